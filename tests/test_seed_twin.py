"""The seed stack ``h200-cu132``, end to end, on its twin (``support.twin``) and real PyPI.

The profile is used as committed (a byte-identical copy, so the lock lands in the test's
folder): ``lock --profile h200-cu132`` for Python 3.13 on this machine's Python (uv,
cross-target), ``check-lock``, the target host's installers in dry runs (pip ``--require-hashes
--python-version 3.13 --platform manylinux_2_28_x86_64 --only-binary=:all:``, uv ``--target``),
``wheelhouse mirror`` of the whole lock, then ``provision --offline --wheelhouse`` and ``verify``
of a copy of the profile whose ``python`` is this machine's (the same steps, flags and pins;
locked by uv as well), and every seed trap as
the real host shows it.

Marked ``network`` and ``slow`` (deselect with ``-m 'not seed_twin'``); ``make test`` runs it,
and it skips by itself when PyPI does not answer (asked with urllib, never through envbuild's
own probe: a failure of envbuild's code is a failure, never a skip). Phase times go to
``.cache/tests/seed-twin/timings.json``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fixtures import (
    NIGHTLY_TORCH,
    PY_MAJOR_MINOR,
    PYTORCH_TRITON,
    EnvbuildResult,
    Venv,
    run_cli,
)
from support.twin import CACHE, FLA_URL, LOCAL, SeedTwin
from test_lock_target import dry_run_on_target

from envbuild.errors import ExitCode
from envbuild.spec import load_spec, profile_path
from envbuild.stacklock.model import parse_requirements_text

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.seed_twin]

PROFILE = "h200-cu132"
PLATFORM = "manylinux_2_28_x86_64"
SDIST_ONLY = ("dualpipe",)  # PyPI has no wheel of dualpipe 1.0.0
TIMES: dict[str, float] = {}
PYPI_PAGE = "https://pypi.org/simple/pip/"  # the first package of the profile


def pypi_absent(url: str = PYPI_PAGE, attempts: int = 3) -> str | None:
    """Why PyPI does not answer, asked without envbuild (the standard library's urllib, so a bug
    in envbuild's own probe cannot pass for a network without PyPI); None when it answers."""
    why = ""
    for n in range(attempts):
        try:
            req = urllib.request.Request(url, method="HEAD")
            with urllib.request.urlopen(req, timeout=10) as resp:  # a fixed https URL
                if resp.status < 500:
                    return None
                why = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return None
            why = f"HTTP {exc.code}"
        except (OSError, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
        time.sleep(2 * (n + 1))
    return why


@pytest.fixture(scope="module", autouse=True)
def _pypi_answers() -> None:
    """A network without PyPI skips the module instead of failing its set-up; it is the only
    skip here, and it is asked independently of envbuild."""
    why = pypi_absent()
    if why is not None:
        pytest.skip(f"PyPI does not answer ({why}): the seed twin needs it for everything PyPI has")


def test_the_skip_rule_tells_an_answer_from_silence() -> None:
    """Both ways: PyPI answering is no reason to skip (the fixture above got here), a port where
    nothing listens is one."""
    assert pypi_absent() is None
    assert pypi_absent("http://127.0.0.1:9/simple/pip/", attempts=1)


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, seed_twin: SeedTwin
) -> Iterator[dict[str, Any]]:
    """The profile as committed in a lockfiles folder of its own, and a copy for this Python."""
    tmp = tmp_path_factory.mktemp("seed")
    real = profile_path(PROFILE)
    lockfiles = tmp / "lockfiles"
    (lockfiles / PROFILE).mkdir(parents=True)
    shutil.copy2(real, lockfiles / PROFILE / "stack.toml")
    host = lockfiles / f"{PROFILE}-host"
    host.mkdir()
    text = real.read_text()
    assert 'python = "3.13"' in text
    # the copy differs in python and in the data disk it asks for (this machine's is not the H200's)
    assert "min_free_gb = 60\n" in text
    copy = text.replace('python = "3.13"', f'python = "{PY_MAJOR_MINOR}"', 1).replace(
        "min_free_gb = 60\n", "min_free_gb = 1\n"
    )
    (host / "stack.toml").write_text(copy)
    cache = CACHE / "envbuild-cache"  # uv's and pip-tools' caches: later runs resolve from them
    env = seed_twin.env({"ENVBUILD_LOCKFILES": str(lockfiles), "ENVBUILD_CACHE_DIR": str(cache)})
    t0 = time.monotonic()
    yield {
        "tmp": tmp,
        "lockfiles": lockfiles,
        "folder": lockfiles / PROFILE,
        "host": host,
        "env": env,
        "twin": seed_twin,
        "home": tmp / "home",
        "wheelhouse": tmp / "wheelhouse",
    }
    TIMES["total"] = time.monotonic() - t0
    (CACHE / "timings.json").write_text(
        json.dumps({k: round(v, 1) for k, v in TIMES.items()}, indent=2) + "\n"
    )


def envbuild(world: dict[str, Any], *args: str | Path, phase: str | None = None) -> EnvbuildResult:
    """Run the CLI. Where envbuild says a package source does not answer (exit 3), PyPI is asked
    again without envbuild (``pypi_absent``): a skip only when it is really gone; when it answers,
    the exit stands and the test fails on it (envbuild's own probe is code under test)."""
    t0 = time.monotonic()
    r = run_cli(args, home=world["home"], cwd=world["tmp"], env=world["env"], timeout=1500)
    if phase:
        TIMES[phase] = TIMES.get(phase, 0.0) + time.monotonic() - t0
    if (
        r.rc == ExitCode.PREFLIGHT
        and "do not answer" in r.stderr
        and (gone := pypi_absent()) is not None
    ):
        command = next(str(a) for a in args if not str(a).startswith("-"))
        pytest.skip(f"envbuild {command}: PyPI does not answer ({gone})")
    return r


def _manifest(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "lock.json").read_text())
    return data


