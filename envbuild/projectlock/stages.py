"""The install stages of one environment of a lock, each package with the reason it is there.

A pure function of the lock, the chosen environment and the project's ``pyproject.toml`` (no
network, no venv): ``plan --lock`` prints it, ``provision --lock`` installs it stage by stage
with the ABI guard after each.

1. ``torch``: torch and what its own edges reach in this environment (its CUDA runtime
   ``nvidia-*``, its triton, the pure-Python packages it imports). The ABI baseline and the
   frozen set: no later stage may move any of them.
2. ``extensions``: prebuilt extension wheels: a wheel whose local version claims a torch/CUDA/C++
   ABI (``+cu12torch2.10cxx11abiTRUE``, read by ``envbuild.abitag``; the gate already checked the
   claim against this torch), or a binary wheel of a package that depends on torch; with them
   what they depend on beyond stage 1 (einops for flash-attn), so no stage leaves a requirement
   unmet.
3. ``rest``: everything else, exact files, ``--no-deps``, every file hash-checked.
4. ``builds``: packages with no wheel for this target whose build needs the installed torch: an
   sdist (or git pin) of a known CUDA extension, or one the project lists in ``[tool.uv]
   no-build-isolation(-package)`` / ``extra-build-dependencies`` (and, read from the sdist itself
   after this plan, ``projectlock.torchbuilds``: one whose ``pyproject.toml`` names torch in its
   build requirements). Every other sdist is built
   isolated in its stage, as uv sync builds it, a pure-Python one that merely depends on torch
   (julius) too: its build does not compile against torch. Built without build
   isolation against the torch of stage 1, by the wheelhouse builder into a build cache keyed by
   that torch, Python, CUDA, GPU archs and C++ ABI (``projectlock.builds``): the next venv, host or
   image with the same key installs the cached wheel. They come after ``rest`` because a build
   without isolation finds its build requirements (setuptools, ninja, packaging, psutil) in the
   environment, and the lock installs them there in ``rest`` (uv's own two-phase recipe).
5. ``project``: the project itself, editable, as ``uv sync`` installs it (unless ``--no-project``,
   or the lock says it is virtual: ``package = false``).

Artifacts: per entry, the lock's wheel that installs on the target (the best tag first, as pip
orders them), else its sdist; each installed from the exact URL the lock records, with its
sha256 (``name @ URL --hash=sha256:...``), a file from a package index recorded as uv sync records
it (``Placed.index``: ``spec.stepfile.stage_pylock``).
"""

from __future__ import annotations

import platform as host_platform
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TypedDict
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError, LockError
from envbuild.gate.model import KNOWN_EXTENSIONS, Entry
from envbuild.gate.project import Project, project_of
from envbuild.gate.selection import Chosen, ChosenJSON
from envbuild.gate.uvsync import SyncFlags
from envbuild.index.wheeltags import NEWEST_GLIBC, best_wheel, is_sdist

__all__ = [
    "ORDER",
    "GitPin",
    "LockedFile",
    "Placed",
    "StagePlan",
    "Stage",
    "lock_files",
    "plan_stages",
    "target_tag_order",
]

Stage = Literal["torch", "extensions", "rest", "builds", "project"]
ORDER: tuple[Stage, ...] = ("torch", "extensions", "rest", "builds", "project")
STAGE_WORDS: dict[Stage, str] = {
    "torch": "torch and its runtime (the ABI baseline, frozen after this stage)",
    "extensions": "prebuilt extension wheels, built for this torch",
    "rest": "everything else, --no-deps, hash-checked",
    "builds": "built from source without isolation, against the installed torch",
    "project": "the project itself, editable",
}
_RUNTIME_PREFIXES = ("nvidia-", "triton", "pytorch-triton", "cuda-")


@dataclass(frozen=True)
class LockedFile:
    """One file of a locked entry, as installed: its URL (``file://`` for a path) and sha256."""

    url: str
    sha256: str | None
    filename: str
    # a wheel that installs anywhere (every tag's platform ``any``), as ``pick_artifact`` read it
    pure: bool = False

    @property
    def wheel(self) -> bool:
        return self.filename.endswith(".whl")


