"""pixi.lock (format 6; 5 and 7 where they share its layout): each environment x platform in it.

A pixi.lock is YAML: ``environments`` name, per platform, the files each installs (``- conda:
URL`` and ``- pypi: URL``), and the top-level ``packages`` list describes each file once (its
sha256, a conda package's ``depends``, a PyPI one's ``name``, ``version``, ``requires_dist``).

The gate reads it as any other lock: an entry per file, which applies where its marker holds. The
marker names the (environment, platform) pairs that list the file: the platform as
``sys_platform``/``platform_machine`` (``linux-64`` is ``linux x86_64``, ``osx-arm64`` ``macos
arm64``, ``win-64`` ``windows amd64``; other subdirs are left out, with a note), the Python the
pair installs (its conda ``python``) as ``python_version``, and the environment as a pseudo-extra:
the ``default`` environment is the selection of none, each other one an item of one conflict set
(``--group NAME`` narrows to it). Format 7's named platforms (``{ name = "cuda-linux-64", platform
= "linux-64", cuda = "12" }``) are a second such set over the same subdir.

conda ``pytorch`` is the lock's torch: conda-forge's ``pytorch 2.8.0`` built ``cuda129_mkl_…``
reads as torch ``2.8.0+cu129``, ``cpu_…`` as ``2.8.0+cpu`` (a CUDA build that names no version in
its build string takes it from its ``cuda-version`` dependency), the pytorch channel's
``py3.12_cuda11.8_cudnn8.7.0_0`` as ``+cu118``, so the torch rules, the extension
ABI of PyPI wheels beside it and ``--base`` judge it as any torch. What each conda package
``depends`` on of ``pytorch``/``libtorch`` is kept (``CondaPackage``) for ``rules.conda``, and
its ``depends`` names are its entry's ``dependencies`` (so environments that differ in one are
judged apart); a conda package declares no PyPI requirements (``requires = ()``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from packaging.utils import canonicalize_name

from envbuild.gate.environments import PLATFORMS
from envbuild.gate.model import Entry, Item, LockParseError, ParsedLock

__all__ = ["CONDA_TORCH", "CondaPackage", "SUBDIRS", "conda_packages", "parse"]

# conda subdir -> the gate's platform key
SUBDIRS = {
    "linux-64": "linux-x86_64",
    "linux-aarch64": "linux-aarch64",
    "osx-arm64": "macos-arm64",
    "osx-64": "macos-x86_64",
    "win-64": "windows-amd64",
}
CONDA_TORCH = "pytorch"  # conda-forge's name of torch (``libtorch`` is its C++ half)
READ_VERSIONS = (5, 6, 7)
_CONDA_FILE = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)-(?P<build>[^-]+)\.(?:conda|tar\.bz2)$")


@dataclass(frozen=True)
class CondaPackage:
    """A conda file of the lock: its name, version and build string, and its ``depends`` on
    ``pytorch``/``libtorch`` (match specs as written)."""

    name: str
    version: str
    build: str
    url: str
    torch_depends: tuple[str, ...] = ()
    cuda_version: str | None = None  # from its ``cuda-version`` dependency (">=12.9,<13" -> "12.9")

    def words(self) -> str:
        return f"{self.name} {self.version} ({self.build})"


@dataclass
class _Pair:
    env: str
    platform: str  # the platform's name in the lock
    subdir: str
    python: str | None = None
    urls: list[str] = field(default_factory=list)


def conda_packages(lock: ParsedLock) -> dict[int, CondaPackage]:
    """The conda entries of a pixi lock, by entry key ({} for other formats)."""
    got: dict[int, CondaPackage] = lock.extra.get("conda", {})
    return got


def _yaml(text: str) -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise LockParseError(f"not valid YAML: {exc}") from exc
    except RecursionError as exc:
        raise LockParseError("not valid YAML: nested too deeply") from exc
    if not isinstance(data, dict):
        raise LockParseError("not a pixi lock (no mapping at its top)")
    return data


def torch_version(pkg: CondaPackage) -> str:
    """conda-forge pytorch as a torch version: ``2.8.0`` built ``cuda129_mkl_…`` -> ``+cu129``,
    ``cpu_…`` -> ``2.8.0+cpu``; a CUDA build naming no version takes its ``cuda-version``'s."""
    m = re.match(r"cuda(\d{2,3})(?:_|$)", pkg.build)
    if m:
        return f"{pkg.version}+cu{m.group(1)}"
    # the pytorch channel's ``py3.12_cuda11.8_cudnn8.7.0_0``, ``py3.12_cpu_0``
    m = re.search(r"(?:^|_)cuda(\d{2})\.(\d+)(?:_|$)", pkg.build)
    if m:
        return f"{pkg.version}+cu{m.group(1)}{m.group(2)}"
    if pkg.build.startswith("cpu") or re.search(r"(?:^|_)cpu(?:_|$)", pkg.build):
        return f"{pkg.version}+cpu"
    if (pkg.build.startswith("cuda") or "__cuda" in pkg.torch_depends) and pkg.cuda_version:
        major, _, minor = pkg.cuda_version.partition(".")
        return f"{pkg.version}+cu{major}{minor.split('.')[0] or '0'}"
    return pkg.version


