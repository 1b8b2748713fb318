"""The ABI guard's identity of torch survives what happens to an environment nobody reinstalled
(an image layer commit, ``cp -a``, a backup restore with whole-second mtimes, a ``touch``) and
still catches a reinstall of the same version that changes a byte, by pip and by uv; it lives in
the manifest, never in the dist-info folders it protects.

Real wheels (a small stand-in "torch" and its protected "triton"), a real venv, real pip and uv.
The image layer commit itself is exercised by tests/test_image_build.py.
"""

from __future__ import annotations

import os
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
    base = guard.take_baseline(e.spec.abi, e.site, {})
    assert not base.stamped and not base.protected["triton"]["stamped"]
    assert e.check(base) == []
    return base


def rebuilt_torch(folder: Path) -> Path:
    """Another build of the same torch version: the same names, other bytes."""
    return build_wheel(
        folder,
        "torch",
        "2.13.0+cpu",
        requires=["triton==3.5.0"],
        files={
            "torch/__init__.py": "from .version import __version__\n",
            "torch/version.py": "__version__ = '2.13.0+cpu'\ncuda = None\n",
            "torch/lib/libtorch_stand_in.so": "\1" * 4096,
        },
    )


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


def test_pip_force_reinstall_of_the_same_wheel_leaves_the_same_bytes(
    env: Env, tmp_path: Path
) -> None:
    """pip over the very same wheel writes the same bytes and the same RECORD: nothing the guard
    protects moved; another build of the same version by pip is caught, and named."""
    base = frozen(env)
    env.pip("--force-reinstall", str(env.wheels["torch"]))
    assert env.check(base) == []
    env.pip("--force-reinstall", str(rebuilt_torch(tmp_path / "rebuilt")))
    (found,) = env.check(base)
    assert found.rule == "reinstalled"
    assert found.message.startswith(
        "torch 2.13.0+cpu was replaced by pip by a different build of the same version"
    ), found


def test_uv_reinstall_that_changes_bytes_is_caught(env: Env, tmp_path: Path) -> None:
    """uv over torch and triton: the very same wheels leave every byte as it was (nothing the guard
    protects moved: no violation); another build of the same versions is caught, torch and triton
    alike."""
    env.uv("--reinstall", str(env.wheels["torch"]), str(env.wheels["triton"]))
    base = frozen(env)
    env.uv("--reinstall", str(env.wheels["torch"]), str(env.wheels["triton"]))
    assert env.check(base) == []
    rebuilt = {
        "torch": rebuilt_torch(tmp_path / "rebuilt"),
        "triton": build_wheel(
            tmp_path / "rebuilt", "triton", "3.5.0", files={"triton/__init__.py": "x = 2\n"}
        ),
    }
    env.uv("--reinstall", str(rebuilt["torch"]), str(rebuilt["triton"]))
    found = env.check(base)
    assert [(f.rule, f.package) for f in found] == [
        ("reinstalled", "torch"),
        ("protected", "triton"),
    ]
    assert "replaced by uv by a different build of the same version" in found[0].message


def test_uv_then_pip_of_the_same_wheel_is_a_reinstall_not_another_build(env: Env) -> None:
    """The console scripts uv and pip write differ; the wheel's own files do not."""
    env.uv("--reinstall", str(env.wheels["torch"]))
    base = frozen(env)
    env.pip("--force-reinstall", str(env.wheels["torch"]))
    (found,) = env.check(base)
    assert found.message.startswith(
        "torch 2.13.0+cpu was reinstalled by pip (same version, same files"
    ), found


def test_the_baseline_writes_nothing_into_the_environment(env: Env, tmp_path: Path) -> None:
    """Freezing the baseline reads only: every dist-info keeps the files its installer wrote, and
    two environments of the same wheels have the same payload identity (receipts compare equal)."""
    before = {p: p.read_bytes() for p in env.site.glob("*.dist-info/*")}
    frozen(env)
    assert {p: p.read_bytes() for p in env.site.glob("*.dist-info/*")} == before
    other = Env(tmp_path / "other", env.wheels, env.spec)
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(other.venv)], check=True)
    other.pip(str(env.wheels["torch"]), str(env.wheels["triton"]))
    assert (
        guard.take_baseline(env.spec.abi, env.site, {}).payload_sha256
        == guard.take_baseline(other.spec.abi, other.site, {}).payload_sha256
    )


def test_blame_names_the_step_only_when_it_changed_torch(env: Env, tmp_path: Path) -> None:
    base = frozen(env)
    # torch rebuilt outside envbuild, then a step installs fla-core (which requires torch)
    env.uv("--reinstall", str(rebuilt_torch(tmp_path / "rebuilt")))
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
