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

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from envbuild import events
from envbuild._io import sha256_file
from envbuild.fromlock.stages import STAGE_WORDS, Placed, StagePlan
from envbuild.plan import PlannedStep
from envbuild.spec import spec_digest
from envbuild.spec.stagefile import git_note, index_note, noted_git, noted_index
from envbuild.spec.stepfile import logical_lines
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


def _line_spec(line: str, version: str, lock: Path) -> WheelSpec | None:
    """The spec of one requirement line of the builds stage (``name @ URL --hash=sha256:HEX`` or
    ``name @ git+URL@COMMIT[#subdirectory=DIR]``); None for anything else."""
    from envbuild.fromlock.stack import canonical_name

    if (g := _GIT_LINE.match(line.strip())) is not None:
        return git_spec(canonical_name(g["name"]), version, g["url"], g["commit"], g["sub"], lock)
    if (m := _LINE.match(line.strip())) is not None:
        return lock_spec(canonical_name(m["name"]), version, m["url"], m["sha256"], lock)
    return None


def _placed_spec(p: Placed, lock: Path) -> WheelSpec:
    spec = _line_spec(p.line, p.entry.version or "", lock)
    assert spec is not None, p.line  # stages.py writes every builds line in one of the two forms
    return spec


def _step_specs(planned: PlannedStep, lock: Path) -> list[WheelSpec]:
    """The specs of a builds step, from its pinned lines and its ``name==version`` packages: the
    same for a lock's plan and an image's stage slice."""
    from envbuild.fromlock.stack import canonical_name

    assert planned.locked_file is not None
    versions = {canonical_name(p): p.split("==", 1)[1] for p in planned.step.packages if "==" in p}
    out = []
    for _, line, _ in logical_lines(planned.locked_file.read_text(encoding="utf-8")):
        name = line.split("@", 1)[0].strip()
        spec = _line_spec(line, versions.get(canonical_name(name), "") if name else "", lock)
        if spec is not None:
            out.append(spec)
    return out


def _notes(planned: PlannedStep) -> dict[str, str]:
    """{name: its line's note} of a builds step's sources: the wheel built from one is recorded as
    uv sync records that source: an sdist from a package index as an index file
    (``spec.stagefile.index_note``), a git pin as that git install (``git_note``)."""
    from envbuild.fromlock.stack import canonical_name

    assert planned.locked_file is not None
    out = {}
    for _, line, comments in logical_lines(planned.locked_file.read_text(encoding="utf-8")):
        if "@" not in line:
            continue
        name = canonical_name(line.split("@", 1)[0].strip())
        if (index := noted_index(comments)) is not None:
            out[name] = index_note(index)
        elif (git := noted_git(comments)) is not None:
            out[name] = git_note(git.source)
    return out


_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9._-]+)\s*@\s*(?P<url>\S+)\s+--hash=sha256:(?P<sha256>[0-9a-f]{64})$"
)
_GIT_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9._-]+)\s*@\s*git\+(?P<url>\S+?)@(?P<commit>[0-9a-f]{40})"
    r"(?:#subdirectory=(?P<sub>\S+))?$"
)


@dataclass
class BuildCache:
    """The ``prepare_steps`` hook of provision for the builds stage (``ProvisionOptions``)."""

    lock: Path  # named in the wheels' provenance (spec.file)
    caches: tuple[Path, ...]
    out: Path  # the built wheels' copies and the build logs of this data root
    folder: Path  # where the stage's rewritten requirements file goes
    shared: SharedCache | None = None  # the fleet's build cache (--build-cache DIR|URL)
    # {name: where its wheel came from}: the receipt's lock record keeps it (``builds``)
    provenance: dict[str, dict[str, object]] = field(default_factory=dict)

    def __call__(self, planned: PlannedStep, python: Path) -> PlannedStep:
        """The step installing the built wheels (from a cache, else built now) by path and
        sha256."""
        from envbuild.wheelhouse.build import BuildOptions, build, cache_key, probe_target

        lines = []
        base = None
        notes = _notes(planned)
        for spec in map(_with_build_requires, _step_specs(planned, self.lock)):
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
                f"{spec.name} @ {res.wheel.as_uri()} --hash=sha256:{sha256_file(res.wheel)}"
                + notes.get(spec.name, "")
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
    """An sdist whose own build requirements name torch (``fromlock.torchbuilds``, which read them
    into the cache): its other build requirements are the build's (found in the venv, else
    installed beside it for the build, ``wheelhouse.requires``), by their import names."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from envbuild.fromlock.torchbuilds import names_torch
    from envbuild.index.sdistreqs import cached_build_requires

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
