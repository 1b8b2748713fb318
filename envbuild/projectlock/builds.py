"""The ``builds`` stage through the wheelhouse: each sdist (or git pin) that needs torch to build is
built once per key into a build cache, by ``envbuild.wheelhouse.build`` (no build isolation, against
the target venv's torch), and installed from there as a wheel; the next venv, host or image with the
same key installs that wheel and compiles nothing.

The key is the wheelhouse's (``wheelhouse.build.key_parts``): the sdist's sha256 (the lock's), the
package and version, the Python tag and platform, torch's version, git version, CUDA, C++11 ABI
flag and payload digest (its own files' RECORD rows: the same for every install of one torch
build, whatever venv path or installer), the GPU archs (``TORCH_CUDA_ARCH_LIST``, else the visible
GPUs' for a CUDA torch) and the compilers (gcc, nvcc). A cached wheel of another key is never
reused: the build says which part differs, and the new wheel's provenance records it.

The wheel keeps the lock's version and requirements (the lock pins them; ``pip list`` equals the
locker's own install) and carries the provenance record the ABI guard checks against the
installed torch.

The build caches, looked up in order, the first also the one built into: ``--wheelhouse DIR``'s
``builds/`` when given (a wheelhouse carried to the next host or image brings its built wheels),
then the data root's ``<root>/wheelhouse/builds``, then the user's (``~/.cache/envbuild/builds``,
``ENVBUILD_CACHE_DIR``: the next data root on this host). A wheel found in a later one is copied
into the first, and every wheel installed is copied into the user's, so the carried wheelhouse
holds every wheel its provisions installed and a second root on the host compiles nothing.

Beyond them, the fleet's shared build cache (``--build-cache DIR|URL``,
``wheelhouse.sharedcache``): a build none of them holds is taken from there (checked), else built
here by the one host that holds its lease, the others waiting, and published there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from envbuild import events
from envbuild._io import sha256_file
from envbuild.plan import PlannedStep
from envbuild.projectlock.stages import STAGE_WORDS, Placed, StagePlan
from envbuild.spec import spec_digest
from envbuild.spec.stagefile import git_note, index_note, noted_git, noted_index
from envbuild.spec.stepfile import logical_lines, parse_requirements_text
from envbuild.wheelhouse.sharedcache import SharedCache
from envbuild.wheelhouse.spec import Backend, BuildSource, WheelSpec

__all__ = ["BuildCache", "caches", "lock_spec", "plan_notes"]

BUILDS = "builds"  # the build cache's folder in a wheelhouse


def caches(root: Path, wheelhouse: Path | None) -> tuple[Path, ...]:
    """The build caches of a provision into ``root`` (see the module docstring)."""
    from envbuild.index.metacache import cache_dir

    out = [wheelhouse / BUILDS] if wheelhouse is not None else []
    return (*out, root / "wheelhouse" / BUILDS, cache_dir() / BUILDS)


def lock_spec(name: str, version: str, url: str, sha256: str, lock: Path) -> WheelSpec:
    """The wheelhouse spec of one ``builds`` sdist of the lock (sha256-checked)."""
    parts = urlsplit(url)
    source = BuildSource(
        kind="sdist", location=unquote(parts.path) if parts.scheme == "file" else url, sha256=sha256
    )
    return _spec(name, version, source, {"sdist_sha256": sha256}, lock)


def git_spec(
    name: str, version: str, url: str, commit: str, subdirectory: str | None, lock: Path
) -> WheelSpec:
    """The wheelhouse spec of a ``builds`` git pin: the lock's commit (the key holds it)."""
    source = BuildSource(kind="git", location=url, commit=commit, subdirectory=subdirectory or None)
    return _spec(
        name,
        version,
        source,
        {"git": url, "commit": commit, "subdirectory": subdirectory or ""},
        lock,
    )


def _spec(
    name: str, version: str, source: BuildSource, identity: dict[str, str], lock: Path
) -> WheelSpec:
    """Built with uv (it needs nothing in the venv; pip when uv is missing: then the venv needs
    pip)."""
    from envbuild.installer.python import find_uv

    backend: Backend = "uv" if find_uv() else "pip"
    return WheelSpec(
        path=lock,
        name=name,
        version=version,
        source=source,
        backend=backend,
        keep_version=True,
        digest=spec_digest(
            {"lock_build": 1, "name": name, "version": version, **identity, "backend": backend}
        ),
    )