@dataclass(frozen=True)
class GitPin:
    """A git pin as installed: the repository's URL (no ``git+``), the commit, the subdirectory."""

    url: str
    commit: str
    subdirectory: str = ""
    # the lock's git source (``URL?rev=REF#COMMIT``), which names the ref uv sync records
    # (``spec.stagefile.git_note``)
    source: str = ""

    @property
    def line(self) -> str:
        """The PEP 508 direct reference, after ``name @ ``."""
        sub = f"#subdirectory={self.subdirectory}" if self.subdirectory else ""
        return f"git+{self.url}@{self.commit}{sub}"


@dataclass(frozen=True)
class Placed:
    """One package of the environment in its stage: why it is there and what is installed."""

    entry: Entry
    stage: Stage
    why: str
    artifact: LockedFile | None = None  # None: a git pin or the project (``line`` says what)
    line: str = ""  # the requirement line the installer reads
    needs_glibc: int | None = None  # its wheel is manylinux_2_N, newer than this host's glibc
    # --rebuild-mismatched: the sdist it is built from (``projectlock.rebuild``)
    rebuilt: dict[str, object] | None = None
    # the lock records no sha256 for its file: taken from the bytes (here, or when downloaded)
    unhashed: bool = False
    # its file comes from a package index (the index's URL; "" where the lock names none), as
    # uv sync records it: no direct_url.json (``spec.stagefile.index_note``); None: a direct URL, a
    # path, a git pin or a folder
    index: str | None = None
    git: GitPin | None = None  # a git pin: where and which commit, and the lock's git source

    @property
    def label(self) -> str:
        return self.entry.label()


class _StagePackageJSON(TypedDict):
    name: str  # the package
    version: str | None  # its locked version (null: not pinned exactly)
    why: str  # why it is in this stage
    file: str | None  # the file installed (null: a git pin or the project)
    sha256: str | None  # that file's sha256


class StagePackageJSON(_StagePackageJSON, total=False):
    """One package of a stage."""

    # built from source (an sdist, a git pin, a folder): "isolated" (as uv sync builds it, its
    # build requirements resolved on their own) or "against torch" (no isolation, the installed
    # torch: the builds stage); ``why`` says why
    build: Literal["isolated", "against torch"]
    rebuilt: dict[str, object]  # --rebuild-mismatched: the sdist it is built from
    unhashed: bool  # true: the lock records no sha256 for its file (taken from the bytes)


class StageJSON(TypedDict):
    """One stage of a lock's install, in order."""

    name: Stage  # the stage
    what: str  # what it holds, in words
    packages: list[StagePackageJSON]  # its packages


class LeftOutJSON(TypedDict):
    """A locked package that is not installed."""

    name: str  # the package
    why: str  # why it is left out


class StagePlanJSON(ChosenJSON):
    """The lock, the environment chosen of it and its stages (``StagePlan.to_json``)."""

    torch: str | None  # the environment's torch version
    stages: list[StageJSON]  # the stages that install something, in order
    left_out: list[LeftOutJSON]  # locked but not installed


@dataclass
class StagePlan:
    chosen: Chosen
    torch: Entry
    placed: list[Placed]
    # (name, why): locked but not installed
    left_out: list[tuple[str, str]] = field(default_factory=list)
    no_build_isolation: frozenset[str] = frozenset()

    def stage(self, name: Stage) -> list[Placed]:
        return [p for p in self.placed if p.stage == name]

    @property
    def stages(self) -> list[Stage]:
        return [s for s in ORDER if self.stage(s)]

    def to_json(self) -> StagePlanJSON:
        return {
            **self.chosen.to_json(),
            "torch": self.torch.version,
            "stages": [
                {
                    "name": s,
                    "what": STAGE_WORDS[s],
                    "packages": [_package_json(p) for p in self.stage(s)],
                }
                for s in self.stages
            ],
            "left_out": [{"name": n, "why": w} for n, w in self.left_out],
        }


def _package_json(p: Placed) -> StagePackageJSON:
    out: StagePackageJSON = {
        "name": p.entry.name,
        "version": p.entry.version,
        "why": p.why,
        "file": p.artifact.filename if p.artifact else None,
        "sha256": p.artifact.sha256 if p.artifact else None,
    }
    if p.stage == "builds":
        out["build"] = "against torch"
    elif p.artifact is None or not p.artifact.wheel:
        out["build"] = "isolated"
    if p.rebuilt:
        out["rebuilt"] = p.rebuilt
    if p.unhashed:
        out["unhashed"] = True
    return out


