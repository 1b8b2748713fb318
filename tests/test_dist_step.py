"""The distributed step: real torchrun, real gloo processes, the real torch CPU build."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envbuild.cli import main
from envbuild.commands import ui
from envbuild.commands.dist_step import result_rows

REPO = Path(__file__).parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_process_gloo(
    torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["dist-step", "--venv", str(torch_venv), "--root", str(tmp_path), "--steps", "3", "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert doc["mesh"] == {"dp": 1, "tp": 2, "ep": 2, "efsdp": 1, "experts": 8}
    assert all(doc["checks"].values()), doc["checks"]
    assert doc["losses"][0] > doc["losses"][-1]
    assert doc["parity"]["max_loss_diff"] <= doc["parity"]["tolerance"]["loss"] == 1e-4
    ck = doc["checkpoint"]
    assert ck["eval_loss_loaded"] == ck["eval_loss_saved"] != ck["eval_loss_perturbed"]
    assert doc["allreduce"]["busbw_gbps"] > 0
    assert len(doc["timing"]) and doc["timing"]["first_step_seconds"] > 0
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["ranks"][0]["peak_memory"][
        "rss_mb"
    ] > 0
    assert (
        doc["env"]["TORCH_NCCL_HIGH_PRIORITY"] == "1"
        and doc["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] is None
    )
    # where the seconds went: every rank's phases from its process's start, in order, after the
    # launch
    for rank in doc["ranks"]:
        names = [n for n, _, _ in rank["timeline"]]
        assert names[:4] == ["imports", "start", "init_process_group", "reference (single process)"]
        assert names[-1] == "gather results" and [n for n in names if n.startswith("step ")] == [
            "step 1/3",
            "step 2/3",
            "step 3/3",
        ]
        times = [t for _, t, _ in rank["timeline"]]
        assert doc["torchrun_launched_at"] < times[0] and times == sorted(times)
        assert times[-1] < doc["torchrun_launched_at"] + doc["torchrun_seconds"]
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["kind"] == "dist-step"
    assert receipt["names"]["launch_regime"] == "torchrun-standalone 1x2 gloo dp1xtp2 ep2"
    assert any(d["name"] == "torch" for d in receipt["software"]["distributions"])
    # the table the plain output prints from this result fits 100 columns, every row shown
    ui.configure()
    ui.print_table(None, ["", "result"], result_rows(doc), max_width=ui.WIDTH, keep=1)
    ui.close()
    table = capsys.readouterr().out.splitlines()
    assert max(map(len, table)) <= 100, "\n".join(table)
    for needle in (
        "loss finite",
        "checkpoint roundtrip exact",
        "routing",
        "all-reduce",
        "rank 1 peak",
    ):
        assert needle in "\n".join(table)


@pytest.mark.slow
# 1-4 and 8 (the reference host) in make test; 5-7 (no new shape: odd or even dp, tp 1 or 2) in make
# test-thorough
@pytest.mark.parametrize(
    "nproc", [*range(1, 5), *(pytest.param(n, marks=pytest.mark.thorough) for n in (5, 6, 7)), 8]
)
def test_every_default_mesh_1_to_8(
    torch_venv: Path, tmp_path: Path, nproc: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default mesh of 1-8 gloo processes matches the single-process reference. Before the
    routing fix, 3 processes (dp3 x tp1, ep3) failed: one top-k choice flipped on a near tie
    (router preference 7e-7) and sent a different gradient to two experts."""
    code = main(
        [
            "dist-step",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--steps",
            "5",
            "--bw-mb",
            "0",
            "--no-receipt",
            "--nproc",
            str(nproc),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, (doc.get("checks"), doc.get("parity"), doc.get("routing"))
    dp, tp, ep = doc["mesh"]["dp"], doc["mesh"]["tp"], doc["mesh"]["ep"]
    assert dp * tp == nproc and ep == nproc and tp == (2 if nproc % 2 == 0 else 1)
    assert doc["routing"]["max_flip_gap"] <= doc["routing"]["tolerance"]
    assert doc["routing"]["tokens_routed"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("nproc,dp,tp,ep", [(2, 2, 1, 1), (4, 2, 2, 2)])
def test_layouts(
    torch_venv: Path,
    tmp_path: Path,
    nproc: int,
    dp: int,
    tp: int,
    ep: int,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The mesh asked for is the mesh the ranks ran (the document says what was used), and it
    passes every check against the single-process reference."""
    code = main(
        [
            "dist-step",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--steps",
            "2",
            "--no-receipt",
            "--nproc",
            str(nproc),
            "--dp",
            str(dp),
            "--tp",
            str(tp),
            "--ep",
            str(ep),
            "--bw-mb",
            "0",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, (doc.get("checks"), doc.get("parity"))
    assert doc["world_size"] == nproc and len(doc["ranks"]) == nproc
    assert (doc["mesh"]["dp"], doc["mesh"]["tp"], doc["mesh"]["ep"]) == (dp, tp, ep), doc["mesh"]
    assert doc["checks"] and all(doc["checks"].values()), doc["checks"]
    assert doc["parity"]["max_loss_diff"] <= doc["parity"]["tolerance"]["loss"]


MESH_SCRIPT = r"""
import itertools, json, sys
sys.path.insert(0, sys.argv[1])
import worker
out = {}
for world, dp, tp, ep in itertools.product(range(1, 9), range(0, 5), range(0, 5), range(0, 5)):
    try:
        out[f"{world},{dp},{tp},{ep}"] = list(worker.choose_layout(world, dp, tp, ep))
    except SystemExit:
        out[f"{world},{dp},{tp},{ep}"] = None
print(json.dumps(out))
"""


def test_mesh_checked_before_launch_agrees_with_the_worker(torch_venv: Path) -> None:
    """plan_mesh (the launcher's check) and the worker's choose_layout give the same mesh, and
    refuse the same layouts (tp must also divide the sequence length, which the worker checks
    later).
    """
    from envbuild.errors import ConfigError
    from envbuild.proof.diststep.launch import SEQ_LEN, plan_mesh

    proc = subprocess.run(
        [
            str(torch_venv / "bin" / "python"),
            "-c",
            MESH_SCRIPT,
            str(REPO / "envbuild" / "proof" / "diststep"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    worker = json.loads(proc.stdout)
    assert len(worker) == 8 * 125
    for key, want in worker.items():
        world, dp, tp, ep = map(int, key.split(","))
        try:
            got: list[int] | None = list(plan_mesh(world, dp, tp, ep))
        except ConfigError as exc:
            got = None
            assert "\n" not in str(exc)
        if want is not None and SEQ_LEN % want[1]:
            want = None  # the worker refuses it once launched (--seq must divide by tp)
        assert got == want, key


def test_invalid_mesh_refused_before_launch(
    torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "root"
    code = main(
        ["dist-step", "--venv", str(torch_venv), "--root", str(root), "--nproc", "2", "--tp", "3"]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "tp 3 does not divide the world size 2" in err and "[1, 2]" in err
    assert "Traceback" not in err and "torchrun" not in err and "ChildFailedError" not in err
    assert not root.exists()  # refused before a log, a receipt or a process


def test_hung_rank_is_named(torch_venv: Path, tmp_path: Path) -> None:
    """SIGSTOP one real torchrun worker in the middle of training: the run stops within the
    stall timeout (+10 s), exit 7, naming the rank that stopped answering, its last phase and
    collective, and what the others wait in; no worker is left behind."""
    import os
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    argv = [
        sys.executable,
        "-m",
        "envbuild",
        "dist-step",
        "--venv",
        str(torch_venv),
        "--root",
        str(tmp_path / "r"),
        "--nproc",
        "3",
        "--steps",
        "40",
        "--bw-mb",
        "0",
        "--no-receipt",
        "--timeout",
        "600",
        "--stall-timeout",
        "8",
    ]
    agent = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env
    )
    victim = None
    try:
        for _ in range(3000):  # until rank 1 is training
            beats = list(scratch.glob("envbuild-dist-*/heartbeats/rank-1.json"))
            if beats:
                try:
                    beat = json.loads(beats[0].read_text())
                except ValueError:
                    beat = {}
                if str(beat.get("phase", "")).startswith("step 2/"):
                    victim = int(beat["pid"])
                    break
            assert agent.poll() is None, agent.communicate()
            time.sleep(0.1)
        assert victim is not None, "rank 1 never reached step 2"
        os.kill(victim, signal.SIGSTOP)
        stopped = time.monotonic()
        # read to the end (the bound is checked below, with what the run said)
        out, err = agent.communicate(timeout=8 + 10 + 30)
        took = time.monotonic() - stopped
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    assert agent.returncode == 7, err[-3000:]
    assert took <= 8 + 10, f"stopped {took:.1f} s after the rank did (stall timeout 8 s + 10 s)"
    assert "a rank sent no heartbeat for --stall-timeout 8 s" in err
    assert f"Stopped answering: rank 1 (pid {victim}" in err
    assert (
        "last collective" in err and "Waiting: rank 0 in 'step" in err and "rank 2 in 'step" in err
    )
    assert "Traceback" not in err
    assert (
        not Path(f"/proc/{victim}").exists()
        or "zombie" in Path(f"/proc/{victim}/status").read_text().lower()
    )
    assert not list(scratch.glob("envbuild-dist-*"))  # the run's temporary folder is gone


@pytest.mark.slow
def test_two_agents_c10d_rendezvous(torch_venv: Path, tmp_path: Path) -> None:
    """Multi-node as torchrun does it: two agents (one process each) join one c10d rendezvous."""
    endpoint = f"127.0.0.1:{_free_port()}"
    argv = [
        sys.executable,
        "-m",
        "envbuild",
        "dist-step",
        "--venv",
        str(torch_venv),
        "--steps",
        "2",
        "--nproc",
        "1",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        endpoint,
        "--rdzv-id",
        "t2",
        "--ckpt-dir",
        str(tmp_path / "ck"),
        "--json",
    ]
    agents = [
        subprocess.Popen(
            [*argv, "--root", str(tmp_path / f"node{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for i in range(2)
    ]
    outs = [a.communicate(timeout=300) for a in agents]
    for agent, (out, err) in zip(agents, outs, strict=True):
        assert agent.returncode == 0, err[-3000:]
        doc = json.loads(out)
        assert doc["ok"] and doc["world_size"] == 2 and doc["nnodes"] == 2
        assert doc["launch_regime"].startswith("torchrun-c10d 2x1 gloo")


AGENT = REPO / "envbuild" / "proof" / "diststep" / "agent.py"


def test_agent_is_torchrun_with_its_exit_status(torch_venv: Path, tmp_path: Path) -> None:
    """agent.py runs torchrun's own main (every dist-step above runs through it): a worker that
    fails is torchrun's ChildFailedError report and exit 1, as the torchrun script gives; an
    unknown option is argparse's exit 2. It never imports envbuild (it runs in the target venv)."""
    text = AGENT.read_text()
    assert "import envbuild" not in text and "from envbuild" not in text
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, sys\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    python = str(torch_venv / "bin" / "python")
    base = [
        python,
        str(AGENT),
        "--nproc-per-node",
        "1",
        "--standalone",
        "--local-addr",
        "127.0.0.1",
    ]
    failed = subprocess.run(
        [*base, "--max-restarts", "0", str(script), "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "rank 0 of 1" in failed.stdout, failed.stderr[-3000:]
    assert (
        failed.returncode == 1
        and "ChildFailedError" in failed.stderr
        and "exitcode  : 3" in failed.stderr
    )
    usage = subprocess.run(
        [python, str(AGENT), "--no-such-option"], capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and "usage: torchrun" in usage.stderr


def test_usage_errors(torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["dist-step", "--venv", str(torch_venv), "--root", str(tmp_path), "--nnodes", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--rdzv-endpoint" in err and "Traceback" not in err
    code = main(["dist-step", "--venv", str(tmp_path / "none"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and "no Python interpreter" in err
    code = main(["dist-step", "--python", sys.executable, "--root", str(tmp_path), "--no-receipt"])
    err = capsys.readouterr().err
    assert code == 3 and "torch is not installed" in err and "Traceback" not in err


def test_hang_paragraph_from_heartbeat_files(tmp_path: Path) -> None:
    """The words for a hang, from heartbeat files as the workers write them."""
    import time

    from envbuild.proof.diststep.watch import describe_hang, read_beats

    now = time.time()
    for rank, age, phase, op, seq, inside in [
        (0, 0.5, "step 3/5", "all_reduce", 40, True),
        (1, 30.0, "step 2/5", "all_to_all_single", 31, False),
    ]:
        (tmp_path / f"rank-{rank}.json").write_text(
            json.dumps(
                {
                    "rank": rank,
                    "pid": 100 + rank,
                    "host": "h",
                    "phase": phase,
                    "op": op,
                    "op_seq": seq,
                    "in_op": inside,
                    "time": now - age,
                }
            )
        )
    (tmp_path / "rank-2.json").write_text("{half a write")  # skipped, and reported as never seen
    beats = read_beats(tmp_path, now=now)
    assert [b.rank for b in beats] == [0, 1]
    text = describe_hang(
        beats,
        seconds=42.0,
        why="did not finish within --timeout 40 s and was stopped",
        expected_ranks=3,
    )
    assert text.startswith(
        "The distributed step did not finish within --timeout 40 s and was stopped "
        "(42 s into the run)."
    )
    assert (
        "Stopped answering: rank 1 (pid 101 on h: no heartbeat for 30 s, in 'step 2/5', "
        "last collective all_to_all_single #31 (returned))" in text
    )
    assert "Never reported: rank(s) 2." in text
    assert (
        "Waiting: rank 0 in 'step 3/5', last collective all_reduce #40 (still inside it)." in text
    )
    assert "\n" not in text
    empty = describe_hang(
        [], seconds=5.0, why="did not finish within --timeout 5 s and was stopped", expected_ranks=2
    )
    assert "no rank ever sent a heartbeat" in empty and "rendezvous" in empty


@pytest.mark.slow
def test_one_node_does_not_depend_on_the_hostname_resolving(
    torch_venv: Path, tmp_path: Path
) -> None:
    """A container's random hostname resolves nowhere; torchrun's default master address is the
    host's name, so its workers used to wait on it until the rendezvous timeout. Run in a UTS
    namespace of its own whose hostname does not resolve (``unshare --uts``, root only)."""
    probe = subprocess.run(["unshare", "--uts", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --uts does not run here: {probe.stderr.decode().strip()}")
    name = "envbuild-unresolvable-7f3a"
    with pytest.raises(OSError):
        socket.getaddrinfo(name, None)
    script = (
        f"hostname {name} && python -c 'import socket; print(\"hostname\", socket.gethostname())'"
        f" && {sys.executable} -m envbuild dist-step --venv {torch_venv} --root {tmp_path} --steps"
        " 2 --json"
    )
    out = subprocess.run(
        ["unshare", "--uts", "sh", "-c", script], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"hostname {name}" in out.stdout
    doc = json.loads(out.stdout[out.stdout.index("{") :])
    assert doc["world_size"] == 2 and all(doc["checks"].values()), doc["checks"]