def _pins(folder: Path, step: str) -> dict[str, str | None]:
    entry = next(s for s in _manifest(folder)["steps"] if s["name"] == step)
    return {
        r.name: r.version or r.url
        for r in parse_requirements_text((folder / entry["file"]).read_text(), step)
    }


@pytest.fixture(scope="module")
def locked(world: dict[str, Any]) -> Path:
    folder: Path = world["folder"]
    assert (
        load_spec(folder / "stack.toml", world["env"]).digest
        == load_spec(profile_path(PROFILE), world["env"]).digest
    )
    r = envbuild(world, "-v", "lock", "--profile", PROFILE, phase="lock (3.13, uv)")
    assert r.rc == 0, r.output
    return folder


def test_lock_for_python_313_from_this_machine(locked: Path, world: dict[str, Any]) -> None:
    data = _manifest(locked)
    assert data["target"] == {"python": "3.13", "platform": PLATFORM, "resolver": "uv"}
    assert [s["name"] for s in data["steps"]] == [
        "bootstrap",
        "torch",
        "prebuilt-cuda",
        "flash-attn-4",
        "fla",
        "rest",
    ]
    assert all(s["locked"] for s in data["steps"])
    torch = _pins(locked, "torch")
    assert torch["torch"] == NIGHTLY_TORCH and torch["pytorch-triton"] == PYTORCH_TRITON
    assert torch["nvidia-cudnn-cu13"] == "9.20.0.48" and torch["nvidia-nccl-cu13"] == "2.29.7"
    # torch needs it on 3.13 (python_version >= "3.12"); bootstrap's pin
    assert torch["setuptools"] == "80.9.0"
    assert sorted(data["abi"]["protected"]) == sorted(
        [
            "torch",
            "pytorch-triton",
            "nvidia-cublas",
            "nvidia-cuda-runtime",
            "nvidia-cudnn-cu13",
            "nvidia-nccl-cu13",
            "nvidia-nvshmem-cu13",
        ]
    )
    # the prebuilt wheels: exact pins, --no-deps, from the wheelhouse; both interpreters' files
    # hashed
    prebuilt = next(s for s in data["steps"] if s["name"] == "prebuilt-cuda")
    assert prebuilt["flags"]["no_deps"] and {
        p["name"]: p["version"] for p in prebuilt["packages"]
    } == {
        "flash-attn": f"2.8.3+{LOCAL}",
        "causal-conv1d": f"1.6.1+{LOCAL}",
        "mamba-ssm": f"2.3.1+{LOCAL}",
        "qoptim-cuda": f"0.0.0+{LOCAL}",
    }
    # FA4 with the seed's pins: cutlass-dsl 4.4.2 and quack 0.3.9, not what FA4 alone resolves to
    fa4 = _pins(locked, "flash-attn-4")
    assert (fa4["flash-attn-4"], fa4["nvidia-cutlass-dsl"], fa4["quack-kernels"]) == (
        "4.0.0b7",
        "4.4.2",
        "0.3.9",
    )
    # fla: the git requirement at the twin repository's commit (the URL as the profile has it)
    fla = _pins(locked, "fla")
    assert fla["flash-linear-attention"] == f"git+{FLA_URL}@{world['twin'].fla_commit}"
    assert fla["fla-core"] == "0.4.2"
    rest = _pins(locked, "rest")
    assert (
        rest["torchao"] == "0.17.0"
        and rest["transformers"] == "5.23.0"
        and rest["datasets"] == "5.2.0"
    )
    # the baseline never comes back in a later step, and no PyPI triton anywhere
    for step in ("flash-attn-4", "fla", "rest"):
        later = _pins(locked, step)
        assert not set(later) & set(data["abi"]["protected"]) and "triton" not in later, step
    # hashes of every file of each chosen version: numpy's cover all its wheels, not only cp313
    numpy = next(p for p in data["steps"][-1]["packages"] if p["name"] == "numpy")
    assert numpy["version"] == "2.4.6" and len(numpy["hashes"]) == len(numpy["artifacts"]) > 10
    assert any("cp311" in a["filename"] for a in numpy["artifacts"])
    # a trap of the seed's order, found here: the FA4 step resolves numpy freely (cutlass-dsl needs
    # it), so its newest version lands first and the rest step's numpy==2.4.6 replaces it
    assert fa4["numpy"] != "2.4.6"
    assert (locked / "pylock.toml").is_file()