# ----------------------------------------------------------------------------- target tags


def target_tag_order(python: str, platform_name: str, *, glibc: int | None = None) -> list[str]:
    """The wheel tags the target installs, best first (pip's order), as ``py-abi-plat`` strings,
    from the one owner of tags (``envbuild.index.wheeltags``): this interpreter's own on this host;
    Linux: manylinux up to this host's glibc (2.28 on another system), or up to 2.``glibc``."""
    from envbuild.index.wheeltags import host_python, host_tags, platform_tags

    if python == host_python() and _host_words() == platform_name and glibc is None:
        return [str(t) for t in host_tags()]
    if platform_name.startswith("linux") and glibc is None:
        glibc = (host_glibc() if _host_words().startswith("linux") else None) or 28
    return [str(t) for t in platform_tags(python, platform_name, glibc=glibc)]


def _glibc_of(filename: str) -> int | None:
    """The glibc minor a manylinux wheel needs (``manylinux_2_39_x86_64`` -> 39), the lowest of its
    tags."""
    import re

    found = [int(m) for m in re.findall(r"manylinux_2_(\d+)_", filename)]
    return min(found) if found else None


def host_glibc() -> int | None:
    """This host's glibc minor (2.36 -> 36); None off glibc."""
    lib, ver = host_platform.libc_ver()
    return int(ver.split(".")[1]) if lib == "glibc" and ver.count(".") >= 1 else None


def _host_glibc_text() -> str:
    minor = host_glibc()
    return f"2.{minor}" if minor is not None else "no glibc"


def _host_words() -> str:
    from envbuild.gate.selection import host_platform_key

    return host_platform_key().replace("-", " ")


def lock_files(entry: Entry, folder: Path, path_source: str | None = None) -> list[LockedFile]:
    """The files the lock names for ``entry`` (a lock in ``folder``): the one reader of them.
    uv.lock writes a direct-URL sdist's hash alone (``sdist = { hash }``): its URL is the entry's
    source URL. ``path_source``: uv.lock's ``source = { path = ... }`` of a
    wheel or sdist locked from a file (relative to the lock's folder, or absolute); its files are
    named by file name only, and lie there."""
    if not entry.files and entry.url and len(entry.hashes) == 1:
        name = unquote(urlsplit(entry.url).path.rsplit("/", 1)[-1])
        return [LockedFile(entry.url, entry.hashes[0], name)]
    # a path sdist: its hash alone
    if path_source is not None and not entry.files and len(entry.hashes) <= 1:
        path = (folder / path_source).resolve()
        return [LockedFile(path.as_uri(), entry.hashes[0] if entry.hashes else None, path.name)]
    out = []
    for where, sha in entry.files:
        parts = urlsplit(where)
        if parts.scheme in ("http", "https", "file"):
            url = where
            name = unquote(parts.path.rsplit("/", 1)[-1])
        else:
            base = _local_index(entry.index, folder) or folder
            if path_source is not None:
                source = folder / path_source
                base = (
                    source.parent
                    if source.name == Path(where).name or not source.is_dir()
                    else source
                )
            path = (base / where).resolve()
            url, name = path.as_uri(), path.name
        out.append(LockedFile(url, sha, name))
    return out


def _local_index(index: str | None, folder: Path) -> Path | None:
    """The folder of a local flat index (uv.lock's ``source = { registry = "wheels" }``, relative to
    the lock's folder, or a ``file://`` URL): its wheels are named by path within it."""
    if not index:
        return None
    parts = urlsplit(index)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme in ("http", "https"):
        return None
    return folder / index


def pick_artifact(
    entry: Entry, folder: Path, order: dict[str, int], path_source: str | None = None
) -> LockedFile | None:
    """The entry's wheel that installs on the target (the best tag, and whether it is pure:
    ``wheeltags.best_wheel``), else its sdist, else None."""
    arts = lock_files(entry, folder, path_source)
    wheels = [a for a in arts if a.wheel]
    pick = best_wheel([a.filename for a in wheels], order)
    if pick is not None:
        return replace(wheels[pick.at], pure=pick.pure)
    return next((a for a in arts if is_sdist(a.filename)), None)


