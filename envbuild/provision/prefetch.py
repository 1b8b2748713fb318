"""Prefetch: warm the installer's cache for step k+1 while step k installs.

Steps run strictly in order (each one is guarded before the next starts), but the *downloads*
of a later step do not depend on an earlier one when the later step names exact artifacts: a
locked step (hash-pinned, every dependency listed) or the ``name==version`` pins of any step.
Those can be fetched while the current step installs, into the same cache the real install
reads, so the real install finds them there:

- uv: ``uv pip install --no-deps --target <scratch> <pins>`` with the step's own sources. uv has
  no download-only mode (``--dry-run`` resolves but fetches no wheels; ``uv pip download`` does
  not exist, astral-sh/uv#3163), and its cache is keyed by the artifact's URL: installing the
  pins into a throw-away target downloads *and unpacks* each wheel into the cache, which is the
  expensive part of the real install; the real step then only hard-links from the cache. The
  scratch target is on the data root (same filesystem), so it costs links, not copies.
- pip: ``pip download --no-deps -d <scratch> <pins>`` through the same ``PIP_CACHE_DIR``: the
  wheel responses land in pip's HTTP cache, where the real ``pip install`` of the same URL finds
  them (for indexes that send cacheable responses, as PyPI and the PyTorch index do).

Nothing changes what a step installs: the step's arguments (and so its digest in the
manifest) are untouched, the scratch target is deleted, and a failed or cancelled prefetch only
means the real step downloads the file itself (and reports any error). Because the caches live
on the data root, nothing is downloaded twice across steps or across re-runs either way.

Whether prefetching pays depends on where the time goes: with a remote index it hides a later
step's download behind the current install; from a local wheelhouse it only moves unpacking
earlier, onto the same cores (measured in bench/README.md: no gain there). So ``provision
--prefetch auto`` (the default) prefetches only when a step that still has to run fetches from a
remote index (an http(s) source that is not this host); ``yes`` and ``no`` force it.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement

from envbuild.installer import Installer
from envbuild.plan import PlannedStep
from envbuild.run import run

__all__ = ["PrefetchJob", "Prefetcher", "exact_pins", "prefetch_argv", "remote_sources", "wanted"]

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")

# Options that say where packages come from; copied from the step so the prefetch fetches the
# very URLs the real install will (the caches are keyed by URL).
_SOURCE_FLAGS_WITH_VALUE = (
    "--index-url",
    "--extra-index-url",
    "--find-links",
    "--index-strategy",
    "--prerelease",
)
_SOURCE_FLAGS = ("--no-index", "--pre")
_EXACT = re.compile(r"^===?[^*,<>!~=]+$")
# a locked line naming one wheel by URL: ``name @ https://host/.../x-1.0-py3-none-any.whl --hash=``
_WHEEL_LINE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\s*@\s*(https?://\S+?\.whl)(?:#\S*)?(?:\s|$)")


def remote_sources(planned: PlannedStep) -> list[str]:
    """The step's package sources that are on another host (http(s), not localhost): its index
    options, and the direct wheel URLs of a locked file (``provision --lock``'s stages name each
    file by URL under ``--no-index``)."""
    candidates = [*_source_args(planned.args), *(url for url, _ in _locked_wheels(planned))]
    return [
        v
        for v in candidates
        if v.startswith(("http://", "https://"))
        and (urlsplit(v).hostname or "") not in _LOCAL_HOSTS
    ]


def _names_by_reference(planned: PlannedStep) -> bool:
    """Whether the step's locked file names anything by URL or path (``name @ ...``, ``-e ...``)."""
    try:
        text = planned.locked_file.read_text(encoding="utf-8") if planned.locked_file else ""
    except OSError:
        return False
    return any(" @ " in ln or ln.startswith(("-e ", "--editable")) for ln in text.splitlines())


def _locked_wheels(planned: PlannedStep) -> list[tuple[str, str]]:
    """(URL, line) of each ``name @ URL-of-a-wheel`` line of the step's locked file."""
    if planned.locked_file is None:
        return []
    try:
        text = planned.locked_file.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        m = _WHEEL_LINE.match(line)
        if m:
            out.append((m.group(1), line))
    return out


def wanted(option: str, steps: Sequence[PlannedStep]) -> bool:
    """``--prefetch``: ``yes``/``no``; ``auto``: when a step still to run (not the first) reads a
    remote index."""
    if option in ("yes", "no"):
        return option == "yes"
    return any(remote_sources(s) for s in steps[1:])


