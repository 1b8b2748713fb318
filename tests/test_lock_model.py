"""The typed lock model: lock.json read and written only through it, bad input named by its key
path.

Every damaged lock is refused by the real CLI (check-lock, provision) with exit 8 and one
paragraph, never a traceback; a lock that was bypassed is refused before anything installs,
and ``--no-lock`` (the one way past it) is said on the console and recorded in the receipt.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lockhelpers import lock_env, manifest, save_manifest
from support.fixtures import NIGHTLY_TORCH, EnvbuildResult, Venv

from envbuild.cli import main
from envbuild.errors import LockError
from envbuild.spec import profile_path
from envbuild.stacklock.model import LOCK_VERSION, Lock, lock_from_text, read_stack_lock
from envbuild.stacklock.pylock import build_pylock

STEPS = [{"name": "helpers", "packages": ["fla-core-like==0.4.2"]}]


@pytest.fixture
def cpu_lock(tmp_path: Path) -> Path:
    folder = tmp_path / "lock"
    shutil.copytree(profile_path("cpu").parent, folder)
    return folder


def test_the_committed_lock_round_trips_byte_for_byte() -> None:
    path = profile_path("cpu").parent / "lock.json"
    text = path.read_text()
    lock = lock_from_text(path, text)
    assert lock.lock_version == LOCK_VERSION and [s.name for s in lock.steps] == [
        "bootstrap",
        "torch",
        "fla",
        "torch-users",
        "rest",
    ]
    assert json.dumps(lock.to_dict(), indent=2) + "\n" == text
    torch = lock.steps[1].package("torch")
    assert torch is not None and torch.version == "2.13.0+cpu" and torch.requires_dist is not None
    assert all(a.sha256 in torch.hashes for a in torch.artifacts)
    # the PEP 751 export reads the same typed lock
    assert "torch" in [p.name for p in build_pylock(lock).packages]


def _edit(data: dict[str, Any], path: str, value: Any) -> None:
    """Set (or, for value DELETE, remove) the key at a dotted path such as steps[2].file."""
    keys: list[str | int] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        keys.append(name)
        keys += [int(i) for i in rest.rstrip("]").split("][") if i] if rest else []
    target: Any = data
    for k in keys[:-1]:
        target = target[k]
    if value is DELETE:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value


DELETE = object()


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            "steps[2].file",
            DELETE,
            "steps[2].file: missing: step 'fla' is marked locked but names no step file",
        ),
        ("steps[2].packages", None, "steps[2].packages: must be a list, not null"),
        (
            "steps[1].packages[0].hashes",
            "abc",
            "steps[1].packages[0].hashes: must be a list, not a string",
        ),
        (
            "steps[1].packages[0].hashes[0]",
            "xyz",
            "steps[1].packages[0].hashes[0]: not a sha256 hex digest",
        ),
        (
            "steps[0].flags.no_deps",
            "yes",
            "steps[0].flags.no_deps: must be true or false, not a string",
        ),
        (
            "steps[3].file",
            "../../etc/passwd",
            "steps[3].file: '../../etc/passwd' is not a step file name",
        ),
        ("steps[4].file_sha256", DELETE, "steps[4].file_sha256: missing"),
        (
            "steps[0].locked",
            False,
            "steps[0].reason: missing: step 'bootstrap' is marked not locked",
        ),
        ("steps", {"a": 1}, "steps: must be a list, not a table (object)"),
        ("steps[1]", 7, "steps[1]: must be a table (object), not a number"),
        ("lock_version", 2, "lock_version 2 is not one this envbuild reads (it reads 1)"),
        ("lock_version", DELETE, "lock_version: missing"),
    ],
)
def test_a_damaged_lock_json_names_the_key(
    cpu_lock: Path, path: str, value: Any, message: str
) -> None:
    data = manifest(cpu_lock)
    _edit(data, path, value)
    save_manifest(cpu_lock, data)
    with pytest.raises(LockError) as exc:
        read_stack_lock(cpu_lock)
    assert message in exc.value.message
    assert exc.value.message.startswith(f"{cpu_lock / 'lock.json'}: ")


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    rc = main(args)
    captured = capsys.readouterr()
    return rc, captured.out + captured.err


@pytest.mark.parametrize(
    "damage",
    ["packages-null", "no-file", "binary-step-file", "binary-lock-json", "not-json", "deep-json"],
)
def test_check_lock_and_provision_refuse_damage_with_exit_8(
    cpu_lock: Path, tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = manifest(cpu_lock)
    if damage == "packages-null":
        data["steps"][2]["packages"] = None
        save_manifest(cpu_lock, data)
    elif damage == "no-file":
        del data["steps"][3]["file"]
        save_manifest(cpu_lock, data)
    elif damage == "binary-step-file":
        (cpu_lock / "03-fla.txt").write_bytes(b"fla-core==0.4.2 \\\n  --hash=sha256:\xff\xfe\x00\n")
    elif damage == "binary-lock-json":
        (cpu_lock / "lock.json").write_bytes(b'{"lock_version": 1, "stack": "\xc3\x28"}')
    elif damage == "not-json":
        (cpu_lock / "lock.json").write_text('{"lock_version": 1,')
    else:
        (cpu_lock / "lock.json").write_text("[" * 100_000)
    stack = str(cpu_lock / "stack.toml")
    root = tmp_path / "data"
    for args in (
        ["check-lock", "--stack", stack, "--offline"],
        ["provision", "--stack", stack, "--root", str(root), "--home", str(tmp_path / "home")],
    ):
        rc, text = _cli(args, capsys)
        assert rc == 8, (args, text)
        assert "Traceback" not in text
        assert "lock.json" in text or "03-fla.txt" in text
    assert not root.exists()  # refused before anything was made


def test_a_bypassed_lock_is_refused_and_no_lock_is_recorded(
    write_stack: Callable[..., Path],
    run_envbuild: Callable[..., EnvbuildResult],
    provision: Callable[..., EnvbuildResult],
    provisioned_venv: Venv,
    tmp_path: Path,
) -> None:
    """A step whose lock entry lost its "file" must not quietly install from the spec, unpinned."""
    stack = write_stack(STEPS)
    r = run_envbuild("lock", "--stack", stack, env=lock_env(tmp_path))
    assert r.rc == 0, r.output
    data = manifest(stack.parent)
    del data["steps"][1]["file"]
    save_manifest(stack.parent, data)

    r = provision(stack)
    assert r.rc == 8, r.output
    assert "Traceback" not in r.output
    assert (
        "steps[1].file: missing: step 'helpers' is marked locked but names no step file" in r.stderr
    )
    assert "--no-lock" in r.stderr  # the way past it is named
    assert not (tmp_path / "data" / "venv").exists()

    r = provision(stack, "--no-lock")
    assert r.rc == 0, r.output
    assert "--no-lock: the lock at" in r.stderr and "is bypassed" in r.stderr
    assert provisioned_venv.version("torch") == NIGHTLY_TORCH
    assert provisioned_venv.version("fla-core-like") == "0.4.2"
    receipts = sorted((tmp_path / "data" / "receipts").glob("*.json"))
    assert receipts, list((tmp_path / "data").iterdir())
    payload = json.loads(receipts[-1].read_text())["payload"]
    assert payload["lock"] == {"bypassed": True, "locked_steps": []}


def test_a_partial_lock_is_said_and_a_skipped_step_resolves(
    cpu_lock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envbuild.spec import load_spec
    from envbuild.stacklock.serve import locked_requirements

    data = manifest(cpu_lock)
    rest = data["steps"][4]
    data["steps"][4] = {
        "name": rest["name"],
        "role": rest["role"],
        "step_digest": rest["step_digest"],
        "flags": rest["flags"],
        "locked": False,
        "reason": "left out with --skip-step",
    }
    save_manifest(cpu_lock, data)
    lock = read_stack_lock(cpu_lock)
    assert isinstance(lock, Lock) and not lock.steps[4].locked and lock.steps[4].file is None
    files = locked_requirements(load_spec(cpu_lock / "stack.toml", {}))
    assert list(files) == ["bootstrap", "torch", "fla", "torch-users"]


def test_lock_json_and_step_file_must_agree(cpu_lock: Path) -> None:
    from envbuild.spec import load_spec
    from envbuild.stacklock.serve import locked_requirements

    data = manifest(cpu_lock)
    # lock.json no longer lists one pin
    data["steps"][4]["packages"] = data["steps"][4]["packages"][:-1]
    save_manifest(cpu_lock, data)
    with pytest.raises(
        LockError,
        match=r"step 'rest': the packages recorded in lock.json are not the pins of 05-rest.txt",
    ):
        locked_requirements(load_spec(cpu_lock / "stack.toml", {}))