# ----------------------------------------------------------------------------- the project's build
# settings


@dataclass(frozen=True)
class BuildSettings:
    """``[tool.uv]`` of the project beside the lock: what uv builds without isolation."""

    no_isolation: frozenset[str] = frozenset()
    all_without_isolation: bool = False
    extra_build: frozenset[str] = frozenset()


def build_settings(project: Project | Path) -> BuildSettings:
    """``[tool.uv]``'s build settings of the project (or of the one beside the lock at a path)."""
    return _settings_of(project_of(project))


def _settings_of(project: Project) -> BuildSettings:
    uv = project.tool_uv
    names = uv.get("no-build-isolation-package") or []
    extra = uv.get("extra-build-dependencies") or {}
    return BuildSettings(
        no_isolation=frozenset(str(canonicalize_name(str(n))) for n in names if isinstance(n, str)),
        all_without_isolation=uv.get("no-build-isolation") is True,
        extra_build=(
            frozenset(str(canonicalize_name(str(n))) for n in extra)
            if isinstance(extra, dict)
            else frozenset()
        ),
    )


# ----------------------------------------------------------------------------- classification


def _torch_reach(torch: Entry, by_name: dict[str, Entry]) -> dict[str, str]:
    """{name: why} of what torch's edges reach in this environment (by name, marker already applied:
    only members are followed). A format that records no edges: torch's runtime by name."""
    if torch.dependencies is None:
        return {
            n: "torch's CUDA runtime / triton (the lock records no edges: by name)"
            for n in by_name
            if n != torch.name and n.startswith(_RUNTIME_PREFIXES)
        }
    out: dict[str, str] = {}
    todo = [(torch.name, d) for d in torch.dependencies]
    while todo:
        parent, name = todo.pop()
        if name in out or name == torch.name or name not in by_name:
            continue
        out[name] = (
            "torch depends on it"
            if parent == torch.name
            else f"torch's runtime: {parent} depends on it"
        )
        todo += [(name, d) for d in by_name[name].dependencies or ()]
    return out


def _depends_on_torch(entry: Entry) -> bool:
    """Whether the entry depends on torch: an edge to it, else a declared requirement on it
    (``torch``, ``torch>=2``, ``torch[opt]``, ``torch (>=2)``, ``torch @ URL``; any marker)."""
    if entry.dependencies is not None and "torch" in entry.dependencies:
        return True
    return any(_names_torch(r) for r in entry.requires or ())


def _names_torch(requirement: str) -> bool:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return canonicalize_name(Requirement(requirement).name) == "torch"
    except InvalidRequirement:
        return False


def _claim(entry: Entry, art: LockedFile | None) -> str | None:
    from envbuild.abitag import parse_claim

    for text in (entry.version or "", art.filename if art else ""):
        if text and "+" in text and parse_claim(text) is not None:
            return text.split("+", 1)[1].split("-", 1)[0]
    return None


BASE_TORCH_KEY = -1  # the entry that stands for a base environment's torch the lock leaves to it


def plan_stages(
    chosen: Chosen, *, project: bool = True, base_torch: str | None = None
) -> StagePlan:
    """The stages of ``chosen`` (see the module docstring). ConfigError (exit 2): no torch, two
    torches, an entry with no file for this target. ``base_torch``: the version of the torch the
    target environment (``--venv``) already has; a lock that installs no torch (it leaves torch to
    a base image) is planned onto it, that torch the baseline."""
    entries, torch = _the_torch(chosen, base_torch)
    by_name = {e.name: e for e in entries}
    tags = _TagOrder(chosen.env.python, chosen.env.platform)
    folder = chosen.path.parent
    settings = _settings_of(chosen.source.project)
    sources = chosen.sources
    runtime = _torch_reach(torch, by_name)
    plan = StagePlan(
        chosen, torch, [], no_build_isolation=settings.no_isolation | settings.extra_build
    )
    root_name = chosen.source.project.name
    for e in sorted(entries, key=lambda x: (x.name, x.key)):
        if e.key == BASE_TORCH_KEY:  # the base environment's: adopted, never installed
            continue
        source = sources.get(e.key, {})
        if e.key in chosen.members.roots or any(
            k in source for k in ("editable", "virtual", "directory")
        ):
            _project(plan, e, source, folder, project, chosen.flags, root_name)
            continue
        if "git" in source:
            plan.placed.append(_git(e, source, runtime, settings))
            continue
        path_source = str(source["path"]) if isinstance(source.get("path"), str) else None
        plan.placed.append(_placed_file(chosen, e, path_source, tags, runtime, settings, torch))
    _with_extension_deps(plan, by_name)
    return plan