def test_check_lock_is_green(locked: Path, world: dict[str, Any]) -> None:
    r = envbuild(world, "check-lock", "--profile", PROFILE, "--json", phase="check-lock")
    assert r.rc == 0, r.output
    report = json.loads(r.stdout)["reports"][0]
    assert report["findings"] == []


# make test-thorough: installs every locked file of the twin; check-lock and verify of the twin stay
@pytest.mark.thorough
def test_each_file_installs_on_a_python_313_host(locked: Path, world: dict[str, Any]) -> None:
    t0 = time.monotonic()
    twin: SeedTwin = world["twin"]
    pypi = "https://pypi.org/simple"
    data = _manifest(locked)
    for step in data["steps"]:
        path = locked / step["file"]
        if step["name"] == "prebuilt-cuda":
            chosen = dry_run_on_target(
                path,
                "3.13",
                PLATFORM,
                [],
                world["tmp"],
                find_links=[str(twin.prebuilt)],
                no_deps_only=True,
            )
            assert chosen["flash-attn"] == f"flash_attn-2.8.3+{LOCAL}-cp313-cp313-linux_x86_64.whl"
        elif step["name"] == "fla":
            # a git line has no hash: pip's hash mode takes the hashed line alone (provision splits
            # the file)
            hashed = path.with_name("fla-hashed.txt")
            hashed.write_text(
                "".join(f"{line}\n" for line in path.read_text().splitlines() if "git+" not in line)
            )
            dry_run_on_target(hashed, "3.13", PLATFORM, [pypi], world["tmp"], no_deps_only=True)
        else:
            indexes = [twin.nightly_url] if step["name"] == "torch" else [pypi, twin.nightly_url]
            base = (
                ()
                if step["name"] in ("bootstrap", "torch")
                else (locked / "01-bootstrap.txt", locked / "02-torch.txt")
            )
            chosen = dry_run_on_target(
                path, "3.13", PLATFORM, indexes, world["tmp"], sdist_ok=SDIST_ONLY, on_top_of=base
            )
            if step["name"] == "torch":
                assert chosen["torch"].endswith(
                    "-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
                )
    TIMES["dry runs (3.13)"] = time.monotonic() - t0


