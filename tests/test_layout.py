"""Data layout and $HOME links: idempotent, and nothing of the user's is ever lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild import layout
from envbuild.errors import LayoutError
from envbuild.spec import StackSpec, load_spec

SPEC = """schema = 1
name = "t"
python = "3.11"
[layout]
root = "{root}"
links = {{ venv = "venv", data = "data", nanochat = "nanochat" }}
[abi]
version = "2.13.0"
[[step]]
name = "torch"
packages = ["torch==2.13.0"]
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[StackSpec, layout.Paths, Path]:
    (tmp_path / "s.toml").write_text(SPEC.format(root=tmp_path / "data"))
    spec = load_spec(tmp_path / "s.toml", {})
    paths = layout.paths_for(spec)
    return spec, paths, tmp_path / "home"


def test_folders_links_and_overlay(setup: tuple[StackSpec, layout.Paths, Path]) -> None:
    spec, paths, home = setup
    layout.create_folders(paths)
    done = layout.link_home(spec, paths, home)
    assert len(done) == 3
    for name in ("venv", "data", "nanochat"):
        assert os.readlink(home / name) == str(paths.root / name)
    for sub in ("pip", "uv", "triton", "inductor", "huggingface"):
        assert (paths.cache / sub).is_dir()
    assert paths.receipts.is_dir() and paths.logs.is_dir() and paths.checkpoints.is_dir()
    overlay = layout.write_overlay(spec, paths).read_text()
    assert "export TORCH_NCCL_HIGH_PRIORITY=1" in overlay
    assert "export PYTORCH_ALLOC_CONF=expandable_segments:True" in overlay
    assert "export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=7200" in overlay
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in overlay
    assert f"export TRITON_CACHE_DIR={paths.cache / 'triton'}" in overlay
    assert "NCCL_MNNVL_ENABLE" not in overlay
    # idempotent: a second run changes nothing
    assert layout.link_home(spec, paths, home) == []


def test_the_overlay_is_written_again_only_when_it_differs(
    setup: tuple[StackSpec, layout.Paths, Path],
) -> None:
    """A re-run leaves the same private overlay as it is (no write); another text, a mode others
    can read, or a link in its place is written again, as a private file of its own."""
    spec, paths, _ = setup
    layout.create_folders(paths)
    written = layout.write_overlay(spec, paths)
    first = written.stat()
    assert first.st_mode & 0o777 == 0o600
    layout.write_overlay(spec, paths)
    assert written.stat().st_ino == first.st_ino  # left as it was
    written.chmod(0o644)
    layout.write_overlay(spec, paths)
    again = written.stat()
    assert again.st_ino != first.st_ino and again.st_mode & 0o777 == 0o600
    elsewhere = paths.root / "elsewhere.sh"
    elsewhere.write_text(written.read_text())
    elsewhere.chmod(0o600)
    written.unlink()
    written.symlink_to(elsewhere)
    layout.write_overlay(spec, paths)
    assert not written.is_symlink() and written.read_text() == elsewhere.read_text()


def test_a_real_file_in_the_way_is_never_replaced(
    setup: tuple[StackSpec, layout.Paths, Path],
) -> None:
    spec, paths, home = setup
    home.mkdir()
    (home / "data").mkdir()
    (home / "data" / "precious.txt").write_text("mine")
    (home / "venv").write_text("also mine")
    with pytest.raises(LayoutError) as info:
        layout.link_home(spec, paths, home)
    message = str(info.value)
    assert f"{home / 'data'} (a folder)" in message and f"{home / 'venv'} (a file)" in message
    assert "--force-links" in message
    # nothing was touched, not even the links that had no conflict
    assert (home / "data" / "precious.txt").read_text() == "mine"
    assert (home / "venv").read_text() == "also mine"
    assert not (home / "nanochat").exists()


def test_force_links_moves_aside_and_says_where(
    setup: tuple[StackSpec, layout.Paths, Path],
) -> None:
    spec, paths, home = setup
    home.mkdir()
    (home / "data").mkdir()
    (home / "data" / "precious.txt").write_text("mine")
    done = layout.link_home(spec, paths, home, force=True)
    moved = [line for line in done if line.startswith("moved")]
    assert len(moved) == 1
    aside = Path(moved[0].split(" aside to ")[1])
    assert (aside / "precious.txt").read_text() == "mine"
    assert os.readlink(home / "data") == str(paths.root / "data")


def test_file_where_a_data_folder_goes(setup: tuple[StackSpec, layout.Paths, Path]) -> None:
    spec, paths, home = setup
    paths.root.mkdir(parents=True)
    (paths.root / "receipts").write_text("not a folder")
    with pytest.raises(LayoutError, match="exists and is not a folder"):
        layout.create_folders(paths)
    assert (paths.root / "receipts").read_text() == "not a folder"


def test_home_that_is_a_file(setup: tuple[StackSpec, layout.Paths, Path]) -> None:
    spec, paths, home = setup
    home.write_text("not a folder")
    with pytest.raises(LayoutError, match="is not a folder"):
        layout.link_home(spec, paths, home)
    assert home.read_text() == "not a folder"
