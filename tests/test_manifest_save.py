"""The provisioning manifest is written only when its text changes (a no-op run writes it once)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envbuild.provision.state import Manifest


def test_an_unchanged_manifest_is_not_written_again_and_a_changed_one_is(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    first = Manifest(path=path, stack="s", python="3.11")
    first.state("torch").status = "ok"
    first.save()
    before = os.stat(path).st_ino

    loaded = Manifest.load(path)
    loaded.save()  # nothing changed: the file is left as it is (no new inode from os.replace)
    assert os.stat(path).st_ino == before

    loaded.finished = "2026-11-27T22:00:00+0000"
    loaded.save()  # a change: written (atomically, a new inode) and read back as saved
    assert os.stat(path).st_ino != before
    assert Manifest.load(path).finished == "2026-11-27T22:00:00+0000"
    again = os.stat(path).st_ino
    loaded.save()  # saved text remembered: no second write
    assert os.stat(path).st_ino == again


def test_state_written_inside_synced_at_end_is_there_at_once_and_synced_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``provision`` writes its state inside ``_io.synced_at_end``: each write takes its name at
    once (a reader, or a process killed then, sees it), and each file is synced once, when the
    block ends (the same file saved three times: one fsync, of its last bytes), also when the block
    ends by an exception."""
    from envbuild import _io

    synced: list[bytes] = []
    real = os.fsync

    def fsync(fd: int) -> None:  # records what is synced, then syncs it
        synced.append(Path(f"/proc/self/fd/{fd}").read_bytes())
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    manifest = Manifest(path=tmp_path / "manifest.json", stack="s", python="3.11")
    other = tmp_path / "overlay.env"
    with _io.synced_at_end():
        for status in ("running", "ok", "failed"):
            manifest.state("torch").status = status
            manifest.save()
            assert Manifest.load(manifest.path).state("torch").status == status
        _io.atomic_write_text(other, "A=1\n")
        _io.atomic_write_text(tmp_path / "cache.json", "{}", durable=False)
        assert synced == []
    assert sorted(synced) == sorted([manifest.path.read_bytes(), b"A=1\n"])

    synced.clear()
    with pytest.raises(RuntimeError), _io.synced_at_end():
        _io.atomic_write_text(other, "A=2\n")
        raise RuntimeError("a step failed")
    assert synced == [b"A=2\n"]
    _io.atomic_write_text(other, "A=3\n")  # outside: synced on its own, before it takes its name
    assert synced == [b"A=2\n", b"A=3\n"]
