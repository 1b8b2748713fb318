"""The ABI guard's identity of torch survives what happens to an environment nobody reinstalled
(an image layer commit, ``cp -a``, a backup restore with whole-second mtimes, a ``touch``) and
still catches a reinstall of the same version, by pip and by uv.

Real wheels (a small stand-in "torch" and its protected "triton"), a real venv, real pip and uv.
The image layer commit itself is exercised by tests/test_image_build.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
from support.wheels import build_wheel

from envbuild import guard
from envbuild.spec import StackSpec, load_spec

UV = Path(sys.executable).with_name("uv")
pytestmark = pytest.mark.slow  # real pip and uv installs into real venvs

SPEC = """schema = 1
name = "t"
python = "3.11"
[abi]
version = "2.13.0+cpu"
local = "cpu"
protect = ["triton"]
[[step]]
name = "torch"
packages = ["torch==2.13.0+cpu"]
[[step]]
name = "fla"
packages = ["fla-core"]
"""


class Env:
    def __init__(self, root: Path, wheels: dict[str, Path], spec: StackSpec) -> None:
        self.root, self.wheels, self.spec = root, wheels, spec
        self.venv = root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def site(self) -> Path:
        return guard.site_packages(self.venv)

    def pip(self, *args: str) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(self.python),
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                *args,
            ],
            check=True,
            env={**os.environ, "PIP_CONFIG_FILE": "/dev/null"},
        )

    def uv(self, *args: str) -> None:
        subprocess.run(
            [
                str(UV),
                "pip",
                "install",
                "-q",
                "--offline",
                "--no-deps",
                "--python",
                str(self.python),
                *args,
            ],
            check=True,
            env={**os.environ, "UV_NO_CONFIG": "1"},
        )

    def check(self, baseline: guard.Baseline, site: Path | None = None) -> list[guard.Violation]:
        guard.clear_cache()  # a fresh process, as `envbuild verify` in a new layer is
        return guard.check(self.spec, baseline, site or self.site).violations


@pytest.fixture
def env(tmp_path: Path) -> Env:
    w = tmp_path / "wheels"
    wheels = {
        "torch": build_wheel(
            w,
            "torch",
            "2.13.0+cpu",
            requires=["triton==3.5.0"],
            files={
                "torch/__init__.py": (
                    "from .version import __version__\n\ndef main() -> None:\n    pass\n"
                ),
                "torch/version.py": "__version__ = '2.13.0+cpu'\ncuda = None\n",
                "torch/lib/libtorch_stand_in.so": "\0" * 4096,
                # a console script: pip and uv write bin/torchrun each their own way
                "torch-2.13.0+cpu.dist-info/entry_points.txt": (
                    "[console_scripts]\ntorchrun = torch:main\n"
                ),
            },
        ),
        "triton": build_wheel(w, "triton", "3.5.0", files={"triton/__init__.py": "x = 1\n"}),
        "fla-core": build_wheel(
            w, "fla-core", "0.4.2", requires=["torch>=2.5"], files={"fla/__init__.py": ""}
        ),
    }
    (tmp_path / "stack.toml").write_text(SPEC)
    e = Env(tmp_path, wheels, load_spec(tmp_path / "stack.toml", {}))
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(e.venv)], check=True)
    e.pip(str(wheels["torch"]), str(wheels["triton"]))
    return e


def frozen(e: Env) -> guard.Baseline:
    base = guard.take_baseline(e.spec.abi, e.site, {}, stamp=True)
    assert base.stamped and base.protected["triton"]["stamped"]
    assert e.check(base) == []
    return base


def copy_a(src: Path, dst: Path) -> None:
    subprocess.run(["cp", "-a", str(src), str(dst)], check=True)


def tar_round_trip(src: Path, dst: Path) -> None:
    """A backup and restore (or a container export) that keeps whole-second mtimes only: ustar
    stores integer seconds; every file comes back with a new inode."""
    archive = dst.with_suffix(".tar")
    with tarfile.open(archive, "w", format=tarfile.USTAR_FORMAT) as tar:
        tar.add(src, arcname=".")
    with tarfile.open(archive) as tar:
        tar.extractall(dst, filter="tar")


def touch_all(src: Path, dst: Path) -> None:
    copy_a(src, dst)
    for dirpath, _, files in os.walk(dst):
        for f in files:
            os.utime(os.path.join(dirpath, f), (1_800_000_000, 1_800_000_000))


@pytest.mark.parametrize(
    "move", [copy_a, tar_round_trip, touch_all], ids=["cp-a", "tar-whole-seconds", "touch-all"]
)
def test_a_copied_environment_is_not_reinstalled(
    env: Env, move: Callable[[Path, Path], None]
) -> None:
    base = frozen(env)
    moved = env.root / "moved"
    move(env.site, moved)
    record = next(moved.glob("torch-*.dist-info")) / "RECORD"
    before = next(env.site.glob("torch-*.dist-info")) / "RECORD"
    # the cheap key really changed (what the old guard called "reinstalled") ...
    assert (record.stat().st_ino, record.stat().st_mtime_ns) != (
        before.stat().st_ino,
        before.stat().st_mtime_ns,
    )
    if move is tar_round_trip:
        assert record.stat().st_mtime_ns % 1_000_000_000 == 0
    # ... and the guard, which looks at content, still sees the baseline's torch and triton
    assert env.check(base, moved) == []


def test_a_file_edited_in_a_copy_is_caught(env: Env) -> None:
    base = frozen(env)
    moved = env.root / "moved"
    copy_a(env.site, moved)
    (moved / "torch" / "version.py").write_text(
        "__version__ = '2.13.0+cpu'\ncuda = None  # patched\n"
    )
    (found,) = env.check(base, moved)
    assert (found.rule, found.package) == ("modified", "torch")
    assert "torch/version.py" in found.message


def test_pip_force_reinstall_of_the_same_wheel_is_caught(env: Env) -> None:
    base = frozen(env)
    env.pip("--force-reinstall", str(env.wheels["torch"]))
    (found,) = env.check(base)
    assert found.rule == "reinstalled"
    assert found.message.startswith(
        "torch 2.13.0+cpu was reinstalled by pip (same version, same files"
    )


def test_uv_reinstall_of_the_same_wheel_is_caught_by_the_stamp(env: Env) -> None:
    """uv writes a byte-identical RECORD for the same wheel: only the stamp tells the two apart."""
    env.uv("--reinstall", str(env.wheels["torch"]))
    unstamped = guard.take_baseline(env.spec.abi, env.site, {})  # what the RECORD alone would say
    env.uv("--reinstall", str(env.wheels["torch"]))
    assert guard.scan(env.site)["torch"].record_sha256 == unstamped.record_sha256
    base = frozen(env)
    env.uv("--reinstall", str(env.wheels["torch"]), str(env.wheels["triton"]))
    found = env.check(base)
    assert [(f.rule, f.package) for f in found] == [
        ("reinstalled", "torch"),
        ("protected", "triton"),
    ]
    assert "the baseline stamp envbuild listed in its RECORD is gone" in found[0].message
    assert "uv" in found[0].message


def test_uv_then_pip_of_the_same_wheel_is_a_reinstall_not_another_build(env: Env) -> None:
    """The console scripts uv and pip write differ; the wheel's own files do not."""
    env.uv("--reinstall", str(env.wheels["torch"]))
    base = frozen(env)
    env.pip("--force-reinstall", str(env.wheels["torch"]))
    (found,) = env.check(base)
    assert found.message.startswith(
        "torch 2.13.0+cpu was reinstalled by pip (same version, same files"
    ), found


