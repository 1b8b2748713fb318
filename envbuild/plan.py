"""Plan: a pure function from a stack spec (+ options) to ordered steps with exact installer
arguments.

Nothing here runs anything. ``envbuild plan`` prints the result; ``provision`` executes it.
The argument lists are backend-specific (pip or uv) but mean the same thing:

- an empty ``index_url`` means "the sources pip is configured with" (pip.conf, ``PIP_*``);
  for uv, which does not read pip's config, those sources are passed explicitly (see
  ``InstallerSources``) so both backends see the same packages;
- every step after the baseline reads the constraints file that pins torch and the protected
  set to the exact installed versions, so a resolver that wants another torch fails loudly;
- ``--offline --wheelhouse`` replaces every step's sources with ``--no-index --find-links``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict, get_args
from urllib.parse import unquote, urlsplit

from envbuild.errors import ConfigError
from envbuild.spec import StackSpec, Step

Backend = Literal["pip", "uv"]
BACKENDS: tuple[str, ...] = get_args(Backend)
PIP_NETWORK_ARGS = ("--timeout", "30", "--retries", "2")
INDEX_STRATEGY = "UV_INDEX_STRATEGY"  # a step's env naming uv's index strategy


@dataclass(frozen=True)
class InstallerSources:
    """Where packages come from when a step names no index of its own."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PlanOptions:
    backend: Backend = "pip"
    wheelhouse: str | None = None  # --offline --wheelhouse DIR|URL: the only source
    default_sources: InstallerSources = field(default_factory=InstallerSources)
    # step name -> hash-pinned requirement file
    locked: Mapping[str, Path] = field(default_factory=dict)
    # --offline: the lock's git/URL pins the wheelhouse built into wheels, {step: {name: line}}
    # (``stacklock.serve.built_wheels``; the caller reads the lock, the plan only uses what it is
    # given)
    built_wheels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PlannedStep:
    number: int  # 1-based, as shown to users
    step: Step
    role: Literal["pre-baseline", "baseline", "guarded"]
    requirements: tuple[str, ...]  # what goes into the step's requirements file
    locked_file: Path | None
    args: tuple[str, ...]  # installer options, without the program, requirements and constraints
    env: Mapping[str, str]
    # Winners of an ``[[abi.overlap]]`` whose packages this step installs together: they go in a
    # run of their own after the rest, so their files are the ones on disk (uv installs a step's
    # wheels in parallel, and pip orders them by its resolver, not by the step).
    install_last: tuple[str, ...] = ()
    # --offline: the locked git/URL pins replaced by the wheels the wheelhouse built from them
    # ({name: "name==version --hash=sha256:..."}; ``lock.json``'s ``vcs.wheel``)
    offline_pins: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.step.name

    @property
    def constrained(self) -> bool:
        return self.role == "guarded"

    @property
    def digest(self) -> str:
        """Identity of what this step installs and how: a change re-runs it on resume."""
        payload: dict[str, object] = {
            "req": self.requirements,
            "args": self.args,
            "env": dict(self.env),
            "locked": self.locked_file.read_text() if self.locked_file else None,
        }
        if self.offline_pins:
            payload["offline"] = dict(self.offline_pins)
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    spec: StackSpec
    options: PlanOptions
    steps: tuple[PlannedStep, ...]

    def step(self, name: str) -> PlannedStep:
        for s in self.steps:
            if s.name == name:
                return s
        self.spec.step(name)  # raises with a did-you-mean
        raise AssertionError(name)

    def sources(self) -> list[str]:
        """Every index or find-links location the plan reads (for reachability checks)."""
        seen: list[str] = []
        for s in self.steps:
            args = list(s.args)
            for i, a in enumerate(args[:-1]):
                if (
                    a in ("--index-url", "--extra-index-url", "--find-links")
                    and args[i + 1] not in seen
                ):
                    seen.append(args[i + 1])
        return seen