@pytest.fixture(scope="module")
def mirrored(locked: Path, world: dict[str, Any]) -> Path:
    wh: Path = world["wheelhouse"]
    for platform in ("manylinux*_x86_64", "linux_x86_64"):  # PyPI's wheels, then the GPU-built ones
        r = envbuild(
            world,
            "wheelhouse",
            "mirror",
            "--profile",
            PROFILE,
            "--out",
            wh,
            "--python-tag",
            "cp313",
            "--platform",
            platform,
            "--json",
            phase="mirror (3.13 lock)",
        )
        assert r.rc == 0, r.output
    # the git requirement: built into a wheel at its locked commit (issue 24), so offline needs no
    # clone
    built = json.loads(r.stdout)["built"]
    assert [(b["name"], b["commit"]) for b in built] == [
        ("flash-linear-attention", world["twin"].fla_commit)
    ]
    return wh


def test_mirror_holds_every_locked_artifact_for_the_target(mirrored: Path, locked: Path) -> None:
    names = {p.name for p in mirrored.iterdir() if p.name.endswith((".whl", ".tar.gz"))}
    assert (
        f"torch-{NIGHTLY_TORCH}-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
        in names
    )
    assert f"flash_attn-2.8.3+{LOCAL}-cp313-cp313-linux_x86_64.whl" in names
    assert "dualpipe-1.0.0.tar.gz" in names
    for step in _manifest(locked)["steps"]:
        for p in step.get("packages", []):
            if p["vcs"]:
                continue
            assert any(a["filename"] in names for a in p["artifacts"]), p["name"]


@pytest.fixture(scope="module")
def provisioned(world: dict[str, Any], mirrored: Path) -> dict[str, Any]:
    host: Path = world["host"]
    name = host.name
    # uv, as for 3.13 (pip-compile, the default for this interpreter, takes ten minutes on this
    # stack here)
    r = envbuild(
        world, "lock", "--profile", name, "--resolver", "uv", phase=f"lock ({PY_MAJOR_MINOR})"
    )
    assert r.rc == 0, r.output
    assert _manifest(host)["target"] == {
        "python": PY_MAJOR_MINOR,
        "platform": PLATFORM,
        "resolver": "uv",
    }
    r = envbuild(world, "check-lock", "--profile", name, "--offline", phase="check-lock")
    assert r.rc == 0, r.output
    for platform in ("manylinux*_x86_64", "linux_x86_64"):
        r = envbuild(
            world,
            "wheelhouse",
            "mirror",
            "--profile",
            name,
            "--out",
            mirrored,
            "--python-tag",
            "cp" + PY_MAJOR_MINOR.replace(".", ""),
            "--platform",
            platform,
            phase=f"mirror ({PY_MAJOR_MINOR} lock)",
        )
        assert r.rc == 0, r.output
    root = world["tmp"] / "data"
    # The default backend (uv), as an operator runs it. uv installs a step's wheels concurrently;
    # the fla step still ends with fla-core's copies on disk, as [[abi.overlap]] says, because the
    # overlap's winner goes in a run of its own after the rest (plan.step_commands).
    r = envbuild(
        world,
        "provision",
        "--profile",
        name,
        "--offline",
        "--wheelhouse",
        mirrored,
        "--root",
        root,
        "--home",
        world["home"],
        "--python",
        sys.executable,
        "--json",
        phase="provision (offline, uv)",
    )
    assert r.rc == 0, r.output
    return {
        "root": root,
        "result": json.loads(r.stdout),
        "name": name,
        "output": r.output,
        "venv": Venv(root / "venv", home=world["home"]),
    }


def test_verify_passes(provisioned: dict[str, Any], world: dict[str, Any]) -> None:
    r = envbuild(
        world,
        "verify",
        "--profile",
        provisioned["name"],
        "--root",
        provisioned["root"],
        "--json",
        phase="verify",
    )
    assert r.rc == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "envbuild.verify/1" and doc["ok"] is True, doc
    assert doc["violations"] == [] and doc["changed_on_disk"] == [], doc
    assert Path(doc["venv"]) == provisioned["venv"].path, doc["venv"]
    assert doc["torch"] and doc["receipt"] and Path(doc["receipt"]).is_file()
    assert json.loads(Path(doc["receipt"]).read_text())["kind"] == "verify"


def _record_sha(venv: Venv, name: str) -> str:
    return hashlib.sha256(venv.dists()[name].record.read_bytes()).hexdigest()


