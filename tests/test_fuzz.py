"""Fuzzing the inputs a user hands envbuild, through the real CLI (Hypothesis).

Each test starts from a real, valid file (the ``cpu`` profile's stack spec and lock, a
wheelhouse spec, a receipt envbuild wrote), damages it the way a bad edit, a merge, a disk or a
hostile file does (random bytes, truncation, non-UTF-8, deleted keys, wrong types, nulls,
renamed keys, duplicated or dropped lines) and runs ``envbuild.cli.main`` on it. The verdict is
always a documented exit code with one paragraph on stderr: never a traceback (exit 1), and no
file written outside the data root the command was given (envbuild's own cache folder,
``$ENVBUILD_CACHE_DIR``, aside).

Example counts are modest so the suite stays fast on 2 cores; ``ENVBUILD_FUZZ_EXAMPLES`` raises
them for a longer hunt (``ENVBUILD_FUZZ_EXAMPLES=500 pytest tests/test_fuzz.py``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from envbuild.cli import main
from envbuild.spec import profile_path

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # the real CLI per example; `make fuzz` runs more of them
EXAMPLES = int(os.environ.get("ENVBUILD_FUZZ_EXAMPLES", "15"))
# shrinking a failure can take minutes: on request only (ENVBUILD_FUZZ_SHRINK=1)
PHASES = [
    Phase.explicit,
    Phase.generate,
    *([Phase.shrink] if os.environ.get("ENVBUILD_FUZZ_SHRINK") else []),
]
settings.register_profile(
    "envbuild-fuzz",
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    phases=PHASES,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
FUZZ = settings.get_profile("envbuild-fuzz")
FEW = settings(FUZZ, max_examples=max(3, EXAMPLES // 2))  # the slower commands (provision)

# ----------------------------------------------------------------------------- damage


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(
        ["", "../../etc/passwd", "steps", "sha256:" + "0" * 64, "0" * 64, "\u00e9\x00", "torch"]
    ),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

TOML_LITERALS = [
    "true",
    "0",
    "-3",
    "1.5",
    "inf",
    "nan",
    '""',
    '"x"',
    "[]",
    '[1, "a"]',
    "{}",
    "{ a = 1 }",
    '"${ENVBUILD_FUZZ_UNSET}"',
    '"${ENVBUILD_FUZZ_UNSET:-}"',
    '"torch==2.0"',
    '["torch>>=1"]',
    "[[1]]",
    "1979-05-27",
    '"\\u00e9"',
    '"../../../etc"',
    '"zz==1.0"',
    '["einops==0.8.1", 3]',
    # what a hostile spec tries on the files envbuild renders (issue 23)
    '"a\\nRUN touch /tmp/envbuild-fuzz-pwned"',
    '"$(touch /tmp/envbuild-fuzz-pwned)"',
    '"`id`"',
    "'it''s'",
    '"\\\\"',
    '"x\\r"',
    '"\\u2028"',
    '"\\u001b[31m"',
    '{ from_env = "HF_TOKEN" }',
    '{ "A=1\\ntouch /tmp/envbuild-fuzz-pwned" = "v" }',
    '"ftp://mirror/simple"',
    '"-r /etc/passwd"',
    '"/abs/venv"',
    "\"{{ lookup('pipe', 'id') }}\"",
]
LINES = [
    "[[step]]",
    "[abi]",
    "[layout]",
    'name = "x"',
    "schema = 2",
    "python = 3.11",
    "packages = []",
    "[env]",
    'HF_TOKEN = "hf_literal"',
    '"BAD NAME" = "v"',
    'PS1 = "$(id)"',
    'env = { X = { from_env = "X" } }',
    'venv = "../../escape"',
    'cuda = "13.2; id"',
    'name = "../../../tmp/escape"',
    'index_url = "file:///x"',
    'no_deps = "yes"',
    "--hash=sha256:zz",
    "-r other.txt",
    "torch @ file:///etc/passwd",
    "pkg==1.0 --hash=md5:abc",
    "bad-line \\",
    "einops==0.8.1 --hash=sha256:" + "0" * 64,
    "\t",
    "#",
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def mutate_json(data: st.DataObject, doc: Any, times: int = 2) -> Any:
    """``doc`` with 1..``times`` structural edits: a key deleted or renamed, a value replaced or
    wrapped."""
    for _ in range(data.draw(st.integers(1, times))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return data.draw(json_values)
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = data.draw(st.sampled_from(["delete", "set", "set", "null", "rename", "wrap"]))
        if op == "delete":
            del parent[key]
        elif op == "null":
            parent[key] = None
        elif op == "set":
            parent[key] = data.draw(json_values)
        elif op == "wrap":
            parent[key] = [parent[key]] if data.draw(st.booleans()) else {"value": parent[key]}
        elif isinstance(parent, dict):
            parent[data.draw(st.text(min_size=1, max_size=8))] = parent.pop(key)
        else:
            parent[key] = str(parent[key])
    return doc


def mutate_text(data: st.DataObject, text: bytes, literals: list[str]) -> bytes:
    """``text`` with 1..3 edits: lines dropped, doubled or replaced, values retyped, bytes spliced,
    a cut."""
    for _ in range(data.draw(st.integers(1, 3))):
        lines = text.split(b"\n")
        i = data.draw(st.integers(0, max(0, len(lines) - 1)))
        op = data.draw(
            st.sampled_from(["drop", "double", "value", "value", "line", "bytes", "cut"])
        )
        if op == "drop":
            del lines[i]
        elif op == "double":
            lines.insert(i, lines[i])
        elif op == "value" and b"=" in lines[i]:
            key = lines[i].split(b"=", 1)[0]
            lines[i] = key + b"= " + data.draw(st.sampled_from(literals)).encode()
        elif op == "line":
            lines.insert(i, data.draw(st.sampled_from(LINES)).encode())
        elif op == "bytes":
            pos = data.draw(st.integers(0, len(lines[i])))
            lines[i] = (
                lines[i][:pos] + data.draw(st.binary(min_size=1, max_size=6)) + lines[i][pos:]
            )
        text = b"\n".join(lines)
        if op == "cut":
            text = text[: data.draw(st.integers(0, len(text)))]
    return text


# ----------------------------------------------------------------------------- the verdict


def _snapshot(*roots: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if here / d not in skip]
            for name in [*filenames, *dirnames]:
                st_ = os.lstat(here / name)
                out[str(here / name)] = (st_.st_size, st_.st_mtime_ns)
    return out


class Sandbox:
    """A folder per example: the inputs, a data root, HOME, caches; what may change and what may
    not."""

    def __init__(self, base: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(dir=base))
        self.inputs = self.dir / "in"
        self.root = self.dir / "data"
        self.home = self.dir / "home"
        self.home.mkdir()

    def run(self, args: list[str], capsys: pytest.CaptureFixture[str], allowed: set[int]) -> int:
        capsys.readouterr()
        before = _snapshot(self.dir, skip=(self.root,))
        rc = main(args)
        captured = capsys.readouterr()
        text = captured.out + captured.err
        assert "Traceback" not in text, (args, text)
        assert rc in allowed, (args, rc, text)
        if rc not in (0, 10):  # an error (10, drift, is a verdict printed as a table)
            message = captured.err.strip()
            assert message, (args, rc, "no message on stderr")
            assert "\n\n" not in message, (args, message)  # one paragraph
        after = _snapshot(self.dir, skip=(self.root,))
        assert after == before, (args, sorted(set(after) ^ set(before)))
        return rc

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The base folder for every example's sandbox; HOME, caches and cwd point inside it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "home" / "cache"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home" / "xdg"))
    # the cpu spec's torch from pip's own sources: no network
    monkeypatch.setenv("ENVBUILD_TORCH_INDEX", "")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home").mkdir()
    before = _repo_state()
    # envbuild's own cache (pip's configured sources, metadata) may fill
    cache = tmp_path / "home" / "cache"
    watched = _snapshot(tmp_path / "home", skip=(cache,))
    yield tmp_path
    assert _snapshot(tmp_path / "home", skip=(cache,)) == watched  # nothing else in HOME
    assert _repo_state() == before  # nothing in the repository


def _repo_state() -> str:
    out = subprocess.run(
        [
            "git",
            "status",
            "--porcelain",
            "--ignored",
            "--untracked-files=all",
            "--",
            "lockfiles",
            "wheelhouse_specs",
            "envbuild",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout


def _cpu(box: Sandbox) -> Path:
    shutil.copytree(profile_path("cpu").parent, box.inputs)
    return box.inputs / "stack.toml"


# ----------------------------------------------------------------------------- stack specs


@FUZZ
@given(data=st.data())
def test_fuzz_stack_spec(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    box = Sandbox(sandbox)
    try:
        stack = _cpu(box)
        stack.write_bytes(mutate_text(data, stack.read_bytes(), TOML_LITERALS))
        box.run(["plan", "--stack", str(stack)], capsys, {0, 2, 8})
        box.run(["check-lock", "--offline", "--stack", str(stack)], capsys, {0, 2, 8})
        (box.inputs / "lock.json").unlink()  # no lock: the spec alone decides
        box.run(["plan", "--stack", str(stack), "--json"], capsys, {0, 2})
    finally:
        box.close()


# the issue-23 target: a few hundred examples in `make test` (about 20 s), more with `make fuzz`
RENDER = settings(FUZZ, max_examples=int(os.environ.get("ENVBUILD_FUZZ_EXAMPLES", "150")))


@RENDER
@given(data=st.data())
def test_fuzz_plan_check_lock_and_docker(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    """A damaged spec or lock through `plan`, `check-lock` and `docker`: a documented exit code and
    one message, files only inside the output folder, and never an instruction a spec value wrote.
    """
    box = Sandbox(sandbox)
    try:
        stack = _cpu(box)
        if data.draw(st.booleans()):
            stack.write_bytes(mutate_text(data, stack.read_bytes(), TOML_LITERALS))
        else:
            lock = box.inputs / "lock.json"
            lock.write_text(json.dumps(mutate_json(data, json.loads(lock.read_text())), indent=2))
        box.run(["plan", "--stack", str(stack)], capsys, {0, 2, 8})
        box.run(["check-lock", "--offline", "--stack", str(stack)], capsys, {0, 2, 8})
        out = box.root / "image" / "Dockerfile"
        lock_args = data.draw(st.sampled_from([[], ["--no-lock"]]))
        rc = box.run(
            [
                "docker",
                "--stack",
                str(stack),
                "-o",
                str(out),
                "--context",
                str(box.root),
                *lock_args,
            ],
            capsys,
            {0, 2, 8},
        )
        if rc == 0:
            from dockerfile_parse import DockerfileParser

            # its stub says IO[str]; the parser reads and writes the file object in bytes (u2b, b2u)
            parsed = DockerfileParser(fileobj=io.BytesIO())  # type: ignore[arg-type]
            parsed.content = out.read_text()
            # a spec value may only be an ENV value, never its own instruction
            for ins in parsed.structure:
                assert ins["instruction"] in {
                    "COMMENT",
                    "ARG",
                    "FROM",
                    "SHELL",
                    "ENV",
                    "RUN",
                    "COPY",
                    "WORKDIR",
                    "CMD",
                }
                assert ins["instruction"] == "ENV" or "envbuild-fuzz-pwned" not in ins["value"], ins
        assert not Path("/tmp/envbuild-fuzz-pwned").exists()
    finally:
        box.close()


# ----------------------------------------------------------------------------- locks


@FUZZ
@given(data=st.data())
def test_fuzz_lock_json(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    box = Sandbox(sandbox)
    try:
        stack = _cpu(box)
        lock = box.inputs / "lock.json"
        if data.draw(st.booleans()):
            lock.write_text(json.dumps(mutate_json(data, json.loads(lock.read_text())), indent=2))
        else:
            lock.write_bytes(
                mutate_text(
                    data, lock.read_bytes(), ["null", "1", '"x"', "[]", "{}", "true", '"\\ud800"']
                )
            )
        box.run(["check-lock", "--offline", "--stack", str(stack)], capsys, {0, 8})
        box.run(["plan", "--stack", str(stack)], capsys, {0, 8})
    finally:
        box.close()


@FUZZ
@given(data=st.data())
def test_fuzz_step_files(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    import hashlib

    box = Sandbox(sandbox)
    try:
        stack = _cpu(box)
        files = sorted(box.inputs.glob("0*.txt"))
        target = data.draw(st.sampled_from(files))
        target.write_bytes(
            mutate_text(data, target.read_bytes(), ["=", "==1.0", "==", "@ git+https://x/y@HEAD"])
        )
        if data.draw(st.booleans()):  # a damaged file whose sha256 was "fixed" in lock.json too
            doc = json.loads((box.inputs / "lock.json").read_text())
            for s in doc["steps"]:
                if s.get("file") == target.name:
                    s["file_sha256"] = hashlib.sha256(target.read_bytes()).hexdigest()
            (box.inputs / "lock.json").write_text(json.dumps(doc, indent=2) + "\n")
        box.run(["check-lock", "--offline", "--stack", str(stack)], capsys, {0, 8})
    finally:
        box.close()


@FEW
@given(data=st.data())
def test_fuzz_provision_refuses_a_damaged_lock_before_installing(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    box = Sandbox(sandbox)
    try:
        stack = _cpu(box)
        if data.draw(st.booleans()):
            lock = box.inputs / "lock.json"
            lock.write_text(json.dumps(mutate_json(data, json.loads(lock.read_text())), indent=2))
        else:
            target = data.draw(st.sampled_from(sorted(box.inputs.glob("0*.txt"))))
            target.write_bytes(mutate_text(data, target.read_bytes(), ["==", "==1.0"]))
        # an interpreter that does not exist: a lock that passes is stopped at the next check (exit
        # 3), before the venv, the links or any install
        rc = box.run(
            [
                "provision",
                "--stack",
                str(stack),
                "--root",
                str(box.root),
                "--home",
                str(box.home),
                "--python",
                str(box.dir / "no-such-python"),
                "--backend",
                "pip",
            ],
            capsys,
            {3, 8},
        )
        assert not (box.root / "venv").exists()
        if rc == 8:
            assert not box.root.exists() or not any((box.root / "venv").parent.glob("venv*"))
    finally:
        box.close()


# ----------------------------------------------------------------------------- wheelhouse specs


@FUZZ
@given(data=st.data())
def test_fuzz_wheelhouse_spec(
    sandbox: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    box = Sandbox(sandbox)
    try:
        shutil.copytree(REPO / "wheelhouse_specs", box.inputs)
        spec = data.draw(st.sampled_from(sorted(box.inputs.glob("*.toml"))))
        spec.write_bytes(mutate_text(data, spec.read_bytes(), TOML_LITERALS))
        # no target environment: a spec that loads is refused next, with exit 2, before any build
        box.run(
            ["wheelhouse", "build", str(spec), "--out", str(box.root / "wheelhouse")], capsys, {2}
        )
    finally:
        box.close()


# ----------------------------------------------------------------------------- receipts


@pytest.fixture(scope="module")
def real_receipt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A receipt written by envbuild for this interpreter (no torch in it: the inventory says
    so)."""
    from envbuild.layout import Paths
    from envbuild.proof.receipt import ReceiptPayload, write_receipt
    from envbuild.spec import resolve_spec

    root = tmp_path_factory.mktemp("receipt")
    payload = cast(ReceiptPayload, {"ran": ["torch"], "seconds": 1.0})  # cut to what is read
    return write_receipt(
        Paths(root=root),
        "provision",
        payload,
        spec=resolve_spec("cpu", None, {"ENVBUILD_TORCH_INDEX": ""}),
        python=Path(sys.executable),
    )


@FUZZ
@given(data=st.data())
def test_fuzz_receipts(
    sandbox: Path, real_receipt: Path, capsys: pytest.CaptureFixture[str], data: st.DataObject
) -> None:
    box = Sandbox(sandbox)
    try:
        box.inputs.mkdir()
        good = box.inputs / "a.json"
        shutil.copy(real_receipt, good)
        bad = box.inputs / "b.json"
        if data.draw(st.booleans()):
            bad.write_text(json.dumps(mutate_json(data, json.loads(good.read_text()), times=3)))
        else:
            bad.write_bytes(mutate_text(data, good.read_bytes(), ["null", "1", '"x"', "[]", "{}"]))
        box.run(["receipt", "show", str(bad)], capsys, {0, 2})
        box.run(["receipt", "show", str(bad), "--json"], capsys, {0, 2})
        box.run(["receipt", "diff", str(good), str(bad)], capsys, {0, 2, 10})
        box.run(["receipt", "diff", str(bad), "--against", str(good), "--json"], capsys, {0, 2, 10})
    finally:
        box.close()
