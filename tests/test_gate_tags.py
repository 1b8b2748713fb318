"""The gate (``envbuild check-lock FILE``, the console script) on every ABI tag style of prebuilt
extensions, and on torch builds whose version names no CUDA: locks written by real uv (and
``uv pip compile``, pip-tools) against the fixture index (``support.gatelocks``).

- NVIDIA's cosmos wheels (``+cu128.torch271``) and wheels.astral.sh's (``+cu.13.0.torch.2.11``):
  the pair each was built for passes (exit 0); a flash-attn for torch 2.6 or 2.9 beside torch 2.7
  or 2.11, or a CUDA 12 build beside a CUDA 13 torch, is an ``extension-abi`` finding on the
  flash-attn line (exit 8), whether the wheel comes by URL or from a registry.
- A prebuilt extension whose tag the gate does not read is a notice in plain output (a few names
  and a count; every one under ``--explain`` and in JSON), never listed as something ``--offline``
  could not check.
- torch without a local tag (PyPI's builds) is a build of the CUDA major its locked
  ``nvidia-*-cuXX`` runtime names (torch's own edges first): a ``+cu11torch2.5`` or CUDA 13
  extension beside it is a CUDA-major finding; where nothing says, it stays unverified.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import EnvbuildResult, installer_env
from support.gatelocks import (
    HEALTHY_EXTENSION,
    GateIndex,
    ToolFailed,
    pip_compile_requirements,
    uv_bin,
    uv_platform_lock,
    uv_universal_requirements,
)
from support.wheels import build_sdist, build_wheel

from envbuild._io import parse_toml
from envbuild.errors import ExitCode

pytestmark = pytest.mark.slow

# torch 2.7.1 and 2.11.0 exist on the fixture's Linux indexes only
LINUX_ONLY = ["sys_platform == 'linux'"]
COSMOS_OK = "flash_attn-2.6.3+cu128.torch271"
ASTRAL_OK = "flash_attn-2.8.3.post1+cu.13.0.torch.2.11"
UNREAD = "flash_attn-2.8.3+das.opt1.dtk2604.torch271"


def _envbuild(tmp: Path, *args: str | Path, env: dict[str, str] | None = None) -> EnvbuildResult:
    """The installed console script, as a CI job runs it."""
    script = Path(sys.executable).parent / "envbuild"
    out = subprocess.run(
        [str(script), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=tmp,
        env=installer_env(tmp / "home", env),
        timeout=300,
    )
    return EnvbuildResult(out.returncode, out.stdout, out.stderr)


def _json(r: EnvbuildResult) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(r.stdout)["files"][0]
    return doc


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _from_releases_index(idx: GateIndex) -> str:
    """pyproject text that sends flash-attn to the releases repo as a registry (how the cosmos and
    astral wheels are served), appended after uv_platform_lock's own tables."""
    return (
        f'[[tool.uv.index]]\nname = "releases"\nurl = "{idx.url("releases")}"\nexplicit = true\n\n'
        '[tool.uv.sources.flash-attn]\nindex = "releases"\n'
    )


# ----------------------------------------------------------------------------- cosmos and astral
# tags


@pytest.mark.parametrize(
    ("kwargs", "extension"),
    [
        ({"torch": "2.7.1"}, COSMOS_OK),
        ({"torch": "2.11.0", "linux_index": "cu130"}, ASTRAL_OK),
        # PyPI-style 2.11.0: CUDA 13 by its runtime
        ({"torch": "2.11.0", "linux_index": "plain"}, ASTRAL_OK),
    ],
)
def test_the_pair_each_wheel_was_built_for_passes(
    gate_index: GateIndex, tmp_path: Path, kwargs: dict[str, str], extension: str
) -> None:
    lock = uv_platform_lock(
        tmp_path, gate_index, extension=extension, environments=LINUX_ONLY, **kwargs
    )
    # the tag, as uv locked it
    assert f'version = "{extension.split("-", 1)[1]}"' in lock.read_text()
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--explain")
    assert r.rc == 0, r.output
    assert not [
        ln for ln in r.stdout.splitlines() if ln.startswith("not verified:") and "flash-attn" in ln
    ], r.output
    assert "no ABI tag" not in r.output


