"""A project lock's isolated builds offline: ``wheelhouse mirror --lock`` carries the build
requirements of every project, workspace member and sdist the chosen environment builds in
isolation, and ``provision --lock --offline --wheelhouse DIR`` builds from them (``--no-index
--find-links DIR``), as uv would.

Per build (``Build``): its ``build-system.requires`` (read from the project's ``pyproject.toml``,
or from the sdist itself; setuptools' legacy backend when it has none, as uv and pip do) and what
the backend asks for beyond them (PEP 517's ``get_requires_for_build_editable`` / ``_wheel``: the
mirror runs that hook in a throwaway venv of the target's Python, as a build front end does;
hatchling's editable build wants ``editables``), resolved for the target by ``uv pip compile
--format pylock.toml`` from the build's sources and constraints (``projectlock.buildreqs``). Every
file is downloaded by the wheelhouse mirror (sha256-checked) and recorded in ``wheelhouse.json``,
the build's pins under ``builds`` by its key (the package, its requirements, its backend and the
constraints): a build whose settings changed since the mirror is not found, not guessed.

Offline, before anything is made (``check_builds``): every isolated build of the stages still to
run has its record, and each file it names is in the wheelhouse with the recorded sha256;
otherwise InstallError (exit 5) naming the package and the ``wheelhouse mirror --lock`` command.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
import zipfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from envbuild import events
from envbuild.errors import InstallError
from envbuild.gate.project import read_pyproject
from envbuild.projectlock.buildreqs import BuildSources, builds_isolated
from envbuild.projectlock.stages import Placed, StagePlan

__all__ = ["Build", "check_builds", "isolated_builds", "mirror_builds"]

_LEGACY = ("setuptools>=40.8.0",)  # PEP 517's fallback for a source tree with no [build-system]
_LEGACY_BACKEND = "setuptools.build_meta:__legacy__"
_PLATFORMS = {
    "linux x86_64": "x86_64-unknown-linux-gnu",
    "linux aarch64": "aarch64-unknown-linux-gnu",
    "macos arm64": "aarch64-apple-darwin",
    "macos x86_64": "x86_64-apple-darwin",
    "windows amd64": "x86_64-pc-windows-msvc",
}


@dataclass(frozen=True)
class Build:
    """One isolated build of the plan: what it builds and what its backend is."""

    package: str
    source: Path  # the project's folder, or the sdist file
    editable: bool
    requires: tuple[str, ...]
    backend: str
    backend_path: tuple[str, ...]

    def key(self, constraints: Sequence[str]) -> str:
        doc = [
            self.package,
            sorted(self.requires),
            self.backend,
            list(self.backend_path),
            sorted(constraints),
        ]
        return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:24]


def isolated_builds(
    plan: StagePlan, stages: Collection[str], wheelhouse: Path | None = None
) -> list[Build]:
    """The isolated builds of ``stages`` (git pins aside: offline they are refused on their own).
    An sdist is read from ``wheelhouse`` when given, else from where the lock says it is."""
    out = []
    for p in plan.placed:
        if p.stage not in stages or not builds_isolated(p):
            continue
        if p.artifact is None:
            if p.stage != "project":
                continue  # a git pin
            editable = p.line.startswith("-e ")
            folder = (
                Path(p.line[3:])
                if editable
                else Path(unquote(urlsplit(p.line.split(" @ ", 1)[1]).path))
            )
            project = plan.chosen.source.project  # the lock's own project: read once
            same = folder.resolve() == project.folder.resolve()
            data = project.data if same else read_pyproject(folder)
            out.append(_build(p, folder, editable, data))
            continue
        path = (wheelhouse / p.artifact.filename) if wheelhouse is not None else _local_file(p)
        if path is None or not path.is_file():
            continue  # not here yet: the mirror downloads it first; offline, check_files names it
        out.append(_build(p, path, False, _sdist_pyproject(path)))
    return out


def _local_file(p: Placed) -> Path | None:
    assert p.artifact is not None
    parts = urlsplit(p.artifact.url)
    return Path(unquote(parts.path)) if parts.scheme == "file" else None


def _sdist_pyproject(path: Path) -> dict[str, Any]:
    """The ``pyproject.toml`` at the top of an sdist ({} without one); a damaged archive: exit 5"""
    from envbuild.gate.model import LockParseError
    from envbuild.gate.project import parse_pyproject

    try:
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                names = [
                    n for n in zf.namelist() if n.count("/") == 1 and n.endswith("/pyproject.toml")
                ]
                text = zf.read(names[0]).decode() if names else ""
        else:
            with tarfile.open(path) as tf:
                member = next(
                    (
                        m
                        for m in tf.getmembers()
                        if m.name.count("/") == 1
                        and m.name.endswith("/pyproject.toml")
                        and m.isfile()
                    ),
                    None,
                )
                got = tf.extractfile(member) if member is not None else None
                text = got.read().decode() if got is not None else ""
        return parse_pyproject(text) if text else {}
    except (
        OSError,
        tarfile.TarError,
        zipfile.BadZipFile,
        UnicodeDecodeError,
        LockParseError,
    ) as exc:
        raise InstallError(
            f"{path}: cannot read the sdist's pyproject.toml ({exc})",
            hint="Mirror it again (the file may be cut short).",
        ) from exc


def _build(p: Placed, source: Path, editable: bool, data: dict[str, Any]) -> Build:
    from envbuild.gate.project import table

    system = table(data, "build-system")
    requires = system.get("requires")
    reqs = (
        tuple(str(r) for r in requires if isinstance(r, str))
        if isinstance(requires, list)
        else _LEGACY
    )
    backend = system.get("build-backend")
    paths = system.get("backend-path")
    return Build(
        p.entry.name,
        source,
        editable,
        reqs if system else _LEGACY,
        str(backend) if isinstance(backend, str) else _LEGACY_BACKEND,
        tuple(str(x) for x in paths) if isinstance(paths, list) else (),
    )


# ----------------------------------------------------------------------------- the mirror


def mirror_builds(
    plan: StagePlan,
    out: Path,
    sources: BuildSources,
    *,
    jobs: int = 4,
    deadline: float | None = None,
) -> list[str]:
    """Mirror the build requirements of every isolated build of ``plan`` into ``out`` (the lock's
    files already there) and record them in ``wheelhouse.json``; returns what was recorded, in
    words."""
    from envbuild.projectlock.buildreqs import constraints_file

    constraints = list(sources.constraints)
    cfile = constraints_file(constraints) if constraints else None
    records: dict[str, dict[str, Any]] = {}
    said = []
    for b in isolated_builds(plan, plan.stages, out):
        key = b.key(constraints)
        if key in records:
            continue
        files = _resolve_and_mirror(plan, b.requires, out, sources, cfile, jobs, deadline)
        extra = _hook_requires(plan, b, out, files)
        if extra:
            files = _resolve_and_mirror(
                plan, (*b.requires, *extra), out, sources, cfile, jobs, deadline
            )
        records[key] = {
            "package": b.package,
            "requires": list(b.requires),
            "hook_requires": extra,
            "backend": b.backend,
            "files": sorted(files),
        }
        said.append(f"{b.package}: {', '.join(sorted(files))}")
    _record(out / "wheelhouse.json", records)
    return said


def _resolve_and_mirror(
    plan: StagePlan,
    requires: Sequence[str],
    out: Path,
    sources: BuildSources,
    cfile: Path | None,
    jobs: int,
    deadline: float | None,
) -> dict[str, str]:
    """{filename: sha256} of the wheels ``requires`` resolve to for the target, downloaded into
    ``out``."""
    from envbuild.index.client import Artifact
    from envbuild.wheelhouse.mirror import mirror

    pins = _compile(plan, requires, sources, cfile)
    mirror([Artifact(f, u, s) for f, (u, s) in pins.items()], out, jobs=jobs, deadline=deadline)
    return {f: s for f, (_, s) in pins.items()}


def _source_args(sources: BuildSources) -> list[str]:
    from envbuild.installer.pip import pip_config_sources

    index, extras, links = (
        sources.index_url,
        list(sources.extra_index_urls),
        list(sources.find_links),
    )
    if index is None and not sources.no_index:
        d = (
            pip_config_sources()
        )  # uv does not read pip.conf: the user's pip sources, as the uv backend gets them
        index, extras, links = d.index_url, [*d.extra_index_urls, *extras], [*d.find_links, *links]
    args = ["--no-index"] if sources.no_index else []
    args += ["--index-url", index] if index and not sources.no_index else []
    for url in [] if sources.no_index else extras:
        args += ["--extra-index-url", url]
    for link in links:
        args += ["--find-links", link]
    return args


def _compile(
    plan: StagePlan, requires: Sequence[str], sources: BuildSources, cfile: Path | None
) -> dict[str, tuple[str, str]]:
    """``uv pip compile --format pylock.toml``: {wheel filename: (url, sha256)} for the target."""
    from envbuild.errors import ConfigError
    from envbuild.installer.python import find_uv
    from envbuild.run import run

    uv = find_uv()
    if uv is None:
        raise ConfigError(
            "wheelhouse mirror --lock resolves the build requirements with uv, and no uv was found",
            hint="Install uv (`pip install uv`).",
        )
    env = plan.chosen.env
    with tempfile.TemporaryDirectory(prefix="envbuild-buildreqs-") as tmp:
        (Path(tmp) / "build.in").write_text("".join(f"{r}\n" for r in requires), encoding="utf-8")
        argv = [
            uv,
            "pip",
            "compile",
            "build.in",
            "--format",
            "pylock.toml",
            "-o",
            "pylock.toml",
            "--quiet",
            "--python-version",
            env.python,
            "--only-binary",
            ":all:",
            *_source_args(sources),
        ]
        if env.platform in _PLATFORMS:
            argv += ["--python-platform", _PLATFORMS[env.platform]]
        if cfile is not None:
            argv += ["-c", str(cfile)]
        res = run(argv, cwd=Path(tmp), capture=True, timeout=300)
        if not res.ok:
            raise InstallError(
                f"the build requirements {', '.join(requires)} do not resolve for "
                f"{env.name} from {sources.where}:\n{res.tail}",
                hint=(
                    "Make the build backend available there, or pin it with --build-constraints "
                    "FILE / [tool.uv] build-constraint-dependencies."
                ),
            )
        text = (Path(tmp) / "pylock.toml").read_text(encoding="utf-8")
    return _wheels(text, env.python, env.platform)


def _wheels(text: str, python: str, platform: str) -> dict[str, tuple[str, str]]:
    """{wheel filename: (url, sha256)} of the best wheel of each package of ``uv pip compile``'s
    pylock.toml for the target (the one PEP 751 reader; the tags ranked by their owner)."""
    from envbuild.errors import ConfigError
    from envbuild.gate.formats.pylock import read_pylock
    from envbuild.gate.model import LockParseError
    from envbuild.index.wheeltags import best_wheel
    from envbuild.projectlock.stages import target_tag_order

    try:
        lock = read_pylock(text)
    except LockParseError as exc:
        raise ConfigError(
            f"uv pip compile wrote a pylock.toml envbuild cannot read ({exc})"
        ) from exc
    order = {t: i for i, t in enumerate(target_tag_order(python, platform))}
    out: dict[str, tuple[str, str]] = {}
    for pkg in lock.packages:
        wheels: list[tuple[str, str, str]] = []
        for w in pkg.wheels or ():
            url, sha = w.url or w.path, w.hashes.get("sha256")
            name = w.name or (unquote(urlsplit(url).path.rsplit("/", 1)[-1]) if url else None)
            if name and url and sha:
                wheels.append((str(name), str(url), str(sha)))
        pick = best_wheel([name for name, _, _ in wheels], order)
        if pick is not None:
            name, url, sha = wheels[pick.at]
            out[name] = (url, sha)
    return out


_HOOK = """import json, os, sys
backend, paths, editable = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
sys.path[:0] = [os.path.abspath(p) for p in paths]
mod, _, obj = backend.partition(":")
import importlib
b = importlib.import_module(mod)
for part in filter(None, obj.split(".")):
    b = getattr(b, part)
