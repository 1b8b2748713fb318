"""Every page a reader follows (the README's tour, the tutorials, the how-tos) runs as written on
this machine, and what it shows is what it prints.

``make docs-snippets`` rewrites the outputs from a real run (``tests/support/tour.py``); these tests
run every command again and fail when one fails or when a shown output no longer matches
(numbers, durations, dates and hashes aside). A shell block that is not run says where it runs
(a GPU host, a cluster, Docker: its title), and a test holds every page to one or the other.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import tour

README = tour.REPO / "README.md"
DOCS = tour.REPO / "docs"
# every page a reader follows: the README, the tutorials and the how-tos
PAGES = [
    README,
    *sorted((DOCS / "tutorials").glob("*.md")),
    *sorted((DOCS / "how-to").glob("*.md")),
    DOCS / "fleet.md",
]
# Pages that install from pip's sources (PyPI, or the mirror pip is configured with): make
# test-thorough walks them (pip_sources). install: `pip install .` and `make bootstrap` (22 s);
# your-stack: lock, provision, smoke with its torch.compile (48-67 s); offline-fleet: a wheelhouse
# mirror and two offline roots (38 s). The README walk in make test provisions, smokes and runs
# the step as they do; make test checks their samples without running them
# (test_every_sample_block_is_one_a_run_can_print).
INSTALLING = {
    DOCS / "how-to" / "install.md",
    DOCS / "tutorials" / "your-stack.md",
    DOCS / "tutorials" / "offline-fleet.md",
}
# the pages make test walks: their commands install nothing (a few seconds each)
QUICK = [p for p in PAGES if p not in INSTALLING and p != README and tour.commands(p.read_text())]


def _name(path: Path) -> str:
    return str(path.relative_to(tour.REPO))


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> list[tour.Block]:
    # the README's /tmp/tour is the reader's: the commands run in a private folder of the same
    # length
    text = README.read_text()
    with tour.private_roots(tour.roots(text)) as paths:
        return tour.run(text, tmp_path_factory.mktemp("tour"), paths=paths)


@pytest.mark.slow
def test_every_readme_command_runs_and_prints_what_the_readme_shows(
    readme_run: list[tour.Block],
) -> None:
    steps = [s for b in readme_run for s in b.steps]
    assert len(steps) >= 8, [s.command for s in steps]
    # envbuild stays at hand in the venv it made: the tour activates it and runs envbuild there
    assert any(tour._SOURCE.match(s.command) for s in steps)
    problems = tour.differences(readme_run)
    assert not problems, (
        "\n\n".join(problems) + "\n\n(run `make docs-snippets` when the change is intended)"
    )


@pytest.mark.slow
def test_an_output_edited_by_hand_is_caught(readme_run: list[tour.Block]) -> None:
    step = next(s for b in readme_run for s in b.steps if len(s.shown) > 2)
    kept = list(step.shown)
    try:
        step.shown[1] = step.shown[1] + " (edited)"
        assert tour.differences(readme_run), "a hand-edited line passed"
    finally:
        step.shown[:] = kept


def _page(path: Path, tmp_path: Path) -> None:
    text = path.read_text()
    with tour.private_roots(tour.roots(text)) as paths:
        found = tour.run(text, tmp_path, overrides=tour.overrides(path), paths=paths)
    assert any(b.steps for b in found), f"{path}: no `$ ` block"
    problems = tour.differences(found)
    assert not problems, (
        "\n\n".join(problems) + "\n\n(run `make docs-snippets` when the change is intended)"
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", QUICK, ids=_name)
def test_a_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    _page(page, tmp_path)


@pytest.mark.thorough
@pytest.mark.pip_sources
@pytest.mark.parametrize("page", sorted(INSTALLING), ids=_name)
def test_a_page_that_installs_runs_as_written(page: Path, tmp_path: Path) -> None:
    # the folders the page names are the reader's: its commands run in private ones of the same
    # length
    _page(page, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_shell_block_is_run_or_says_where_it_runs(page: Path) -> None:
    """A shell block either runs here (``$ `` commands, checked above) or names, as its title,
    where it runs instead (a GPU host, a cluster, Docker), which the docs site shows above it."""
    text = page.read_text()
    assert tour.unmarked(text) == [], f"{_name(page)}: shell blocks that neither run nor say where"
    assert all(title.strip() for title in tour.not_run(text))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_sample_block_is_one_a_run_can_print(page: Path) -> None:
    """What make test checks of the pages it does not walk, and of every page without running it:
    nothing in a sample that only the docs machine prints (its pip warnings, a make's directory
    lines, which source answered there), no /tmp folder but the ones its commands name (a run maps
    those to private ones), and an expected exit status only as ``# exit N``."""
    text = page.read_text()
    named = {str(r) for r in tour.roots(text)}
    for block in tour.blocks(text):
        for step in block.steps:
            assert not [x for x in step.shown if tour.machine_only(x)], (
                f"{_name(page)}: $ {step.command}: a line only the docs machine prints"
            )
            stray = {m.group(0) for x in step.shown for m in tour._ROOT.finditer(x)} - named
            assert not stray, f"{_name(page)}: $ {step.command}: {sorted(stray)}"
            assert "exit" not in step.command.partition("#")[2] or tour._EXIT.search(step.command)


def test_every_page_is_walked_and_make_docs_snippets_writes_it() -> None:
    walked = {README, *QUICK, *INSTALLING}
    with_commands = {p for p in PAGES if tour.commands(p.read_text())}
    assert sorted(_name(p) for p in with_commands - walked) == [], "a page no test walks"
    makefile = (tour.REPO / "Makefile").read_text().splitlines()
    recipe = next(line for line in makefile if "tour.py --write" in line)
    assert recipe.endswith("$(DOCS_PAGES)"), recipe
    words = next(line for line in makefile if line.startswith("DOCS_PAGES :=")).split()[2:]
    written = set()
    for word in " ".join(words).replace("$(wildcard ", "").replace(")", "").split():
        written |= set(tour.REPO.glob(word))
    assert sorted(_name(p) for p in walked - written) == [], (
        "a page the tests check that make docs-snippets does not write"
    )
    # make docs-snippets works in private folders, never in (or removing) the pages' /tmp ones
    assert "rm -rf /tmp" not in (tour.REPO / "Makefile").read_text()
