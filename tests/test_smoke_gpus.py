"""smoke on every GPU at once, with the CPU standing in for N GPUs (``ENVBUILD_SMOKE_FAKE_GPUS``):
real worker processes of the real torch CPU build (the torch_venv fixture), through the CLI; the
slow-GPU comparison and dist-step's all-reduce expectation on recorded figures and nvidia-smi
outputs. The real GPUs' run is bench/gpu_smoke_all.sh (bench/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from envbuild import events
from envbuild.cli import main
from envbuild.nvidia import GPU, gpus_of, proc_gpus
from envbuild.proof.diststep import topology
from envbuild.proof.smoke.gpus import (
    describe_finding,
    parse_gpu_list,
    slow_findings,
    worker_env,
)

DATA = Path(__file__).parent / "data"
# nvidia-smi --query-gpu=index,uuid,pci.bus_id,name on the 2x H200 of bench/gpu_smoke_all.sh
QUERY_2XH200 = (
    "0, GPU-f0a8dbf6-34b2-3b10-0d51-58b812ce2437, 00000000:00:06.0, NVIDIA H200\n"
    "1, GPU-d5235e89-aa43-fae5-e5ee-a519c0156373, 00000000:00:07.0, NVIDIA H200\n"
)


def _smoke(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["smoke", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_one_wrong_gpu_fails_smoke_naming_only_it(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVBUILD_SMOKE_FAKE_GPUS", "3")
    monkeypatch.setenv("ENVBUILD_SMOKE_PERTURB_GPUS", "1")
    monkeypatch.setenv("ENVBUILD_SMOKE_PERTURB", "matmul")
    code, doc = _smoke(
        ["--venv", str(torch_venv), "--root", str(tmp_path), "--only", "matmul", "--only", "sdpa"],
        capsys,
    )
    assert code == 7 and doc["ok"] is False
    assert doc["launch_regime"] == "per-gpu 3 workers"
    by_gpu = {g["index"]: g for g in doc["gpus"]}
    assert sorted(by_gpu) == [0, 1, 2]
    assert (
        by_gpu[1]["ok"] is False
        and by_gpu[1]["uuid"] == "FAKE-GPU-1"
        and by_gpu[1]["bus_id"] == "fake:01"
    )
    verdicts = {i: {c["name"]: c["verdict"] for c in g["checks"]} for i, g in by_gpu.items()}
    assert verdicts == {
        0: {"matmul": "pass", "sdpa": "pass"},
        1: {"matmul": "fail", "sdpa": "pass"},
        2: {"matmul": "pass", "sdpa": "pass"},
    }  # the others' results still there
    matmul = next(c for c in doc["checks"] if c["name"] == "matmul")
    assert matmul["verdict"] == "fail" and matmul["failed_gpus"] == [1] and matmul["gpu"] == 1
    assert all(
        g["environment"]["gpu_index"] == i for i, g in by_gpu.items()
    )  # each worker knew its GPU
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert [g["index"] for g in receipt["payload"]["gpus"]] == [0, 1, 2]
    assert (tmp_path / "logs" / "smoke-gpu1.log").is_file()

    # the text names the GPU by index, UUID and PCI bus id, and says where it failed
    code = main(
        [
            "smoke",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--only",
            "matmul",
            "--no-receipt",
            "--gpus",
            "0,1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 7
    assert "GPU 1  FAKE-GPU-1  PCI fake:01" in out and "FAILED: matmul" in out
    assert "(failed on GPU 1)" in out
    assert "GPU 0  FAKE-GPU-0  PCI fake:00" in out and "ok, 1 passed" in out


def test_healthy_gpus_pass_and_gpus_picks_them(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ENVBUILD_SMOKE_FAKE_GPUS", "4")
    monkeypatch.delenv("ENVBUILD_SMOKE_PERTURB", raising=False)
    # a competing load pinned to GPU 3 (the CPU's here): started before, stopped after
    monkeypatch.setenv("ENVBUILD_SMOKE_LOAD_GPUS", "3")
    args = ["--venv", str(torch_venv), "--root", str(tmp_path), "--only", "sdpa"]
    with _Watcher() as seen:
        code = main(["smoke", *args, "--gpus", "3,1", "--no-receipt", "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0 and doc["ok"] is True and doc["slow"] == []
    assert [g["index"] for g in doc["gpus"]] == [3, 1]  # in --gpus's order, GPU 0 and 2 left out
    assert all(g["ok"] and g["checks"][0]["verdict"] == "pass" for g in doc["gpus"])
    # the load ran: one load.py child, named in the warning, alive while the workers were
    (load,) = {pid for snap in seen for pid, argv in snap.items() if argv.endswith("smoke/load.py")}
    assert "planted: a competing matmul load on GPU 3 (" in err and f"(pid {load})" in err, err
    together = [s for s in seen if load in s and any("smoke/checks.py" in a for a in s.values())]
    assert together, seen
    workers = {pid for s in together for pid, argv in s.items() if "smoke/checks.py" in argv}
    assert len(workers) == 2  # GPU 3's worker and GPU 1's, both beside the load
    # ... and gone after: killed and reaped (no zombie left), no load.py child of this process
    assert _parent_of(load) != os.getpid()
    assert not [a for a in _children().values() if a.endswith("smoke/load.py")]


class _Watcher:
    """This process's live children, every 20 ms, while the block runs: a list of snapshots
    (pid -> command line)."""

    def __enter__(self) -> list[dict[int, str]]:
        self.seen: list[dict[int, str]] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self.seen

    def _watch(self) -> None:
        while not self.done.wait(0.02):
            snap = _children()
            if snap:
                self.seen.append(snap)

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


def _children() -> dict[int, str]:
    """This process's children that run (not zombies): pid -> command line (the kernel lists
    each thread's children: the workers are started from threads of their own)."""
    out = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in map(int, pids):
            proc = Path("/proc") / str(pid)
            try:
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state != "Z":
                out[pid] = _cmdline(proc)
    return out