def _placed_spec(p: Placed, lock: Path) -> WheelSpec:
    """The spec of one typed pin of the builds stage: its git pin, else its file and sha256."""
    version = p.entry.version or ""
    if p.git is not None:
        git = p.git
        return git_spec(p.entry.name, version, git.url, git.commit, git.subdirectory, lock)
    assert p.artifact is not None and p.artifact.sha256, p.line  # stages.py pins every builds file
    return lock_spec(p.entry.name, version, p.artifact.url, p.artifact.sha256, lock)


def _pinned_specs(pins: Sequence[Placed], lock: Path) -> list[tuple[WheelSpec, str]]:
    """(spec, its line's note) of the builds stage's typed pins: the wheel built from one is
    recorded as uv sync records its source, an sdist from a package index as an index file
    (``spec.stagefile.index_note``), a git pin as that git install (``git_note``)."""
    return [(_placed_spec(p, lock), _note(p)) for p in pins]


def _note(p: Placed) -> str:
    if p.index is not None and p.artifact is not None:
        return index_note(p.index)
    return git_note(p.git.source) if p.git is not None and p.git.source else ""


def _noted(comments: list[str]) -> str:
    """The note a step file's line carries on (an index file's, a git pin's), written again."""
    if (index := noted_index(comments)) is not None:
        return index_note(index)
    git = noted_git(comments)
    return git_note(git.source) if git is not None else ""


def _step_specs(planned: PlannedStep, lock: Path) -> list[tuple[WheelSpec, str]]:
    """(spec, its line's index note) of a builds step read from its hash-pinned file (an image
    layer's stage slice, which carries no typed pins): each line read by the step files' one
    parser (``spec.stepfile``), its version from the step's ``name==version`` requirement."""
    assert planned.locked_file is not None
    text = planned.locked_file.read_text(encoding="utf-8")
    versions = {
        str(canonicalize_name(r.name)): next((s.version for s in r.specifier), "")
        for r in planned.step.requirements
    }
    # the comments after each line, by the line it starts on (what parse_requirements_text says)
    notes = {n: _noted(comments) for n, _, comments in logical_lines(text)}
    out = []
    for req in parse_requirements_text(text, str(planned.locked_file)):
        version = versions.get(req.name, "")
        note = notes.get(req.line, "")
        if req.vcs_commit is not None and req.url is not None:
            where, _, fragment = req.url.removeprefix("git+").partition("#")
            sub = fragment.removeprefix("subdirectory=") if fragment else ""
            url = where.rsplit("@", 1)[0]
            out.append((git_spec(req.name, version, url, req.vcs_commit, sub, lock), note))
        elif req.url is not None and len(req.hashes) == 1:
            out.append((lock_spec(req.name, version, req.url, req.hashes[0], lock), note))
    return out


