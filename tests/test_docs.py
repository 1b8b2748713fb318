"""The documentation, as a site and as files: built with ``mkdocs build --strict`` (a page missing
from the nav, a broken link or anchor, a missing snippet file fail it); its reference pages,
generated from the code by ``docs/hooks/reference.py`` and committed, are current and cover every
command, option, spec key, exit code and rule; every relative link in ``docs/**/*.md`` and
``README.md`` resolves as a file (as on a code host), its anchor too."""

from __future__ import annotations

import argparse
import html
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason=(
        "mkdocs and mkdocs-material are not installed (pip install -e '.[docs]'; make test installs"
        " them)"
    ),
)


# What the docs build may not reach: the test suite's files and the test extra's libraries. The docs
# extra alone builds the site (`pip install -e '.[docs]'`, then `mkdocs build --strict`).
DOCS_ONLY = """\
import sys

_TESTS = {tests!r}
_TEST_EXTRA = {{"pytest", "_pytest", "xdist", "pytest_timeout", "hypothesis"}}


def _refuse(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith(_TESTS):
        raise PermissionError("the docs build read the test suite: " + args[0])
    if event == "import" and args[0].partition(".")[0] in _TEST_EXTRA:
        raise ImportError("the docs build imported the test extra: " + args[0])


sys.addaudithook(_refuse)
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly by a Python that can read neither ``tests/`` nor the test extra
    (a ``sitecustomize`` audit hook refuses both), as a docs-only install would build it."""
    out = tmp_path_factory.mktemp("site")
    guard = tmp_path_factory.mktemp("docs-only")
    (guard / "sitecustomize.py").write_text(
        DOCS_ONLY.format(tests=str(ROOT / "tests") + os.sep), encoding="utf-8"
    )
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(guard)}
    start = time.monotonic()
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stdout}{res.stderr}"
    print(f"site built in {time.monotonic() - start:.1f} s")
    return out


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "envbuild_docs_reference_hook", ROOT / "docs" / "hooks" / "reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text(encoding="utf-8")


def _sections(page: str) -> dict[str, str]:
    """{heading id or the id of an anchor in the heading: the page's HTML from that heading to the
    next h2/h3/h4}."""
    parts = re.split(r'(?=<h[234] id=")', page)
    out = {}
    for part in parts:
        if m := re.match(r'<h[234] id="([^"]+)"[^>]*>(.*?)</h[234]>', part, re.S):
            out[m.group(1)] = part
            out.update({anchor: part for anchor in re.findall(r'<a id="([^"]+)"', m.group(2))})
    return out