def make_plan(spec: StackSpec, options: PlanOptions | None = None) -> Plan:
    opts = options or PlanOptions()
    if opts.backend not in BACKENDS:
        raise ConfigError(f"unknown backend {opts.backend!r}; choose one of {', '.join(BACKENDS)}")
    baseline = spec.baseline_index
    if baseline is None:  # adopted torch: every step is guarded
        baseline = -1
    offline = opts.built_wheels if opts.wheelhouse and opts.locked else {}
    steps = []
    for i, step in enumerate(spec.steps):
        role: Literal["pre-baseline", "baseline", "guarded"]
        role = "baseline" if i == baseline else ("guarded" if i > baseline else "pre-baseline")
        locked = opts.locked.get(step.name)
        steps.append(
            PlannedStep(
                number=i + 1,
                step=step,
                role=role,
                requirements=step.packages,
                locked_file=locked,
                args=tuple(_installer_args(step, opts, locked is not None)),
                env=dict(step.env),
                install_last=overlap_winners(spec, step),
                offline_pins=offline.get(step.name, {}) if locked is not None else {},
            )
        )
    return Plan(spec=spec, options=opts, steps=tuple(steps))


def overlap_winners(spec: StackSpec, step: Step) -> tuple[str, ...]:
    """The winners of the spec's ``[[abi.overlap]]`` whose packages ``step`` installs together."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    names = set()
    for raw in step.packages:
        try:
            names.add(canonicalize_name(Requirement(raw).name))
        except InvalidRequirement:
            continue
    winners = []
    for overlap in spec.abi.overlaps:
        members = {canonicalize_name(p) for p in overlap.packages}
        winner = canonicalize_name(overlap.winner)
        if winner in names and len(members & names) >= 2 and winner not in winners:
            winners.append(winner)
    return tuple(winners)


def _installer_args(step: Step, opts: PlanOptions, locked: bool) -> list[str]:
    pip = opts.backend == "pip"
    args: list[str] = []
    if opts.wheelhouse:
        args += ["--no-index", "--find-links", opts.wheelhouse]
    else:
        index = step.index_url
        extras = list(step.extra_index_urls)
        links = list(step.find_links)
        if step.no_index:
            args.append("--no-index")
        elif index is None and not pip:
            # uv does not read pip.conf: hand it the sources pip would use.
            d = opts.default_sources
            index = d.index_url
            extras = list(d.extra_index_urls) + extras
            links = list(d.find_links) + links
        if index and not step.no_index:
            args += ["--index-url", index]
        if not step.no_index:
            for url in extras:
                args += ["--extra-index-url", url]
        for link in links:
            args += ["--find-links", link]
        if not pip and (extras or links) and not step.no_index and INDEX_STRATEGY not in step.env:
            # pip looks at every source and takes the best match; uv's default stops at the
            # first index that has the name. Same semantics for both backends (a step that names
            # its strategy, as a lock's do, uv sync's, keeps it):
            args += ["--index-strategy", "unsafe-best-match"]
    if step.pre:
        args += ["--pre"] if pip else ["--prerelease", "allow"]
    if step.no_deps:
        args.append("--no-deps")
    if step.no_build_isolation:
        args.append("--no-build-isolation")
    if step.upgrade:
        args.append("--upgrade")
        if pip:
            args += ["--upgrade-strategy", step.upgrade_strategy]
    if step.reinstall:
        args.append("--force-reinstall" if pip else "--reinstall")
    if locked:
        # uv's --require-hashes also wants hashes for dependencies that are already installed
        # (torch under a guarded step); --verify-hashes checks every hash the lock file carries.
        args.append("--require-hashes" if pip else "--verify-hashes")
    if pip:
        args += ["--disable-pip-version-check", "--no-input", *PIP_NETWORK_ARGS]
    return args


PIP_RAW_PROGRESS = (24, 1)  # the first pip with --progress-bar raw ("Progress N of M" lines)


def progress_env(backend: Backend, python: Path) -> dict[str, str]:
    """Environment that makes an installer report byte progress while a live display is on.

    pip prints its download bar only to a terminal; ``PIP_PROGRESS_BAR=raw`` makes it print
    ``Progress N of M`` lines (at most 4 a second) that the display reads. Not an argument, so
    the argv stays what ``plan`` shows; only when the venv's pip knows ``raw`` (an older one
    refuses the value). uv reports its downloads without being asked.
    """
    from envbuild import events

    if backend != "pip" or not events.live():
        return {}
    for info in python.parent.parent.glob("lib/python3*/site-packages/pip-*.dist-info"):
        try:
            version = tuple(int(x) for x in info.name[4 : -len(".dist-info")].split(".")[:2])
        except ValueError:
            continue
        if version >= PIP_RAW_PROGRESS:
            return {"PIP_PROGRESS_BAR": "raw"}
    return {}


@dataclass(frozen=True)
class StepCommand:
    """One installer run of a step: its argv and the requirements file it reads."""

    argv: tuple[str, ...]
    requirements_file: Path
    text: str | None  # what provision writes into requirements_file; None: a lock file, used as is

    def write(self) -> None:
        if self.text is None:
            return
        self.requirements_file.parent.mkdir(parents=True, exist_ok=True)
        if (
            not self.requirements_file.exists()
            or self.requirements_file.read_text(encoding="utf-8") != self.text
        ):
            self.requirements_file.write_text(self.text, encoding="utf-8")


def step_commands(
    planned: PlannedStep,
    *,
    backend: Backend,
    python: Path,
    uv: str | None,
    steps_dir: Path,
    constraints: Path | None,
    pylock_pip: Sequence[str] | None = None,
) -> list[StepCommand]:
    """The exact commands one step runs (``provision`` runs these; ``plan --json`` shows them).

    Unlocked: the step's packages, written to ``NN-name.in``. Locked: the lock file; with pip, a
    file mixing VCS and hashed lines is cut into runs of one kind (``pip_run_parts``). A lock
    stage's index files (``spec.stepfile.stage_pylock``) install as the locker records them: with
    uv from a ``pylock.toml``; with pip from one too, read by ``pylock_pip`` (the argv of a pip that
    reads pylock files, run against the venv: ``installer.pip.pylock_pip``), else as
    ``name==version`` lines from their index (``_pip_index_runs``).
    """
    files: list[tuple[Path, str | None, bool]]
    if planned.locked_file is None:
        files = _unlocked_runs(planned, steps_dir)
    elif planned.offline_pins:
        files = [_offline_file(planned, steps_dir)]
    else:
        parts = pip_run_parts(planned, steps_dir) if backend == "pip" else None
        files = list(parts) if parts else [(planned.locked_file, None, False)]
        if planned.install_last:
            files = _winners_last(planned, files, steps_dir)
    if planned.locked_file is not None and planned.offline_pins and planned.install_last:
        files = _winners_last(planned, files, steps_dir)
    indexes: dict[Path, str] = {}
    if planned.locked_file is not None and (backend == "uv" or pylock_pip):
        files = _pylock_runs(files, steps_dir, vcs=backend == "uv")
    elif planned.locked_file is not None:
        files, indexes = _pip_index_runs(files, steps_dir)
    out = []
    for path, content, vcs in files:
        argv = installer_argv(
            planned,
            backend=backend,
            python=python,
            uv=uv,
            requirements_file=path,
            # uv takes no constraints beside a pylock.toml: its packages are exact files already
            constraints_file=None if backend == "uv" and is_pylock(path) else constraints,
        )
        if pylock_pip and is_pylock(path):
            argv = [*pylock_pip, *argv[argv.index("install") :]]
        if path in indexes:
            argv = _from_index(argv, indexes[path])
        # pinned to a commit, not hashable: no hash mode; its dependencies are the lock's other
        # lines
        if vcs:
            argv = [a for a in argv if a != "--require-hashes"] + (
                [] if "--no-deps" in argv else ["--no-deps"]
            )
        elif (
            planned.locked_file is not None
            and path.name.endswith(".last.txt")
            and "--no-deps" not in argv
        ):
            # the winners' dependencies are the lock's other lines, installed before
            argv = [*argv, "--no-deps"]
        out.append(StepCommand(tuple(argv), path, content))
    return out


def _offline_file(planned: PlannedStep, steps_dir: Path) -> tuple[Path, str | None, bool]:
    """The step's lock file with each git/URL line replaced by the wheel built from it (hashed)."""
    from envbuild.spec.stepfile import parse_requirements_text

    assert planned.locked_file is not None
    reqs = parse_requirements_text(
        planned.locked_file.read_text(encoding="utf-8"), str(planned.locked_file)
    )
    lines = [
        (
            planned.offline_pins[r.name]
            if r.name in planned.offline_pins
            else r.raw + "".join(f" \\\n    --hash=sha256:{h}" for h in r.hashes)
        )
        for r in reqs
    ]
    text = (
        f"# envbuild: {planned.locked_file.name} for an offline install: git/URL requirements"
        " replaced by the wheels `wheelhouse mirror` built from them (lock.json records their"
        " hashes)\n" + "\n".join(lines) + "\n"
    )
    return steps_dir / f"{planned.number:02d}-{planned.name}.offline.txt", text, False