def _parent_of(pid: int) -> int | None:
    """The parent of ``pid``, zombie or not; None when there is no such process."""
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def test_gpus_and_slow_margin_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ENVBUILD_SMOKE_FAKE_GPUS", "2")
    python = Path(sys.executable)
    code = main(["smoke", "--python", str(python), "--root", str(tmp_path), "--gpus", "0,5"])
    err = capsys.readouterr().err
    assert code == 3 and "--gpus names GPU 5" in err and "visible GPUs: 0, 1" in err
    for bad in (["--gpus", "first"], ["--slow-margin", "1.5"], ["--slow-margin", "x"]):
        with pytest.raises(SystemExit) as exc:
            main(["smoke", "--python", str(python), "--root", str(tmp_path), *bad])
        assert exc.value.code == 2
    assert parse_gpu_list("all") is None and parse_gpu_list("0, 3,3") == (0, 3)


def test_visible_gpus_follow_cuda_visible_devices(tmp_path: Path) -> None:
    """``nvidia.visible_gpus`` on a host whose driver lists no /proc folder: nvidia-smi's list (a
    stand-in on PATH that answers only the list query, with the 2x H200's recorded answer),
    narrowed as CUDA narrows it by CUDA_VISIBLE_DEVICES: indices or UUID prefixes, in its order,
    up to the first entry it cannot use."""
    from envbuild.nvidia import visible_gpus

    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\n"
        '[ "$*" = "--query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader,nounits" ]'
        " || exit 9\n"
        f"printf '%s' '{QUERY_2XH200}'\n"
    )
    smi.chmod(0o755)
    env = {"PATH": str(smi.parent), "ENVBUILD_SMOKE_PROC_GPUS": str(tmp_path / "no-driver")}

    def visible(wanted: str | None) -> list[tuple[int, str]]:
        cuda = {} if wanted is None else {"CUDA_VISIBLE_DEVICES": wanted}
        return [(g.index, g.bus_id) for g in visible_gpus({**env, **cuda})]

    gpu0, gpu1 = (0, "00000000:00:06.0"), (1, "00000000:00:07.0")
    assert [(g.index, g.bus_id, g.name) for g in gpus_of(QUERY_2XH200)] == [
        (*gpu0, "NVIDIA H200"),
        (*gpu1, "NVIDIA H200"),
    ]
    assert visible(None) == [gpu0, gpu1]
    assert visible("1") == [gpu1]
    assert visible("GPU-d5235e89,0") == [gpu1, gpu0]
    assert visible("") == [] and visible("0,7,1") == [gpu0]  # CUDA stops at 7
    assert visible("-1,0") == []
    # the list is nvidia-smi's: without it on PATH there is none
    assert visible_gpus({**env, "PATH": str(tmp_path)}) == []