def _depends(info: dict[str, Any]) -> tuple[tuple[str, ...], str | None, bool]:
    """(its ``pytorch``/``libtorch`` specs, ``cuda-version``'s lower bound, whether ``__cuda``)."""
    torch: list[str] = []
    cuda: str | None = None
    needs_cuda = False
    for dep in info.get("depends") or ():
        if not isinstance(dep, str):
            continue
        name = dep.split(" ", 1)[0]
        if name in (CONDA_TORCH, "libtorch"):
            torch.append(dep)
        elif name == "cuda-version":
            m = re.search(r"(?:>=|==|\s)(\d+\.\d+)", dep)
            cuda = m.group(1) if m else cuda
        elif name == "__cuda":
            needs_cuda = True
    return tuple(torch), cuda, needs_cuda


def _dependency_names(info: dict[str, Any]) -> tuple[str, ...]:
    """The names a conda package depends on (``pytorch`` as ``torch``; virtual ``__*`` left out):
    what tells the gate's grouping that a package built against torch is judged."""
    names = []
    for dep in info.get("depends") or ():
        if isinstance(dep, str) and not dep.startswith("__"):
            name = dep.split(" ", 1)[0]
            names.append("torch" if name == CONDA_TORCH else canonicalize_name(name))
    return tuple(dict.fromkeys(names))


def _platforms(data: dict[str, Any]) -> dict[str, str]:
    """Platform name -> conda subdir (format 7 names platforms; before, the name is the subdir)."""
    out: dict[str, str] = {}
    for p in data.get("platforms") or ():
        if isinstance(p, dict) and isinstance(p.get("name"), str):
            out[p["name"]] = str(p.get("subdir") or p["name"])
    return out


def _lines(text: str) -> dict[str, int]:
    """The 1-based line of each top-level package (``- conda: URL`` / ``- pypi: URL``)."""
    out: dict[str, int] = {}
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith(("- conda: ", "- pypi: ", "  url: ")):  # format 5: ``url:`` in the item
            out.setdefault(line.split(": ", 1)[1].strip(), i)
    return out


def _python_of(urls: list[str]) -> str | None:
    for url in urls:
        m = _CONDA_FILE.match(unquote(url.rsplit("/", 1)[-1]))
        if m and m.group("name") == "python":
            parts = m.group("version").split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return f"{parts[0]}.{parts[1]}"
    return None