@dataclass
class BuildCache:
    """The ``prepare_steps`` hook of provision for the builds stage (``ProvisionOptions``)."""

    lock: Path  # named in the wheels' provenance (spec.file)
    caches: tuple[Path, ...]
    out: Path  # the built wheels' copies and the build logs of this data root
    folder: Path  # where the stage's rewritten requirements file goes
    shared: SharedCache | None = None  # the fleet's build cache (--build-cache DIR|URL)
    # the builds stage's typed pins (a lock's plan); None: read from the step's file (a slice)
    pins: Sequence[Placed] | None = None
    # {name: where its wheel came from}: the receipt's lock record keeps it (``builds``)
    provenance: dict[str, dict[str, object]] = field(default_factory=dict)

    def __call__(self, planned: PlannedStep, python: Path) -> PlannedStep:
        """The step installing the built wheels (from a cache, else built now) by path and
        sha256."""
        from envbuild.wheelhouse.build import BuildOptions, build, cache_key, probe_target

        lines = []
        base = None
        specs = (
            _pinned_specs(self.pins, self.lock)
            if self.pins is not None
            else _step_specs(planned, self.lock)
        )
        for spec, note in specs:
            spec = _with_build_requires(spec)
            assert spec.source is not None
            base = base or probe_target(python)
            # its own build requirements: which of them the venv lacks (``wheelhouse.requires``)
            target = probe_target(python, spec.requires) if spec.requires else base
            key = cache_key(spec, spec.source, target)
            cache = next(
                (c for c in self.caches if (c / "wheels" / key[:32] / "result.json").is_file()),
                self.caches[0],
            )
            res = build(
                spec,
                BuildOptions(python=python, out=self.out, cache=cache, shared=self.shared),
                target,
            )
            slot = cache / "wheels" / key[:32]
            # the first cache (the carried wheelhouse, else the data root's) and the user's (the
            # next root on this host) hold every wheel this provision installed
            for other in (self.caches[0], self.caches[-1]):
                if other != cache and slot.is_dir():
                    _copy_slot(slot, other / "wheels" / slot.name)
            how = (
                f"built in {res.seconds:.1f} s"
                if not res.cached
                else f"{res.origin.shown} (no compile)"
                if res.origin.how == "build cache"
                else "from the build cache (no compile)"
            )
            self.provenance[spec.name] = {
                "wheel": res.wheel.name,
                "sha256": sha256_file(res.wheel),
                "key": res.key,
                **res.origin.to_json(),
            }
            events.emit(
                "info",
                f"builds: {spec.label}: {res.wheel.name} {how}",
                built=str(res.wheel),
                cached=res.cached,
            )
            lines.append(
                f"{spec.name} @ {res.wheel.as_uri()} --hash=sha256:{sha256_file(res.wheel)}" + note
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{planned.number:02d}-{planned.name}-wheels.txt"
        path.write_text(
            f"# stage builds: {STAGE_WORDS['builds']}; the wheels built from the lock's sdists\n"
            + "\n".join(lines)
            + "\n",
            encoding="utf-8",
        )
        return replace(planned, locked_file=path)


def _with_build_requires(spec: WheelSpec) -> WheelSpec:
    """An sdist whose own build requirements name torch (``projectlock.torchbuilds``, which read
    them into the cache): its other build requirements are the build's (found in the venv, else
    installed beside it for the build, ``wheelhouse.requires``), by their import names."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from envbuild.index.sdistreqs import cached_build_requires
    from envbuild.projectlock.torchbuilds import names_torch

    assert spec.source is not None
    requires = cached_build_requires(spec.source.sha256) if spec.source.kind == "sdist" else None
    if not requires or not names_torch(requires):
        return spec
    names = []
    for text in requires:
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            continue
        if name != "torch":
            names.append(name.replace("-", "_"))
    return replace(spec, requires=tuple(dict.fromkeys((*spec.requires, *names))))


def _copy_slot(slot: Path, to: Path) -> None:
    """Copy a build cache slot, best effort (a read-only or full user cache costs a rebuild
    later)."""
    import shutil

    try:
        shutil.copytree(slot, to, dirs_exist_ok=True)
    except OSError as exc:
        events.emit("debug", f"builds: could not copy {slot} to {to}: {exc}")


def plan_notes(plan: StagePlan, caches: tuple[Path, ...], python: Path | None) -> dict[str, str]:
    """{name: what ``plan --lock`` says of each build}: the cached wheel it installs, or that it
    compiles. With a venv that has torch (``python``) the key is the full one; before the torch
    stage is installed, a cached wheel of the same sdist, Python tag and torch version is named
    (the install checks the rest of the key against the torch it installed)."""
    import json

    from envbuild.errors import EnvbuildError
    from envbuild.wheelhouse.build import cache_key, probe_target

    target = None
    if python is not None and python.exists():
        try:
            target = probe_target(python)
        except EnvbuildError:
            target = None
    if target is not None and target.torch_version != plan.torch.version:
        target = None  # the venv's torch is not the one the lock installs
    out = {}
    for p in plan.stage("builds"):
        spec = _placed_spec(p, plan.chosen.path)
        assert spec.source is not None
        found = None
        if target is not None:
            key = cache_key(spec, spec.source, target)
            found = next(
                (
                    c / "wheels" / key[:32]
                    for c in caches
                    if (c / "wheels" / key[:32] / "result.json").is_file()
                ),
                None,
            )
        else:
            tag = "cp" + plan.chosen.env.python.replace(".", "")
            for meta_file in (
                m for c in caches for m in sorted((c / "wheels").glob("*/result.json"))
            ):
                try:
                    parts = json.loads(meta_file.read_text()).get("parts") or {}
                except (OSError, ValueError):
                    continue
                if (
                    parts.get("spec") == spec.digest
                    and parts.get("python") == tag
                    and (parts.get("torch") or {}).get("version") == plan.torch.version
                ):
                    found = meta_file.parent
                    break
        if found is None:
            source = "its git commit" if p.artifact is None else "the sdist"
            out[p.entry.name] = f"no built wheel in cache for this key: compiles from {source}"
            continue
        wheel = json.loads((found / "result.json").read_text())["wheel"]
        out[p.entry.name] = f"built wheel in cache: {found / wheel}"
    return out
