"""Issue 23, item 6: a value the spec takes from the environment reaches what needs it and nothing
envbuild writes.

The spec says ``HF_TOKEN = { from_env = "HF_TOKEN" }`` ([env]) and a step says
``PRIVATE_TOKEN = { from_env = "PRIVATE_TOKEN" }``; both are planted with secret values in the
environment of a real ``provision`` (pip against the scenario index over HTTP). The step's build (an
in-tree PEP 517 backend, stdlib only) proves it saw its token by writing the token's sha256 outside
the data root. Then ``plan``, ``docker``, ``modal`` and ``ansible-vars`` render the same spec, and
every file under the data root, $HOME and the output folder, and everything printed, is searched
for both secrets. The Dockerfile hands the step's token in as a build secret (``RUN
--mount=type=secret``), never as ``ARG`` or ``ENV``; no image is built here (no registry), so what
the layers hold is read from the Dockerfile: no instruction that writes an environment value.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support.fixtures import EnvbuildResult, ScenarioIndex, stack_toml

pytestmark = pytest.mark.slow

HF_SECRET = "hf_PLANTED_s3cret_0123456789"
STEP_SECRET = "step-PLANTED-t0ken-9876543210"

BACKEND = """
import base64, csv, hashlib, io, os, zipfile

NAME, VERSION = "envbuild_secret_probe", "1.0"


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    token = os.environ.get("PRIVATE_TOKEN", "")
    with open(os.environ["PROOF_FILE"], "w") as f:  # the sha256 only: the proof holds no secret
        f.write(hashlib.sha256(token.encode()).hexdigest())
    info = NAME + "-" + VERSION + ".dist-info"
    files = {NAME + "/__init__.py": b"",
             info + "/METADATA": ("Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n").encode(),
             info + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"}
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\\n")
    for rel, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow((rel, "sha256=" + digest, len(data)))
    writer.writerow((info + "/RECORD", "", ""))
    files[info + "/RECORD"] = record.getvalue().encode()
    name = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as zf:
        for rel, data in files.items():
            zf.writestr(rel, data)
    return name
"""  # noqa: E501 (embedded backend source: the text is the value)


def _project(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "probe_backend"\nbackend-path = ["."]\n'
    )
    (folder / "probe_backend.py").write_text(BACKEND)
    return folder


def _files(*roots: Path) -> list[Path]:
    return [
        p
        for root in roots
        if root.exists()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    ]


def _leaks(paths: list[Path]) -> list[str]:
    return [
        str(p) for p in paths if any(s.encode() in p.read_bytes() for s in (HF_SECRET, STEP_SECRET))
    ]


def test_from_env_secrets_reach_the_step_and_no_file(
    tmp_path: Path, scenario_index: ScenarioIndex, run_envbuild: Callable[..., EnvbuildResult]
) -> None:
    project = _project(tmp_path / "probe-project")
    proof = tmp_path / "proof.sha256"
    step = {
        "name": "probe",
        "packages": [f"envbuild-secret-probe @ {project.as_uri()}"],
        "env": {"PROOF_FILE": str(proof), "PRIVATE_TOKEN": {"from_env": "PRIVATE_TOKEN"}},
    }
    stack = tmp_path / "stack.toml"
    text = stack_toml([step], index=scenario_index)
    stack.write_text(
        text.replace(
            "[[step]]",
            '[env]\nHF_TOKEN = { from_env = "HF_TOKEN" }\nHF_HUB_OFFLINE = "1"\n\n[[step]]',
            1,
        ),
        encoding="utf-8",
    )
    root, home, out = tmp_path / "data", tmp_path / "home", tmp_path / "out"
    secrets = {"HF_TOKEN": HF_SECRET, "PRIVATE_TOKEN": STEP_SECRET}
    printed: list[str] = []

    def envbuild(*args: str | Path, env: dict[str, str] | None = None) -> EnvbuildResult:
        r = run_envbuild(*args, env={**secrets, **(env or {})})
        printed.append(r.output)
        return r

    # without the step's value, provision refuses before anything is made
    r = run_envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--home",
        home,
        "--python",
        sys.executable,
        "--backend",
        "pip",
        env={"HF_TOKEN": HF_SECRET},
    )
    assert r.rc == 2 and "step[2].env.PRIVATE_TOKEN" in r.stderr, r.output
    assert not root.exists()

    r = envbuild(
        "-v",
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--home",
        home,
        "--python",
        sys.executable,
        "--backend",
        "pip",
        "--json",
    )
    assert r.rc == 0, r.output
    # the step's build saw its token (the proof is its sha256), under its own name
    assert proof.read_text() == hashlib.sha256(STEP_SECRET.encode()).hexdigest()
    overlay = (root / ".envbuild" / "envbuild-env.sh").read_text()
    # named in a comment, no value
    assert "export HF_HUB_OFFLINE=1" in overlay and "HF_TOKEN" in overlay
    receipt = json.loads(Path(json.loads(r.stdout)["receipt"]).read_text())
    assert receipt["env"]["in_force"].get("HF_TOKEN") == "***"
    # a finished environment re-verifies without the step's value (no step needs it any more)
    again = run_envbuild(
        "provision",
        "--stack",
        stack,
        "--root",
        root,
        "--home",
        home,
        "--python",
        sys.executable,
        "--backend",
        "pip",
        "--json",
        env={"HF_TOKEN": HF_SECRET},
    )
    assert again.rc == 0 and json.loads(again.stdout)["ran"] == [], again.output

    assert envbuild("plan", "--stack", stack, "--json", "--backend", "pip", "--no-lock").rc == 0
    r = envbuild(
        "docker", "--stack", stack, "--no-lock", "-o", out / "Dockerfile", "--context", out
    )
    assert r.rc == 0, r.output
    assert envbuild("modal", "--stack", stack, "--no-lock", "-o", out / "probe_image.py").rc == 0
    assert envbuild("ansible-vars", "--stack", stack, "-o", out / "vars.yml").rc == 0

    written = _files(root, home, out)
    assert len(written) > 20
    assert _leaks(written) == []
    assert not any(s in text for text in printed for s in (HF_SECRET, STEP_SECRET))
    assert stat.S_IMODE((root / ".envbuild" / "envbuild-env.sh").stat().st_mode) == 0o600

    # the Dockerfile: a build secret for the step that needs it, no ARG or ENV of either name
    dockerfile = (out / "Dockerfile").read_text()
    probe_at = dockerfile.index("COPY scenario.steps/02-probe.toml")
    assert "--mount=type=secret,id=PRIVATE_TOKEN" in dockerfile[probe_at:].split("\n\n")[0]
    assert "--mount=type=secret,id=PRIVATE_TOKEN" not in dockerfile[:probe_at]
    assert "ARG PRIVATE_TOKEN" not in dockerfile and "ARG HF_TOKEN" not in dockerfile
    assert (
        "PRIVATE_TOKEN=" not in dockerfile.replace('PRIVATE_TOKEN="$(cat', "")
        and "HF_TOKEN=" not in dockerfile
    )
    # how to build it, in the header
    assert "--secret id=PRIVATE_TOKEN,env=PRIVATE_TOKEN" in dockerfile
    assert (
        "PRIVATE_TOKEN" in (out / "vars.yml").read_text()
        and "HF_TOKEN" in (out / "vars.yml").read_text()
    )
    source = (out / "probe_image.py").read_text()
    assert "SECRETS: dict[str, list[str]] = {'probe': ['PRIVATE_TOKEN']}" in source


def test_the_step_secret_line_sets_the_variable_for_one_command(tmp_path: Path) -> None:
    """The Dockerfile's shell for a build secret, run by bash with the secret mounted as a file."""
    import subprocess

    from envbuild.images.docker import SECRETS_DIR, secret_line

    line = secret_line("PRIVATE_TOKEN").replace(SECRETS_DIR, str(tmp_path))
    (tmp_path / "PRIVATE_TOKEN").write_text(STEP_SECRET + "\n")
    got = subprocess.run(
        ["bash", "-c", line + ' printf %s "$PRIVATE_TOKEN"'],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=30,
    )
    assert got.stdout == STEP_SECRET
    # no secret given to the build: unset, and provision says so
    (tmp_path / "PRIVATE_TOKEN").unlink()
    got = subprocess.run(
        ["bash", "-c", line + ' printf %s "${PRIVATE_TOKEN-unset}"'],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=30,
    )
    assert got.stdout == "unset"
