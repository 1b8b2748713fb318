"""The lock serves a spec cut after a step (a Docker layer's slice) through per-step digests.

- ``step_digests``: a step's digest covers python, [abi] and the steps up to it, nothing else;
- every slice of the `cpu` profile is served by the committed lock (the whole ``lock.json``
  beside it, or the prefix manifest ``envbuild docker`` renders), with the files of its steps;
- a slice whose step was edited is refused with exit 8 naming the step; so is a slice checked
  against a lock written before per-step digests, which keeps serving its full spec;
- ``envbuild docker`` copies the lock per layer; ``--no-lock`` and a stale lock;
- (slow) a `cpu` slice provisions its step from the lock file, hash-checked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.fixtures import run_cli

from envbuild.errors import LockError
from envbuild.images.docker import DockerOptions, render, slice_spec
from envbuild.spec import load_spec, profile_path
from envbuild.stacklock.model import read_stack_lock
from envbuild.stacklock.serve import (
    locked_requirements,
    prefix_manifest,
    stale_reason,
    step_digests,
)

CPU_STEPS = ["bootstrap", "torch", "fla", "torch-users", "rest"]


@pytest.fixture
def cpu_lock(tmp_path: Path) -> Path:
    """A copy of lockfiles/cpu (spec + lock) in tmp_path/lock; returns the folder."""
    folder = tmp_path / "lock"
    shutil.copytree(profile_path("cpu").parent, folder)
    return folder


def write_slice(folder: Path, n: int) -> Path:
    """The cpu spec cut after step ``n`` (as `envbuild docker` cuts it), beside the lock in
    ``folder``."""
    text = slice_spec(load_spec(profile_path("cpu"), {}))[n - 1]
    path = folder / "stack.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_step_digests_cover_python_abi_and_earlier_steps(tmp_path: Path) -> None:
    base = profile_path("cpu").read_text()
    stack = tmp_path / "stack.toml"

    def digests(text: str) -> list[str]:
        stack.write_text(text)
        d = step_digests(load_spec(stack, {}))
        assert d is not None
        return d

    ref = digests(base)
    assert len(set(ref)) == 5
    assert digests(base.replace('"tqdm==4.70.1"', '"tqdm==4.70.0"'))[:4] == ref[:4]
    assert digests(base.replace('"tqdm==4.70.1"', '"tqdm==4.70.0"'))[4] != ref[4]
    assert digests(base.replace('"einops==0.8.1"', '"einops==0.8.0"'))[:2] == ref[:2]
    assert digests(base.replace('"einops==0.8.1"', '"einops==0.8.0"'))[2:] != ref[2:]
    # not resolution: layout, comments, the description
    assert (
        digests(
            base.replace("min_free_gb = 2", "min_free_gb = 3").replace("# fla-core", "# FLA-core")
        )
        == ref
    )
    # the baseline and the interpreter decide every step
    assert all(
        a != b
        for a, b in zip(
            digests(base.replace('local = "cpu"', 'local = "cpu"\nprotect = ["filelock"]')),
            ref,
            strict=True,
        )
    )
    assert all(
        a != b
        for a, b in zip(
            digests(base.replace('python = "3.11"', 'python = "3.12"')), ref, strict=True
        )
    )


def test_committed_cpu_lock_records_the_step_digests() -> None:
    spec = load_spec(profile_path("cpu"), {})
    manifest = read_stack_lock(profile_path("cpu").parent)
    assert manifest is not None and manifest.has_step_digests and not manifest.is_prefix
    assert [s.digest for s in manifest.steps] == step_digests(spec)


@pytest.mark.parametrize("n", range(1, 6))
def test_every_cpu_slice_is_served_by_the_lock(cpu_lock: Path, n: int) -> None:
    spec = load_spec(write_slice(cpu_lock, n), {})
    files = locked_requirements(spec)
    count = max(n, 2)  # a slice before the baseline carries the spec up to it
    assert list(files) == CPU_STEPS[:count]
    assert [p.name for p in files.values()] == [
        f"{i:02d}-{s}.txt" for i, s in enumerate(CPU_STEPS[:count], 1)
    ]


@pytest.mark.parametrize(
    ("edit", "step"),
    [
        (('"einops==0.8.1"', '"einops==0.8.0"'), "fla"),
        (('"torch==2.13.0+cpu"', '"torch==2.13.0+cpu", "filelock"'), "torch"),
    ],
)
def test_a_tampered_step_in_a_slice_is_refused(
    cpu_lock: Path, tmp_path: Path, edit: tuple[str, str], step: str
) -> None:
    stack = write_slice(cpu_lock, 3)
    stack.write_text(stack.read_text().replace(*edit))
    with pytest.raises(LockError, match=f"step '{step}' changed"):
        locked_requirements(load_spec(stack, {}))
    r = run_cli(
        [
            "provision",
            "--stack",
            stack,
            "--root",
            tmp_path / "data",
            "--home",
            tmp_path / "home",
            "--step",
            "fla",
        ],
        home=tmp_path / "home",
        env={"ENVBUILD_TORCH_INDEX": ""},
    )
    assert r.rc == 8, r.output
    assert f"step '{step}' changed" in r.stderr and "envbuild lock" in r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "data" / "venv").exists()  # refused before anything was made


def test_a_slice_that_is_not_a_prefix_is_refused(cpu_lock: Path) -> None:
    stack = write_slice(cpu_lock, 3)
    stack.write_text(stack.read_text().replace('name = "fla"', 'name = "fla2"'))
    with pytest.raises(LockError, match="not the first steps of the lock"):
        locked_requirements(load_spec(stack, {}))


def test_the_full_spec_keeps_the_whole_digest_rule(cpu_lock: Path) -> None:
    stack = cpu_lock / "stack.toml"
    assert list(locked_requirements(load_spec(stack, {}))) == CPU_STEPS
    # same steps, another layout: stale for the full spec (check-lock's rule), fine for a slice
    stack.write_text(stack.read_text().replace("min_free_gb = 2", "min_free_gb = 3"))
    with pytest.raises(LockError, match="the lock is stale"):
        locked_requirements(load_spec(stack, {}))
    write_slice(cpu_lock, 4)
    stack.write_text(stack.read_text().replace("min_free_gb = 2", "min_free_gb = 3"))
    assert list(locked_requirements(load_spec(stack, {}))) == CPU_STEPS[:4]
    # a changed last step: stale, and the step is named
    stack.write_text(profile_path("cpu").read_text().replace('"tqdm==4.70.1"', '"tqdm==4.70.0"'))
    with pytest.raises(LockError, match="the lock is stale.*step 'rest' changed"):
        locked_requirements(load_spec(stack, {}))


def test_a_lock_without_step_digests_serves_only_its_full_spec(cpu_lock: Path) -> None:
    data = json.loads((cpu_lock / "lock.json").read_text())
    for s in data["steps"]:
        del s["step_digest"]
    (cpu_lock / "lock.json").write_text(json.dumps(data, indent=2) + "\n")
    assert list(locked_requirements(load_spec(cpu_lock / "stack.toml", {}))) == CPU_STEPS
    with pytest.raises(LockError, match="the lock is stale"):
        locked_requirements(load_spec(write_slice(cpu_lock, 3), {}))
    shutil.copy(profile_path("cpu"), cpu_lock / "stack.toml")
    r = run_cli(
        [
            "docker",
            "--stack",
            cpu_lock / "stack.toml",
            "-o",
            cpu_lock / "docker" / "Dockerfile",
            "--context",
            cpu_lock,
        ],
        home=cpu_lock / "home",
    )
    assert r.rc == 8 and "no per-step digests" in r.stderr and "Traceback" not in r.output, r.output


# ----------------------------------------------------------------------------- envbuild docker


def test_docker_layers_copy_their_part_of_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "docker" / "Dockerfile"
    r = run_cli(
        ["docker", "--profile", "cpu", "-o", out, "--context", tmp_path], home=tmp_path / "home"
    )
    assert r.rc == 0, r.output
    text = out.read_text()
    steps = tmp_path / "docker" / "cpu.steps"
    for i, name in enumerate(CPU_STEPS, 1):
        assert f"COPY docker/cpu.steps/{i:02d}-{name}.lock.json /etc/envbuild/lock.json\n" in text
        # the step files are the lock's, byte for byte
        assert (steps / f"{i:02d}-{name}.txt").read_bytes() == (
            profile_path("cpu").parent / f"{i:02d}-{name}.txt"
        ).read_bytes()
    # the first layer's slice runs to the baseline: it needs both files; each file is copied once
    assert (
        "COPY docker/cpu.steps/01-bootstrap.txt docker/cpu.steps/02-torch.txt /etc/envbuild/\n"
        in text
    )
    assert text.count("02-torch.txt") == 1
    # a prefix manifest serves its slice, and holds nothing that changes with later steps
    etc = tmp_path / "etc"
    etc.mkdir()
    for i, name in enumerate(CPU_STEPS, 1):
        shutil.copy(steps / f"{i:02d}-{name}.toml", etc / "stack.toml")
        shutil.copy(steps / f"{i:02d}-{name}.lock.json", etc / "lock.json")
        for j, other in enumerate(CPU_STEPS[: max(i, 2)], 1):
            shutil.copy(steps / f"{j:02d}-{other}.txt", etc)
        spec = load_spec(etc / "stack.toml", {})
        manifest = read_stack_lock(etc)
        assert manifest is not None and manifest.is_prefix and stale_reason(spec, manifest) is None
        assert manifest.created is None and manifest.spec_digest is None
        assert list(locked_requirements(spec)) == CPU_STEPS[: max(i, 2)]
    # --check sees a lock file gone astray; --no-lock renders the layers without the lock
    (steps / "03-fla.txt").write_text("tampered\n")
    r = run_cli(
        ["docker", "--profile", "cpu", "-o", out, "--context", tmp_path, "--check"],
        home=tmp_path / "home",
    )
    assert r.rc == 8 and "03-fla.txt" in r.stderr, r.output
    r = run_cli(
        ["docker", "--profile", "cpu", "-o", out, "--context", tmp_path, "--no-lock"],
        home=tmp_path / "home",
    )
    assert r.rc == 0, r.output
    assert "lock.json" not in out.read_text() and "--no-lock -o" in out.read_text()
    assert sorted(p.suffix for p in steps.iterdir()) == [".toml"] * 5  # the lock files were removed


def test_prefix_manifest_bytes_depend_only_on_its_steps(cpu_lock: Path) -> None:
    """Relocking after an edit of the last step leaves the earlier layers' lock files alone."""
    spec = load_spec(cpu_lock / "stack.toml", {})
    before = dict(render(spec, DockerOptions(steps_dir="s")).files)
    data = json.loads((cpu_lock / "lock.json").read_text())
    data["created"] = "2030-01-01T00:00:00Z"  # what `envbuild lock` changes for every step
    data["steps"][4]["packages"][0]["requested"] = False  # a change to the last step's lock...
    data["steps"][4]["step_digest"] = "sha256:" + "0" * 64  # ...and its digest (the spec "changed")
    data["spec_digest"] = "sha256:" + "1" * 64
    (cpu_lock / "lock.json").write_text(json.dumps(data, indent=2) + "\n")
    manifest = read_stack_lock(cpu_lock)
    assert manifest is not None
    for i, name in enumerate(CPU_STEPS[:4], 1):
        assert (
            json.dumps(prefix_manifest(manifest, max(i, 2)), indent=2) + "\n"
            == before[f"s/{i:02d}-{name}.lock.json"]
        )
    assert (
        json.dumps(prefix_manifest(manifest, 5), indent=2) + "\n" != before["s/05-rest.lock.json"]
    )