def _the_torch(chosen: Chosen, base_torch: str | None) -> tuple[list[Entry], Entry]:
    """The entries to plan and the one torch among them (the base environment's, standing in for
    none); ConfigError for none or several."""
    entries = chosen.members.entries
    torches = [e for e in entries if e.name == "torch"]
    if not torches and base_torch is not None:
        torches = [
            Entry(key=BASE_TORCH_KEY, name="torch", version=base_torch, raw=f"torch=={base_torch}")
        ]
        entries = [*entries, torches[0]]
    if len(torches) != 1:
        what = "installs no torch" if not torches else f"installs {len(torches)} torch entries"
        raise ConfigError(
            f"{chosen.path}: {chosen.env.name} {what}; provision --lock installs a torch stack "
            "with torch as its ABI baseline",
            hint=_torch_choices(chosen),
        )
    return entries, torches[0]


@dataclass
class _TagOrder:
    """The target's wheel tags in preference order (tag -> rank), and, taken once when first
    asked, those of the newest glibc (a wheel for a newer glibc than this host's: the target host
    may have it)."""

    python: str
    platform: str
    order: dict[str, int] = field(init=False)
    newer: dict[str, int] | None = None

    def __post_init__(self) -> None:
        self.order = {t: i for i, t in enumerate(target_tag_order(self.python, self.platform))}

    def newest_glibc(self) -> dict[str, int]:
        if not self.newer:
            tags = target_tag_order(self.python, self.platform, glibc=NEWEST_GLIBC)
            self.newer = {t: i for i, t in enumerate(tags)}
        return self.newer


def _placed_file(
    chosen: Chosen,
    e: Entry,
    path_source: str | None,
    tags: _TagOrder,
    runtime: dict[str, str],
    settings: BuildSettings,
    torch: Entry,
) -> Placed:
    """An entry installed from one of its locked files: the file for this target (hashed here
    when the lock records no sha256), its stage and why."""
    folder = chosen.path.parent
    art, needs = _pick_file(chosen, e, path_source, tags)
    unhashed = not art.sha256
    if unhashed:
        art = _hash_local(art)
    stage, why = _classify(e, art, torch, runtime, settings)
    if needs is not None:
        why += f"; its wheel needs glibc 2.{needs} (this host has {_host_glibc_text()})"
    if unhashed:
        why += (
            "; the lock records no sha256: "
            + (
                "that of the file as found here is pinned"
                if art.sha256
                else "the file's is taken when it is downloaded"
            )
            + ", and required from then on"
        )
    line = (
        f"{e.name} @ {art.url} --hash=sha256:{art.sha256}"
        if art.sha256
        else f"{e.name} @ {art.url}"
    )
    return Placed(
        e,
        stage,
        why,
        art,
        line,
        needs_glibc=needs,
        unhashed=unhashed,
        index=_index_of(e, folder) if e.url is None and path_source is None else None,
    )


def _pick_file(
    chosen: Chosen, e: Entry, path_source: str | None, tags: _TagOrder
) -> tuple[LockedFile, int | None]:
    """The entry's file for this target, else (Linux) one for a newer glibc, with the glibc minor
    it needs; ConfigError when the lock has none."""
    folder = chosen.path.parent
    art = pick_artifact(e, folder, tags.order, path_source)
    needs = None
    if art is None and chosen.env.platform.startswith("linux"):
        # a wheel for a newer glibc than this host's: the target host may have it (plan, an image)
        art = pick_artifact(e, folder, tags.newest_glibc(), path_source)
        needs = _glibc_of(art.filename) if art is not None else None
    if art is None:
        files = ", ".join(a.filename for a in lock_files(e, folder, path_source)[:3]) or "no files"
        raise ConfigError(
            f"{chosen.path}: {e.label()}: the lock has no file that installs on Python "
            f"{chosen.env.python} {chosen.env.platform} ({files})",
            hint="Re-lock for this platform, or provision on a host the lock is made for.",
        )
    return art, needs