@pytest.mark.parametrize(
    ("kwargs", "extension", "says"),
    [
        (
            {"torch": "2.7.1"},
            "flash_attn-2.6.3+cu126.torch260",
            "built for torch 2.6, locked with torch 2.7.1+cu128",
        ),
        (
            {"torch": "2.11.0", "linux_index": "cu130"},
            "flash_attn-2.7.4.post1+cu130.torch29",
            "built for torch 2.9, locked with torch 2.11.0+cu130",
        ),
        (
            {"torch": "2.11.0", "linux_index": "cu130"},
            "flash_attn-2.8.3.post1+cu.13.0.torch.2.9",
            "built for torch 2.9, locked with torch 2.11.0+cu130",
        ),
        (
            {"torch": "2.7.1"},
            "flash_attn-2.8.3.post1+cu.13.0.torch.2.9",
            "built for torch 2.9, locked with torch 2.7.1+cu128",
        ),
        (
            {"torch": "2.11.0", "linux_index": "cu130"},
            "flash_attn-2.8.3.post1+cu.12.8.torch.2.11",
            "built for CUDA 12.8, locked with torch 2.11.0+cu130 (CUDA 13.0)",
        ),
    ],
)
def test_a_wheel_for_another_torch_is_caught_on_its_line(
    gate_index: GateIndex, tmp_path: Path, kwargs: dict[str, str], extension: str, says: str
) -> None:
    lock = uv_platform_lock(
        tmp_path, gate_index, extension=extension, environments=LINUX_ONLY, **kwargs
    )
    r = _envbuild(tmp_path, "check-lock", lock, "--offline")
    assert r.rc == int(ExitCode.LOCK) == 8, r.output
    version = extension.split("-", 1)[1]
    line = _line_of(lock, f'version = "{version}"')
    assert (
        f"{lock}:{line}: flash-attn: flash-attn {version} is {says}: it will fail to import"
        in r.stdout
    ), r.output
    assert "[extension-abi] in linux x86_64; linux aarch64" in r.stdout