def test_docker_refuses_a_stale_lock(cpu_lock: Path) -> None:
    stack = cpu_lock / "stack.toml"
    stack.write_text(stack.read_text().replace('"tqdm==4.70.1"', '"tqdm==4.70.0"'))
    r = run_cli(
        [
            "docker",
            "--stack",
            stack,
            "-o",
            cpu_lock / "docker" / "Dockerfile",
            "--context",
            cpu_lock,
        ],
        home=cpu_lock / "home",
    )
    assert r.rc == 8 and "step 'rest' changed" in r.stderr and "Traceback" not in r.output, r.output


# ----------------------------------------------------------------------------- provisioning


@pytest.mark.slow
def test_a_cpu_slice_provisions_its_step_from_the_lock(
    cpu_lock: Path, tmp_path: Path, cpu_torch_index: str
) -> None:
    stack = write_slice(cpu_lock, 1)  # bootstrap + torch: the first image layer's spec
    root = tmp_path / "data"
    out = run_cli(
        [
            "provision",
            "--stack",
            stack,
            "--root",
            root,
            "--home",
            tmp_path / "home",
            "--step",
            "bootstrap",
        ],
        home=None,
        env={"ENVBUILD_TORCH_INDEX": cpu_torch_index},
        pip_config=True,
    )
    assert out.rc == 0, out.stdout + out.stderr
    log = (root / "logs" / "01-bootstrap.log").read_text()
    assert f"-r {cpu_lock / '01-bootstrap.txt'}" in log
    assert "--require-hashes" in log or "--verify-hashes" in log
    assert not (root / "logs" / "02-torch.log").exists()
