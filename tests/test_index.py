"""The one index client (envbuild.index.client) against a real local PEP 503 index over HTTP and
real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.index import IndexServer, UnreachablePort
from support.wheels import build_sdist, build_wheel, sha256_of

from envbuild.index.client import (
    Artifact,
    ArtifactFinder,
    SourceError,
    Sources,
    find_links_files,
    index_files,
    page_files,
    project_of,
    requires_of,
)
from envbuild.wheelhouse.pages import write_index


@pytest.fixture
def repo(tmp_path: Path) -> dict[str, Path]:
    folder = tmp_path / "repo"
    folder.mkdir()
    return {
        "wheel": build_wheel(
            folder, "Fla_Core.Like", "0.4.2", requires=["einops-like>=0.8", "torch>=2.0"]
        ),
        "sdist": build_sdist(folder, "fla-core-like", "0.4.2", requires=["einops-like"]),
        "other": build_wheel(folder, "einops-like", "0.8.1"),
    }


@pytest.mark.parametrize(
    "filename, project",
    [
        ("torch-2.12.0.dev20260405+cu132-cp313-cp313-manylinux_2_28_x86_64.whl", "torch"),
        ("Fla_Core.Like-0.4.2.tar.gz", "fla-core-like"),
        ("zope.interface-7.0.zip", "zope-interface"),
        ("README.md", None),
        ("broken-.whl", None),
        ("index.html", None),
    ],
)
def test_one_file_name_rule(filename: str, project: str | None) -> None:
    assert project_of(filename) == project


def test_index_pages_and_find_links_agree(repo: dict[str, Path], tmp_path: Path) -> None:
    with IndexServer({"r": repo["wheel"].parent}) as srv:
        # credentials in the URL are used, kept for links on the same host, and shown nowhere
        index = srv.simple_url("r").replace("http://", "http://user:s3cret@")
        on_index = index_files(index, "FLA-core-like")
        flat = find_links_files(srv.flat_url("r"))
    by_name = {a.filename: a for a in on_index}
    assert sorted(by_name) == sorted([repo["wheel"].name, repo["sdist"].name])
    for key in ("wheel", "sdist"):
        a = by_name[repo[key].name]
        assert (
            a.sha256 == sha256_of(repo[key])
            and a.project == "fla-core-like"
            and a.version == "0.4.2"
        )
        assert a.url.startswith("http://user:s3cret@127.0.0.1:")
    assert {a.filename for a in flat} == {p.name for p in repo.values()}
    # a local find-links folder, and the PEP 503 pages envbuild writes over it, list the same files
    local = find_links_files(str(repo["wheel"].parent))
    assert {a.filename for a in local} == {p.name for p in repo.values()}
    write_index(repo["wheel"].parent)
    pages = index_files((repo["wheel"].parent / "simple").as_uri(), "fla-core-like")
    assert {(a.filename, a.sha256) for a in pages} == {
        (repo[k].name, sha256_of(repo[k])) for k in ("wheel", "sdist")
    }


def test_pep_691_json_page() -> None:
    body = json.dumps(
        {
            "meta": {"api-version": "1.1"},
            "name": "torch",
            "files": [
                {
                    "filename": "torch-2.13.0-cp311-cp311-linux_x86_64.whl",
                    "url": "../../files/torch-2.13.0-cp311-cp311-linux_x86_64.whl",
                    "hashes": {"sha256": "a" * 64},
                    "core-metadata": {"sha256": "b" * 64},
                },
                {
                    "filename": "torch-2.13.0.tar.gz",
                    "url": "https://elsewhere.example/torch-2.13.0.tar.gz",
                    "hashes": {},
                },
                {"filename": "not-a-dist.txt", "url": "x", "hashes": {}},
                {"filename": 7, "url": None},
            ],
        }
    ).encode()
    got = page_files(body, "https://idx.example/simple/torch/", is_json=True)
    assert got == [
        Artifact(
            "torch-2.13.0-cp311-cp311-linux_x86_64.whl",
            "https://idx.example/files/torch-2.13.0-cp311-cp311-linux_x86_64.whl",
            "a" * 64,
            "https://idx.example/files/torch-2.13.0-cp311-cp311-linux_x86_64.whl.metadata",
        ),
        Artifact(
            "torch-2.13.0.tar.gz", "https://elsewhere.example/torch-2.13.0.tar.gz", None, None
        ),
    ]
    with pytest.raises(SourceError, match="not a PEP 691 project page"):
        page_files(b"{not json", "https://idx.example/simple/torch/", is_json=True)


def test_finder_hashes_matches_and_reads_metadata(
    repo: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVBUILD_CACHE_DIR", str(tmp_path / "cache"))
    with IndexServer({"r": repo["wheel"].parent}) as srv:
        finder = ArtifactFinder(Sources((srv.simple_url("r"),), (str(repo["wheel"].parent),)))
        every = finder.matching_all("fla-core-like", "0.4.2")
        # the same two files from the index and the folder: one entry per sha256
        assert sorted(a.sha256 or "" for a in every) == sorted(
            sha256_of(repo[k]) for k in ("wheel", "sdist")
        )
        wheel = finder.matching("fla-core-like", None, [sha256_of(repo["wheel"])])
        assert [a.filename for a in wheel] == [repo["wheel"].name]
        assert requires_of(wheel[0]) == ["einops-like>=0.8", "torch>=2.0"]
        sdist = next(a for a in every if not a.is_wheel)
        assert requires_of(
            Artifact(sdist.filename, srv.file_url("r", sdist.filename), sdist.sha256)
        ) == ["einops-like"]
        # a file whose bytes are not the ones the index states is refused
        srv.fail(f"*/{repo['other'].name}", "corrupt")
        other = Artifact(
            repo["other"].name, srv.file_url("r", repo["other"].name), sha256_of(repo["other"])
        )
        with pytest.raises(SourceError, match="sha256 mismatch"):
            requires_of(other)


def test_an_unreachable_source_is_one_error_type_with_exit_3(tmp_path: Path) -> None:
    with UnreachablePort() as port:
        url = f"http://user:s3cret@127.0.0.1:{port.port}/simple"
        with pytest.raises(SourceError) as exc:
            index_files(url, "torch")
    assert int(exc.value.exit_code) == 3
    assert "cannot reach http://***@127.0.0.1" in exc.value.message and "s3cret" not in str(
        exc.value
    )
