"""A remote wheel's METADATA is read without the wheel: the index's metadata file, else HTTP
ranges (kilobytes of a large wheel), else the file streamed to disk and hash-checked; never the
whole file in memory. Real zip files, a real HTTP server, counted on the server side."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.rangeserver import RangeServer
from support.wheels import build_wheel, sha256_of

from envbuild.index.client import SourceError, session
from envbuild.index.remotezip import Read, remote_metadata

SIZE = 12 * 1024 * 1024  # incompressible payload: the wheel is about this big


@pytest.fixture(scope="module")
def big_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    return build_wheel(
        folder,
        "big-ext",
        "1.0",
        requires=["torch>=2.10", "einops"],
        files={"big_ext/payload.bin": os.urandom(SIZE).hex()[:SIZE]},
    )


@pytest.mark.parametrize("ranges", [True, False])
def test_metadata_of_a_remote_wheel(big_wheel: Path, ranges: bool) -> None:
    with RangeServer(big_wheel.parent, ranges=ranges) as server:
        read = Read()
        text, path = remote_metadata(
            f"{server.url}/{big_wheel.name}",
            sha256_of(big_wheel),
            http=session(),
            timeout=(5, 30),
            read=read,
        )
    assert path is None and text is not None
    assert "Requires-Dist: torch>=2.10" in text and "Name: big-ext" in text
    if ranges:
        assert read.how == "range" and server.sent < 512 * 1024, (read, server.sent)
        # every file request was a range
        assert all(r for name, r in server.requests if name == big_wheel.name)
    else:  # streamed to disk and hash-checked
        assert read.how == "stream" and server.sent >= big_wheel.stat().st_size


def test_the_metadata_file_is_read_first(big_wheel: Path, tmp_path: Path) -> None:
    (tmp_path / big_wheel.name).symlink_to(big_wheel)
    (tmp_path / f"{big_wheel.name}.metadata").write_text(
        "Metadata-Version: 2.1\nName: big-ext\nVersion: 1.0\nRequires-Dist: torch>=2.10\n"
    )
    with RangeServer(tmp_path, metadata_files=True) as server:
        read = Read()
        text, _ = remote_metadata(
            f"{server.url}/{big_wheel.name}", None, http=session(), timeout=(5, 30), read=read
        )
    assert read.how == "metadata-file" and text is not None and "torch>=2.10" in text
    assert [name for name, _ in server.requests] == [f"{big_wheel.name}.metadata"]


def test_a_streamed_file_that_is_not_the_locked_one_is_refused(big_wheel: Path) -> None:
    with (
        RangeServer(big_wheel.parent, ranges=False) as server,
        pytest.raises(SourceError, match="sha256 mismatch for .*the file was not kept"),
    ):
        remote_metadata(f"{server.url}/{big_wheel.name}", "0" * 64, http=session(), timeout=(5, 30))
