"""Smoke checks with the real torch CPU build (the torch_venv fixture), through the CLI."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from envbuild.cli import main
from envbuild.proof.smoke import describe, rate


def test_smoke_cpu(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the torch.compile check in its own process, as on a GPU (smoke_part; unsplit, the CPU's
    # default, in test_fromlock_smoke and the planted-fault tests)
    monkeypatch.setenv("ENVBUILD_SMOKE_SPLIT", "1")
    code = main(["smoke", "--venv", str(torch_venv), "--root", str(tmp_path), "--json"])
    out = capsys.readouterr().out
    doc = json.loads(out)
    assert code == 0, out
    by = {c["name"]: c for c in doc["checks"]}
    for name in ("matmul", "sdpa", "torch.compile"):
        assert by[name]["verdict"] == "pass", by[name]
        assert 0 <= by[name]["rel_err"] <= by[name]["tol"]
        assert by[name]["seconds"] > 0
    assert by["torch.compile"]["backend"] == "inductor, C++ (CPU)"
    # nothing measured on CPU
    assert "tflops" not in by["matmul"] and "kernel_ms" not in by["matmul"]
    assert by["sdpa"]["reference"].startswith("explicit softmax")
    for name in (
        "triton",
        "flash_attn",
        "causal_conv1d",
        "mamba_ssm.selective_scan",
        "fla",
        "flash_attn_4",
    ):
        assert (
            by[name]["verdict"] == "skip" and by[name]["reason"] == "no CUDA GPU visible to torch"
        )
    assert doc["environment"]["torch"].startswith("2.13.0")
    receipt = json.loads(Path(doc["receipt"]).read_text())
    assert receipt["kind"] == "smoke" and receipt["payload"]["ok"] is True
    assert receipt["names"]["launch_regime"] == "single-process"
    # taken on a thread while the checks ran: provenance, the venv's inventory
    assert receipt["provenance"]["argv"] and any(
        d["name"] == "torch" for d in receipt["software"]["distributions"]
    )
    assert (tmp_path / "logs" / "smoke.log").is_file()
    # where the seconds went: the process's start (the interpreter, then the imports: torch's),
    # each check (no CUDA phase without a GPU), the result
    timing = doc["timing"]
    names = [n for n, _, _ in timing["timeline"]]
    here = [c["name"] for c in doc["checks"] if c["name"] != "torch.compile"]
    assert names == [
        "python",
        "imports",
        "start",
        *here,
        "environment",
        "wait torch.compile",
        "result",
    ]
    # the torch.compile process's own, and its result once, in the checks' order
    part = [n for n, _, _ in timing["compile_part"]["timeline"]]
    assert part == ["python", "imports", "start", "torch.compile", "environment", "result"]
    assert [c["name"] for c in doc["checks"]][:4] == ["matmul", "sdpa", "triton", "torch.compile"]
    assert not list(tmp_path.rglob("*.compile.json"))  # its result file was taken
    # no CUDA context opened early without a GPU; this side's moments, in order
    assert "ready" not in timing["early_cuda"]
    moments = [n for n, _ in timing["parent"]]
    assert moments == ["process", "command", "gpus listed", "launched", "collected", "output"]
    assert [t for _, t in timing["parent"]] == sorted(t for _, t in timing["parent"])
    times = [t for _, t, _ in timing["timeline"]]
    cpu = [c for _, _, c in timing["timeline"]]
    assert timing["launched_at"] - 1 < times[0] and times == sorted(times) and cpu == sorted(cpu)
    assert times[-1] <= timing["launched_at"] + doc["seconds"]


@pytest.mark.slow
def test_smoke_fails_without_a_compiler(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No C++ compiler on PATH: inductor cannot build the kernel, so torch.compile fails, saying
    so, while sdpa (no compiler needed) passes; exit 7."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for var in ("CC", "CXX"):
        monkeypatch.delenv(var, raising=False)
    code = main(
        [
            "smoke",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--only",
            "torch.compile",
            "--only",
            "sdpa",
            "--no-receipt",
        ]
    )
    out = capsys.readouterr().out
    assert code == 7, out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith(("ok", "FAIL"))}
    assert set(lines) == {"sdpa", "torch.compile"}, out
    assert lines["sdpa"].startswith("ok "), out
    # the failure is the one planted, in inductor's own words: the compiler it looked for is missing
    assert lines["torch.compile"].startswith("FAIL "), out
    assert "InvalidCxxCompiler: No working C++ compiler found" in lines["torch.compile"], out
    assert "smoke FAILED: 1 passed, 1 failed" in out
    assert not (tmp_path / "receipts").exists()


def test_smoke_missing_venv_and_torchless_python(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["smoke", "--venv", str(tmp_path / "nope"), "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and "no Python interpreter at" in err and "Traceback" not in err
    # envbuild's venv: no torch
    code = main(["smoke", "--python", sys.executable, "--root", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and "torch is not installed" in err and "Traceback" not in err


def test_the_proofs_leave_bytecode_even_under_pythondontwritebytecode(
    torch_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uv installs no bytecode and a caller's PYTHONDONTWRITEBYTECODE=1 would keep every run
    compiling torch from source: the proofs run with bytecode writing on. A module of this
    test's own that the proof's interpreter imports at start (sitecustomize, from PYTHONPATH)
    gets its .pyc; the caller's own environment keeps the variable."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("# imported by the proof's interpreter at its start\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    code = main(
        [
            "smoke",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path / "root"),
            "--only",
            "sdpa",
            "--no-receipt",
        ]
    )
    assert code == 0
    assert list((site / "__pycache__").glob("sitecustomize.*.pyc"))
    assert os.environ["PYTHONDONTWRITEBYTECODE"] == "1"
    # the Dockerfiles' ENVBUILD_PROOF_BYTECODE=0: the variable holds (a smoke layer adds nothing
    # under torch/ to a layer after torch's)
    shutil.rmtree(site / "__pycache__")
    monkeypatch.setenv("ENVBUILD_PROOF_BYTECODE", "0")
    args = ["smoke", "--venv", str(torch_venv), "--root", str(tmp_path / "root")]
    assert main([*args, "--only", "sdpa", "--no-receipt"]) == 0
    assert not (site / "__pycache__").exists()


def test_checks_script_is_standalone() -> None:
    """The script and the modules beside it run inside the target venv: they must not import
    envbuild, and each is a module the script's folder on sys.path finds."""
    here = Path(__file__).parents[1] / "envbuild" / "proof" / "smoke"
    worker = [here / "checks.py", *sorted(here.glob("smoke_*.py"))]
    assert len(worker) == 7
    for path in worker:
        text = path.read_text()
        assert "import envbuild" not in text and "from envbuild" not in text, path
        assert len(text.splitlines()) < 500, path