def test_a_planted_wrong_answer_goes_to_the_chosen_gpu_only() -> None:
    a, b = (GPU(i, f"GPU-{i}", f"bus{i}", "H200") for i in range(2))
    base = {"ENVBUILD_SMOKE_PERTURB_GPUS": "1", "ENVBUILD_SMOKE_PERTURB": "sdpa"}
    assert "ENVBUILD_SMOKE_PERTURB" not in worker_env(base, a)
    assert worker_env(base, b)["ENVBUILD_SMOKE_PERTURB"] == "sdpa"
    assert worker_env({"ENVBUILD_SMOKE_PERTURB_GPUS": "1"}, b)["ENVBUILD_SMOKE_PERTURB"] == "all"
    assert (
        worker_env(base, b)["CUDA_VISIBLE_DEVICES"] == "GPU-1"
    )  # by UUID: no ordering to get wrong


def _gpu(i: int) -> GPU:
    return GPU(i, f"GPU-{i}", f"00000000:{i:02x}:00.0", "NVIDIA H100 80GB HBM3")


def _matmul(tflops: float, **extra: Any) -> list[dict[str, Any]]:
    return [
        {"name": "matmul", "verdict": "pass", "tflops": tflops, "datasheet_tflops": 989.0, **extra},
        {"name": "sdpa", "verdict": "pass"},
    ]


def test_the_slow_gpu_is_named_and_healthy_spread_is_not() -> None:
    # healthy: 2x H100 and 2x H200 as measured (issue 43, bench/results-gpu-smoke-all-*.json)
    for healthy in ([752.0, 771.0], [758.0, 785.0, 770.0, 790.0], [773.0, 806.0]):
        assert slow_findings([(_gpu(i), _matmul(r)) for i, r in enumerate(healthy)], 0.10) == []
    nvml = {
        "sm_clock_mhz": 1110,
        "sm_clock_max_mhz": 1980,
        "throttle_reasons": ["hw_thermal_slowdown"],
        "temperature_c": 91.0,
        "power_w": 402.0,
        "processes": 3,
        "own_processes": 2,
    }
    rates = [
        (_gpu(0), _matmul(780.0)),
        (_gpu(1), _matmul(790.0)),
        (_gpu(2), _matmul(401.0, nvml=nvml)),
        (_gpu(3), _matmul(770.0)),
    ]
    found = slow_findings(rates, 0.10)
    assert [(f["index"], f["check"], f["verdict"]) for f in found] == [(2, "matmul", "fail")]
    assert found[0]["reference_tflops"] == 780.0 and found[0]["uuid"] == "GPU-2"
    text = describe_finding(found[0])
    assert "GPU 2 (GPU-2, PCI 00000000:02:00.0) is slow: matmul 401 TFLOP/s, 49% below" in text
    assert "SM clock 1110 of 1980 MHz" in text and "hw_thermal_slowdown" in text
    assert "3 compute processes on it (2 of them this smoke's)" in text
    # two GPUs: the slow one against the other; the fast one is not "below" anything
    two = slow_findings([(_gpu(0), _matmul(785.0)), (_gpu(1), _matmul(354.0))], 0.10)
    assert [f["index"] for f in two] == [1]
    # the margin decides; off compares nothing; a failed check's rate is not compared
    assert slow_findings(rates, 0.6) == [] and slow_findings(rates, None) == []
    failed = [{"name": "matmul", "verdict": "fail", "tflops": 100.0}]
    assert slow_findings([(_gpu(0), _matmul(780.0)), (_gpu(1), failed)], 0.10) == []