def test_the_stamp_is_deterministic(env: Env, tmp_path: Path) -> None:
    """Two provisions of the same wheels give the same stamped RECORD (receipts compare equal)."""
    first = frozen(env).record_sha256
    other = Env(tmp_path / "other", env.wheels, env.spec)
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(other.venv)], check=True)
    other.pip(str(env.wheels["torch"]), str(env.wheels["triton"]))
    # pip's RECORD lists the .pyc it compiled, whose headers carry the source mtimes: align them
    for site in (env.site, other.site):
        for p in (site / "torch").rglob("*.py"):
            os.utime(p, (1_800_000_000, 1_800_000_000))
    shutil.rmtree(other.site / "torch" / "__pycache__", ignore_errors=True)
    again = guard.take_baseline(env.spec.abi, env.site, {}, stamp=True)
    assert (
        again.stamped
        and again.payload_sha256
        == guard.take_baseline(other.spec.abi, other.site, {}, stamp=True).payload_sha256
    )
    assert first  # the stamp's content is a function of the RECORD it stamps
    stamp = next(env.site.glob("torch-*.dist-info")) / guard.STAMP
    assert '"record_sha256"' in stamp.read_text()


def test_blame_names_the_step_only_when_it_changed_torch(env: Env) -> None:
    base = frozen(env)
    # torch rewritten outside envbuild, then a step installs fla-core (which requires torch)
    env.uv("--reinstall", str(env.wheels["torch"]))
    before = guard.scan(env.site)
    env.pip(str(env.wheels["fla-core"]))
    after = guard.scan(env.site)
    (found,) = env.check(base)
    lines = guard.culprits(found, before, after, ["fla-core"])
    assert lines == [
        "  not this step: torch was already like this when the step began "
        "(changed outside envbuild, by hand or between steps)"
    ]
    # the same step when it does rewrite torch: fla-core is named with its requirement
    before = guard.scan(env.site)
    env.pip("--force-reinstall", str(env.wheels["fla-core"]), str(env.wheels["torch"]))
    after = guard.scan(env.site)
    assert guard.culprits(found, before, after, ["fla-core"]) == [
        "  pulled in by: fla-core 0.4.2 (requires torch>=2.5)"
    ]


def test_a_manifest_written_before_record_key_still_loads() -> None:
    old = {
        "package": "torch",
        "version": "2.13.0+cpu",
        "cuda": None,
        "record_sha256": "a" * 64,
        "record_id": [123, 456],
        "protected": {
            "triton": {"version": "3.5.0", "record_sha256": "b" * 64, "record_id": [1, 2]}
        },
    }
    base = guard.Baseline.from_json(old)
    assert (base.record_key, base.stamped, base.payload_sha256) == ((123, 456, -1), False, "")
    assert guard.Baseline.from_json(base.to_json()) == base