def parse(path: Path, text: str) -> ParsedLock:
    data = _yaml(text)
    version = data.get("version")
    if not isinstance(version, int) or not isinstance(data.get("environments"), dict):
        raise LockParseError("not a pixi lock (no `version` number and `environments` mapping)")
    if version not in READ_VERSIONS:
        raise LockParseError(
            f"pixi lock format {version}: envbuild reads formats "
            f"{', '.join(map(str, READ_VERSIONS))}"
        )
    names = _platforms(data)
    pairs: list[_Pair] = []
    indexes: list[str] = []
    skipped: set[str] = set()
    for env, body in data["environments"].items():
        if not isinstance(body, dict):
            continue
        indexes += [str(x) for x in body.get("indexes") or () if isinstance(x, str)]
        for plat, listed in (body.get("packages") or {}).items():
            subdir = names.get(str(plat), str(plat))
            if subdir not in SUBDIRS:
                skipped.add(subdir)
                continue
            urls = [
                str(v) for item in listed or () if isinstance(item, dict) for v in item.values()
            ]
            pairs.append(_Pair(str(env), str(plat), subdir, _python_of(urls), urls))
    envs = sorted({p.env for p in pairs}, key=lambda e: (e != "default", e))
    custom = sorted({p.platform for p in pairs if p.platform != p.subdir})
    base = "default" if "default" in envs else (envs[0] if envs else "")  # the selection of none
    env_tag = {e: f"pixi-env-{canonicalize_name(e)}" for e in envs if e != base}
    plat_tag = {p: f"pixi-platform-{canonicalize_name(p)}" for p in custom}

    def where(pair: _Pair) -> str:
        values = PLATFORMS[SUBDIRS[pair.subdir]][1]
        clauses = [
            f"sys_platform == '{values['sys_platform']}'",
            f"platform_machine == '{values['platform_machine']}'",
        ]
        if pair.python:
            clauses.append(f"python_version == '{pair.python}'")
        return " and ".join(clauses)

    def selected(pair: _Pair) -> str:
        clauses = []
        if pair.env in env_tag:
            clauses.append(f"extra == '{env_tag[pair.env]}'")
        else:
            clauses += [f"extra != '{tag}'" for tag in env_tag.values()]
        if pair.platform in plat_tag:
            clauses.append(f"extra == '{plat_tag[pair.platform]}'")
        else:
            clauses += [
                f"extra != '{plat_tag[p]}'"
                for p in custom
                if next(x.subdir for x in pairs if x.platform == p) == pair.subdir
            ]
        return " and ".join(clauses)

    described: dict[str, dict[str, Any]] = {}
    for item in data.get("packages") or ():
        if isinstance(item, dict):
            key = item.get("conda") or item.get("pypi") or item.get("url")  # format 5: kind + url
            if isinstance(key, str):
                described.setdefault(key, item)
    in_pairs: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        for url in pair.urls:
            in_pairs.setdefault(url, []).append(i)
    lines = _lines(text)
    entries: list[Entry] = []
    conda: dict[int, CondaPackage] = {}
    marker_texts: list[str] = []
    pair_markers = [(where(p), selected(p)) for p in pairs]
    for url, at in in_pairs.items():
        info = described.get(url, {})
        parts = [f"({w} and {s})" if s else f"({w})" for w, s in (pair_markers[i] for i in at)]
        marker = " or ".join(dict.fromkeys(parts))
        sha = info.get("sha256") if isinstance(info.get("sha256"), str) else None
        key = len(entries)
        if "conda" in info or info.get("kind") == "conda" or url.endswith((".conda", ".tar.bz2")):
            m = _CONDA_FILE.match(unquote(url.rsplit("/", 1)[-1]))
            if m is None:
                continue
            torch_deps, cuda, needs_cuda = _depends(info)
            pkg = CondaPackage(
                m.group("name"),
                m.group("version"),
                m.group("build"),
                url,
                torch_deps + (("__cuda",) if needs_cuda else ()),
                cuda,
            )
            name, version = str(canonicalize_name(pkg.name)), pkg.version
            if pkg.name == CONDA_TORCH:
                name, version = "torch", torch_version(pkg)
            conda[key] = pkg
            entries.append(
                Entry(
                    key=key,
                    name=name,
                    version=version,
                    raw=f"{pkg.name} {pkg.version} {pkg.build}",
                    line=lines.get(url),
                    hashes=(sha,) if sha else (),
                    files=((url, sha),),
                    requires=(),
                    dependencies=_dependency_names(info),
                    marker=marker,
                )
            )
        else:
            pypi_name = info.get("name")
            if not isinstance(pypi_name, str):
                continue
            name = pypi_name
            requires = tuple(str(r) for r in info.get("requires_dist") or ())
            version = str(info["version"]) if info.get("version") is not None else None
            entries.append(
                Entry(
                    key=key,
                    name=canonicalize_name(name),
                    version=version,
                    raw=f"{name}=={version}" if version else name,
                    line=lines.get(url),
                    hashes=(sha,) if sha else (),
                    files=((url, sha),),
                    requires=requires,
                    marker=marker,
                )
            )
        marker_texts.append(marker)
    out = ParsedLock(
        path,
        "pixi.lock",
        entries,
        list(dict.fromkeys(indexes)),
        environments=list(dict.fromkeys(" and ".join(x for x in m if x) for m in pair_markers)),
        marker_texts=list(dict.fromkeys(marker_texts)),
    )
    out.extra["conda"] = conda
    if env_tag:
        out.conflicts.append(
            [
                Item(
                    f"pixi:{e}",
                    f"environment {e}",
                    frozenset({tag}),
                    name=canonicalize_name(e),
                    kind="group",
                )
                for e, tag in env_tag.items()
            ]
        )
    if plat_tag:
        out.conflicts.append(
            [
                Item(
                    f"pixi-platform:{p}",
                    f"platform {p}",
                    frozenset({tag}),
                    name=canonicalize_name(p),
                    kind="group",
                )
                for p, tag in plat_tag.items()
            ]
        )
    if skipped:
        out.notes.append(
            f"platforms envbuild does not judge were left out: {', '.join(sorted(skipped))}"
        )
    return out
