"""support.gatelocks: each lock maker really makes, with the real tool, the lock its docstring
claims.

Read with envbuild's TOML parser and as text only: the check-lock gate itself is not imported here.
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.gatelocks import (
    EXTENSIONS,
    HEALTHY_EXTENSION,
    GateIndex,
    pip_compile_requirements,
    pip_lock,
    poetry_lock,
    uv_groups_lock,
    uv_platform_lock,
    uv_runtime_missing_lock,
    uv_universal_requirements,
)

from envbuild._io import parse_toml

pytestmark = pytest.mark.slow

LINUX, NOT_LINUX = "sys_platform == 'linux'", "sys_platform != 'linux'"


def _load(path: Path) -> dict[str, Any]:
    assert path.is_file(), path
    data: dict[str, Any] = parse_toml(path.read_text())
    return data


def _uv(lock: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [p for p in lock["package"] if p["name"] == name]


def _torch(lock: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """uv.lock torch entries by version."""
    return {p["version"]: p for p in _uv(lock, "torch")}


def _deps(entry: dict[str, Any]) -> set[str]:
    return {d["name"] for d in entry.get("dependencies", [])}


def _lines(path: Path) -> list[str]:
    """The requirement lines of a requirements file (continuations, comments and options
    dropped)."""
    return [
        ln.rstrip(" \\")
        for ln in path.read_text().splitlines()
        if ln and not ln.startswith((" ", "#", "-"))
    ]


# ----------------------------------------------------------------------------- the index


def test_the_wheel_set_is_served_under_the_names_the_gate_tests_use(gate_index: GateIndex) -> None:
    files = {p.name for p in (gate_index.root / "releases").iterdir()}
    assert files == {f"{key}-py3-none-any.whl" for key in EXTENSIONS}
    # the release's spelling
    assert "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE-py3-none-any.whl" in files
    assert (
        gate_index.extension_name("flash_attn_3-3.0.0+20260318.cu128torch2100cxx11abitrue.8afc61")
        == "flash-attn-3"
    )
    url = gate_index.extension_url(HEALTHY_EXTENSION)
    assert url == f"{gate_index.server.url}/releases/files/{HEALTHY_EXTENSION}-py3-none-any.whl"
    with urllib.request.urlopen(url, timeout=5) as resp:
        assert resp.status == 200 and resp.read(2) == b"PK"
    cu128 = {p.name for p in (gate_index.root / "cu128").iterdir()}
    assert {
        "torch-2.10.0+cu128-py3-none-any.whl",
        "torch-2.9.1+cu128-py3-none-any.whl",
        "nvidia_nccl_cu12-2.27.5-py3-none-any.whl",
        "filelock_like-3.0-py3-none-any.whl",
    } <= cu128


# ----------------------------------------------------------------------------- uv.lock: uv's guide,
# per platform


def test_uv_platform_lock_healthy(gate_index: GateIndex, tmp_path: Path) -> None:
    lock = _load(uv_platform_lock(tmp_path, gate_index))
    assert lock["resolution-markers"] == [LINUX, NOT_LINUX]
    torch = _torch(lock)
    assert set(torch) == {"2.10.0", "2.10.0+cu128"}
    cuda, plain = torch["2.10.0+cu128"], torch["2.10.0"]
    assert cuda["source"]["registry"] == gate_index.url("cu128") and cuda["resolution-markers"] == [
        LINUX
    ]
    assert plain["source"]["registry"] == gate_index.url("pypi") and plain[
        "resolution-markers"
    ] == [NOT_LINUX]
    assert _deps(cuda) == {"filelock-like", "nvidia-cuda-runtime-cu12", "nvidia-nccl-cu12"}
    # uv knows platform_system == "Linux" is false off Linux
    assert _deps(plain) == {"filelock-like"}
    root = _uv(lock, "trainer")[0]
    edges = {(d["version"], d["marker"]) for d in root["dependencies"] if d["name"] == "torch"}
    assert edges == {("2.10.0+cu128", LINUX), ("2.10.0", NOT_LINUX)}


def test_uv_platform_lock_planted(gate_index: GateIndex, tmp_path: Path) -> None:
    retag = _torch(_load(uv_platform_lock(tmp_path, gate_index, linux_index="cu130")))
    assert set(retag) == {"2.10.0", "2.10.0+cu130"}
    assert _deps(retag["2.10.0+cu130"]) == {
        "filelock-like",
        "nvidia-cuda-runtime-cu13",
        "nvidia-nccl-cu13",
    }

    down = _torch(_load(uv_platform_lock(tmp_path, gate_index, linux_torch="2.9.1")))
    assert set(down) == {"2.10.0", "2.9.1+cu128"} and down["2.9.1+cu128"]["resolution-markers"] == [
        LINUX
    ]

    ext = _load(
        uv_platform_lock(
            tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE"
        )
    )
    (fa,) = _uv(ext, "flash-attn")
    assert fa["version"] == "2.8.3+cu12torch2.9cxx11abitrue"  # normalised; the url keeps TRUE
    assert fa["source"] == {
        "url": gate_index.extension_url("flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE")
    }
    assert fa["source"]["url"].endswith(
        "/releases/files/flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-py3-none-any.whl"
    )
    assert [(d["name"], d.get("version")) for d in fa["dependencies"]] == [
        ("einops-like", None),
        ("torch", "2.10.0+cu128"),
    ]
    root = _uv(ext, "trainer")[0]
    assert {"name": "flash-attn", "marker": LINUX} in root["dependencies"]

    forced = _load(
        uv_platform_lock(
            tmp_path, gate_index, deps=["needs-torch-211==1.0"], overrides=["torch==2.10.0"]
        )
    )
    assert set(_torch(forced)) == {"2.10.0", "2.10.0+cu128"}
    assert _uv(forced, "needs-torch-211")[0]["version"] == "1.0"
    assert {o["name"] for o in forced["manifest"]["overrides"]} == {"torch"}
    assert len(list(tmp_path.glob("uv-platform-*/uv.lock"))) == 4  # each call its own folder


# ----------------------------------------------------------------------------- uv.lock: one extra
# per accelerator


def test_uv_groups_lock(gate_index: GateIndex, tmp_path: Path) -> None:
    path = uv_groups_lock(tmp_path, gate_index)
    lock = _load(path)
    assert lock["conflicts"] == [
        [{"package": "trainer", "extra": e} for e in ("cpu", "cu128", "cu130")]
    ]
    torch = _torch(lock)
    assert set(torch) == {"2.10.0+cpu", "2.10.0+cu128", "2.10.0+cu130"}
    for local in ("cpu", "cu128", "cu130"):
        assert torch[f"2.10.0+{local}"]["source"]["registry"] == gate_index.url(local)
    assert _deps(torch["2.10.0+cpu"]) == {"filelock-like"}
    root = _uv(lock, "trainer")[0]
    assert {
        e: [d.get("version") for d in deps if d["name"] == "torch"]
        for e, deps in root["optional-dependencies"].items()
    } == {"cpu": ["2.10.0+cpu"], "cu128": ["2.10.0+cu128"], "cu130": ["2.10.0+cu130"]}
    # a package shared by the extras reaches each torch through uv's pseudo-extras
    utils = _uv(lock, "trainer-utils")[0]
    markers = {d["version"]: d["marker"] for d in utils["dependencies"] if d["name"] == "torch"}
    assert set(markers) == set(torch)
    assert markers["2.10.0+cu128"].startswith("extra == 'extra-7-trainer-cu128'")
    assert "extra == 'extra-7-trainer-cu130'" in path.read_text()

    drift = _torch(_load(uv_groups_lock(tmp_path, gate_index, cu130_torch="2.11.0")))
    assert set(drift) == {"2.10.0+cpu", "2.10.0+cu128", "2.11.0+cu130"}

    ext = _load(
        uv_groups_lock(tmp_path, gate_index, extension_group="cu128", extension=HEALTHY_EXTENSION)
    )
    (fa,) = _uv(ext, "flash-attn")
    assert fa["source"] == {"url": gate_index.extension_url(HEALTHY_EXTENSION)}
    assert {
        "name": "torch",
        "version": "2.10.0+cu128",
        "source": {"registry": gate_index.url("cu128")},
    } in fa["dependencies"]
    opt = _uv(ext, "trainer")[0]["optional-dependencies"]
    assert {"name": "flash-attn"} in opt["cu128"] and {"name": "flash-attn"} not in opt["cu130"]
    with pytest.raises(ValueError):
        uv_groups_lock(tmp_path, gate_index, extension=HEALTHY_EXTENSION)


# ----------------------------------------------------------------------------- uv.lock: torch
# without its runtime


@pytest.mark.parametrize("how", ["override", "exclude", "metadata"])
def test_uv_runtime_missing_lock(gate_index: GateIndex, tmp_path: Path, how: str) -> None:
    lock = _load(uv_runtime_missing_lock(tmp_path, gate_index, how=how))
    torch = _torch(lock)
    assert set(torch) == {"2.10.0", "2.10.0+cu128"}
    # no nccl edge
    assert _deps(torch["2.10.0+cu128"]) == {"filelock-like", "nvidia-cuda-runtime-cu12"}
    nccl = _uv(lock, "nvidia-nccl-cu12")
    # the 'never' marker survives in the non-Linux fork: nccl stays locked there
    if how == "override":
        assert [n["version"] for n in nccl] == ["2.27.5"]
        assert {"name": "nvidia-nccl-cu12", "marker": "sys_platform == 'never'"} in torch["2.10.0"][
            "dependencies"
        ]
    else:
        assert nccl == []
        assert "nvidia-nccl-cu12" not in _deps(torch["2.10.0"])
    assert ("dependency-metadata" in lock["manifest"]) == (how == "metadata")


# ----------------------------------------------------------------------------- requirements.txt


def test_uv_universal_requirements(gate_index: GateIndex, tmp_path: Path) -> None:
    healthy = uv_universal_requirements(tmp_path, gate_index)
    text = healthy.read_text()
    assert "--universal" in text and text.count("--hash=sha256:") == 7
    assert _lines(healthy) == [
        "einops-like==0.8.1",
        "filelock-like==3.0",
        f"nvidia-cuda-runtime-cu12==12.8.90 ; {LINUX}",
        f"nvidia-nccl-cu12==2.27.5 ; {LINUX}",
        f"torch==2.10.0 ; {NOT_LINUX}",
        f"torch==2.10.0+cu128 ; {LINUX}",
        "trainer-utils==1.0",
    ]
    down = uv_universal_requirements(tmp_path, gate_index, linux_torch="2.9.1+cu128", hashes=False)
    assert [ln for ln in _lines(down) if ln.startswith("torch")] == [
        f"torch==2.9.1+cu128 ; {LINUX}",
        f"torch==2.10.0 ; {NOT_LINUX}",
    ]
    ext = uv_universal_requirements(tmp_path, gate_index, extension=HEALTHY_EXTENSION, hashes=False)
    assert f"flash-attn @ {gate_index.extension_url(HEALTHY_EXTENSION)} ; {LINUX}" in _lines(ext)
    bare = uv_universal_requirements(
        tmp_path, gate_index, extra=["needs-torch-211==1.0"], no_deps=True, hashes=False
    )
    assert _lines(bare) == [
        "needs-torch-211==1.0",
        f"torch==2.10.0 ; {NOT_LINUX}",
        f"torch==2.10.0+cu128 ; {LINUX}",
    ]
    # the brief's requirements.in + unsafe-best-match: uv gives every platform the +cu128 build
    flat = uv_universal_requirements(tmp_path, gate_index, source="requirements", hashes=False)
    assert [ln for ln in _lines(flat) if ln.startswith("torch")] == ["torch==2.10.0+cu128"]
    split = uv_universal_requirements(
        tmp_path, gate_index, source="requirements", linux_torch="2.9.1+cu128"
    )
    assert [ln for ln in _lines(split) if ln.startswith("torch")] == [
        f"torch==2.9.1+cu128 ; {LINUX}",
        f"torch==2.10.0+cu128 ; {NOT_LINUX}",
    ]


def test_pip_compile_requirements(gate_index: GateIndex, tmp_path: Path) -> None:
    healthy = pip_compile_requirements(tmp_path, gate_index)
    text = healthy.read_text()
    assert (
        "autogenerated by pip-compile" in text and f"--index-url {gate_index.url('cu128')}" in text
    )
    assert _lines(healthy) == [
        "einops-like==0.8.1",
        "filelock-like==3.0",
        "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-nccl-cu12==2.27.5",
        "torch==2.10.0+cu128",
        "trainer-utils==1.0",
    ]
    assert " ; " not in text and "--hash" not in text  # one environment: no markers
    ext = pip_compile_requirements(
        tmp_path, gate_index, extension="flash_attn-2.8.3+cu12torch2.10cxx11abiFALSE"
    )
    assert (
        f"flash-attn @ {gate_index.extension_url('flash_attn-2.8.3+cu12torch2.10cxx11abiFALSE')}"
        in _lines(ext)
    )
    down = pip_compile_requirements(tmp_path, gate_index, torch="2.9.1+cu128")
    assert "torch==2.9.1+cu128" in _lines(down)
    retag = pip_compile_requirements(tmp_path, gate_index, torch="2.10.0+cu130", index="cu130")
    assert {"torch==2.10.0+cu130", "nvidia-nccl-cu13==2.28.3"} <= set(_lines(retag))


# ----------------------------------------------------------------------------- poetry.lock


def _poetry(lock: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    return {p["version"]: p for p in lock["package"] if p["name"] == name}


@pytest.mark.pip_sources  # Poetry, installed from pip's sources once into .cache/tests
def test_poetry_lock(gate_index: GateIndex, tmp_path: Path) -> None:
    lock = _load(poetry_lock(tmp_path, gate_index, extension=HEALTHY_EXTENSION))
    assert lock["metadata"]["lock-version"] == "2.1"
    torch = _poetry(lock, "torch")
    assert set(torch) == {"2.10.0", "2.10.0+cu128"}
    assert torch["2.10.0+cu128"]["markers"] == 'sys_platform == "linux"'
    assert torch["2.10.0+cu128"]["source"] == {
        "type": "legacy",
        "url": gate_index.url("cu128"),
        "reference": "cu128",
    }
    assert torch["2.10.0"]["markers"] == 'sys_platform != "linux"'
    assert torch["2.10.0"]["source"]["reference"] == "standin"
    assert set(torch["2.10.0+cu128"]["dependencies"]) == {
        "filelock-like",
        "nvidia-cuda-runtime-cu12",
        "nvidia-nccl-cu12",
    }
    (fa,) = _poetry(lock, "flash_attn").values()  # Poetry keeps the METADATA's spelling of the name
    assert (
        fa["version"] == "2.8.3+cu12torch2.10cxx11abitrue"
        and fa["markers"] == 'sys_platform == "linux"'
    )
    assert fa["source"] == {"type": "url", "url": gate_index.extension_url(HEALTHY_EXTENSION)}
    assert fa["files"] == [
        {"file": f"{HEALTHY_EXTENSION}-py3-none-any.whl", "hash": fa["files"][0]["hash"]}
    ]

    down = _poetry(_load(poetry_lock(tmp_path, gate_index, linux_torch="2.9.1+cu128")), "torch")
    assert set(down) == {"2.10.0", "2.9.1+cu128"}
    retag = _poetry(
        _load(poetry_lock(tmp_path, gate_index, linux_torch="2.10.0+cu130", linux_index="cu130")),
        "torch",
    )
    assert (
        set(retag) == {"2.10.0", "2.10.0+cu130"}
        and retag["2.10.0+cu130"]["source"]["reference"] == "cu130"
    )


# ----------------------------------------------------------------------------- pylock.toml


def _pylock(lock: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in lock["packages"]}


def test_pip_lock(gate_index: GateIndex, tmp_path: Path) -> None:
    lock = _load(pip_lock(tmp_path, gate_index, extension=HEALTHY_EXTENSION))
    assert lock["lock-version"] == "1.0" and lock["created-by"] == "pip"
    pkgs = _pylock(lock)
    assert set(pkgs) == {
        "einops-like",
        "filelock-like",
        "flash-attn",
        "nvidia-cuda-runtime-cu12",
        "nvidia-nccl-cu12",
        "torch",
        "trainer-utils",
    }
    assert pkgs["torch"]["version"] == "2.10.0+cu128"
    assert pkgs["torch"]["wheels"][0]["url"].startswith(
        f"{gate_index.server.url}/cu128/files/torch-2.10.0"
    )
    assert "version" not in pkgs["flash-attn"]  # pip writes no version for a URL archive
    assert pkgs["flash-attn"]["archive"]["url"] == gate_index.extension_url(HEALTHY_EXTENSION)

    bare = _pylock(_load(pip_lock(tmp_path, gate_index, no_deps=True, extra=())))
    assert set(bare) == {"torch"}
    cu130 = _pylock(_load(pip_lock(tmp_path, gate_index, torch="2.10.0+cu130", index="cu130")))
    assert cu130["torch"]["version"] == "2.10.0+cu130" and "nvidia-nccl-cu13" in cu130