def _record_rows(venv: Venv, name: str) -> dict[str, str]:
    with venv.dists()[name].record.open(newline="") as f:
        return {row[0]: row[1] for row in csv.reader(f) if row and row[1]}


def _on_disk(venv: Venv, path: str) -> str:
    import base64

    digest = hashlib.sha256((venv.site_packages / path).read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_the_seed_traps_show_up_as_on_the_host(
    provisioned: dict[str, Any], world: dict[str, Any]
) -> None:
    venv: Venv = provisioned["venv"]
    state = json.loads((provisioned["root"] / ".envbuild" / "manifest.json").read_text())
    steps = {s["name"]: s for s in state["steps"]}
    assert all(s["status"] == "ok" for s in steps.values()), steps
    # torch: the nightly, and its RECORD unchanged from the torch step to the end
    assert (
        venv.version("torch") == NIGHTLY_TORCH and venv.version("pytorch-triton") == PYTORCH_TRITON
    )
    tag = "cp" + PY_MAJOR_MINOR.replace(".", "")
    wheel = next(world["twin"].nightly.glob(f"torch-*-{tag}-*.whl"))
    shipped = {row.split(",", 1)[0] for row in world["twin"].record_of(wheel).decode().splitlines()}
    assert shipped <= venv.dists()["torch"].files | {p for p in shipped if p.endswith("RECORD")}
    assert json.dumps(state["baseline"]).count(_record_sha(venv, "torch")) >= 1
    # no PyPI triton beside pytorch-triton: one owner of triton/
    assert venv.version("triton") is None
    assert venv.owners("triton/__init__.py") == ["pytorch-triton"]
    # the --no-deps fla step: what it left unmet when it ran (transformers comes in the next step)
    fla_warnings = " ".join(steps["fla"].get("warnings", []))
    assert "flash-linear-attention 0.5.0 requires transformers" in fla_warnings, steps["fla"]
    # flash-attn / flash-attn-4: both own flash_attn/cute/*; FA4's copies are on disk (its RECORD)
    fa4, fa2 = _record_rows(venv, "flash-attn-4"), _record_rows(venv, "flash-attn")
    shared = sorted(p for p in fa4 if p in fa2 and p.startswith("flash_attn/cute/"))
    assert len(shared) == 20
    assert all(_on_disk(venv, p) == fa4[p] != fa2[p] for p in shared)
    assert venv.exists("hopper/__init__.py")
    # fla from git (the whole fla tree) and fla-core 0.4.2 on top: fla-core's copies win
    fla, core = _record_rows(venv, "flash-linear-attention"), _record_rows(venv, "fla-core")
    both = sorted(p for p in core if p in fla)
    assert "fla/__init__.py" in both and len(both) > 50
    assert all(_on_disk(venv, p) == core[p] for p in both)
    assert "__version__ = '0.4.2'" in venv.read("fla/__init__.py")
    assert venv.exists("fla/layers/moba.py") and venv.exists("fla/ops/moba/__init__.py")
    # the git requirement came from the (twin) repository at the locked commit: offline, as the
    # wheel `wheelhouse mirror` built from that commit, whose hash lock.json records (issue 24)
    pin = next(
        p["vcs"]
        for s in _manifest(world["host"])["steps"]
        for p in s.get("packages", [])
        if p["name"] == "flash-linear-attention"
    )
    assert pin["commit"] == world["twin"].fla_commit and pin["url"].startswith(f"git+{FLA_URL}@")
    built = next(
        a
        for a in json.loads((world["wheelhouse"] / "wheelhouse.json").read_text())["artifacts"]
        if a["filename"] == pin["wheel"]["filename"]
    )
    assert (
        built["built_from"]["commit"] == world["twin"].fla_commit
        and built["sha256"] == pin["wheel"]["sha256"]
    )
    assert venv.version("flash-linear-attention") == pin["wheel"]["version"]
    assert not (venv.dists()["flash-linear-attention"].dist_info / "direct_url.json").exists()
    # the prebuilt wheels carry no dependency metadata and name the torch they were built against
    mamba = venv.dists()["mamba-ssm"]
    assert "Requires-Dist" not in (mamba.dist_info / "METADATA").read_text()
    assert venv.version("mamba-ssm") == f"2.3.1+{LOCAL}"
