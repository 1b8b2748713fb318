"""The provisioning manifest is written only when its text changes (a no-op run writes it once)."""

from __future__ import annotations

import os
from pathlib import Path

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
