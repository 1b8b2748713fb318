"""Mirror and index: a real local PEP 503 index over HTTP with injected faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.index import IndexServer, StaticServer
from support.wheels import build_wheel, sha256_of

from envbuild.cli import main
from envbuild.errors import WheelhouseError
from envbuild.index.download import download
from envbuild.index.net import SourceError
from envbuild.wheelhouse import mirror as m
from envbuild.wheelhouse.pages import write_index


@pytest.fixture
def repo(tmp_path: Path) -> dict[str, Path]:
    """Four artifacts: a big-ish 'nightly torch', two small wheels, one more version not locked."""
    pypi = tmp_path / "pypi"
    pypi.mkdir()
    files = {
        "torch": build_wheel(
            pypi,
            "torch",
            "2.12.0.dev20260405+cu132",
            files={"torch/__init__.py": "x = 1\n", "torch/blob.bin": bytes(range(256)) * 4096},
        ),
        "einops": build_wheel(pypi, "einops", "0.8.1"),
        "ninja": build_wheel(
            pypi, "ninja", "1.11.1", python_tag="py2.py3", platform_tag="manylinux_2_17_x86_64"
        ),
        "ninja-arm": build_wheel(
            pypi, "ninja", "1.11.1", python_tag="py2.py3", platform_tag="manylinux_2_17_aarch64"
        ),
    }
    build_wheel(pypi, "einops", "0.8.0")  # on the index, not in the lock
    return files


def _lock(tmp_path: Path, index_url: str, files: dict[str, Path]) -> Path:
    lock = tmp_path / "lock"
    lock.mkdir(exist_ok=True)
    (lock / "00-torch.txt").write_text(
        "# pip-compile --generate-hashes\n"
        f"--index-url {index_url}\n\n"
        "torch==2.12.0.dev20260405+cu132 \\\n"
        f"    --hash=sha256:{sha256_of(files['torch'])}\n"
        "    # via -r requirements.in\n"
    )
    (lock / "10-rest.txt").write_text(
        f"--index-url {index_url}\n"
        f"einops==0.8.1 --hash=sha256:{sha256_of(files['einops'])}\n"
        "ninja==1.11.1 \\\n"
        f"    --hash=sha256:{sha256_of(files['ninja'])} \\\n"
        f"    --hash=sha256:{sha256_of(files['ninja-arm'])}\n"
    )
    return lock


def test_mirror_resumes_dropped_download_and_refuses_corrupt_file(
    tmp_path: Path, repo: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "wheelhouse"
    with IndexServer({"pypi": repo["torch"].parent}) as srv:
        # credentials in the index URL: used, never printed or written
        index = srv.simple_url("pypi").replace("http://", "http://mirror-user:t0ps3cret@")
        lock = _lock(tmp_path, index, repo)
        srv.fail(f"*/{repo['torch'].name}", "drop", times=1)  # connection dropped mid-download
        srv.fail(f"*/{repo['einops'].name}", "corrupt")  # every copy is corrupted
        code = main(
            ["wheelhouse", "mirror", "--lock", str(lock), "--out", str(out), "--deadline", "10"]
        )
        captured = capsys.readouterr()
        torch_requests = srv.requested(f"*/{repo['torch'].name}")
    text = captured.out + captured.err
    assert code == 9
    assert "t0ps3cret" not in text
    einops_url = f"http://***@127.0.0.1:{srv_port(index)}/pypi/files/{repo['einops'].name}"
    assert f"sha256 mismatch for {einops_url}" in text
    assert f"expected {sha256_of(repo['einops'])}, got " in text
    assert "the file was not kept" in text
    assert not (out / repo["einops"].name).exists()
    assert not (out / f"{repo['einops'].name}.partial").exists()
    # the dropped download was retried and completed, hash-checked
    assert len(torch_requests) == 2
    assert sha256_of(out / repo["torch"].name) == sha256_of(repo["torch"])
    assert (out / repo["ninja"].name).is_file() and (out / repo["ninja-arm"].name).is_file()
    assert not (out / "einops-0.8.0-py3-none-any.whl").exists()
    manifest = (out / "wheelhouse.json").read_text()
    assert "t0ps3cret" not in manifest and repo["torch"].name in manifest


def srv_port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


def test_mirror_resumes_from_partial_file_and_filters_platform(
    tmp_path: Path, repo: dict[str, Path]
) -> None:
    out = tmp_path / "wheelhouse"
    out.mkdir()
    # a partial download left by an interrupted run
    (out / f"{repo['torch'].name}.partial").write_bytes(repo["torch"].read_bytes()[:1000])
    with IndexServer({"pypi": repo["torch"].parent}) as srv:
        sources = m.lock_sources(_lock(tmp_path, srv.simple_url("pypi"), repo))
        artifacts = m.select(m.resolve(sources), python="cp313", platform="manylinux*_x86_64")
        assert sorted(a.filename or "" for a in artifacts) == sorted(
            [repo["torch"].name, repo["einops"].name, repo["ninja"].name]
        )
        result = m.mirror(artifacts, out)
        assert len(result.downloaded) == 3
        again = m.mirror(artifacts, out)
        assert len(again.present) == 3 and not again.downloaded
    for key in ("torch", "einops", "ninja"):
        assert sha256_of(out / repo[key].name) == sha256_of(repo[key])


def test_download_gives_up_at_the_deadline_with_url_and_keeps_partial(
    tmp_path: Path, repo: dict[str, Path]
) -> None:
    """A file whose every copy is cut short: retried by index.net's rule until the deadline,
    then one error naming the URL and the attempts; the partial file stays for the next run."""
    with IndexServer({"pypi": repo["torch"].parent}) as srv:
        srv.fail("*/torch-*", "drop")
        url = srv.file_url("pypi", repo["torch"].name)
        with pytest.raises(
            SourceError, match=r"connection dropped mid-answer \(\d+ attempts in \d+ s\)"
        ) as exc:
            download(url, tmp_path / repo["torch"].name, sha256_of(repo["torch"]), deadline=2.0)
        tries = len(srv.requested("*/torch-*"))
    assert url in str(exc.value) and tries >= 2
    assert (tmp_path / f"{repo['torch'].name}.partial").exists()
    assert not (tmp_path / repo["torch"].name).exists()


def test_unlocatable_artifact_is_a_clear_error(tmp_path: Path, repo: dict[str, Path]) -> None:
    with IndexServer({"pypi": repo["torch"].parent}) as srv:
        lock = _lock(tmp_path, srv.simple_url("pypi"), repo)
        repo["torch"].unlink()  # the nightly left its index
        with pytest.raises(
            WheelhouseError,
            match=r"torch==2.12.0.dev20260405\+cu132 \(00-torch.txt\): none of its 1 pinned files",
        ):
            m.resolve(m.lock_sources(lock))


def test_lock_parser_rejects_unpinned_and_unhashed(tmp_path: Path) -> None:
    f = tmp_path / "r.txt"
    f.write_text("torch>=2.0 --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(WheelhouseError, match=r"r.txt:1: not an exact pin"):
        m.read_requirements(f)
    f.write_text("torch==2.0\n")
    with pytest.raises(WheelhouseError, match=r"r.txt:1: torch has no --hash"):
        m.read_requirements(f)


def test_index_serves_pip_find_links_and_simple(
    tmp_path: Path, repo: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    folder = repo["torch"].parent
    assert main(["wheelhouse", "index", str(folder)]) == 0
    page = (folder / "simple" / "ninja" / "index.html").read_text()
    assert f'href="../../{repo["ninja"].name}#sha256={sha256_of(repo["ninja"])}"' in page
    assert "einops" in (folder / "simple" / "index.html").read_text()
    # pip can use it as --find-links, and (served by any static server) as an index
    dl = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            str(tmp_path / "dl"),
            "--no-index",
            "--find-links",
            str(folder),
            "einops==0.8.1",
        ],
        capture_output=True,
        text=True,
    )
    assert dl.returncode == 0, dl.stderr
    with StaticServer(folder) as served:
        dl = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-d",
                str(tmp_path / "dl2"),
                "--index-url",
                f"{served.url}/simple/",
                "einops==0.8.1",
            ],
            capture_output=True,
            text=True,
        )
        assert dl.returncode == 0, dl.stdout + dl.stderr
        # --wheelhouse takes the address of its PEP 503 pages (what `wheelhouse index` prints)
        # as well as its root: both read the same files
        from envbuild.commands.common import wheelhouse_arg
        from envbuild.index.wheeltags import wheelhouse_files

        served_files = wheelhouse_files(wheelhouse_arg(f"{served.url}/simple/"))
        assert repo["einops"].name in served_files.values()
        assert served_files == wheelhouse_files(f"{served.url}/")
        assert wheelhouse_files(wheelhouse_arg(str(folder / "simple"))) == served_files
    assert (tmp_path / "dl2" / repo["einops"].name).is_file()
    result = write_index(folder)
    assert result.projects["ninja"] == sorted([repo["ninja"].name, repo["ninja-arm"].name])
    assert json.loads((folder / ".envbuild-hashes.json").read_text())["artifacts"]


def test_mirror_stack_returns_what_it_did_and_prints_nothing(
    tmp_path: Path, repo: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The library half of `wheelhouse mirror`: a result the command prints, no output of its
    own."""
    from envbuild.wheelhouse.stackmirror import StackMirrorRequest, mirror_stack

    out = tmp_path / "wheelhouse"
    out.mkdir()
    with IndexServer({"pypi": repo["torch"].parent}) as srv:
        lock = _lock(tmp_path, srv.simple_url("pypi"), repo)
        first = mirror_stack(
            StackMirrorRequest(
                out=out, lock_dir=lock, python_tag="cp313", platform="manylinux*_x86_64"
            )
        )
        again = mirror_stack(
            StackMirrorRequest(
                out=out, lock_dir=lock, python_tag="cp313", platform="manylinux*_x86_64"
            )
        )
    assert capsys.readouterr().out == ""
    want = sorted([repo["torch"].name, repo["einops"].name, repo["ninja"].name])
    assert sorted(p.name for p in first.result.downloaded) == want and not first.result.present
    assert sorted(p.name for p in again.result.present) == want and not again.result.downloaded
    assert first.target is None and first.built == ()  # tags asked for: no lock.json target
    assert first.bytes_mirrored == sum((out / n).stat().st_size for n in want)
    assert first.index == out / "simple" and (out / "simple" / "torch" / "index.html").is_file()
