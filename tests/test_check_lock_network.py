"""check-lock on the real PyPI metadata of the seed's packages, on a stand-in nightly torch.

What it must find is what these packages' metadata on PyPI says: only mamba-ssm declares
PyPI `triton`; no package's torch requirement rejects the nightly; flash-linear-attention 0.5.0
needs fla-core 0.5.0, not the 0.4.2 the seed pins beside it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lockhelpers import lock_env, resync
from support.fixtures import EnvbuildResult

pytestmark = pytest.mark.network
PYPI = "https://pypi.org/simple"


def test_seed_packages_on_a_stand_in_nightly(
    write_stack: Callable[..., Path], run_envbuild: Callable[..., EnvbuildResult], tmp_path: Path
) -> None:
    steps = [
        {"name": "mamba", "packages": ["mamba-ssm==2.3.1"], "index_url": PYPI, "no_deps": True},
        {
            "name": "others",
            "index_url": PYPI,
            "no_deps": True,
            "packages": [
                "flash-attn-4==4.0.0b7",
                "torchao==0.17.0",
                "quack-kernels==0.3.9",
                "causal-conv1d==1.6.1",
                "fla-core==0.5.0",
            ],
        },
        {
            "name": "fla",
            "packages": ["flash-linear-attention==0.5.0", "fla-core==0.4.2"],
            "index_url": PYPI,
            "no_deps": True,
            # the lock refuses two steps that pin one name differently unless the later one says
            "replaces": ["fla-core"],
        },
    ]
    stack = write_stack(steps)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path), timeout=900)
    assert r.rc == 0, r.output
    # mamba and others as steps *with* dependencies (a hand-made lock of the same pins)
    text = stack.read_text().replace("no_deps = true\n", "", 2)
    stack.write_text(text)

    def flip(data: dict[str, Any]) -> None:
        for s in data["steps"][1:3]:
            s["flags"]["no_deps"] = False

    resync(stack.parent, stack, flip)
    r = run_envbuild("check-lock", "--stack", stack, "--offline", "--json", env=lock_env(tmp_path))
    data = json.loads(r.stdout)
    findings = data["reports"][0]["findings"]
    notices = data["reports"][0]["notices"]
    assert r.rc == 8
    assert [(f["rule"], f["package"]) for f in findings] == [("pypi-triton", "mamba-ssm")], findings
    assert "mamba-ssm 2.3.1 requires triton (PyPI triton)" in findings[0]["reason"]
    assert any(
        "flash-linear-attention 0.5.0 requires fla-core==0.5.0, but fla-core 0.4.2 is locked" in n
        for n in notices
    ), notices