def test_one_gpu_is_compared_with_its_model() -> None:
    assert slow_findings([(_gpu(0), _matmul(780.0))], 0.10) == []
    found = slow_findings([(_gpu(0), _matmul(500.0))], 0.10)
    assert [(f["verdict"], f["compared_with"]) for f in found] == [
        ("warn", "figure expected of its model")
    ]
    assert found[0]["reference_tflops"] == pytest.approx(0.75 * 989.0)
    no_sheet = [{"name": "matmul", "verdict": "pass", "tflops": 10.0, "datasheet_tflops": None}]
    assert slow_findings([(_gpu(0), no_sheet)], 0.10) == []


def _dist_result(busbw: float, hosts: tuple[str, str] = ("h", "h")) -> dict[str, Any]:
    uuids = [line.split(", ")[1] for line in QUERY_2XH200.splitlines()]
    return {
        "allreduce": {"busbw_gbps": busbw},
        "ranks": [{"rank": i, "host": hosts[i], "gpu_uuid": uuids[i]} for i in range(2)],
    }


def test_allreduce_is_judged_against_the_gpu_links() -> None:
    nv18 = (DATA / "topo_nv18_2gpu.txt").read_text()
    fine = topology.judge(_dist_result(328.0), query=QUERY_2XH200, topo=nv18, host="h")
    assert fine is not None and fine["verdict"] == "pass" and fine["links"] == ["NV18"]
    assert fine["expected_busbw_gbps"] == pytest.approx(18 * 25 * 0.75)
    slow = topology.judge(_dist_result(40.0), query=QUERY_2XH200, topo=nv18, host="h")
    assert slow is not None and slow["verdict"] == "warn"
    assert "far below the 338 GB/s the links between GPU 0, 1 should give" in topology.describe(
        slow
    )
    pcie = (DATA / "topo_pcie_4gpu.txt").read_text()
    over_pcie = topology.judge(_dist_result(11.0), query=QUERY_2XH200, topo=pcie, host="h")
    assert (
        over_pcie is not None and over_pcie["verdict"] == "pass" and over_pcie["links"] == ["PHB"]
    )
    # ranks on two hosts go through the network: nothing to compare
    assert (
        topology.judge(_dist_result(5.0, ("a", "b")), query=QUERY_2XH200, topo=nv18, host="a")
        is None
    )
    assert topology.expected_busbw(["NV18", "SYS"]) == (12.0, "PCIe (SYS): about 12 GB/s")


FLA_LEAD_SCRIPT = """
import sys, time
sys.path.insert(0, sys.argv[1])
import smoke_fla
first = smoke_fla._fla_lead(wait=False)
print("lead" if first else "follow", flush=True)
if sys.argv[2] == "hold":
    sys.stdin.readline()  # holds the lock until the test lets go
else:
    t0 = time.monotonic()
    smoke_fla._fla_lead(wait=True)  # waits for the leader, then goes on
    print(f"waited {time.monotonic() - t0:.1f}", flush=True)
"""


