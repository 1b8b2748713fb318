"""Requirements files read as pip reads them, and each index answering for its own packages
(issue 51), each planted and fixed.

- A bare VCS line (``git+https://host/org/repo.git@ref``), ``-e``, ``name @ URL``, a bare wheel URL
  with a marker, a local path and the index options are read as pip reads them; a line pip would
  refuse is a ``broken-line`` finding that names it, and the rest of the file is still judged (a
  loose torch beside it is still found).
- An extra index that does not answer costs only what only it serves: the main index's metadata
  is still read (a torchvision that requires another torch is found), the rows of a torch only the
  dead index serves say so, and every note points at rows the table has. A file with only
  ``--extra-index-url`` reads the package index (PyPI) first, as pip does.

Real HTTP indexes of real wheels (``support.index``, ``support.wheels``), no network.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.index import IndexServer, UnreachablePort
from support.wheels import build_wheel

from envbuild.gate import Policy, check_file
from envbuild.gate.formats import parse
from envbuild.index import PYPI

POLICY = Policy(python="3.12")

LINES = """\
--extra-index-url https://download.example/whl/cu121
torch==2.5.1 \\
    --hash=sha256:{h}
    # via -r requirements.in
git+https://github.com/org/repo.git@v1.0
-e git+https://github.com/org/other.git@abc123#egg=other-pkg
flash-attn @ https://example.org/flash_attn-2.7.0+cu12torch2.5cxx11abiFALSE-cp312-cp312-linux_x86_64.whl
https://example.org/xformers-0.0.28.post3-cp312-cp312-manylinux_2_28_x86_64.whl ; os_name == "posix"
--editable ./vendored/pkg
--prefer-binary
numpy==2.0.0
""".replace("{h}", "0" * 64)


def test_pip_lines_are_read_as_pip_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(LINES)
    lock = parse(path, path.read_text(), "requirements")
    assert not lock.unread
    got = {e.name: (e.version, e.url, e.line) for e in lock.entries}
    assert got["torch"] == ("2.5.1", None, 2)
    assert got["repo"] == (None, "git+https://github.com/org/repo.git@v1.0", 5)
    assert got["other-pkg"][1] == "git+https://github.com/org/other.git@abc123#egg=other-pkg"
    assert got["flash-attn"][0] == "2.7.0+cu12torch2.5cxx11abifalse"
    assert got["xformers"][:1] == ("0.0.28.post3",)
    assert next(e for e in lock.entries if e.name == "xformers").marker == 'os_name == "posix"'
    assert got["pkg"] == (None, "./vendored/pkg", 9)
    assert got["numpy"][0] == "2.0.0"
    # only --extra-index-url: pip reads the package index first
    assert lock.indexes == [PYPI, "https://download.example/whl/cu121"]
    ok = check_file(path, POLICY, offline=True)
    assert ok.ok, [f.text() for f in ok.findings]
    assert not any(f.rule == "broken-lock" for f in ok.findings)


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("this is not a requirement!!", "Expected"),
        ("--frobnicate", "pip has no option --frobnicate"),
        ("--index-url", "--index-url takes a value"),
        ("git+https://github.com/org/repo.git ; sys_platform ==", "marker"),
    ],
)
def test_a_line_pip_refuses_is_a_finding_and_the_rest_is_judged(
    tmp_path: Path, bad: str, why: str
) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(f"{LINES}{bad}\ntorch>=2.0 ; sys_platform == 'linux'\n")
    report = check_file(path, POLICY, offline=True)
    broken = [f for f in report.findings if f.rule == "broken-line"]
    assert len(broken) == 1 and broken[0].line == 12, report.findings
    assert f"`{bad}`" in broken[0].reason and why in broken[0].reason
    # the rest of the file is judged: the loose torch on the next line is found
    pins = [f for f in report.findings if f.rule == "torch-pins"]
    assert pins and pins[0].line == 13, report.findings
    assert report.environments  # rows, not one "broken lock"


# ----------------------------------------------------------------------------- indexes


@pytest.fixture(scope="module")
def main_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    """The main index: torch 2.5.1 (Linux x86_64), torchvision 0.20.1 (requires torch==2.5.1, as
    PyPI's does), a helper; torch 2.7.1+cu128 is not there (only the accelerator index has it)."""
    folder = tmp_path_factory.mktemp("main")
    build_wheel(folder, "torch", "2.5.1", platform_tag="manylinux_2_28_x86_64")
    build_wheel(folder, "torchvision", "0.20.1", requires=["torch==2.5.1"])
    build_wheel(folder, "helper-lib", "1.0")
    with IndexServer({"main": folder}) as server:
        yield server


def _requirements(tmp: Path, main: str, extra: str, torch: str, vision: str) -> Path:
    path = tmp / "requirements.txt"
    path.write_text(
        f"--index-url {main}\n--extra-index-url {extra}\n\ntorch=={torch}\n"
        f"torchvision=={vision}\nhelper-lib==1.0\ncolorama==0.4.6 ; sys_platform == 'win32'\n"
    )
    return path


def test_a_dead_index_costs_only_what_only_it_serves(
    main_index: IndexServer, tmp_path: Path
) -> None:
    main = main_index.simple_url("main")
    with UnreachablePort() as dead:
        # planted: torch from the dead accelerator index, torchvision (main) for another torch
        path = _requirements(tmp_path, main, dead.url, "2.7.1+cu128", "0.20.1")
        report = check_file(path, POLICY, use_cache=False)
        host = f"127.0.0.1:{dead.port}"
        found = [f for f in report.findings if f.rule == "torch-requirement"]
        assert found and "torchvision 0.20.1 requires torch==2.5.1" in found[0].reason, (
            report.findings
        )
        said = " ".join(report.notices)
        assert f"index at {host} did not answer" in said, report.notices
        dead_note = said.split(f"index at {host}", 1)[1]
        assert "2 package(s) not checked: " in dead_note, dead_note
        assert "torch 2.7.1+cu128" in dead_note and "colorama 0.4.6" in dead_note
        assert "torchvision" not in dead_note and "helper-lib" not in dead_note
        results = {r.result for r in report.environments}
        assert results <= {"1 finding(s)", "not known: the index did not answer"}, results
        # every quoted row result in a note is a row of the table
        for note in report.notices:
            if 'rows "' in note:
                quoted = note.split('rows "', 1)[1].split('"', 1)[0]
                assert quoted in {r.result for r in report.environments} | {
                    "not known: the index did not answer"
                }, note
        # fixed: torch the main index serves, its torchvision
        path = _requirements(tmp_path, main, dead.url, "2.5.1", "0.20.1")
        fixed = check_file(path, POLICY, use_cache=False)
    assert fixed.ok, [f.text() for f in fixed.findings]
    rows = {r.name: r.result for r in fixed.environments}
    assert rows["linux x86_64"] == "ok"
    assert rows["macos arm64"] == "no file for this platform and Python"
    # colorama is on neither index that answered: the dead one answers for it alone
    (dead_note,) = [n for n in fixed.notices if "did not answer" in n]
    assert dead_note.endswith("1 package(s) not checked: colorama 0.4.6"), dead_note


def test_a_note_quotes_only_what_a_row_says(tmp_path: Path) -> None:
    """A loose ``torch`` (AUTOMATIC1111's requirements_versions.txt at 00203a4 has two): its row
    says "1 finding(s)", so the note on its unknown files quotes no row "not known offline"."""
    path = tmp_path / "requirements.txt"
    path.write_text("numpy==1.23.5\ntorch\nxformers==0.0.20\n")
    report = check_file(path, POLICY, offline=True)
    assert [r.result for r in report.environments] == ["1 finding(s)"]
    unknown = [n for n in report.notices if n.startswith("torch on linux x86_64")]
    assert unknown and 'rows "' not in unknown[0], report.notices
    path.write_text("numpy==1.23.5\ntorch==2.0.1\nxformers==0.0.20\n")
    report = check_file(path, POLICY, offline=True)
    assert [r.result for r in report.environments] == ["not known offline"]
    assert any(n.endswith('(rows "not known offline")') for n in report.notices), report.notices
