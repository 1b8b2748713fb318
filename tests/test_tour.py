"""The README's tour and the tutorials run as written on this machine, and what they show is what
they print.

``make docs-snippets`` rewrites the outputs from a real run (``tests/support/tour.py``); these tests
run every command again and fail when one fails or when a shown output no longer matches
(numbers, durations, dates and hashes aside).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support import tour

pytestmark = pytest.mark.slow

README = tour.REPO / "README.md"
TOUR_ROOT = Path("/tmp/tour")  # the folder the README's commands name
PAGES = {  # pages whose `$ ` blocks run in make test, besides the README
    "ci-gate": tour.REPO / "docs" / "tutorials" / "ci-gate.md",
}
# Pages that install from pip's sources (PyPI, or the mirror pip is configured with): make test
# runs them (pip_sources), make check does not. your-stack provisions onto /tmp/trainer, the data
# root the page names, offline-fleet mirrors the cpu lock into /tmp/fleet and provisions two
# roots there from it; install builds the bootstrap archive (make bootstrap) and installs it
# into /tmp/envbuild-host.
SOURCE_PAGES = {
    "install": tour.REPO / "docs" / "how-to" / "install.md",  # pip install . and make bootstrap
    "your-stack": tour.REPO / "docs" / "tutorials" / "your-stack.md",  # lock, provision, smoke
    # mirror, two offline nodes
    "offline-fleet": tour.REPO / "docs" / "tutorials" / "offline-fleet.md",
}
PAGE_ROOTS = {  # the folders outside the scratch that a page's commands name
    "install": [Path("/tmp/envbuild-tool"), Path("/tmp/envbuild-host")],
    "your-stack": [Path("/tmp/trainer")],
    "offline-fleet": [Path("/tmp/fleet"), Path("/tmp/build-venv")],
    "ci-gate": [Path("/tmp/envbuild-tool")],
}


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> list[tour.Block]:
    # the README's /tmp/tour is the reader's: the commands run in a private folder of the same
    # length
    with tour.private_roots([TOUR_ROOT]) as paths:
        return tour.run(README.read_text(), tmp_path_factory.mktemp("tour"), paths=paths)


def test_every_readme_command_runs_and_prints_what_the_readme_shows(
    readme_run: list[tour.Block],
) -> None:
    steps = [s for b in readme_run for s in b.steps]
    assert len(steps) >= 8, [s.command for s in steps]
    problems = tour.differences(readme_run)
    assert not problems, (
        "\n\n".join(problems) + "\n\n(run `make docs-snippets` when the change is intended)"
    )


def test_an_output_edited_by_hand_is_caught(readme_run: list[tour.Block]) -> None:
    step = next(s for b in readme_run for s in b.steps if len(s.shown) > 2)
    kept = list(step.shown)
    try:
        step.shown[1] = step.shown[1] + " (edited)"
        assert tour.differences(readme_run), "a hand-edited line passed"
    finally:
        step.shown[:] = kept


def _page(path: Path, tmp_path: Path, roots: list[Path] | None = None) -> None:
    with tour.private_roots(roots or []) as paths:
        found = tour.run(path.read_text(), tmp_path, overrides=tour.overrides(path), paths=paths)
    assert any(b.steps for b in found), f"{path}: no `$ ` block"
    problems = tour.differences(found)
    assert not problems, (
        "\n\n".join(problems) + "\n\n(run `make docs-snippets` when the change is intended)"
    )


@pytest.mark.parametrize("page", sorted(PAGES))
def test_a_tutorial_runs_as_written(page: str, tmp_path: Path) -> None:
    _page(PAGES[page], tmp_path, PAGE_ROOTS.get(page, []))


# the README walk (make test) provisions, smokes and runs the step as these pages do
@pytest.mark.thorough
@pytest.mark.pip_sources
@pytest.mark.parametrize("page", sorted(SOURCE_PAGES))
def test_a_page_that_installs_runs_as_written(page: str, tmp_path: Path) -> None:
    # the folders the page names are the reader's: its commands run in private ones of the same
    # length
    _page(SOURCE_PAGES[page], tmp_path, PAGE_ROOTS.get(page, []))


def test_every_tutorial_runs_and_make_docs_snippets_writes_it() -> None:
    tutorials = sorted((tour.REPO / "docs" / "tutorials").glob("*.md"))
    run = set(PAGES.values()) | set(SOURCE_PAGES.values())
    assert [p.name for p in tutorials if p not in run] == [], "a tutorial that no test runs"
    recipe = next(
        line
        for line in (tour.REPO / "Makefile").read_text().splitlines()
        if "tour.py --write" in line
    ).split()
    written = {tour.REPO / word for word in recipe if word.endswith(".md")}
    assert sorted(str(p.relative_to(tour.REPO)) for p in (run | {README}) - written) == [], (
        "a page the tests check that make docs-snippets does not write"
    )