def is_pylock(path: Path) -> bool:
    """Whether an installer reads ``path`` as a PEP 751 lock (``pylock.*.toml``)."""
    return path.name.startswith("pylock.") and path.name.endswith(".toml")


def _pylock_runs(
    files: list[tuple[Path, str | None, bool]], steps_dir: Path, *, vcs: bool
) -> list[tuple[Path, str | None, bool]]:
    """A lock stage's runs as the locker records them: the files of a run that come from a package
    index (and, with ``vcs``, its git pins) in a ``pylock.toml`` (``spec.stepfile.stage_pylock``),
    so the installer records them as index installs, not URL installs; what the pylock does not hold
    (editables, folders, direct URLs pip hashes) in a run after it."""
    from envbuild.spec.stagefile import stage_pylock

    out: list[tuple[Path, str | None, bool]] = []
    for path, content, is_vcs in files:
        text = content if content is not None else path.read_text(encoding="utf-8")
        split = stage_pylock(text, str(path), vcs=vcs)
        if split.pylock is None:
            out.append((path, content, is_vcs))
            continue
        # pylock.NAME.toml: a NAME without dots, or pip does not read it as a lock
        out.append((steps_dir / f"pylock.{path.stem.replace('.', '-')}.toml", split.pylock, False))
        if split.rest:
            out.append((steps_dir / f"{path.stem}.rest.txt", split.rest, is_vcs))
    return out


