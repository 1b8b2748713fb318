"""Prefetch: warm the installer's cache for step k+1 while step k installs.

Steps run strictly in order (each one is guarded before the next starts), but the *downloads*
of a later step do not depend on an earlier one when the later step names exact artifacts: a
locked step (hash-pinned, every dependency listed) or the ``name==version`` pins of any step.
Those can be fetched while the current step installs, into the same cache the real install
reads, so the real install finds them there:

- uv: ``uv pip install --no-deps --prefix <scratch> <pins>`` with the step's own sources. uv has
  no download-only mode (``--dry-run`` resolves but fetches no wheels; ``uv pip download`` does
  not exist, astral-sh/uv#3163), and its cache is keyed by the artifact's URL: installing the
  pins into a throw-away prefix downloads *and unpacks* each wheel into the cache, which is the
  expensive part of the real install; the real step then only hard-links from the cache. The
  scratch prefix is on the data root (same filesystem), so it costs links, not copies.
- pip: ``pip download --no-deps -d <scratch> <pins>`` through the same ``PIP_CACHE_DIR``: the
  wheel responses land in pip's HTTP cache, where the real ``pip install`` of the same URL finds
  them (for indexes that send cacheable responses, as PyPI and the PyTorch index do).

A lock's stage that builds in isolation (an sdist, the project, a workspace member or a git pin,
as ``uv sync`` builds them) has those builds prefetched too, with uv: the scratch install builds
each one into uv's cache (keyed by the sdist's URL and hash, the folder's cache keys or the
commit), where the real step finds the wheel and only links it, so the builds run beside torch's
downloads, as ``uv sync`` runs them. They are built as the real step builds them: its sources, and
the build constraints it will have: its own and the ABI baseline's, which, when the baseline step
has not run yet, are the baseline step's exact pins (``Prefetcher(baseline_pins=...)``). Should
the baseline frozen after that step pin anything else, the real step refreshes those packages
(``--refresh-package``) and builds them again. Builds against torch (``--no-build-isolation``)
need the installed torch and are always the real step's.

A prefetch begins once the running step has resolved (the installer's ``Resolved N packages``
line, or ``GATE_SECONDS`` at most), not beside its resolution: a lock's torch stage resolves its
URL lines by asking the host of each for the wheel's metadata, and that burst of new connections
(one name lookup each) is the step's only barrier. Started at the same moment, two prefetches
doubled and tripled the burst, and a resolver that drops queries under load (seen here: 25 of 80
concurrent lookups answered after glibc's 5 s retry) held torch's resolution for 5 s, every run
(``Resolved 26 packages in 5.14s``, against 0.15 s alone). After it, the step's downloads reuse
its connections, and a late lookup of a prefetch delays only the prefetch.

Nothing changes what a step installs: the step's arguments (and so its digest in the
manifest) are untouched, the scratch target is deleted, and a failed or cancelled prefetch only
means the real step downloads the file itself (and reports any error). Because the caches live
on the data root, nothing is downloaded twice across steps or across re-runs either way.

``provision --lock`` with uv uses the same scratch installs differently: every step is prepared
at once before the first one installs (``provision.prepare``), so a download or build that fails
stops the run before the venv is touched, and each prepared prefix is kept (``Prefetcher(keep=
True)``): laid out as a venv is, it is what the step moves into the venv (``provision.movein``).

Whether prefetching pays depends on where the time goes: with a remote index it hides a later
step's download behind the current install; from a local wheelhouse it only moves unpacking
earlier, onto the same cores (measured in bench/README.md: no gain there). So ``provision
--prefetch auto`` (the default) prefetches only when a step that still has to run fetches from a
remote index (an http(s) source that is not this host); ``yes`` and ``no`` force it.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envbuild._io import discard, discard_leftovers
from envbuild.installer import Installer
from envbuild.installer.progress import InstallProgress
from envbuild.installer.uv import UvInstaller, rest_file
from envbuild.plan import PlannedStep, is_pylock
from envbuild.run import RunResult, open_private, run

__all__ = [
    "PrefetchJob",
    "Prefetcher",
    "build_lines",
    "exact_pins",
    "pinned_versions",
    "prefetch_argv",
    "prefix_sites",
    "remote_sources",
    "requirement_names",
    "source_args",
    "stale_builds",
    "wanted",
]

_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")
# a prefetch is work ahead of need: on a host whose cores the running step keeps busy (unzipping
# and hashing torch's gigabytes), it takes what the step leaves (``nice``, POSIX; absent, as is)
_BACKGROUND: tuple[str, ...] = (nice, "-n", "10") if (nice := shutil.which("nice")) else ()
# the longest a prefetch waits for the running step to resolve (a step that prints nothing, or a
# slow index): after it, the prefetch runs beside the resolution
GATE_SECONDS = 15.0

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
    candidates = [*source_args(planned.args), *(url for url, _ in _locked_wheels(planned))]
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
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        m = _WHEEL_LINE.match(line)
        if m:
            out.append((m.group(1), line))
    return out


def build_lines(planned: PlannedStep) -> list[str]:
    """The lines of a lock's stage that uv builds in isolation: ``name @`` an sdist, a folder or a
    git URL, and editables (``-e``; uv keeps their builds too). Empty for a stage of builds against
    torch (``--no-build-isolation``: they need the installed torch) or without a locked file."""
    if planned.locked_file is None or "--no-build-isolation" in planned.args:
        return []
    try:
        text = planned.locked_file.read_text(encoding="utf-8")
    except OSError:
        return []
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(("-e ", "--editable ")):
            out.append(line)
            continue
        if " @ " not in line or line.startswith(("#", "-")) or _WHEEL_LINE.match(line):
            continue
        try:  # the line, its note (``spec.stagefile``) kept: a git pin's names the ref uv records
            req = Requirement(re.split(r"\s+#", line, maxsplit=1)[0].split(" --hash", 1)[0])
        except InvalidRequirement:
            continue
        if req.url and not req.url.split("#", 1)[0].endswith(".whl"):
            out.append(line)
    return out


def pinned_versions(lines: Sequence[str]) -> dict[str, str]:
    """{canonical name: version} of the ``name==version`` lines among ``lines`` (constraint files,
    a step's requirements); other lines are left out."""
    out: dict[str, str] = {}
    for raw in lines:
        try:
            req = Requirement(raw.split("#", 1)[0].strip())
        except InvalidRequirement:
            continue
        specs = list(req.specifier)
        if len(specs) == 1 and _EXACT.match(str(specs[0])):
            out[canonicalize_name(req.name)] = specs[0].version
    return out


def requirement_names(requirements: Sequence[str]) -> list[str]:
    """The canonical names of ``requirements`` (PEP 508 lines; others are left out)."""
    out: list[str] = []
    for raw in requirements:
        try:
            out.append(canonicalize_name(Requirement(raw).name))
        except InvalidRequirement:
            continue
    return out


def stale_builds(
    job: PrefetchJob, frozen: Sequence[str], requirements: Sequence[str]
) -> tuple[str, ...]:
    """The packages (canonical names of ``requirements``, the step's) the real step must build
    again (``--refresh-package``): all of them where ``job`` built under baseline pins other than
    ``frozen`` (the constraint lines of the baseline frozen since); none where it built nothing,
    built unconstrained, or under the same pins."""
    if not job.builds or job.baseline_pins is None:
        return ()
    if pinned_versions(frozen) == job.baseline_pins:
        return ()
    return tuple(dict.fromkeys(requirement_names(requirements)))


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


def _covers(planned: PlannedStep, *argvs: Sequence[str]) -> bool:
    """Whether ``argvs`` (the prefetch of ``planned``: one command, or its head's and the rest's)
    list every requirement line of its locked file (``-r FILE`` with those lines; nothing else
    named, no option line)."""
    if planned.locked_file is None:
        return False
    listed: list[str] = []
    for argv in argvs:
        if "-r" not in argv or argv.index("-r") + 1 >= len(argv):
            return False
        listed_file = Path(argv[argv.index("-r") + 1])
        if is_pylock(listed_file):  # uv's index files: the lines it holds
            listed_file = listed_file.with_name(f"{listed_file.name[7:-5]}.txt")
        try:
            listed += _requirement_lines(listed_file)
        except OSError:
            return False
    try:
        wanted_lines = _requirement_lines(planned.locked_file)
    except OSError:
        return False
    return bool(wanted_lines) and set(wanted_lines) <= set(listed)


def _rest_runs(argv: Sequence[str]) -> tuple[list[str], ...]:
    """The run after a prefetch of a lock stage's index files (``-r pylock.NAME.toml``): the same
    command on the stage's other lines (``NAME.rest.txt``: editables, folders, git pins), so that
    what the real step's second run fetches and builds is prepared too; () when there are none."""
    if "-r" not in argv or argv.index("-r") + 1 >= len(argv):
        return ()
    at = argv.index("-r") + 1
    listed = Path(argv[at])
    if not is_pylock(listed) or not (rest := rest_file(listed)).is_file():
        return ()
    return ([*argv[:at], str(rest), *argv[at + 1 :]],)


def _requirement_lines(path: Path) -> list[str]:
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def source_args(args: Sequence[str]) -> list[str]:
    """The options of ``args`` that say where packages come from (``_SOURCE_FLAGS*``)."""
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
    planned: PlannedStep,
    *,
    installer: Installer,
    python: Path,
    scratch: Path,
    builds: bool = False,
    keep: Callable[[str], bool] | None = None,
) -> list[str] | None:
    """The command that warms the cache for ``planned``, or None when it names nothing exact.
    ``builds``: a lock stage's isolated builds (``build_lines``) are made too (uv only). ``keep``:
    only a lock stage's lines it keeps (``Prefetcher.start``'s ``head``)."""
    sources = source_args(planned.args)
    wheels = _locked_wheels(planned)
    if wheels or _names_by_reference(planned):
        # a lock's stage: its wheel URLs, hashes and all, and with ``builds`` its isolated builds
        # (an editable and a build against torch are the real step's)
        built = build_lines(planned) if builds and isinstance(installer, UvInstaller) else []
        lines = [line for _, line in wheels] + built
        if keep is not None:
            lines = [line for line in lines if keep(line)]
        if not lines:
            return None
        listed = scratch.parent / f"{scratch.name}.txt"
        listed.parent.mkdir(parents=True, exist_ok=True)
        listed.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
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