def _plain(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def _subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append(((*path, name), sub))
                out += _subcommands(sub, (*path, name))
    return out


def test_every_page_of_the_nav_is_built(site: Path) -> None:
    nav = re.findall(
        r":\s*([\w/.-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M
    )
    assert len(nav) >= 20
    for page in nav:
        built = site / page.removesuffix(".md").removesuffix("index") / "index.html"
        assert built.is_file(), page
    assert not (site / "hooks").exists()  # the hook is not published


def test_every_command_and_option_is_in_the_cli_reference(site: Path) -> None:
    from envbuild.cli import build_parser

    sections = _sections(_page(site, "reference/cli"))
    commands = _subcommands(build_parser())
    assert len(commands) >= 15
    for path, parser in commands:
        anchor = "-".join(path)
        assert anchor in sections, f"envbuild {' '.join(path)} has no section in the CLI reference"
        rows = re.findall(r"<tr>.*?</tr>", sections[anchor], re.S)
        for action in parser._actions:
            if (
                isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
                or action.help == argparse.SUPPRESS
            ):
                continue
            name = action.option_strings[-1].lstrip("-") if action.option_strings else action.dest
            row = next((r for r in rows if f'id="{anchor}-{name}"' in r), None)
            what = f"envbuild {' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
            assert row is not None, f"{what} has no row in the CLI reference"
            text = " ".join(_plain(row).split())
            for option in action.option_strings:
                assert re.search(rf"(^|[\s,]){re.escape(option)}([\s,]|$)", text), what
            if action.help:
                words = " ".join(action.help.split()).split("%")[0].split("`")[0][:25]
                assert words in text, f"{what}: its help is not in its row"


def test_every_spec_key_is_in_the_spec_reference(site: Path, hook: ModuleType) -> None:
    import envbuild.spec.stack as spec

    page = _page(site, "reference/stack-spec")
    # every key list the loader checks a table against is one the hook documents
    key_lists = {name for name in vars(spec) if re.fullmatch(r"_[A-Z]+_KEYS", name)}
    assert key_lists == {keys for _, keys, _, _ in hook.SPEC_SECTIONS}, (
        "a key list of envbuild/spec/stack.py is missing from SPEC_SECTIONS in"
        " docs/hooks/reference.py"
    )
    paths = hook.spec_keys()
    assert {
        "schema",
        "python",
        "abi.version",
        "abi.overlap.winner",
        "step.no_deps",
        "layout.root",
    } <= set(paths)
    for name in key_lists:
        for key in getattr(spec, name):
            assert any(p == key or p.endswith(f".{key}") for p in paths), (name, key)
    for path in paths:
        assert f'id="key-{path}"' in page, f"stack spec key {path} is not in the spec reference"
    for key in ("from_env", "required"):  # an [env] value from the environment
        assert f'id="key-env.{key}"' in page


def test_every_exit_code_is_in_the_reference(site: Path) -> None:
    from envbuild.errors import EXIT_CODE_DOCS, ExitCode

    page = _page(site, "reference/exit-codes")
    for code in ExitCode:
        assert f'id="exit-{int(code)}"' in page
        assert html.escape(EXIT_CODE_DOCS[code], quote=False)[:40] in page


def test_every_check_lock_rule_is_in_the_reference(site: Path, hook: ModuleType) -> None:
    from envbuild.gate.findings import RULES

    page = _page(site, "reference/check-lock")
    for rule in RULES:
        assert f'id="gate-{rule}"' in page, rule
    own = hook.own_lock_rules()
    assert {"stale-lock", "missing-hash", "dry-run-protected", "torch-downgrade"} <= set(own)
    for rule in own:
        assert f'id="own-{rule}"' in page, rule
    # the JSON schema block from envbuild/gate/output.py
    assert '"schema": 1' in html.unescape(page)


def test_the_readme_is_short_and_its_links_resolve() -> None:
    """README.md stays a five-minute read (<= 12 KB) and every link in it points at a file that
    exists."""
    import re

    readme = Path(__file__).resolve().parents[1] / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) <= 12 * 1024, len(text.encode("utf-8"))
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert links, "the README links into the documentation"
    missing = [
        link
        for link in links
        if not link.startswith("http") and not (readme.parent / link).exists()
    ]
    assert not missing, missing
    assert "make demo" in text and "make test" in text  # the two set-up commands


def test_the_generated_reference_pages_are_current() -> None:
    """The committed pages are what the code makes now (new flags, spec keys, exit codes, rules, and
    the files the include blocks copy); the failure says the one command that rewrites them."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "hooks" / "reference.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, (
        f"{out.stderr.strip()}\n(the same: {sys.executable} docs/hooks/reference.py --write)"
    )


_FENCE = re.compile(r"^(```+|~~~+).*?^\1\s*$", re.M | re.S)
_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*(\S+)",
    re.M,
)


def _links(text: str) -> list[str]:
    """The targets of the Markdown links and images in ``text``, leaving out code blocks and
    spans."""
    text = _FENCE.sub("", text)
    text = re.sub(r"(`+).+?\1", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return [m.group(1) or m.group(2) for m in _LINK.finditer(text)]


def _anchors(page: Path) -> set[str]:
    """The fragments a link may name in ``page``: HTML ids, and each heading's slug as a code host
    (GitHub) and MkDocs' toc write it, when the heading carries no anchor of its own."""
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found = set(re.findall(r'\bid="([^"]+)"', text))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        plain = re.sub(r"<[^>]+>|`", "", heading).strip().lower()
        found.add(re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", plain)))  # GitHub
        # MkDocs (toc.slugify)
        found.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", plain)).strip("-"))
    return found


def test_every_relative_link_resolves_as_a_file() -> None:
    """What a reader on a code host follows: every relative link in docs/**/*.md and README.md names
    a file that exists (and, with #fragment, an anchor in it); a docs page links only inside docs/,
    which is all the site has."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    assert len(pages) >= 25
    broken = []
    checked = 0
    for page in pages:
        for target in _links(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)}: {target}"
            checked += 1
            if not file.exists():
                broken.append(f"{where} (no such file)")
            elif page.is_relative_to(ROOT / "docs") and not file.is_relative_to(ROOT / "docs"):
                broken.append(
                    f"{where} (outside docs/: the site has no such page; name the path in `code`)"
                )
            elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
                broken.append(f"{where} (no anchor #{fragment} in {file.relative_to(ROOT)})")
    assert checked >= 60, checked
    assert not broken, "links that do not resolve as files:\n" + "\n".join(broken)