def _pip_index_runs(
    files: list[tuple[Path, str | None, bool]], steps_dir: Path
) -> tuple[list[tuple[Path, str | None, bool]], dict[Path, str]]:
    """A lock stage's runs for a pip that reads no pylock file: the index files of each run as
    ``name==version --hash`` lines, one run per index (``spec.stepfile.index_runs``), which pip
    records as it records an install from that index; the other lines in a run after them. The
    runs, and {run: its index URL}."""
    from envbuild.spec.stagefile import index_runs

    out: list[tuple[Path, str | None, bool]] = []
    indexes: dict[Path, str] = {}
    for path, content, is_vcs in files:
        text = content if content is not None else path.read_text(encoding="utf-8")
        split = index_runs(text, str(path))
        if not split.runs:
            out.append((path, content, is_vcs))
            continue
        for k, (index, lines) in enumerate(split.runs.items(), 1):
            run = steps_dir / f"{path.stem}.index{k}.txt"
            out.append((run, f"# envbuild: the files of {path.name} from {index}\n{lines}", False))
            indexes[run] = index
        if split.rest:
            out.append((steps_dir / f"{path.stem}.rest.txt", split.rest, is_vcs))
    return out, indexes


def _from_index(argv: list[str], index: str) -> list[str]:
    """``argv`` reading its exact pins from ``index``: a local folder of files as find-links, else
    a PEP 503 index (``--no-index`` dropped; an index the step already reads stays, for builds)."""
    local = urlsplit(index)
    folder = Path(unquote(local.path)) if local.scheme == "file" else None
    flat = folder is not None and folder.is_dir() and not any(p.is_dir() for p in folder.iterdir())
    source = ["--find-links", index] if flat else ["--index-url", index]
    if "--no-index" in argv:
        i = argv.index("--no-index")
        return [*argv[:i], *source, *argv[i + 1 :]]
    if not flat and "--index-url" in argv:
        source = ["--extra-index-url", index]
    i = argv.index("-r")
    return [*argv[:i], *source, *argv[i:]]


