"""A lock's step file: hash-pinned requirement lines, parsed once, by one parser.

A step file is what ``envbuild lock`` writes for one step (pip-compile's format without index
options)::

    torch==2.13.0+cpu \\
        --hash=sha256:<64 hex> \\
        --hash=sha256:<64 hex>
    causal-conv1d @ git+https://github.com/org/repo@<40 hex>

``parse_requirements_text`` reads it (requirements with ``packaging.requirements``) and raises
``LockError`` naming the file and line of anything that does not belong there. The wheelhouse
mirror reads hand-made pip-compile output with the same parser (``options=True``), which also
collects the ``--index-url``/``--extra-index-url``/``--find-links`` lines such files may carry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild.errors import LockError
from envbuild.index.net import redact

_HASH = re.compile(r"^--hash[= ](?P<algo>[a-z0-9]+):(?P<value>\S*)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SHA40 = re.compile(r"^[0-9a-f]{40}$")
_VCS = ("git", "hg", "svn", "bzr")
_INDEX_OPTS = {
    "-i": "index",
    "--index-url": "index",
    "--extra-index-url": "index",
    "-f": "links",
    "--find-links": "links",
}
REGENERATE = "Re-run `envbuild lock` to regenerate the file."
# the notes a line of a lock stage's file carries (``spec.stagefile``): ``# index: URL``,
# ``# git: SOURCE``
STAGE_NOTES = ("index", "git")

__all__ = [
    "STAGE_NOTES",
    "LineProblem",
    "LockedReq",
    "RequirementsFile",
    "format_requirement",
    "is_commit",
    "line_problems",
    "logical_lines",
    "parse_requirements_text",
    "read_step_file",
]


@dataclass(frozen=True)
class LockedReq:
    """One requirement line of a step file."""

    name: str  # canonical
    raw: str  # the requirement as written (without options)
    line: int  # 1-based line where it starts
    version: str | None  # from an exact ``==`` pin, else None
    hashes: tuple[str, ...]  # sha256 hex values
    url: str | None = None  # direct reference (``name @ URL``)
    bad_hashes: tuple[str, ...] = ()  # --hash values that are not valid sha256
    notes: tuple[str, ...] = ()  # the comments after the line (a lock stage's ``# index: URL``)

    def rendered(self) -> str:
        """The line as a step file holds it: the requirement, its hashes, then its notes."""
        text = self.raw + "".join(f" \\\n    --hash=sha256:{h}" for h in self.hashes)
        note = next((n for n in self.notes if n.partition(":")[0].strip() in STAGE_NOTES), None)
        return text + (f"  # {note}" if note else "")

    @property
    def vcs_commit(self) -> str | None:
        if self.url and self.url.startswith("git+") and "@" in self.url.rsplit("/", 1)[-1]:
            ref = self.url.rsplit("@", 1)[1].split("#", 1)[0]
            return ref if _SHA40.match(ref) else None
        return None

    @property
    def is_vcs(self) -> bool:
        return bool(self.url and self.url.split("+", 1)[0] in _VCS)


@dataclass
class RequirementsFile:
    """A parsed requirement file: its requirements and (``options=True``) the sources it names."""

    reqs: list[LockedReq] = field(default_factory=list)
    index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)


def is_commit(ref: str) -> bool:
    """Whether ``ref`` is a full git commit id (40 hex digits)."""
    return bool(_SHA40.match(ref))


def logical_lines(text: str) -> Iterator[tuple[int, str, list[str]]]:
    """(first line number, the line without comments, the comment lines that follow it) of a
    requirements file: ``\\`` continuations joined, a ``#`` after whitespace starts a comment (pip's
    rule). The step-file reader and the gate's requirements reader (``# via`` annotations) share it.
    """
    buf, start = "", 0
    out: list[tuple[int, str, list[str]]] = []
    for i, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#"):
            if out:
                out[-1][2].append(stripped[1:].strip())
            continue
        line = re.split(r"\s+#", raw, maxsplit=1)[0].rstrip()
        if not buf:
            start = i
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append(
                (
                    start,
                    buf.strip(),
                    [re.split(r"\s+#", raw, maxsplit=1)[1].strip()] if " #" in raw else [],
                )
            )
        buf = ""
    if buf.strip():
        out.append((start, buf.strip(), []))
    yield from out


def parse_requirements(text: str, where: str, *, options: bool = False) -> RequirementsFile:
    """Parse requirement lines; ``options`` accepts index/find-links option lines and records
    them."""
    out = RequirementsFile()
    for lineno, line, comments in logical_lines(text):
        tokens = line.split()
        if options and tokens[0].split("=", 1)[0] in _INDEX_OPTS:
            opt, _, value = tokens[0].partition("=")
            value = value or (tokens[1] if len(tokens) > 1 else "")
            into = out.index_urls if _INDEX_OPTS[opt] == "index" else out.find_links
            value = value.rstrip("/") if into is out.index_urls else value
            if value and value not in into:
                into.append(value)
            continue
        # --trusted-host, --pre, ...: not the mirror's business
        if options and tokens[0].startswith("-"):
            continue
        # the requirement is everything before the first option token
        req_tokens: list[str] = []
        opts: list[str] = []
        for t in tokens:
            (opts if t.startswith("-") or opts else req_tokens).append(t)
        if not req_tokens:
            raise LockError(
                f"{where}:{lineno}: an option line without a requirement ({redact(line)!r}); "
                "a lock file holds only `name==version --hash=sha256:...` lines",
                hint=REGENERATE,
            )
        raw = " ".join(req_tokens)
        try:
            req = Requirement(raw)
        except InvalidRequirement as exc:
            raise LockError(
                f"{where}:{lineno}: not a valid requirement {redact(raw)!r}: {redact(str(exc))}",
                hint=REGENERATE,
            ) from exc
        hashes, bad = [], []
        for opt in opts:
            m = _HASH.match(opt)
            if m is None:
                raise LockError(
                    f"{where}:{lineno}: unexpected option {redact(opt)!r} for {req.name} "
                    "(only --hash=sha256:<64 hex> belongs in a lock file)",
                    hint=REGENERATE,
                )
            value = m.group("value")
            if m.group("algo") != "sha256" or not _SHA256.match(value):
                bad.append(f"{m.group('algo')}:{value}")
            else:
                hashes.append(value)
        if options and req.url and not hashes:  # name @ URL#sha256=...: the URL carries the hash
            frag = req.url.split("#", 1)[1] if "#" in req.url else ""
            if frag.startswith("sha256=") and _SHA256.match(frag[7:]):
                hashes.append(frag[7:])
        version = None
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            version = specs[0].version
        out.reqs.append(
            LockedReq(
                canonicalize_name(req.name),
                raw,
                lineno,
                version,
                tuple(hashes),
                req.url,
                tuple(bad),
                tuple(comments),
            )
        )
    return out


def parse_requirements_text(text: str, where: str) -> list[LockedReq]:
    """Parse a step file; raises ``LockError`` naming ``where`` and the line for anything broken."""
    return parse_requirements(text, where).reqs


def read_text(path: Path, what: str = "lock file") -> str:
    """A lock file's text: a missing, unreadable or non-UTF-8 file is a ``LockError``, not a
    traceback."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LockError(
            f"{path}: the {what} is not UTF-8 text (byte {exc.start}: {exc.reason})",
            hint="It was damaged, or is not a lock file. " + REGENERATE,
        ) from exc
    except OSError as exc:
        raise LockError(
            f"{path}: cannot read the {what}: {exc.strerror or exc}", hint=REGENERATE
        ) from exc