def exact_pins(planned: PlannedStep) -> list[str]:
    """The requirements of ``planned`` that name one exact artifact version (``name==1.2.3``).

    A locked step contributes its whole file (every line is an exact, hash-pinned pin); an
    unlocked one only its top-level ``==`` pins (its dependencies are resolved by the real step).
    """
    if planned.locked_file is not None:
        return []  # passed whole as ``-r`` (see prefetch_argv); hashes and all
    out: list[str] = []
    for raw in planned.requirements:
        try:
            req = Requirement(raw)
        except InvalidRequirement:
            continue
        if req.url or req.extras:
            continue  # direct URLs and extras: leave to the real step
        specs = list(req.specifier)
        if len(specs) == 1 and _EXACT.match(str(specs[0])):
            out.append(str(req))
    return out


def _source_args(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in _SOURCE_FLAGS_WITH_VALUE and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 2
            continue
        if a in _SOURCE_FLAGS:
            out.append(a)
        i += 1
    return out


def prefetch_argv(
    planned: PlannedStep, *, installer: Installer, python: Path, scratch: Path
) -> list[str] | None:
    """The command that warms the cache for ``planned``, or None when it names nothing exact."""
    sources = _source_args(planned.args)
    wheels = _locked_wheels(planned)
    if wheels or _names_by_reference(planned):
        # a lock's stage: its wheel URLs only, hashes and all (a local project, an editable, an
        # sdist or a git pin is the real step's to build; the prefetch downloads, builds nothing)
        if not wheels:
            return None
        listed = scratch.parent / f"{scratch.name}.txt"
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.write_text("".join(line + "\n" for _, line in wheels), encoding="utf-8")
        reqs = ["-r", str(listed)]
    elif planned.locked_file is not None:
        reqs = ["-r", str(planned.locked_file)]
    else:
        pins = exact_pins(planned)
        if not pins:
            return None
        reqs = pins
    return installer.download_argv(
        planned, python=python, scratch=scratch, sources=sources, requirements=reqs
    )


@dataclass
class PrefetchJob:
    step: str
    argv: list[str]
    scratch: Path
    log_file: Path
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    returncode: int | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Prefetcher:
    """Runs at most one background prefetch per step; ``wait(step)`` before that step installs.

    Each job is ``run.run`` on a thread of its own, with a ``cancel`` event that ``close`` sets:
    the runner stops the job's process group, as it does on a timeout.
    """

    def __init__(
        self,
        *,
        installer: Installer,
        python: Path,
        scratch_root: Path,
        logs: Path,
        env: Mapping[str, str],
    ) -> None:
        self.installer = installer
        self.python = python
        self.scratch_root = scratch_root
        self.logs = logs
        # the scratch copy is thrown away
        self.env = {k: v for k, v in env.items() if k != "UV_COMPILE_BYTECODE"}
        self.jobs: dict[str, PrefetchJob] = {}
        self._cancel = threading.Event()

    def start(self, planned: PlannedStep) -> PrefetchJob | None:
        """Begin warming the cache for ``planned`` in the background (no-op if nothing is exact)."""
        if planned.name in self.jobs or self._cancel.is_set():
            return self.jobs.get(planned.name)
        scratch = self.scratch_root / f"{planned.number:02d}-{planned.name}"
        argv = prefetch_argv(planned, installer=self.installer, python=self.python, scratch=scratch)
        if argv is None:
            return None
        job = PrefetchJob(
            step=planned.name,
            argv=argv,
            scratch=scratch,
            log_file=self.logs / f"{planned.number:02d}-{planned.name}.prefetch.log",
        )
        env = dict(self.env)
        env.update(planned.env)
        self.jobs[planned.name] = job
        threading.Thread(
            target=self._run, args=(job, env), name=f"prefetch-{planned.name}", daemon=True
        ).start()
        return job

    def _run(self, job: PrefetchJob, env: dict[str, str]) -> None:
        try:
            shutil.rmtree(job.scratch, ignore_errors=True)
            job.scratch.parent.mkdir(parents=True, exist_ok=True)
            if not self._cancel.is_set():
                job.returncode = run(
                    job.argv, log_file=job.log_file, env=env, cancel=self._cancel
                ).returncode
        except OSError:
            job.returncode = -1
        finally:
            job.seconds = time.monotonic() - job.started
            shutil.rmtree(job.scratch, ignore_errors=True)
            job.scratch.parent.joinpath(f"{job.scratch.name}.txt").unlink(missing_ok=True)
            job.done.set()

    def wait(self, step: str, timeout: float | None = None) -> PrefetchJob | None:
        """Block until the prefetch of ``step`` has finished (so the real install never races
        it)."""
        job = self.jobs.get(step)
        if job is not None:
            job.done.wait(timeout)
        return job

    def close(self) -> None:
        """Stop every running prefetch (its process group) and forget the scratch folders."""
        self._cancel.set()
        for job in list(self.jobs.values()):
            job.done.wait(10)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
