"""Preflight: parsers on captured outputs, checks on facts, the command's output and exit codes."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.index import IndexServer

from envbuild.cli import main
from envbuild.host.preflight import (
    HostFacts,
    check_env,
    check_topology,
    nvcc_release,
    parse_gpus,
    parse_topo,
    run_preflight,
)
from envbuild.layout import Paths, paths_for, write_overlay
from envbuild.spec import Host, StackSpec, resolve_spec

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def facts(query: str | None, topo: str | None, **kw: Any) -> HostFacts:
    base: dict[str, Any] = dict(
        gpu_query=read(query) if query else None,
        topo=read(topo) if topo else None,
        gpu_error=None if query else "nvidia-smi not found (no NVIDIA driver on this host)",
        numa_balancing="0",
        gcc="12.2.0",
        nvcc=read("nvcc_13_0.txt"),
        environ={},
    )
    base.update(kw)
    return HostFacts(**base)


@pytest.fixture
def h200(tmp_path: Path) -> tuple[StackSpec, Paths]:
    spec = resolve_spec("h200-cu132", None)
    return spec, paths_for(spec, tmp_path / "root")


def test_parse_topo_nv18_8gpu() -> None:
    topo = parse_topo(read("topo_nv18_8gpu.txt"))
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8))
    pairs = topo.pairs()
    assert len(pairs) == 28 and {v for *_, v in pairs} == {"NV18"}
    assert topo.cells[("GPU3", "GPU3")] == "X"


def test_parse_topo_nv18_2gpu_and_pcie() -> None:
    assert parse_topo(read("topo_nv18_2gpu.txt")).pairs() == [("GPU0", "GPU1", "NV18")]
    pcie = parse_topo(read("topo_pcie_4gpu.txt"))
    assert {v for *_, v in pcie.pairs()} == {"PHB", "SYS"}


def test_parse_gpus() -> None:
    gpus = parse_gpus(read("nvidia_smi_query_8xh200.csv"))
    assert len(gpus) == 8 and gpus[0].name == "NVIDIA H200" and gpus[0].driver == "590.48.01"
    assert gpus[7].memory_mib == 143771
    assert parse_gpus(read("nvidia_smi_no_driver.txt")) == []
    assert nvcc_release(read("nvcc_13_0.txt")) == "13.0"


def test_healthy_8x_h200_passes_gpu_checks(h200: tuple[StackSpec, Paths]) -> None:
    spec, paths = h200
    report = run_preflight(
        spec,
        paths,
        checks=["driver", "gpus", "topology", "numa"],
        facts=facts("nvidia_smi_query_8xh200.csv", "topo_nv18_8gpu.txt"),
    )
    assert report.verdict == "pass", report.to_dict()
    by = {c.name: c for c in report.checks}
    assert by["topology"].measured == "all 28 pairs NV18"
    assert by["gpus"].measured == "8 x NVIDIA H200"
    assert by["driver"].expected == ">= 590.48"


def test_pcie_fallback_fails_topology(h200: tuple[StackSpec, Paths]) -> None:
    spec, _ = h200
    [check] = check_topology(spec, facts("nvidia_smi_query_4xpcie.csv", "topo_pcie_4gpu.txt"))
    assert check.verdict == "fail"
    assert "6 pairs" in check.measured and "PHB" in check.detail and "SYS" in check.detail
    [one] = check_topology(spec, facts("nvidia_smi_query_8xh200.csv", "topo_nv18_8gpu_one_sys.txt"))
    assert one.verdict == "fail" and one.measured == "7 of 28 pairs without NVLink"
    assert "GPU0-GPU5 SYS" in one.detail


def test_old_driver_wrong_gpus_fail(h200: tuple[StackSpec, Paths]) -> None:
    spec, paths = h200
    report = run_preflight(
        spec,
        paths,
        checks=["driver", "gpus", "topology"],
        facts=facts("nvidia_smi_query_2xh100.csv", "topo_nv18_2gpu.txt"),
    )
    by = {c.name: c for c in report.checks}
    assert by["driver"].verdict == "fail" and by["driver"].measured == "570.133.20"
    assert by["gpus"].verdict == "fail" and "H200" in by["gpus"].detail
    assert by["topology"].verdict == "pass"
    assert report.verdict == "fail"


def test_no_gpu_skips_with_reason(h200: tuple[StackSpec, Paths]) -> None:
    spec, paths = h200
    cpu = resolve_spec("cpu", None)
    report = run_preflight(
        cpu,
        paths_for(cpu, paths.root),
        checks=["driver", "gpus", "topology"],
        facts=facts(None, None),
    )
    assert [c.verdict for c in report.checks] == ["skip", "skip", "skip"]
    assert all("nvidia-smi not found" in c.detail for c in report.checks)
    # a spec that asks for GPUs fails the count, but nothing crashes
    report = run_preflight(
        spec, paths, checks=["driver", "gpus", "topology"], facts=facts(None, None)
    )
    assert [c.verdict for c in report.checks] == ["skip", "fail", "skip"]


def _fake_nvidia_smi(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_gather_real_executables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gather() on a host without nvidia-smi, with a broken driver and with a healthy 8-GPU node."""
    monkeypatch.setenv("PATH", str(tmp_path / "none") + os.pathsep + os.environ["PATH"])
    if not any((Path(p) / "nvidia-smi").exists() for p in os.environ["PATH"].split(os.pathsep)):
        got = HostFacts.gather()
        assert got.gpu_query is None and "not found" in (got.gpu_error or "")
    broken = tmp_path / "broken"
    _fake_nvidia_smi(broken, f"cat {DATA / 'nvidia_smi_no_driver.txt'}\nexit 9\n")
    monkeypatch.setenv("PATH", str(broken) + os.pathsep + os.environ["PATH"])
    got = HostFacts.gather()
    assert got.gpu_query is None and "couldn't communicate with the NVIDIA driver" in (
        got.gpu_error or ""
    )
    good = tmp_path / "good"
    _fake_nvidia_smi(
        good,
        f'if [ "$1" = topo ]; then cat {DATA / "topo_nv18_8gpu.txt"}; '
        f"else cat {DATA / 'nvidia_smi_query_8xh200.csv'}; fi\n",
    )
    monkeypatch.setenv("PATH", str(good) + os.pathsep + os.environ["PATH"])
    got = HostFacts.gather()
    assert len(parse_gpus(got.gpu_query or "")) == 8 and len(parse_topo(got.topo or "").gpus) == 8


