"""The guard's metadata reading, on real wheels installed by real pip (fast: no resolver, no
index)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.wheels import build_wheel

from envbuild import guard
from envbuild.spec import load_spec

SPEC = """schema = 1
name = "t"
python = "3.11"
[abi]
version = "2.11.0+cu130"
local = "cu130"
cuda = "13.0"
adopt = true
[[step]]
name = "x"
packages = ["x"]
"""


def install(target: Path, *wheels: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--upgrade",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        check=True,
        env={"PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin"},
    )


def test_runtime_version_differs_from_metadata(tmp_path: Path) -> None:
    """Some torch builds say 2.11.0 in their dist-info and 2.11.0+cu130 at run time (this
    workplace's GPU image does): the baseline keeps both, the constraint names the dist version."""
    wheel = build_wheel(
        tmp_path / "w",
        "torch",
        "2.11.0",
        files={
            "torch/__init__.py": "from .version import __version__\n",
            "torch/version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n",
        },
    )
    site = tmp_path / "site"
    install(site, wheel)
    (tmp_path / "s.toml").write_text(SPEC)
    spec = load_spec(tmp_path / "s.toml", {})
    base = guard.take_baseline(spec.abi, site, {})
    assert (base.version, base.dist_version, base.cuda) == ("2.11.0+cu130", "2.11.0", "13.0")
    assert base.pins() == ["torch==2.11.0"]
    assert guard.check(spec, base, site).ok
    assert not list(site.glob(f"*.dist-info/{guard.STAMP}"))  # nothing of envbuild's in them
    # another build of the same version over it: a violation, though the version did not move
    other = build_wheel(
        tmp_path / "other",
        "torch",
        "2.11.0",
        files={
            "torch/__init__.py": "from .version import __version__  # rebuilt\n",
            "torch/version.py": "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\n",
        },
    )
    install(site, other)
    report = guard.check(spec, base, site)
    assert [f.rule for f in report.violations] == ["reinstalled"]
    assert "by a different build of the same version" in report.violations[0].message


def test_unmet_requirements_of_a_no_deps_step(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install(
        site,
        build_wheel(tmp_path / "w", "fla", "0.5.0", requires=["fla-core==0.5.0", "transformers"]),
        build_wheel(tmp_path / "w", "fla-core", "0.4.2"),
    )
    found = guard.unmet_requirements(guard.scan(site), ["fla"], {})
    assert sorted(f.message for f in found) == [
        "fla 0.5.0 requires fla-core==0.5.0, but fla-core 0.4.2 is installed",
        "fla 0.5.0 requires transformers, which is not installed",
    ]


def test_a_prebuilt_extension_for_another_torch_is_a_violation(tmp_path: Path) -> None:
    """A release wheel carries no provenance record, only its ABI claim (``+cu13torch2.10…``): the
    guard reads it with the gate's parser (``envbuild.abitag``) and compares it with the installed
    torch.
    """
    site = tmp_path / "site"
    install(
        site,
        build_wheel(
            tmp_path / "w",
            "torch",
            "2.11.0+cu130",
            files={
                "torch/__init__.py": "from .version import __version__\n",
                "torch/version.py": "__version__ = '2.11.0+cu130'\ncuda = '13.0'\n",
            },
        ),
    )
    (tmp_path / "s.toml").write_text(SPEC)
    spec = load_spec(tmp_path / "s.toml", {})
    base = guard.take_baseline(spec.abi, site, {})
    install(
        site,
        build_wheel(
            tmp_path / "w",
            "flash-attn",
            "2.8.3+cu13torch2.11cxx11abiTRUE",
            files={"flash_attn/__init__.py": ""},
        ),
    )
    assert guard.check(spec, base, site).ok
    install(
        site,
        build_wheel(
            tmp_path / "w",
            "flash-attn",
            "2.8.3+cu12torch2.10cxx11abiTRUE",
            files={"flash_attn/__init__.py": ""},
        ),
    )
    report = guard.check(spec, base, site)
    assert [(f.rule, f.package) for f in report.violations] == [
        ("provenance", "flash-attn"),
        ("provenance", "flash-attn"),
    ]
    assert "built for torch 2.10, locked with torch 2.11.0+cu130" in report.violations[0].message
    assert "CUDA 12" in report.violations[1].message
