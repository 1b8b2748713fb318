"""The files two distributions of an environment both install (``guard.shared_files``): read from
their RECORDs, kept in a file of the caller's under every RECORD's identity, and read again from
the RECORDs on any change (a reinstall, a new distribution, a torn file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from envbuild import guard
from envbuild.index.records import find_overlaps, overlap_groups


def _dist(site: Path, name: str, version: str, rows: dict[str, str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    record = [f"{p},{h},1" for p, h in rows.items()]
    record += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_shared_files_are_kept_until_a_record_changes(tmp_path: Path) -> None:
    site, keep = tmp_path / "site", tmp_path / "state" / "shared-files.json"
    cv2 = {"cv2/__init__.py": "sha256=aaa", "cv2/a.so": "sha256=b"}
    _dist(site, "opencv-python", "4.10.0", cv2)
    _dist(site, "opencv-python-headless", "4.10.0", {"cv2/__init__.py": "sha256=ccc"})
    _dist(site, "triton", "3.6.0", {"triton/__init__.py": "sha256=t"})
    _dist(site, "nvidia-a", "1.0", {"nvidia/__init__.py": "sha256=same"})
    _dist(site, "nvidia-b", "1.0", {"nvidia/__init__.py": "sha256=same"})

    dists = guard.scan(site)
    found = guard.shared_files(dists, keep)
    assert set(found.owners) == {"cv2/__init__.py", "nvidia/__init__.py"}
    assert sorted(found.owners["cv2/__init__.py"]) == [
        ("opencv-python", "sha256=aaa"),
        ("opencv-python-headless", "sha256=ccc"),
    ]
    assert found.triton == frozenset({"triton"})
    # the lock's overlaps are the same fact: same bytes (nvidia's namespace file) overwrite nothing
    files = {name: d.files() for name, d in dists.items()}
    assert overlap_groups(found.owners) == find_overlaps(files)
    assert [o.packages for o in overlap_groups(found.owners)] == [
        ("opencv-python", "opencv-python-headless")
    ]

    # kept: a re-run reads the answer, not the RECORDs
    doc = json.loads(keep.read_text())
    assert guard.shared_files(guard.scan(site), keep) == found
    doc["owners"] = [["planted/path.py", [["a", "sha256=1"], ["b", "sha256=2"]]]]
    keep.write_text(json.dumps(doc))
    assert set(guard.shared_files(guard.scan(site), keep).owners) == {"planted/path.py"}

    # a RECORD that changed (a reinstall writes a new one): read again, and kept again
    record = site / "opencv-python-headless-4.10.0.dist-info" / "RECORD"
    record.write_text(record.read_text().replace("cv2/__init__.py", "cv2_headless/__init__.py"))
    os.utime(record, ns=(1, 1))
    again = guard.shared_files(guard.scan(site), keep)
    assert set(again.owners) == {"nvidia/__init__.py"}
    assert json.loads(keep.read_text())["key"] != doc["key"]

    # a torn file: read again from the RECORDs, without a word
    keep.write_text(keep.read_text()[:40])
    assert guard.shared_files(guard.scan(site), keep) == again