def test_env_baseline_uses_overlay(h200: tuple[StackSpec, Paths]) -> None:
    spec, paths = h200
    # before provisioning: the overlay provision will write, over the current shell
    checks = {c.name: c for c in check_env(spec, paths, facts(None, None))}
    assert all(c.verdict == "pass" for c in checks.values()), checks
    # a shell with the bad knobs: the overlay unsets/overrides them, so only warnings
    shell = {"CUDA_DEVICE_MAX_CONNECTIONS": "1", "TORCH_NCCL_HIGH_PRIORITY": "0"}
    checks = {c.name: c for c in check_env(spec, paths, facts(None, None, environ=shell))}
    assert checks["env:CUDA_DEVICE_MAX_CONNECTIONS"].verdict == "warn"
    assert checks["env:CUDA_DEVICE_MAX_CONNECTIONS"].measured == "unset"
    # an overlay on disk that forces MNNVL and lost a baseline value is a failure
    write_overlay(spec, paths)
    text = paths.overlay.read_text().replace(
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=7200", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=600"
    )
    paths.overlay.write_text(text + "export NCCL_MNNVL_ENABLE=1\n")
    checks = {c.name: c for c in check_env(spec, paths, facts(None, None))}
    assert checks["env:TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"].verdict == "fail"
    assert checks["env:TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"].measured == "600"
    assert checks["env:NCCL_MNNVL_ENABLE"].verdict == "fail"
    assert str(paths.overlay) in checks["env:NCCL_MNNVL_ENABLE"].detail