def read_step_file(path: Path, shown: str | None = None) -> list[LockedReq]:
    """Read and parse one step file (``shown`` names it in errors; default: its path)."""
    return parse_requirements_text(read_text(path, "step file"), shown or str(path))


@dataclass(frozen=True)
class LineProblem:
    req: LockedReq
    rule: str  # check-lock's rule: broken-lock, not-pinned, missing-hash
    reason: str


def line_problems(reqs: Iterable[LockedReq]) -> list[LineProblem]:
    """What makes lines of a step file unfit for ``pip install --require-hashes``: the one rule that
    ``check-lock`` reports as findings and ``provision`` refuses (exit 8) before installing."""
    out = []
    for r in reqs:
        if r.bad_hashes:
            out.append(
                LineProblem(
                    r,
                    "broken-lock",
                    f"malformed hash {r.bad_hashes[0]!r} (want --hash=sha256:<64 hex>)",
                )
            )
        if r.is_vcs:
            if r.vcs_commit is None:
                out.append(
                    LineProblem(r, "not-pinned", "git requirement not pinned to a commit SHA")
                )
            continue
        # a direct URL is pinned by its hash (name @ URL --hash=...)
        if r.version is None and not r.url:
            out.append(LineProblem(r, "not-pinned", f"{r.raw!r} is not pinned with =="))
        if not r.hashes and not r.bad_hashes:
            out.append(
                LineProblem(
                    r,
                    "missing-hash",
                    "no --hash (pip --require-hashes refuses it; every locked artifact needs one)",
                )
            )
    return out


def format_requirement(
    name: str, version: str | None, hashes: Iterable[str], url: str | None = None
) -> str:
    head = f"{name} @ {url}" if url else f"{name}=={version}"
    hs = sorted(set(hashes))
    if not hs:
        return head + "\n"
    return head + " \\\n" + " \\\n".join(f"    --hash=sha256:{h}" for h in hs) + "\n"