# make test-thorough: two real processes on the compile lock; the orchestration tests stay
@pytest.mark.thorough
def test_one_worker_compiles_fla_and_the_others_wait(torch_venv: Path, tmp_path: Path) -> None:
    """fla's kernels are compiled once for all GPUs: the first worker takes the shared cache's
    lock and compiles, the others find it taken and wait for it before their fla check."""
    import subprocess
    import time

    checks_dir = Path(__file__).resolve().parents[1] / "envbuild" / "proof" / "smoke"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    python = str(torch_venv / "bin" / "python")
    leader = subprocess.Popen(
        [python, "-c", FLA_LEAD_SCRIPT, str(checks_dir), "hold"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert leader.stdin is not None and leader.stdout is not None
    assert leader.stdout.readline().strip() == "lead"
    other = subprocess.Popen(
        [python, "-c", FLA_LEAD_SCRIPT, str(checks_dir), "wait"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert other.stdout is not None
    assert other.stdout.readline().strip() == "follow"  # the lock is taken: not its to compile
    time.sleep(1.0)
    leader.stdin.close()  # the leader is done
    leader.wait(timeout=60)
    leader.stdout.close()
    waited = other.stdout.readline().split()
    other.wait(timeout=60)
    other.stdout.close()
    assert waited[0] == "waited" and float(waited[1]) >= 0.9  # it waited for the leader to let go
    alone = subprocess.run(
        [python, "-c", FLA_LEAD_SCRIPT, str(checks_dir), "wait"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert alone.stdout.split()[0] == "lead"  # nobody else: it leads


def test_the_compile_check_goes_to_its_own_process_on_a_gpu(tmp_path: Path) -> None:
    """smoke_part: where a GPU is there, the torch.compile check runs in a second process, unless
    it is not asked for or is all there is to do; its result file is read when it is there, and
    a process that ends without one fails the check, saying so."""
    from envbuild.proof.smoke import smoke_part

    out = ["--out", str(tmp_path / "r.json")]
    on = {"ENVBUILD_SMOKE_SPLIT": "1"}
    assert smoke_part.wanted(out, on) and smoke_part.wanted(
        [*out, "--only", "torch.compile", "--only", "matmul"], on
    )
    assert not smoke_part.wanted([*out, "--only", "torch.compile"], on)  # nothing else to do
    assert not smoke_part.wanted([*out, "--only", "matmul"], on)
    assert not smoke_part.wanted(out, {**on, "ENVBUILD_SMOKE_PART": "torch.compile"})  # itself
    assert not smoke_part.wanted(out, {"ENVBUILD_SMOKE_SPLIT": "0"})
    assert not smoke_part.wanted(out, {"CUDA_VISIBLE_DEVICES": ""})  # no GPU: the worker's own
    assert not smoke_part.wanted(["--fla-part", "0", "2"], on)

    result = tmp_path / "r.json.compile.json"
    doc = {"checks": [{"name": "torch.compile", "verdict": "pass"}], "timeline": []}
    write = f"import json, sys; json.dump({doc!r}, open(sys.argv[1], 'w'))"
    wrote = smoke_part.Part(
        subprocess.Popen([sys.executable, "-c", write, str(result)]), str(result)
    )
    assert wrote.collect() == doc and not result.exists()
    wrote.proc.wait()
    lost = smoke_part.Part(
        subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"]), str(result)
    )
    failed = lost.collect()
    assert failed["lost"] is True and failed["checks"][0]["verdict"] == "fail"
    assert "exited with 3 before writing a result" in failed["checks"][0]["reason"]


def test_gpus_are_listed_from_the_driver_without_nvidia_smi(tmp_path: Path) -> None:
    """/proc/driver/nvidia/gpus as the driver writes it (2x H200 of bench/gpu_smoke_all.sh): the
    GPUs in PCI bus order with nvidia-smi's bus ids, only those whose device node this process
    may open; a folder missing a field is not trusted (None: nvidia-smi then)."""
    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    dev.mkdir()
    for minor, (bus, uuid) in enumerate(
        [("0000:00:07.0", "GPU-e318d76f-fd28"), ("0000:00:06.0", "GPU-c3625819-ef1f")]
    ):
        (proc / bus).mkdir(parents=True)
        (proc / bus / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\nGPU UUID: \t {uuid}\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t {1 - minor}\nGPU Excluded:\t No\n"
        )
        (dev / f"nvidia{1 - minor}").write_text("")
    gpus = proc_gpus(proc, dev)
    assert gpus is not None
    assert [(g.index, g.uuid, g.bus_id, g.name) for g in gpus] == [
        (0, "GPU-c3625819-ef1f", "00000000:00:06.0", "NVIDIA H200"),
        (1, "GPU-e318d76f-fd28", "00000000:00:07.0", "NVIDIA H200"),
    ]
    (dev / "nvidia0").unlink()  # a GPU of the host that this container was not given
    assert [g.uuid for g in proc_gpus(proc, dev) or []] == ["GPU-e318d76f-fd28"]
    info = proc / "0000:00:06.0" / "information"
    info.write_text(info.read_text().replace("GPU UUID", "GPU Id"))
    assert proc_gpus(proc, dev) is None and proc_gpus(tmp_path / "none", dev) is None


def test_provision_warm_kernels_compiles_on_one_gpu_and_nothing_without_one(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``provision --warm-kernels`` (commands.smoke.warm_after_provision): the compile checks on
    the first GPU only, with the data root's caches; a failed one is a warning, not a failed
    provision; no GPU: nothing runs. (sdpa stands in for the compile checks: quick on CPU.)"""
    from envbuild.commands.parser import build_parser
    from envbuild.commands.smoke import target_env, warm_after_provision
    from envbuild.layout import Paths
    from envbuild.proof.warm import warm_kernels
    from envbuild.spec.stack import load_spec

    spec = load_spec(Path(__file__).parents[1] / "lockfiles" / "cpu" / "stack.toml")
    paths = Paths(root=tmp_path / "root")
    python = torch_venv / "bin" / "python"
    monkeypatch.setenv("ENVBUILD_SMOKE_FAKE_GPUS", "3")
    env = target_env(spec, paths)
    assert env["TRITON_CACHE_DIR"] == str(paths.cache / "triton")  # the root's, as smoke's
    warmed = warm_kernels(python, env, checks=("sdpa",))
    assert warmed.gpu is not None and warmed.gpu.index == 0 and warmed.compiled == ["sdpa"]
    assert warmed.to_json()["failed"] == [] and warmed.skipped is None
    monkeypatch.setenv("ENVBUILD_SMOKE_PERTURB", "sdpa")
    bad = warm_kernels(python, target_env(spec, paths), checks=("sdpa",))
    assert [r["name"] for r in bad.failed] == ["sdpa"] and bad.compiled == []
    # a lock whose smoke runs none of them, and a host without a GPU: nothing runs
    none = warm_kernels(python, env, selection=("matmul",))
    assert none.checks == () and none.skipped and none.seconds == 0.0
    monkeypatch.delenv("ENVBUILD_SMOKE_FAKE_GPUS")
    monkeypatch.setenv("ENVBUILD_SMOKE_PROC_GPUS", str(tmp_path / "no-driver"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    said: list[events.Event] = []
    with events.sink(said.append):
        doc = warm_after_provision(spec, paths, torch_venv)
    assert doc["skipped"] == "no GPU visible: nothing to compile for" and doc["compiled"] == []
    assert [e.message for e in said] == [
        "--warm-kernels: nothing compiled (no GPU visible: nothing to compile for)"
    ]
    args = build_parser("provision").parse_args(["provision", "--warm-kernels"])
    assert args.warm_kernels is True
    assert build_parser("provision").parse_args(["provision"]).warm_kernels is False


def test_one_reader_of_nvidia_smis_csv() -> None:
    """``nvidia.parse_query``: one row per GPU for any fields, a driver's message and a line of
    another width are not rows; preflight's, smoke's and the arch list's readers are this one."""
    from envbuild.host.preflight import parse_gpus
    from envbuild.nvidia import parse_query

    text = (
        "0, NVIDIA H200, 570.124.06, 143771, 00000000:18:00.0\n"
        "1, NVIDIA H200, 570.124.06, [N/A], 00000000:2A:00.0\n"
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"
        "x, not, an, index, row\n"
    )
    fields = ("index", "name", "driver_version", "memory.total", "pci.bus_id")
    rows = parse_query(text, fields)
    assert [r["index"] for r in rows] == ["0", "1"]
    assert rows[1]["memory.total"] == "[N/A]" and rows[0]["pci.bus_id"] == "00000000:18:00.0"
    facts = parse_gpus(text)
    assert [(g.index, g.memory_mib) for g in facts] == [(0, 143771), (1, None)]
    assert parse_query("9.0\n12.0\n", ("compute_cap",)) == [
        {"compute_cap": "9.0"},
        {"compute_cap": "12.0"},
    ]
    assert [g.uuid for g in gpus_of(QUERY_2XH200)] == [
        "GPU-f0a8dbf6-34b2-3b10-0d51-58b812ce2437",
        "GPU-d5235e89-aa43-fae5-e5ee-a519c0156373",
    ]