name = "get_requires_for_build_" + ("editable" if editable else "wheel")
hook = getattr(b, name, None)
print("ENVBUILD_HOOK " + json.dumps(list(hook({}) if hook else [])))
"""


def _hook_requires(plan: StagePlan, b: Build, out: Path, files: dict[str, str]) -> list[str]:
    """What the backend asks for beyond ``build-system.requires`` (PEP 517's hook, run in a
    throwaway
    venv of the target's Python with the mirrored requirements); [] where it cannot be asked."""
    from envbuild.installer.python import find_uv
    from envbuild.run import run

    uv = find_uv()
    if uv is None:
        return []
    with tempfile.TemporaryDirectory(prefix="envbuild-hook-") as tmp:
        venv = Path(tmp) / "venv"
        made = run(
            [uv, "venv", "--quiet", "--python", plan.chosen.env.python, str(venv)],
            capture=True,
            timeout=120,
        )
        installed = (
            made.ok
            and run(
                [
                    uv,
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(venv / "bin" / "python"),
                    "--no-index",
                    "--find-links",
                    str(out),
                    *b.requires,
                ],
                capture=True,
                timeout=300,
            ).ok
        )
        where = b.source if b.source.is_dir() else _unpacked(b.source, Path(tmp))
        got = (
            run(
                [
                    str(venv / "bin" / "python"),
                    "-c",
                    _HOOK,
                    b.backend,
                    json.dumps(list(b.backend_path)),
                    "1" if b.editable else "0",
                ],
                cwd=where,
                capture=True,
                timeout=300,
            )
            if installed
            else None
        )
    line = (
        next(
            (ln for ln in (got.output or "").splitlines() if ln.startswith("ENVBUILD_HOOK ")), None
        )
        if got is not None and got.ok
        else None
    )
    if line is None:
        events.emit(
            "warn",
            f"{b.package}: its build backend's get_requires hook could not be run; only its "
            "build-system.requires are mirrored",
        )
        return []
    return [str(r) for r in json.loads(line.split(" ", 1)[1]) if str(r) not in b.requires]


def _unpacked(sdist: Path, tmp: Path) -> Path:
    dest = tmp / "sdist"
    if sdist.name.endswith(".zip"):
        with zipfile.ZipFile(sdist) as zf:
            zf.extractall(dest)
    else:
        with tarfile.open(sdist) as tf:
            tf.extractall(dest, filter="data")
    tops = [p for p in dest.iterdir() if p.is_dir()]
    return tops[0] if len(tops) == 1 else dest


def _record(manifest: Path, records: dict[str, dict[str, Any]]) -> None:
    from envbuild._io import atomic_write_json

    try:
        doc = json.loads(manifest.read_text(encoding="utf-8")) if manifest.is_file() else {}
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    builds: dict[str, Any] = doc["builds"] if isinstance(doc.get("builds"), dict) else {}
    doc["builds"] = {**builds, **records}
    doc.setdefault("schema", 1)
    doc.setdefault("artifacts", [])
    atomic_write_json(manifest, doc)


# ----------------------------------------------------------------------------- offline


def check_builds(
    plan: StagePlan, folder: Path, stages: Collection[str], sources: BuildSources
) -> None:
    """Every isolated build of ``stages`` has its build requirements in the wheelhouse ``folder``
    (see the module docstring); InstallError (exit 5) naming what is missing otherwise."""
    from envbuild._io import sha256_file

    builds = isolated_builds(plan, stages, folder)
    if not builds:
        return
    try:
        doc = json.loads((folder / "wheelhouse.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {}
    if not isinstance(doc, dict):
        doc = {}
    records: dict[str, Any] = doc["builds"] if isinstance(doc.get("builds"), dict) else {}
    missing: list[str] = []
    for b in builds:
        rec = records.get(b.key(list(sources.constraints)))
        if not isinstance(rec, dict):
            missing.append(
                f"{b.package}: its build requirements ({', '.join(b.requires)}, "
                f"backend {b.backend})"
            )
            continue
        for name, sha in _pins(rec, doc):
            if not (folder / name).is_file():
                missing.append(f"{b.package}: {name} (a build requirement)")
            elif sha and sha256_file(folder / name) != sha:
                missing.append(
                    f"{b.package}: {name} is not the bytes the mirror recorded (sha256 {sha})"
                )
    if missing:
        lock = plan.chosen.path
        raise InstallError(
            f"--offline: the wheelhouse {folder} lacks what {len(missing)} isolated build(s) need; "
            "nothing was "
            "made:\n" + "\n".join(f"  {m}" for m in missing),
            hint=(
                f"Mirror them where the indexes answer: `envbuild wheelhouse mirror --lock {lock} "
                f"--out {folder}` "
                "(with the same selection and --build-constraints), then bring the folder here."
            ),
        )


def _pins(rec: dict[str, Any], doc: dict[str, Any]) -> list[tuple[str, str | None]]:
    shas = {
        a.get("filename"): a.get("sha256")
        for a in doc.get("artifacts") or ()
        if isinstance(a, dict)
    }
    return [(str(f), shas.get(f)) for f in rec.get("files") or ()]