def test_disk_and_versions(h200: tuple[StackSpec, Paths]) -> None:
    spec, paths = h200
    big = replace(
        spec, host=Host(root_min_free_gb=1e9, data_min_free_gb=1e9, gcc="99.1", cuda_toolkit="12.8")
    )
    report = run_preflight(
        big, paths, checks=["disk", "gcc", "cuda-toolkit"], facts=facts(None, None)
    )
    by = {c.name: c for c in report.checks}
    assert by["disk:/"].verdict == "fail" and by[f"disk:{paths.root}"].verdict == "fail"
    assert by["gcc"].verdict == "fail" and by["gcc"].measured == "12.2.0"
    assert by["cuda-toolkit"].verdict == "fail" and by["cuda-toolkit"].measured == "13.0"
    ok = replace(spec, host=Host(gcc="11.4", cuda_toolkit="13.0"))
    report = run_preflight(
        ok, paths, checks=["gcc", "cuda-toolkit", "numa"], facts=facts(None, None)
    )
    assert report.verdict == "pass"
    report = run_preflight(ok, paths, checks=["numa"], facts=facts(None, None, numa_balancing="1"))
    assert report.checks[0].verdict == "warn" and "sysctl" in report.checks[0].detail


def test_index_reachability_and_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # https to it fails the handshake; /missing is a 404
    server = IndexServer({"r": tmp_path}).start()
    port = server.port
    nowhere = tmp_path / "nowhere"
    spec_file = tmp_path / "stack.toml"
    spec_file.write_text(
        (Path(__file__).parents[1] / "lockfiles" / "cpu" / "stack.toml")
        .read_text()
        .replace(
            "${ENVBUILD_TORCH_INDEX-https://download.pytorch.org/whl/cpu}",
            f"https://user:s3cret@127.0.0.1:{port}/simple",
        )
        + '\n[[step]]\nname = "extra"\npackages = ["tqdm"]\nindex_url ='
        f' "http://127.0.0.1:{port}/missing"\n'
        + '\n[[step]]\nname = "local"\npackages = ["tqdm"]\nfind_links ='
        f' ["${{WH_DIR-{nowhere}}}"]\n'
    )
    try:
        code = main(
            [
                "preflight",
                "--stack",
                str(spec_file),
                "--root",
                str(tmp_path / "root"),
                "--only",
                "index",
                "--json",
            ]
        )
    finally:
        server.stop()
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == 3 and doc["verdict"] == "fail"
    assert "s3cret" not in out
    verdicts = {c["name"]: c["verdict"] for c in doc["checks"]}
    # https to an http server
    assert verdicts[f"index:https://***@127.0.0.1:{port}/simple"] == "fail"
    assert verdicts[f"index:http://127.0.0.1:{port}/missing"] == "fail"
    # the advice fits the source: a local folder is made or its path fixed (naming the variable it
    # came from), a remote index goes through the network or a mirror
    details = {c["name"]: c["detail"] for c in doc["checks"]}
    local = details[f"index:{nowhere}"]
    assert verdicts[f"index:{nowhere}"] == "fail"
    assert "local folder" in local and "WH_DIR" in local and "network" not in local, local
    remote = details[f"index:http://127.0.0.1:{port}/missing"]
    assert "network/proxy" in remote and "TORCH_INDEX" not in remote, remote


def test_cli_table_and_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["preflight", "--root", str(tmp_path), "--only", "numa", "--only", "env"])
    out = capsys.readouterr().out
    assert code == 0 and "env:TORCH_NCCL_HIGH_PRIORITY" in out and "verdict: pass" in out
    code = main(["preflight", "--only", "topolgy"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown check 'topolgy'" in err and "Traceback" not in err


def test_an_index_only_locked_steps_read_is_a_warning_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cpu profile's torch step is locked (its files pinned by sha256): provision takes them
    from any configured source that serves them, so its index not answering is a warning here, as
    provision's own notice is, while an index an unlocked step reads stays a failure."""
    import shutil

    from support.index import UnreachablePort

    profile = tmp_path / "cpu"
    shutil.copytree(Path(__file__).parents[1] / "lockfiles" / "cpu", profile)
    with UnreachablePort() as dead:
        env_index = {"ENVBUILD_TORCH_INDEX": dead.url}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env_index.items():
                mp.setenv(k, v)
            code = main(
                [
                    "preflight",
                    "--stack",
                    str(profile / "stack.toml"),
                    "--root",
                    str(tmp_path / "root"),
                    "--only",
                    "index",
                    "--json",
                ]
            )
    doc = json.loads(capsys.readouterr().out)
    verdicts = {c["name"]: (c["verdict"], c["detail"]) for c in doc["checks"]}
    verdict, detail = verdicts[f"index:{dead.url}"]
    assert verdict == "warn" and "locked steps only" in detail, verdicts
    assert code == 0 and doc["verdict"] == "warn", doc