def test_planted_wrong_answer_fails(
    torch_venv: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ENVBUILD_SMOKE_PERTURB plants an error of 3x the tolerance in one kernel's output: that
    check fails (exit 7), the others still pass."""
    monkeypatch.setenv("ENVBUILD_SMOKE_PERTURB", "sdpa")
    code = main(
        [
            "smoke",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--only",
            "sdpa",
            "--only",
            "matmul",
            "--no-receipt",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 7
    by = {c["name"]: c for c in doc["checks"]}
    assert by["sdpa"]["verdict"] == "fail" and by["sdpa"]["perturbed"] is True
    assert by["sdpa"]["rel_err"] > 2 * by["sdpa"]["tol"]
    assert "planted error" in by["sdpa"]["reason"]
    assert by["matmul"]["verdict"] == "pass" and "perturbed" not in by["matmul"]
    monkeypatch.setenv("ENVBUILD_SMOKE_PERTURB", "all")
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
        ]
    )
    out = capsys.readouterr().out
    assert code == 7 and "planted error" in out


REFERENCES_SCRIPT = r"""
import sys, math, torch, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
import smoke_base as checks
torch.manual_seed(0)
err = lambda a, b: float((a - b).norm() / b.norm())
out = {}

# attention: the float64 reference against torch's own SDPA math in float64
q, k, v = (torch.randn(2, 3, 40, 16, dtype=torch.float64) for _ in range(3))
out["attention"] = err(checks.attention_ref(q, k, v, True), F.scaled_dot_product_attention(q, k, v, is_causal=True))

# causal depthwise conv: against the definition, term by term
x, w, b = torch.randn(2, 5, 30, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
ref = torch.zeros_like(x) + b[None, :, None]
for t in range(30):
    for j in range(4):
        s = t - 3 + j
        if s >= 0:
            ref[:, :, t] += w[:, j] * x[:, :, s]
out["causal_conv1d"] = err(checks.causal_conv1d_ref(x, w, b, silu=True), F.silu(ref))

# selective scan: the recurrence against its closed (quadratic) form
bsz, d, L, n = 2, 3, 24, 4
u, dl = torch.randn(bsz, d, L, dtype=torch.float64), torch.randn(bsz, d, L, dtype=torch.float64)
A = -torch.rand(d, n, dtype=torch.float64) - 0.5
B, C = torch.randn(bsz, n, L, dtype=torch.float64), torch.randn(bsz, n, L, dtype=torch.float64)
D, z = torch.randn(d, dtype=torch.float64), torch.randn(bsz, d, L, dtype=torch.float64)
dt = F.softplus(dl)
cum = torch.cumsum(dt[..., None] * A[None, :, None, :], dim=2)          # (b, d, L, n): sum_{r<=t} dt_r A
y = torch.zeros(bsz, d, L, dtype=torch.float64)
for t in range(L):
    for s in range(t + 1):
        decay = torch.exp(cum[:, :, t] - cum[:, :, s])                   # prod_{r=s+1..t} exp(dt_r A)
        y[:, :, t] += (decay * (dt[:, :, s, None] * B[:, None, :, s] * u[:, :, s, None]) * C[:, None, :, t]).sum(-1)
y = (y + D[:, None] * u) * F.silu(z)
out["selective_scan"] = err(checks.selective_scan_ref64(u, dl, A, B, C, D, z, True), y)

# simple GLA: the recurrence against the parallel form ((q k^T) * decay mask) v
bsz, T, H, K = 2, 20, 2, 8
q, k, v = (torch.randn(bsz, T, H, K, dtype=torch.float64) for _ in range(3))
g = F.logsigmoid(torch.randn(bsz, T, H, dtype=torch.float64))
G = torch.cumsum(g, 1).transpose(1, 2)                                    # (b, h, T)
mask = torch.tril(torch.exp(G[..., :, None] - G[..., None, :]))
att = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(-1, -2)) * mask * K ** -0.5
out["simple_gla"] = err(checks.simple_gla_ref(q, k, v, g, K ** -0.5), (att @ v.transpose(1, 2)).transpose(1, 2))
print(__import__("json").dumps(out))
"""  # noqa: E501 (embedded script: the text is the value)


def test_float64_references_match_a_second_formula(torch_venv: Path) -> None:
    """Each float64 reference the GPU checks compare with agrees with an independent formula
    (definition term by term, closed form, parallel form) to float64 rounding."""
    import subprocess

    checks_dir = Path(__file__).parents[1] / "envbuild" / "proof" / "smoke"
    proc = subprocess.run(
        [str(torch_venv / "bin" / "python"), "-c", REFERENCES_SCRIPT, str(checks_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    errs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(errs) == {"attention", "causal_conv1d", "selective_scan", "simple_gla"}
    for name, e in errs.items():
        assert e < 1e-12, (name, e)


def test_each_result_is_printed_once_with_its_reason(
    torch_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One line per check as it finishes (a skip with its reason, no throughput on CPU), then the
    verdict with the counts: no second table of the same results."""
    code = main(
        [
            "smoke",
            "--venv",
            str(torch_venv),
            "--root",
            str(tmp_path),
            "--only",
            "matmul",
            "--only",
            "sdpa",
            "--only",
            "triton",
            "--only",
            "flash_attn",
            "--no-receipt",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    lines = (captured.out + captured.err).splitlines()
    for name in ("matmul", "sdpa", "triton", "flash_attn"):
        (line,) = [line for line in lines if name in line.split()]
        assert len(line) <= 100, line
    assert re.search(
        r"^ok   matmul +rel err \d\.\de-\d\d \(tol 1\.2e-02\)  \d+\.\d\d s$", captured.out, re.M
    ), captured.out
    assert re.search(r"^skip triton +no CUDA GPU visible to torch$", captured.out, re.M), (
        captured.out
    )
    assert "FLOP/s" not in captured.out and "┃" not in captured.out
    assert re.search(
        r"^smoke passed: 2 passed, 2 skipped in \d+\.\d s \(torch 2\.13\.0\+cpu on CPU\)$",
        captured.out,
        re.M,
    ), captured.out


def test_a_rate_is_shown_only_where_one_was_measured() -> None:
    assert rate(None) == rate(0.0) == rate(float("nan")) == rate(-1) == ""
    assert rate(787.4, 989.0) == "787 TFLOP/s (80% of 989)"
    assert rate(0.35) == "0.35 TFLOP/s" and rate(0.004) == "4 GFLOP/s"
    level, line = describe(
        {
            "name": "matmul",
            "verdict": "pass",
            "rel_err": 2.3e-3,
            "tol": 1.2e-2,
            "seconds": 3.1,
            "tflops": 787.4,
            "datasheet_tflops": 989.0,
        }
    )
    assert (level, line) == (
        "ok",
        (
            "  matmul                    rel err 2.3e-03 (tol 1.2e-02)  3.10 s  "
            "787 TFLOP/s (80% of 989)"
        ),
    )
    level, line = describe(
        {
            "name": "flash_attn",
            "verdict": "fail",
            "seconds": 0.5,
            "reason": "ImportError: " + "undefined symbol " * 40,
        }
    )
    assert level == "fail" and len(line) < 200 and line.endswith("...")