def prefix_sites(prefix: Path) -> list[Path]:
    """The folders of a scratch prefix that hold its distributions (``*.dist-info``): one, its
    ``lib/python3.X/site-packages``, for an interpreter whose prefix scheme is a venv's; a Debian
    system Python's is ``local/lib/python3.X/dist-packages``."""
    patterns = ("lib*/python*/*-packages/*.dist-info", "local/lib*/python*/*-packages/*.dist-info")
    found = {info.parent for pattern in patterns for info in prefix.glob(pattern)}
    return sorted(found)


def _uv_cache_holds_files(env: Mapping[str, str]) -> bool:
    """Whether uv's cache (``UV_CACHE_DIR``; unset: uv's own, assumed to) holds unpacked files."""
    folder = env.get("UV_CACHE_DIR")
    if not folder:
        return True
    try:
        with os.scandir(Path(folder) / "archive-v0") as entries:
            return next(entries, None) is not None
    except OSError:
        return False


def _installed_records(prefix: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """{canonical name: (version, RECORD rows)} of the distributions installed in ``prefix``."""
    from envbuild.guard import scan

    return {
        name: (d.version, dict(d.files()))
        for site in prefix_sites(prefix)
        for name, d in scan(site).items()
    }


@dataclass
class PrefetchJob:
    step: str
    argv: list[str]
    scratch: Path
    log_file: Path
    # the isolated builds it makes (their lines) and the baseline pins they were built under
    # ({name: version}; None: the step is not constrained by the baseline)
    builds: tuple[str, ...] = ()
    baseline_pins: dict[str, str] | None = None
    covers: bool = False  # it fetches (and builds) every line of the step's locked file
    # the runs after ``argv``, into the same target: a lock stage's lines a pylock cannot hold
    then: tuple[list[str], ...] = ()
    started: float = field(default_factory=time.monotonic)
    seconds: float | None = None
    returncode: int | None = None
    result: RunResult | None = None  # the installer's run (None: it never ran)
    # with ``records``: {canonical name: (version, its RECORD rows)} of each distribution the
    # scratch install put in the target, read before the target is deleted
    records: dict[str, tuple[str, dict[str, str]]] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # the stage's head (``Prefetcher.start``): its own lines in a scratch install of their own,
    # beside this one's; the job has failed if either did
    head: PrefetchJob | None = None
    # with ``Prefetcher(keep=True)``: the scratch prefix of a job that succeeded, kept whole (or
    # where ``after`` moved it); None: deleted, or the job failed
    kept: Path | None = None


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
        baseline_pins: Path | None = None,
        unconstrained_builds: bool = False,
        background: bool = True,
        keep: bool = False,
    ) -> None:
        """``baseline_pins``: the constraints a guarded step's builds will have (the frozen
        baseline's file); None: guarded steps' builds are left to the real step, unless
        ``unconstrained_builds`` (a lock's: its builds are never held to the baseline).
        ``background``: the jobs run at ``nice`` 10, beside a running step; False where nothing
        else runs (``provision.prepare``: the run waits for them, as for uv sync's downloads), and
        then a uv job first tries ``--offline``: what uv's cache already holds is taken as it is, as
        ``uv sync`` takes the files of its lock, not revalidated file by file with their host (from
        a host that sends no cache validators, that is a second download of every file).
        ``keep``: the scratch prefix of a job that succeeded is kept (``PrefetchJob.kept``), not
        deleted: the caller moves it into the venv or discards it."""
        self.keep = keep
        self.nice = _BACKGROUND if background else ()
        # an empty cache has nothing to take offline: each job's offline attempt would only fail
        # (0.14 s of a process per job on a cold root's critical path)
        self.offline_first = (
            not background and isinstance(installer, UvInstaller) and _uv_cache_holds_files(env)
        )
        self.installer = installer
        self.baseline_pins = baseline_pins
        self.unconstrained_builds = unconstrained_builds
        self.python = python
        self.scratch_root = scratch_root
        discard_leftovers(scratch_root)  # of a process killed before it had deleted them
        self.logs = logs
        # the scratch copy is thrown away
        self.env = {k: v for k, v in env.items() if k != "UV_COMPILE_BYTECODE"}
        self.jobs: dict[str, PrefetchJob] = {}
        self._cancel = threading.Event()
        self._gate = threading.Event()  # set when the running step has resolved (``heard``)
        self._opened_by = ""  # what let the prefetches begin, for their logs
        self._progress = InstallProgress()  # the running step's phase, read from its lines

    def start(
        self,
        planned: PlannedStep,
        *,
        records: bool = False,
        after: Callable[[PrefetchJob], None] | None = None,
        head: Callable[[str], bool] | None = None,
    ) -> PrefetchJob | None:
        """Begin warming the cache for ``planned`` in the background (no-op if nothing is exact).
        ``records``: keep what each installed distribution's RECORD says (``PrefetchJob.records``).
        ``after``: called with the job on its thread when its scratch install succeeded, before the
        scratch folder is deleted (it may move the folder away to keep it). ``head``: the lines of a
        lock stage that go first, into a scratch install of their own beside the rest's (uv), and
        ``after`` is called for that one (``PrefetchJob.head``) as soon as it is done: torch's own
        files, long before its runtime's gigabytes are in (``provision.prepare``'s walk).
        """
        if planned.name in self.jobs or self._cancel.is_set():
            return self.jobs.get(planned.name)
        stem = f"{planned.number:02d}-{planned.name}"
        pins = self.baseline_pins if planned.constrained else None
        builds = not planned.constrained or pins is not None or self.unconstrained_builds
        first = rest = None
        if head is not None and isinstance(self.installer, UvInstaller):
            first = self._job(planned, f"{stem}-head", builds=False, keep=head, records=records)
            rest = self._job(
                planned, stem, builds=builds, keep=lambda line: not head(line), records=records
            )
        job: PrefetchJob | None = None
        if first is not None and rest is not None:
            job = rest
            job.head = first
            job.covers = _covers(planned, job.argv, first.argv)
        else:
            if first is not None:  # nothing beside the head: one job after all
                first.scratch.with_name(f"{first.scratch.name}.txt").unlink(missing_ok=True)
            job = self._job(planned, stem, builds=builds, records=records)
        if job is None:
            return None
        built = job.builds
        env = dict(self.env)
        if built and pins is not None:
            # as the real step: the baseline's pins, then the step's own build constraints
            env["UV_BUILD_CONSTRAINT"] = str(pins)
            job.baseline_pins = pinned_versions(pins.read_text(encoding="utf-8").splitlines())
        for key, value in planned.env.items():
            joined = key == "UV_BUILD_CONSTRAINT" and env.get(key) and value not in env[key].split()
            env[key] = f"{env[key]} {value}" if joined else value
        self.jobs[planned.name] = job
        threading.Thread(
            target=self._run, args=(job, env, after), name=f"prefetch-{planned.name}", daemon=True
        ).start()
        return job

    def _job(
        self,
        planned: PlannedStep,
        stem: str,
        *,
        builds: bool,
        records: bool,
        keep: Callable[[str], bool] | None = None,
    ) -> PrefetchJob | None:
        """The job of ``planned``'s lines that ``keep`` keeps (all: None), in the scratch folder
        ``stem``; None when it names nothing exact."""
        scratch = self.scratch_root / stem
        argv = prefetch_argv(
            planned,
            installer=self.installer,
            python=self.python,
            scratch=scratch,
            builds=builds,
            keep=keep,
        )
        if argv is None:
            return None
        uv = isinstance(self.installer, UvInstaller)
        return PrefetchJob(
            step=planned.name,
            argv=argv,
            then=_rest_runs(argv),
            scratch=scratch,
            log_file=self.logs / f"{stem}.prefetch.log",
            builds=tuple(line for line in build_lines(planned) if keep is None or keep(line))
            if builds and uv
            else (),
            covers=uv and _covers(planned, argv),
            records={} if records else None,
        )

    def heard(self, line: str) -> None:
        """A line of the running step's output: its ``Resolved`` line lets the prefetches begin."""
        if not self._gate.is_set() and self._progress.feed(line) and self._progress.resolved:
            self.release(f"the running step resolved ({line.strip()})")

    def release(self, why: str = "the running step ended") -> None:
        """Let the prefetches begin (the running step resolved, or ended)."""
        if not self._gate.is_set():
            self._opened_by = why
            self._gate.set()

    def _run(
        self,
        job: PrefetchJob,
        env: dict[str, str],
        after: Callable[[PrefetchJob], None] | None = None,
    ) -> None:
        """Run ``job`` (and its head beside it, on a thread of its own: ``after`` is then the
        head's); the job is done when both are, and failed if either did."""
        if job.head is not None:
            threading.Thread(
                target=self._run,
                args=(job.head, env, after),
                name=f"prefetch-{job.step}-head",
                daemon=True,
            ).start()
            after = None
        try:
            shutil.rmtree(job.scratch, ignore_errors=True)
            job.scratch.parent.mkdir(parents=True, exist_ok=True)
            opened = self._gate.wait(GATE_SECONDS)
            if not self._cancel.is_set():
                with open_private(job.log_file) as log:
                    log.write(
                        f"[envbuild] begins: {self._opened_by}\n"
                        if opened
                        else f"[envbuild] begins after {GATE_SECONDS:g} s: the running step has"
                        " not said it resolved\n"
                    )
                for argv in (job.argv, *job.then):
                    job.result = self._attempt(argv, job, env)
                    job.returncode = job.result.returncode
                    if not job.result.ok:
                        break
                if job.records is not None and job.result is not None and job.result.ok:
                    job.records.update(_installed_records(job.scratch))
                if after is not None and job.result is not None and job.result.ok:
                    after(job)
        except OSError:
            job.returncode = -1
        finally:
            ok = job.result is not None and job.result.ok and not self._cancel.is_set()
            if self.keep and ok and job.kept is None and job.scratch.is_dir():
                job.kept = job.scratch
            elif job.kept is None:
                discard(job.scratch)
            job.scratch.parent.joinpath(f"{job.scratch.name}.txt").unlink(missing_ok=True)
            if (head := job.head) is not None:
                head.done.wait()
                if head.returncode != 0 and job.returncode == 0:
                    job.result, job.returncode = head.result, head.returncode
                if job.records is not None:
                    job.records.update(head.records or {})
            job.seconds = time.monotonic() - job.started
            job.done.set()

    def _attempt(self, argv: list[str], job: PrefetchJob, env: dict[str, str]) -> RunResult:
        """Run one of ``job``'s runs (``argv``): with ``offline_first``, from uv's cache alone
        first, then as planned where the cache lacks something."""
        if self.offline_first:
            cached = run(
                [*self.nice, *argv, "--offline"],
                log_file=job.log_file,
                env=env,
                cancel=self._cancel,
            )
            if cached.ok or self._cancel.is_set():
                return cached
        return run([*self.nice, *argv], log_file=job.log_file, env=env, cancel=self._cancel)

    def failed(self) -> PrefetchJob | None:
        """A finished job that did not succeed (the first started), or its head that did not, as
        soon as it has not; or None."""
        for j in self.jobs.values():
            for one in (j.head, j):
                if one is not None and one.done.is_set() and one.returncode != 0:
                    return one
        return None

    def covered(self, step: str) -> bool:
        """Whether the finished prefetch of ``step`` put every file it installs in uv's cache."""
        job = self.jobs.get(step)
        return job is not None and job.covers and job.done.is_set() and job.returncode == 0

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
        self._gate.set()
        for job in list(self.jobs.values()):
            job.done.wait(10)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