def _index_of(e: Entry, folder: Path) -> str:
    """The URL of the index an entry's file comes from ("" where the lock names none): a local flat
    index (a folder beside the lock) as a ``file://`` URL."""
    local = _local_index(e.index, folder)
    if local is not None:
        return local.resolve().as_uri()
    return e.index or ""


def _hash_local(art: LockedFile) -> LockedFile:
    """A file the lock records no hash for: a local one is hashed now (the bytes the installer
    reads); a remote one keeps ``sha256=None`` until provision downloads it
    (``projectlock.unhashed.pin_unhashed``)."""
    from dataclasses import replace as _replace

    from envbuild.index.client import local_sha256

    parts = urlsplit(art.url)
    if parts.scheme != "file":
        return art
    path = Path(unquote(parts.path))
    try:
        return _replace(art, sha256=local_sha256(path))
    except OSError as exc:
        raise ConfigError(
            f"{path}: the lock's file for {art.filename} cannot be read ({exc.strerror or exc})",
            hint="The lock names files beside it: keep them there, or re-lock.",
        ) from exc


def unhashed(plan: StagePlan) -> list[Placed]:
    """The packages whose file the lock records no sha256 for."""
    return [p for p in plan.placed if p.unhashed]


def _with_extension_deps(plan: StagePlan, by_name: dict[str, Entry]) -> None:
    """What the prebuilt extensions depend on (beyond torch's stage) installs with them, so each
    stage finds its requirements installed (the guard names the unmet ones of a ``--no-deps`` step).
    """
    stage_of = {p.entry.name: i for i, p in enumerate(plan.placed)}
    todo = [
        (p.entry.name, d)
        for p in plan.placed
        if p.stage == "extensions"
        for d in p.entry.dependencies or ()
    ]
    while todo:
        parent, name = todo.pop()
        i = stage_of.get(name)
        if i is None or plan.placed[i].stage != "rest":
            continue
        p = plan.placed[i]
        plan.placed[i] = replace(p, stage="extensions", why=f"{parent} depends on it")
        todo += [(name, d) for d in by_name[name].dependencies or ()]


def _torch_choices(chosen: Chosen) -> str:
    words = chosen.choices
    flags = ", ".join(
        dict.fromkeys(
            f"--{w.split(' ', 1)[0]} {w.split(' ', 1)[1]}"
            for w in words
            if w.split(" ", 1)[0] in ("extra", "group")
        )
    )
    if flags:
        return f"Choose the selection that installs torch: {flags}."
    # locked, but every edge to it is marked off
    if any(e.name == "torch" for e in chosen.lock.entries):
        return (
            'The lock leaves torch to a base image (e.g. `override-dependencies = ["torch;'
            " sys_platform == 'never'\"]`), so it pins no torch to install: provision onto the"
            " image's environment, whose torch becomes the baseline (`--venv <its prefix>`; what"
            " depends on torch is checked against it)."
        )
    return "Check which environments install torch with `envbuild check-lock`."


def _classify(
    e: Entry, art: LockedFile, torch: Entry, runtime: dict[str, str], settings: BuildSettings
) -> tuple[Stage, str]:
    if e is torch:
        return "torch", "the ABI baseline"
    if e.name in runtime:
        return "torch", runtime[e.name]
    if art.wheel:
        return _wheel_stage(e, art)
    needs_torch = _builds_against_torch(e, settings)
    if needs_torch:
        return "builds", f"sdist; {needs_torch}"
    return "rest", _ISOLATED_USES if _depends_on_torch(e) else _ISOLATED