def _name_of(line: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return canonicalize_name(Requirement(line.split(" \\")[0].strip()).name)
    except InvalidRequirement:
        return None


def _unlocked_runs(planned: PlannedStep, steps_dir: Path) -> list[tuple[Path, str | None, bool]]:
    head = f"# envbuild: requirements of step {planned.name!r}"
    first = [r for r in planned.requirements if _name_of(r) not in planned.install_last]
    last = [r for r in planned.requirements if _name_of(r) in planned.install_last]
    if not first or not last:
        text = head + "\n" + "\n".join(planned.requirements) + "\n"
        return [(steps_dir / f"{planned.number:02d}-{planned.name}.in", text, False)]
    stem = f"{planned.number:02d}-{planned.name}"
    return [
        (
            steps_dir / f"{stem}.in",
            head + " (overlap winners follow)\n" + "\n".join(first) + "\n",
            False,
        ),
        (
            steps_dir / f"{stem}.last.in",
            head + ": overlap winners, installed last\n" + "\n".join(last) + "\n",
            False,
        ),
    ]


def _winners_last(
    planned: PlannedStep, files: list[tuple[Path, str | None, bool]], steps_dir: Path
) -> list[tuple[Path, str | None, bool]]:
    """Locked runs with the overlap winners' lines moved into one run of their own, installed
    last."""
    from envbuild.spec.stepfile import parse_requirements_text

    first: list[tuple[Path, str | None, bool]] = []
    last_lines: list[str] = []
    for k, (path, content, vcs) in enumerate(files, 1):
        text = content if content is not None else path.read_text(encoding="utf-8")
        reqs = parse_requirements_text(text, str(path))
        keep = [r for r in reqs if r.name not in planned.install_last]
        moved = [r for r in reqs if r.name in planned.install_last]
        render = [r.rendered() for r in keep]
        last_lines += [r.rendered() for r in moved]
        if not moved:
            first.append((path, content, vcs))
        elif keep:
            part = steps_dir / f"{planned.number:02d}-{planned.name}.first{k}.txt"
            first.append(
                (
                    part,
                    f"# envbuild: {path.name} without its overlap winners\n"
                    + "\n".join(render)
                    + "\n",
                    vcs,
                )
            )
    if not last_lines:
        return files
    last = steps_dir / f"{planned.number:02d}-{planned.name}.last.txt"
    return [
        *first,
        (
            last,
            "# envbuild: overlap winners, installed last\n" + "\n".join(last_lines) + "\n",
            False,
        ),
    ]


def pip_run_parts(
    planned: PlannedStep, steps_dir: Path
) -> list[tuple[Path, str | None, bool]] | None:
    """A locked step file that mixes VCS and hash-pinned lines, cut into runs of one kind for pip.

    pip's hash-checking mode is all-or-nothing: one ``--hash`` (or ``--require-hashes``) and a VCS
    line (``name @ git+URL@<commit>``, which has no hash) is refused. The lines go, in the order the
    step names its packages (an ``[[abi.overlap]]`` winner listed last stays last), into files of
    one kind each: ``(file, text, is_vcs)``. None when the file has no VCS line (it installs whole).
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from envbuild.spec.stepfile import LockedReq, parse_requirements_text

    assert planned.locked_file is not None
    reqs = parse_requirements_text(
        planned.locked_file.read_text(encoding="utf-8"), str(planned.locked_file)
    )
    if not any(r.is_vcs for r in reqs):
        return None
    position: dict[str, int] = {}
    for i, raw in enumerate(planned.requirements):
        try:
            position.setdefault(canonicalize_name(Requirement(raw).name), i)
        except InvalidRequirement:
            continue
    # stable: dependencies keep the lock's order
    reqs.sort(key=lambda r: position.get(r.name, len(position)))
    runs: list[list[LockedReq]] = []
    for r in reqs:
        if runs and runs[-1][0].is_vcs == r.is_vcs:
            runs[-1].append(r)
        else:
            runs.append([r])
    out: list[tuple[Path, str | None, bool]] = []
    for k, group in enumerate(runs, 1):
        path = steps_dir / f"{planned.number:02d}-{planned.name}.part{k}.txt"
        lines = [r.rendered() for r in group]
        text = (
            f"# envbuild: part {k} of {planned.locked_file.name} (pip cannot mix VCS and hashed"
            " lines)\n" + "\n".join(lines) + "\n"
        )
        out.append((path, text, group[0].is_vcs))
    return out


def installer_argv(
    planned: PlannedStep,
    *,
    backend: Backend,
    python: Path,
    uv: str | None,
    requirements_file: Path,
    constraints_file: Path | None,
) -> list[str]:
    """The full command line for one step."""
    if backend == "pip":
        argv = [str(python), "-m", "pip", "install"]
    else:
        if uv is None:
            raise ConfigError("the uv backend was asked for but no uv executable was found")
        argv = [uv, "pip", "install", "--python", str(python)]
    argv += list(planned.args)
    argv += ["-r", str(requirements_file)]
    if constraints_file is not None:
        argv += ["-c", str(constraints_file)]
    return argv


class PlanABIJSON(TypedDict):
    """The spec's ``[abi]``: the baseline every later step is held to."""

    package: str  # the baseline distribution (torch)
    version: str  # its version, as the spec pins it
    local: str | None  # its local version label (`cu132`), when the spec names one
    cuda: str | None  # the CUDA version the spec expects, when it names one
    protect: list[str]  # the protected set: names or fnmatch patterns no later step may move
    adopt: bool  # true: the baseline comes from the base environment and no step installs it


class PlanStepJSON(TypedDict):
    """One install step of a plan, as ``provision`` runs it."""

    number: int  # 1-based, as shown to users
    name: str  # the step's name in the spec
    role: Literal["pre-baseline", "baseline", "guarded"]  # where it stands to the baseline
    requirements: list[str]  # what goes into the step's requirements file
    locked_file: str | None  # the hash-pinned file the step installs from, when the lock has one
    # installer options, without the program, requirements and constraints
    installer_args: list[str]
    constraints: bool  # true: installed under the constraints file that pins the protected set
    replaces: list[str]  # the distributions this step may replace (the spec's `replaces`)
    env: dict[str, str]  # the step's own environment variables


class PlanJSON(TypedDict):
    """A plan: the stack, its baseline and its steps in order (``plan_to_json``)."""

    stack: str  # the stack's name
    spec: str  # the stack spec file
    spec_digest: str  # the spec's digest (what the lock records)
    python: str  # the Python version the spec asks for
    backend: Backend  # the installer
    abi: PlanABIJSON  # the baseline
    steps: list[PlanStepJSON]  # the install steps, in order


def plan_to_json(plan: Plan) -> PlanJSON:
    return {
        "stack": plan.spec.name,
        "spec": str(plan.spec.path),
        "spec_digest": plan.spec.digest,
        "python": plan.spec.python,
        "backend": plan.options.backend,
        "abi": {
            "package": plan.spec.abi.package,
            "version": plan.spec.abi.version,
            "local": plan.spec.abi.local,
            "cuda": plan.spec.abi.cuda,
            "protect": list(plan.spec.abi.protect),
            "adopt": plan.spec.abi.adopt,
        },
        "steps": [
            {
                "number": s.number,
                "name": s.name,
                "role": s.role,
                "requirements": list(s.requirements),
                "locked_file": str(s.locked_file) if s.locked_file else None,
                "installer_args": list(s.args),
                "constraints": s.constrained,
                "replaces": list(s.step.replaces),
                "env": dict(s.env),
            }
            for s in plan.steps
        ],
    }