def test_registry_wheels_with_these_tags_are_read_too(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """As on wheels.astral.sh and the cosmos index: the wheel from a registry, its tag only in the
    locked version."""
    ok = uv_platform_lock(
        tmp_path,
        gate_index,
        torch="2.11.0",
        linux_index="cu130",
        environments=LINUX_ONLY,
        deps=["flash-attn==2.8.3.post1+cu.13.0.torch.2.11"],
        extra_toml=_from_releases_index(gate_index),
    )
    assert 'source = { registry = "' + gate_index.url("releases") + '" }' in ok.read_text()
    assert _envbuild(tmp_path, "check-lock", ok, "--offline").rc == 0
    bad = uv_platform_lock(
        tmp_path,
        gate_index,
        torch="2.11.0",
        linux_index="cu130",
        environments=LINUX_ONLY,
        deps=["flash-attn==2.8.3.post1+cu.13.0.torch.2.9"],
        extra_toml=_from_releases_index(gate_index),
    )
    r = _envbuild(tmp_path, "check-lock", bad, "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    (found,) = _json(r)["findings"]
    assert (found["rule"], found["package"], found["line"]) == (
        "extension-abi",
        "flash-attn",
        _line_of(bad, 'version = "2.8.3.post1+cu.13.0.torch.2.9"'),
    )
    assert "built for torch 2.9, locked with torch 2.11.0+cu130" in found["reason"]


# ----------------------------------------------------------------------------- tags the gate does
# not read


def test_a_tag_not_read_is_a_plain_notice_not_an_offline_limit(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    lock = uv_platform_lock(
        tmp_path,
        gate_index,
        environments=LINUX_ONLY,
        deps=["flash-attn==2.8.3+das.opt1.dtk2604.torch271"],
        extra_toml=_from_releases_index(gate_index),
    )
    # offline, nothing cached: metadata unread
    empty = {"ENVBUILD_CACHE_DIR": str(tmp_path / "empty-cache")}
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", env=empty)
    assert r.rc == 0, r.output
    notes = [ln for ln in r.output.splitlines() if ln.startswith("note:")]
    (tag_note,) = [n for n in notes if "no ABI tag" in n]
    assert (
        tag_note
        == f"note: {lock}: 1 extension wheel carries no ABI tag envbuild reads, so its torch, CUDA"
        " and C++ ABI were not compared with the locked torch: flash-attn"
        " 2.8.3+das.opt1.dtk2604.torch271"
    )
    # the offline note lists what going online would check, and the unread wheel is not among it
    (offline,) = [n for n in notes if "could not check the torch requirement" in n]
    assert (
        "(--offline)" in offline and "trainer-utils 1.0" in offline and "flash-attn" not in offline
    ), notes
    doc = _json(_envbuild(tmp_path, "check-lock", lock, "--offline", "--json", env=empty))
    assert any("no ABI tag envbuild reads" in n for n in doc["notices"])
    assert [u for u in doc["unverified"] if u.startswith("flash-attn")] == [
        "flash-attn 2.8.3+das.opt1.dtk2604.torch271 with torch 2.10.0+cu128: no ABI tag envbuild"
        " reads in its version or file name [in linux x86_64; linux aarch64]"
    ]
    assert (
        "flash-attn 2.8.3+das.opt1.dtk2604.torch271" not in doc["unchecked"]
        and "trainer-utils 1.0" in doc["unchecked"]
    )


def test_a_url_wheel_whose_tag_is_not_read_is_named(gate_index: GateIndex, tmp_path: Path) -> None:
    lock = uv_platform_lock(tmp_path, gate_index, extension=UNREAD)
    r = _envbuild(tmp_path, "check-lock", lock, "--offline")
    assert r.rc == 0, r.output
    assert "1 extension wheel carries no ABI tag envbuild reads" in r.output
    assert "flash-attn 2.8.3+das.opt1.dtk2604.torch271" in r.output
    assert not [
        ln for ln in r.output.splitlines() if "could not check" in ln and "flash-attn" in ln
    ], r.output


def test_many_unread_tags_are_counted_and_each_listed_under_explain(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """Seven vendor builds (``+<commit>.torch29``, as xspeedgate_ops publishes them) in a
    ``uv pip compile`` output: the notice names five and counts the rest; --explain and JSON list
    all.
    """
    wheels = tmp_path / "vendor"
    names = [f"vendor-op{i}" for i in range(7)]
    for name in names:
        build_wheel(wheels, name.replace("-", "_"), "1.5.0+b1629e2.torch29", requires=["torch"])
    (tmp_path / "requirements.in").write_text(
        "torch==2.10.0+cu128\n" + "".join(f"{n}==1.5.0+b1629e2.torch29\n" for n in names)
    )
    out = subprocess.run(
        [
            uv_bin(),
            "pip",
            "compile",
            "requirements.in",
            "-o",
            "requirements.txt",
            "--no-cache",
            "--index-url",
            gate_index.url("cu128"),
            "--find-links",
            str(wheels),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=installer_env(tmp_path / "home"),
        timeout=300,
    )
    if out.returncode != 0:
        raise ToolFailed(out.args, out.returncode, out.stdout + out.stderr)
    lock = tmp_path / "requirements.txt"
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--explain")
    assert r.rc == 0, r.output
    shown = ", ".join(f"{n} 1.5.0+b1629e2.torch29" for n in names[:5])
    assert (
        "7 extension wheels carry no ABI tag envbuild reads, so their torch, CUDA and C++ ABI were"
        f" not compared with the locked torch: {shown} and 2 more" in r.output
    ), r.output
    explained = [
        ln for ln in r.stdout.splitlines() if ln.startswith("not verified:") and "no ABI tag" in ln
    ]
    assert len(explained) == 7
    doc = _json(_envbuild(tmp_path, "check-lock", lock, "--offline", "--json"))
    assert sorted(u.split(" ", 1)[0] for u in doc["unverified"] if "no ABI tag" in u) == names


# ----------------------------------------------------------------------------- torch's CUDA major
# from its runtime


@pytest.mark.parametrize(
    ("kwargs", "extension", "says"),
    [
        # PyPI-style torch 2.10.0 (nvidia-cuda-runtime-cu12): a CUDA 13 build beside it
        (
            {"linux_index": "plain"},
            "flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE",
            [
                "built for CUDA 13, locked with torch 2.10.0, a CUDA 12 build (its runtime:"
                " nvidia-cuda-runtime-cu12 12.8.90)"
            ],
        ),
        # ... and +cu11torch2.5: a CUDA-major finding as well as a torch-minor one
        (
            {"linux_index": "plain"},
            "flash_attn-2.7.0.post2+cu11torch2.5cxx11abiFALSE",
            [
                "built for torch 2.5, locked with torch 2.10.0",
                (
                    "built for CUDA 11, locked with torch 2.10.0, a CUDA 12 build (its runtime:"
                    " nvidia-cuda-runtime-cu12 12.8.90)"
                ),
            ],
        ),
        # PyPI-style torch 2.11.0: CUDA 13 by the unsuffixed nvidia-cuda-runtime 13.0.96
        (
            {"linux_index": "plain", "torch": "2.11.0", "environments": LINUX_ONLY},
            "flash_attn-2.8.3.post1+cu.12.8.torch.2.11",
            [
                "built for CUDA 12.8, locked with torch 2.11.0, a CUDA 13 build (its runtime:"
                " nvidia-cuda-runtime 13.0.96)"
            ],
        ),
        # the environment also installs a cu13 nccl of its own: torch's own edges say 12
        (
            {"linux_index": "plain", "deps": ["nvidia-nccl-cu13==2.28.3"]},
            "flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE",
            [
                "built for CUDA 13, locked with torch 2.10.0, a CUDA 12 build (its runtime:"
                " nvidia-cuda-runtime-cu12 12.8.90)"
            ],
        ),
    ],
)
def test_torch_without_a_local_tag_is_compared_by_its_runtime(
    gate_index: GateIndex, tmp_path: Path, kwargs: dict[str, Any], extension: str, says: list[str]
) -> None:
    lock = uv_platform_lock(tmp_path, gate_index, extension=extension, **kwargs)
    linux_torch = [
        p
        for p in parse_toml(lock.read_text())["package"]
        if p["name"] == "torch" and p["source"] == {"registry": gate_index.url("plain")}
    ]
    assert [p["version"] for p in linux_torch] == [kwargs.get("torch", "2.10.0")]  # no local tag
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--json")
    assert r.rc == ExitCode.LOCK, r.output
    found = _json(r)["findings"]
    line = _line_of(lock, f'version = "{extension.split("-", 1)[1].lower()}"')
    assert {f["rule"] for f in found} == {"extension-abi"} and {f["line"] for f in found} == {line}
    reasons = " | ".join(f["reason"] for f in found)
    for text in says:
        assert text in reasons, reasons
    assert all(f["environments"] == ["linux x86_64", "linux aarch64"] for f in found)


def test_runtime_pairs_that_fit_pass_and_nothing_said_stays_unverified(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    for kwargs, ext in (
        ({}, HEALTHY_EXTENSION),
        ({"deps": ["nvidia-nccl-cu13==2.28.3"]}, HEALTHY_EXTENSION),
        ({"torch": "2.11.0", "environments": LINUX_ONLY}, ASTRAL_OK),
    ):
        lock = uv_platform_lock(tmp_path, gate_index, linux_index="plain", extension=ext, **kwargs)
        r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--explain")
        assert r.rc == 0, (ext, r.output)
        assert "was not compared" not in r.output, r.output
    # pip-tools: torch's runtime known by its "# via torch" lines
    lock = pip_compile_requirements(
        tmp_path,
        gate_index,
        torch="2.10.0",
        index="pypi",
        extension="flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE",
    )
    assert "nvidia-cuda-runtime-cu12==12.8.90" in lock.read_text()
    r = _envbuild(tmp_path, "check-lock", lock, "--offline")
    assert (
        r.rc == ExitCode.LOCK
        and "a CUDA 12 build (its runtime: nvidia-cuda-runtime-cu12 12.8.90)" in r.stdout
    ), r.output
    # uv pip compile --no-annotate: no graph at all, so the runtime the environment installs says it
    (tmp_path / "requirements.in").write_text(
        f"torch==2.10.0\n{gate_index.extension_requirement('flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE')}\n"
    )
    out = subprocess.run(
        [
            uv_bin(),
            "pip",
            "compile",
            "requirements.in",
            "-o",
            "bare.txt",
            "--no-annotate",
            "--no-cache",
            "--index-url",
            gate_index.pypi_url,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=installer_env(tmp_path / "home"),
        timeout=300,
    )
    if out.returncode != 0:
        raise ToolFailed(out.args, out.returncode, out.stdout + out.stderr)
    assert (
        "# via" not in (tmp_path / "bare.txt").read_text()
        and "nvidia-cuda-runtime-cu12" in (tmp_path / "bare.txt").read_text()
    )
    r = _envbuild(tmp_path, "check-lock", tmp_path / "bare.txt", "--offline")
    assert r.rc == ExitCode.LOCK and "a CUDA 12 build (its runtime: nvidia-" in r.stdout, r.output
    # no runtime locked at all (--no-deps): nothing says which CUDA, so it is listed as not compared
    lock = uv_universal_requirements(
        tmp_path,
        gate_index,
        linux_torch="2.10.0",
        linux_index="plain",
        no_deps=True,
        extension="flash_attn-2.8.3+cu13torch2.10cxx11abiTRUE",
    )
    assert "nvidia" not in lock.read_text()
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--explain")
    assert r.rc == 0, r.output
    assert (
        "torch 2.10.0 carries no local CUDA tag, so the CUDA major was not compared" in r.stdout
    ), r.output


def test_a_source_build_with_a_commit_version_is_no_prebuilt_wheel(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """transformer-engine from git locks as ``2.15.0+42b8400`` (NVIDIA-NeMo/RL's uv.lock): a local
    version, but built against the torch beside it, so there is no tag to read and no notice."""
    sdist = build_sdist(
        tmp_path / "sdist", "transformer_engine", "2.15.0+42b8400", requires=["torch"]
    )
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    repo = tmp_path / "src" / "transformer_engine-2.15.0+42b8400"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "v2.15"]):
        subprocess.run(
            [*git, *args],
            cwd=repo,
            check=True,
            capture_output=True,
            env=installer_env(tmp_path / "home"),
        )
    lock = uv_platform_lock(
        tmp_path,
        gate_index,
        deps=["transformer-engine"],
        extra_toml=f'[tool.uv.sources.transformer-engine]\ngit = "{repo.as_uri()}"\n',
    )
    assert 'version = "2.15.0+42b8400"\nsource = { git = "' in lock.read_text()
    r = _envbuild(tmp_path, "check-lock", lock, "--offline")
    assert r.rc == 0, r.output
    assert "ABI tag" not in r.output


def test_a_compiled_wheel_by_path_is_named_and_a_pure_python_one_is_not(
    gate_index: GateIndex, tmp_path: Path
) -> None:
    """deep-gemm's release wheel (``2.5.0+891d57b``, a commit, no ABI tag:
    PrimeIntellect-ai/prime-rl's uv.lock) is a compiled extension whose build nothing compares;
    flash-attn-4's ``py3-none-any`` wheel (allenai/open-instruct's) has no compiled code to
    compare."""
    wheels = tmp_path / "wheels"
    deep_gemm = build_wheel(
        wheels, "deep_gemm", "2.5.0+891d57b", requires=["torch"], platform_tag="linux_x86_64"
    )
    fa4 = build_wheel(wheels, "flash_attn_4", "4.0.0b5", requires=["torch"])
    lock = uv_platform_lock(
        tmp_path,
        gate_index,
        deps=["deep-gemm", "flash-attn-4"],
        environments=["sys_platform == 'linux' and platform_machine == 'x86_64'"],
        extra_toml=(
            f'[tool.uv.sources.deep-gemm]\npath = "{deep_gemm}"\n\n'
            f'[tool.uv.sources.flash-attn-4]\npath = "{fa4}"\n'
        ),
    )
    assert lock.read_text().count("source = { path = ") == 2
    r = _envbuild(tmp_path, "check-lock", lock, "--offline", "--explain")
    assert r.rc == 0, r.output
    notes = [
        ln
        for ln in r.output.splitlines()
        if "ABI tag envbuild reads" in ln and ln.startswith("note:")
    ]
    assert notes == [
        f"note: {lock}: 1 extension wheel carries no ABI tag envbuild reads, so its torch, CUDA and"
        " C++ ABI were not compared with the locked torch: deep-gemm 2.5.0+891d57b"
    ], r.output