def _wheel_stage(e: Entry, art: LockedFile) -> tuple[Stage, str]:
    """A wheel's stage: an extension where it is binary and depends on torch, or where its version
    claims a torch ABI (``+cu128torch2.10...``, read by ``envbuild.abitag``); else ``rest``."""
    binary = not art.pure
    claim = _claim(e, art)
    if claim:
        return (
            "extensions",
            f"prebuilt extension: its version claims the ABI it was built for (+{claim})",
        )
    if binary and _depends_on_torch(e):
        return "extensions", "prebuilt binary wheel of a package that depends on torch"
    return "rest", (
        "no torch in it" if not _depends_on_torch(e) else "pure-Python package that uses torch"
    )


_ISOLATED = "sdist: built isolated, as uv sync builds it (no torch in its build)"
_ISOLATED_USES = (
    "sdist of a package that uses torch: built isolated, as uv sync builds it (not a known CUDA"
    " extension, nor named by [tool.uv] no-build-isolation-package / extra-build-dependencies:"
    " its build does not compile against torch)"
)


def _builds_against_torch(e: Entry, settings: BuildSettings) -> str | None:
    """Why a package built from source (an sdist, a git pin) needs the installed torch at build
    time, or None: its build then runs isolated, as the locker's does."""
    if e.name in settings.no_isolation or settings.all_without_isolation:
        return "[tool.uv] no-build-isolation-package names it: its build imports torch"
    if e.name in settings.extra_build:
        return "[tool.uv] extra-build-dependencies names it: its build needs the installed torch"
    if e.name in KNOWN_EXTENSIONS:
        return "a known CUDA extension: its build compiles against the installed torch"
    return None


def _project(
    plan: StagePlan,
    e: Entry,
    source: Mapping[str, str],
    folder: Path,
    wanted: bool,
    flags: SyncFlags,
    root_name: str | None,
) -> None:
    """The project, a workspace member or a local folder the lock points at, as ``uv sync`` installs
    it: editable where the lock says so (unless ``--no-editable``), left out by
    ``--no-install-project`` (the project) and ``--no-install-workspace`` (every workspace
    member)."""
    if "virtual" in source or not source:
        plan.left_out.append(
            (
                e.name,
                "the project is virtual (package = false): "
                "the locker installs only its dependencies",
            )
        )
        return
    is_root = e.name == root_name if root_name else source.get("editable") == "."
    if is_root and not wanted:
        plan.left_out.append((e.name, "--no-install-project"))
        return
    if flags.no_install_workspace and (is_root or "editable" in source):
        plan.left_out.append((e.name, "--no-install-workspace"))
        return
    where = (folder / str(source.get("editable") or source.get("directory") or ".")).resolve()
    editable = "editable" in source and not flags.no_editable
    what = (
        "the project itself"
        if is_root
        else ("a workspace member" if "editable" in source else "a local folder the lock names")
    )
    how = (
        "editable, as uv sync installs it"
        if editable
        else (
            "not editable (--no-editable)"
            if "editable" in source
            else "from its folder, as uv sync installs it"
        )
    )
    plan.placed.append(
        Placed(
            e,
            "project",
            f"{what}, {how}",
            None,
            f"-e {where}" if editable else f"{e.name} @ {where.as_uri()}",
        )
    )


def _git(
    e: Entry, source: Mapping[str, str], runtime: dict[str, str], settings: BuildSettings
) -> Placed:
    """A git pin: installed from its commit. One whose build needs torch (as ``_classify`` says of
    an sdist: named in the project's no-build-isolation settings, depending on torch, or a known
    CUDA extension) goes to the builds stage, built without isolation against the installed
    torch."""
    from urllib.parse import parse_qs

    raw = str(source["git"])
    parts = urlsplit(raw)
    commit = parts.fragment
    if len(commit) != 40:
        raise LockError(
            f"{e.label()}: the git source {raw} is not pinned to a commit", hint="Re-lock it."
        )
    base = parts._replace(query="", fragment="").geturl()
    git = GitPin(base, commit, (parse_qs(parts.query).get("subdirectory") or [""])[0], raw)
    line = f"{e.name} @ {git.line}"
    pinned = f"git pin at {commit[:12]} (no file hash: pinned by its commit)"
    if e.name in runtime:
        return Placed(e, "torch", pinned, None, line, git=git)
    needs_torch = _builds_against_torch(e, settings)
    return Placed(
        e,
        "builds" if needs_torch else "rest",
        f"{pinned}; {needs_torch}" if needs_torch else pinned,
        None,
        line,
        git=git,
    )
