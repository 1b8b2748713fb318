"""The stack spec (``lockfiles/<profile>/stack.toml``): load, validate, freeze.

One frozen object, validated once (after cibuildwheel's ``options.py`` and packaging's
``pylock``): unknown keys get a ``difflib`` suggestion, every error names the file, the
key path (``step[3].no_deps``) and what is allowed. Indexes in key paths count from 1, as the
step numbers do everywhere else (``step[2]`` is the second ``[[step]]``, shown as step 2/N).
``${VAR}``, ``${VAR:-default}`` (default when unset or empty) and ``${VAR-default}`` (default only
when unset) expand from the environment in every string value; an unset variable without a default
is an error naming it.

Every input is checked here, before anything touches disk or network (docs/reference/manual.md, "The
stack spec" lists what is refused and why): a string holding a control character or line break
(after ``${VAR}`` expansion), an ``[env]`` name that is not a variable name, a requirement
``packaging`` cannot parse, an index or find-links location with another scheme than http, https or
file, a stack or package name outside its character set, a ``layout.venv`` outside the data root. An
``[env]`` value may come from the environment of the process that provisions instead of the
file (``HF_TOKEN = { from_env = "HF_TOKEN" }``): it is never written anywhere (``EnvFrom``).
A literal value under a name that looks like a secret gets a warning (``StackSpec.warnings``,
emitted by ``load_spec``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from envbuild import events
from envbuild.errors import ConfigError
from envbuild.quoting import ENV_NAME
from envbuild.spec._toml import TomlReader, did_you_mean, read_toml, variables

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - exercised on 3.10 only
    pass

SCHEMA_VERSION = 1
UpgradeStrategy = Literal["only-if-needed", "eager"]
UPGRADE_STRATEGIES: tuple[UpgradeStrategy, ...] = get_args(UpgradeStrategy)

_PY = re.compile(r"^3\.\d{1,2}$")
_STEP_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_STACK_NAME = _STEP_NAME  # it names files (docker/<name>.Dockerfile), folders and image tags
_PROTECT = re.compile(r"^[A-Za-z0-9._*?\[\]!-]+$")  # a project name or an fnmatch pattern of one
_CUDA = re.compile(r"^\d{1,3}\.\d{1,3}$")
_VENV_PART = re.compile(r"^[A-Za-z0-9_.+@-]+$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
SOURCE_SCHEMES = ("https", "http", "file")
# Names whose value is a credential: a literal one is written into the overlay, plans and images.
# TOKEN followed by a letter is not one (TOKENIZERS_PARALLELISM).
# [env] names the overlay cannot hold: a shell runs their value as commands (BASH_ENV,
# PROMPT_COMMAND, PS1 with $(...), an exported function), or keeps its own value whatever a sourced
# file says (read-only and dynamic variables: sourcing an overlay that sets BASHOPTS fails, RANDOM
# changes).
SHELL_RESERVED = frozenset(
    {
        "_",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS0",
        "PS1",
        "PS2",
        "PS3",
        "PS4",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "BASH_VERSINFO",
        "BASH_VERSION",
        "EUID",
        "UID",
        "PPID",
        "RANDOM",
        "SRANDOM",
        "SECONDS",
        "LINENO",
        "BASHPID",
        "EPOCHSECONDS",
        "EPOCHREALTIME",
        "HISTCMD",
        "BASH_ARGV0",
        "BASH_COMMAND",
        "BASH_SUBSHELL",
        "FUNCNAME",
        "GROUPS",
        "DIRSTACK",
        "BASH_LINENO",
        "BASH_SOURCE",
        "BASH_ARGC",
        "BASH_ARGV",
        "BASH_REMATCH",
        "BASH_CMDS",
        "BASH_ALIASES",
        "PIPESTATUS",
        "OPTIND",
        "OPTARG",
        "COMP_WORDBREAKS",
        "BASH_XTRACEFD",
        "BASH_LOADABLES_PATH",
    }
)
SECRET_NAME = re.compile(r"TOKEN(?![A-Z])|PASSWORD|PASSWD|SECRET|CREDENTIAL|_KEY$|^KEY$", re.I)
_PROJECT = re.compile(r"^([A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9])$")  # PEP 508 names


@dataclass(frozen=True, kw_only=True)
class EnvFrom:
    """``NAME = { from_env = "NAME", required = true }``: the value of ``NAME`` is the one in the
    environment of the process that runs envbuild, passed to what envbuild starts under the same
    name and never written by envbuild (overlay, plan, lock, logs, receipts, Dockerfile, image:
    there a build secret, ``RUN --mount=type=secret,id=NAME``)."""

    name: str
    required: bool = True


@dataclass(frozen=True, kw_only=True)
class Step:
    """One ordered install step and its installer policy."""

    name: str
    packages: tuple[str, ...]
    index_url: str | None = None  # None: the installer's configured sources (pip.conf, PIP_*)
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    pre: bool = False
    no_deps: bool = False
    no_build_isolation: bool = False
    upgrade: bool = False
    upgrade_strategy: UpgradeStrategy = "only-if-needed"
    reinstall: bool = False
    no_index: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    # taken from the provisioning process
    env_from: Mapping[str, EnvFrom] = field(default_factory=dict)
    # packages an earlier step pinned that this step may pin at another version (canonical names);
    # without it a step must agree with every earlier step's pins (the lock and the guard hold it)
    replaces: tuple[str, ...] = ()
    # the environment variables its index_url, extra_index_urls and find_links were expanded from
    # (``${ENVBUILD_TORCH_INDEX-...}``): what an error about those sources names
    source_vars: tuple[str, ...] = ()

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return tuple(Requirement(p) for p in self.packages)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(canonicalize_name(r.name) for r in self.requirements)


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """Files owned by two distributions that the stack knowingly accepts; ``winner`` must own
    them."""

    packages: tuple[str, ...]
    winner: str


@dataclass(frozen=True, kw_only=True)
class ABI:
    package: str = "torch"
    version: str
    local: str | None = None
    cuda: str | None = None
    protect: tuple[str, ...] = ()  # canonical names or fnmatch patterns ("nvidia-*")
    triton_provider: str | None = None  # the distribution allowed to own the `triton` module
    adopt: bool = False  # torch comes from the base environment; never installed by a step
    overlaps: tuple[Overlap, ...] = ()

    def is_version(self, runtime: str, dist: str | None = None) -> bool:
        """Whether a torch whose ``__version__`` is ``runtime`` (and whose distribution version is
        ``dist``) is this baseline. A package index publishes torch as ``2.6.0`` while it says
        ``2.6.0+cu124`` at run time: a baseline pinned without a local tag (``abi.version = 2.6.0``,
        a lock's pin) is that distribution, its run-time tag the build's CUDA, not another version.
        """
        if self.version in (runtime, dist):
            return True
        return (
            "+" not in self.version
            and runtime.split("+", 1)[0] == self.version
            and dist in (None, self.version)
        )

    def is_protected(self, name: str) -> bool:
        n = canonicalize_name(name)
        if n == canonicalize_name(self.package):
            return True
        return any(
            fnmatch.fnmatchcase(n, canonicalize_name(p) if "*" not in p else p)
            for p in self.protect
        )


@dataclass(frozen=True, kw_only=True)
class Layout:
    root: str = "/mnt/data"
    links: Mapping[str, str] = field(default_factory=dict)  # $HOME/<key> -> <root>/<value>
    venv: str = "venv"  # venv folder, relative to root
    separate_root_fs: bool = False  # warn when the data root is on the / filesystem
    min_free_gb: float = 1.0  # free space the data root must have before provisioning


@dataclass(frozen=True, kw_only=True)
class Host:
    """What preflight expects of the machine (all optional)."""

    driver_min: str | None = None
    gpu_count: int | None = None
    gpu_name: str | None = None
    cuda_toolkit: str | None = None
    gcc: str | None = None
    root_min_free_gb: float | None = None
    data_min_free_gb: float | None = None


_TARGET_PLATFORM = re.compile(r"^manylinux_2_(?P<glibc>\d{2})_(?P<arch>x86_64|aarch64)$")
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"


@dataclass(frozen=True, kw_only=True)
class Target:
    """What a lock resolves for: the stack's Python (``StackSpec.python``) on this platform.

    ``platform`` is the wheel platform tag of the hosts the stack runs on (glibc and CPU),
    whatever machine makes the lock; ``uv pip compile --python-platform`` takes it as
    ``uv_platform`` and ``pip install --platform`` as written.
    """

    platform: str = DEFAULT_PLATFORM

    @property
    def arch(self) -> str:
        m = _TARGET_PLATFORM.match(self.platform)
        assert m, self.platform
        return m.group("arch")

    @property
    def glibc(self) -> tuple[int, int]:
        m = _TARGET_PLATFORM.match(self.platform)
        assert m, self.platform
        return (2, int(m.group("glibc")))

    @property
    def uv_platform(self) -> str:
        """``manylinux_2_28_x86_64`` -> ``x86_64-manylinux_2_28`` (uv's ``--python-platform``)."""
        return f"{self.arch}-manylinux_{self.glibc[0]}_{self.glibc[1]}"


@dataclass(frozen=True, kw_only=True)
class StackSpec:
    path: Path
    name: str
    python: str
    abi: ABI
    layout: Layout
    host: Host
    env: Mapping[str, str]
    steps: tuple[Step, ...]
    digest: str  # sha256 of the canonical *unexpanded* spec data: what a lock is checked against
    description: str = ""
    target: Target = field(default_factory=Target)  # [target]: the platform locks resolve for
    # [env] values from the environment
    env_from: Mapping[str, EnvFrom] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()  # said once by load_spec (a literal secret, a password in a URL)

    def env_refs(self) -> list[tuple[str, EnvFrom]]:
        """Every ``from_env`` value with its key path: ``[env]``'s, then each step's."""
        out = [(f"env.{k}", ref) for k, ref in self.env_from.items()]
        for i, s in enumerate(self.steps, 1):
            out += [(f"step[{i}].env.{k}", ref) for k, ref in s.env_from.items()]
        return out

    def missing_env(
        self, environ: Mapping[str, str], steps: tuple[str, ...] | None = None
    ) -> list[str]:
        """Key paths of required ``from_env`` values of ``steps`` (all when None) that ``environ``
        does not set (or sets empty): what provision refuses to start without."""
        missing = []
        for i, s in enumerate(self.steps, 1):
            if steps is not None and s.name not in steps:
                continue
            missing += [
                f"step[{i}].env.{k}"
                for k, ref in s.env_from.items()
                if ref.required and not environ.get(k)
            ]
        return missing

    @property
    def baseline_index(self) -> int | None:
        """Index of the step that installs the ABI package (None when adopted from the base)."""
        target = canonicalize_name(self.abi.package)
        for i, step in enumerate(self.steps):
            if target in step.names:
                return i
        return None

    def step(self, name: str) -> Step:
        for s in self.steps:
            if s.name == name:
                return s
        raise ConfigError(
            f"{self.path}: no step named {name!r}; steps are:"
            f" {', '.join(s.name for s in self.steps)}"
            + did_you_mean(name, [s.name for s in self.steps])
        )


# ----------------------------------------------------------------------------- loading


_TOP_KEYS = (
    "schema",
    "name",
    "description",
    "python",
    "target",
    "layout",
    "abi",
    "host",
    "env",
    "step",
)
_TARGET_KEYS = ("platform",)
_LAYOUT_KEYS = ("root", "links", "venv", "separate_root_fs", "min_free_gb")
_ABI_KEYS = (
    "package",
    "version",
    "local",
    "cuda",
    "protect",
    "triton_provider",
    "adopt",
    "overlap",
)
_OVERLAP_KEYS = ("packages", "winner")
_HOST_KEYS = (
    "driver_min",
    "gpu_count",
    "gpu_name",
    "cuda_toolkit",
    "gcc",
    "root_min_free_gb",
    "data_min_free_gb",
)
_STEP_KEYS = (
    "name",
    "packages",
    "index_url",
    "extra_index_urls",
    "find_links",
    "pre",
    "no_deps",
    "no_build_isolation",
    "upgrade",
    "upgrade_strategy",
    "reinstall",
    "no_index",
    "env",
    "replaces",
)


def spec_digest(data: Mapping[str, Any]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def load_spec(path: Path, environ: Mapping[str, str] | None = None) -> StackSpec:
    """Read and validate ``path``; raises ``ConfigError`` with the file and key path."""
    env = os.environ if environ is None else environ
    spec = parse_spec(read_toml(path, "stack spec"), path, env)
    for warning in spec.warnings:
        events.emit("warn", warning)
    return spec


def parse_spec(data: Mapping[str, Any], path: Path, environ: Mapping[str, str]) -> StackSpec:
    r = TomlReader(path, environ)
    r.check_keys(data, _TOP_KEYS, "")
    name, python = _parse_header(r, data)
    layout = _parse_layout(r, r.table(data, "layout"))
    abi = _parse_abi(r, r.table(data, "abi"))
    host = _parse_host(r, r.table(data, "host"))
    warnings: list[str] = []
    env, env_from = _parse_env(r, data, "", warnings)
    steps = _parse_steps(r, data.get("step"), warnings)
    spec = StackSpec(
        path=path,
        name=name,
        description=r.str_(data, "description", "", ""),
        python=python,
        abi=abi,
        layout=layout,
        host=host,
        env=env,
        env_from=env_from,
        steps=steps,
        digest=spec_digest(data),
        target=_parse_target(r, r.table(data, "target")),
        warnings=tuple(warnings),
    )
    _check_baseline(r, spec)
    return spec


def _parse_header(r: TomlReader, data: Mapping[str, Any]) -> tuple[str, str]:
    """The schema (this envbuild's), the stack's name and its Python (major.minor)."""
    schema = data.get("schema")
    if schema != SCHEMA_VERSION:
        raise r.fail(
            "schema",
            f"must be {SCHEMA_VERSION} (this envbuild reads schema {SCHEMA_VERSION}), got"
            f" {schema!r}",
        )
    name = r.str_(data, "name", "")
    if not _STACK_NAME.match(name):
        raise r.fail(
            "name",
            "must be letters, digits, '.', '_' or '-' (it names files, folders and image "
            f"tags), starting with a letter or digit; got {name!r}",
        )
    python = r.str_(data, "python", "")
    if not _PY.match(python):
        raise r.fail("python", f'must be a major.minor version such as "3.13", got {python!r}')
    return name, python


def _parse_layout(r: TomlReader, lay: Mapping[str, Any]) -> Layout:
    """``[layout]``: the data root, its links under $HOME, the venv folder under the root."""
    r.check_keys(lay, _LAYOUT_KEYS, "layout")
    links = r.str_map(lay, "links", "layout")
    for key, target in links.items():
        if not key or "/" in key or key in (".", ".."):
            raise r.fail(f"layout.links.{key}", "link names are single names under $HOME (no '/')")
        if Path(target).is_absolute() or ".." in Path(target).parts:
            raise r.fail(
                f"layout.links.{key}", f"must be a path relative to the data root, got {target!r}"
            )
    venv = r.str_(lay, "venv", "layout", "venv")
    parts = venv.split("/")
    if not all(_VENV_PART.match(p) and p not in (".", "..") for p in parts):
        raise r.fail(
            "layout.venv",
            "must be a folder under the data root: a relative path of letters, digits "
            f"and _ . + @ - (no '..', not absolute), such as \"venv\"; got {venv!r}",
        )
    return Layout(
        root=r.str_(lay, "root", "layout", "/mnt/data"),
        links=links,
        venv=venv,
        separate_root_fs=r.bool_(lay, "separate_root_fs", "layout"),
        min_free_gb=r.num(lay, "min_free_gb", "layout", 1.0) or 0.0,
    )


def _parse_host(r: TomlReader, host_data: Mapping[str, Any]) -> Host:
    """``[host]``: what preflight requires of the machine."""
    r.check_keys(host_data, _HOST_KEYS, "host")
    gpu_count = host_data.get("gpu_count")
    if gpu_count is not None and (
        isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0
    ):
        raise r.fail("host.gpu_count", f"must be a non-negative integer, got {gpu_count!r}")
    return Host(
        driver_min=r.opt_str(host_data, "driver_min", "host"),
        gpu_count=gpu_count,
        gpu_name=r.opt_str(host_data, "gpu_name", "host"),
        cuda_toolkit=r.opt_str(host_data, "cuda_toolkit", "host"),
        gcc=r.opt_str(host_data, "gcc", "host"),
        root_min_free_gb=r.num(host_data, "root_min_free_gb", "host", None),
        data_min_free_gb=r.num(host_data, "data_min_free_gb", "host", None),
    )


def _parse_steps(r: TomlReader, raw_steps: Any, warnings: list[str]) -> tuple[Step, ...]:
    """The ``[[step]]`` tables, at least one, each name once."""
    if not isinstance(raw_steps, list) or not raw_steps:
        raise r.fail("step", "at least one [[step]] table is required")
    steps = tuple(_parse_step(r, s, i, warnings) for i, s in enumerate(raw_steps, 1))
    seen: dict[str, int] = {}
    for i, s in enumerate(steps, 1):
        if s.name in seen:
            raise r.fail(
                f"step[{i}].name", f"duplicate step name {s.name!r} (also step[{seen[s.name]}])"
            )
        seen[s.name] = i
    return steps


def _parse_target(r: TomlReader, t: Mapping[str, Any]) -> Target:
    r.check_keys(t, _TARGET_KEYS, "target")
    platform = r.str_(t, "platform", "target", DEFAULT_PLATFORM)
    m = _TARGET_PLATFORM.match(platform)
    if not m or not 17 <= int(m.group("glibc")) <= 40:
        raise r.fail(
            "target.platform",
            "must be a manylinux wheel platform tag, manylinux_2_<17..40>_<x86_64|aarch64> (the"
            f" glibc and CPU of the hosts the lock is for), such as {DEFAULT_PLATFORM!r}; got"
            f" {platform!r}",
        )
    return Target(platform=platform)


def _parse_abi(r: TomlReader, a: Mapping[str, Any]) -> ABI:
    if not a:
        raise r.fail("abi", "the [abi] table is required (package, version, ...)")
    r.check_keys(a, _ABI_KEYS, "abi")
    version = r.str_(a, "version", "abi")
    try:
        Version(version)
    except InvalidVersion as exc:
        raise r.fail("abi.version", f"not a valid version: {version!r}") from exc
    local = r.opt_str(a, "local", "abi")
    package = r.str_(a, "package", "abi", "torch")
    _check_project(r, "abi.package", package)
    cuda = r.opt_str(a, "cuda", "abi")
    if cuda is not None and not _CUDA.match(cuda):
        raise r.fail(
            "abi.cuda",
            f'must be a CUDA major.minor version such as "13.2" (torch.version.cuda), got {cuda!r}',
        )
    protect = r.str_list(a, "protect", "abi")
    for j, p in enumerate(protect, 1):
        if not _PROTECT.match(p):
            raise r.fail(
                f"abi.protect[{j}]",
                f'must be a project name or an fnmatch pattern of one ("nvidia-*"), got {p!r}',
            )
    if local and local not in version:
        raise r.fail("abi.local", f"{local!r} does not appear in abi.version {version!r}")
    overlaps = []
    raw_overlaps = a.get("overlap", [])
    if not isinstance(raw_overlaps, list):
        raise r.fail("abi.overlap", "must be a list of tables ([[abi.overlap]])")
    for i, o in enumerate(raw_overlaps, 1):
        where = f"abi.overlap[{i}]"
        if not isinstance(o, dict):
            raise r.fail(where, "must be a table with packages and winner")
        r.check_keys(o, _OVERLAP_KEYS, where)
        raw_pkgs = r.str_list(o, "packages", where)
        for j, p in enumerate(raw_pkgs, 1):
            _check_project(r, f"{where}.packages[{j}]", p)
        pkgs = tuple(canonicalize_name(p) for p in raw_pkgs)
        raw_winner = r.str_(o, "winner", where)
        _check_project(r, f"{where}.winner", raw_winner)
        winner = canonicalize_name(raw_winner)
        if len(pkgs) < 2 or winner not in pkgs:
            raise r.fail(where, "needs at least two packages, and winner must be one of them")
        overlaps.append(Overlap(packages=pkgs, winner=winner))
    triton = r.opt_str(a, "triton_provider", "abi")
    if triton:
        _check_project(r, "abi.triton_provider", triton)
    return ABI(
        package=canonicalize_name(package),
        version=version,
        local=local,
        cuda=cuda,
        protect=tuple(canonicalize_name(p) if "*" not in p else p for p in protect),
        triton_provider=canonicalize_name(triton) if triton else None,
        adopt=r.bool_(a, "adopt", "abi"),
        overlaps=tuple(overlaps),
    )


def _check_project(r: TomlReader, key: str, name: str) -> None:
    if not _PROJECT.match(name):
        raise r.fail(key, f"must be a project name (letters, digits, '.', '_', '-'), got {name!r}")


def _check_source(r: TomlReader, key: str, value: str) -> None:
    """An index or find-links location: an http(s) or file URL, or a local path; "" means none."""
    if not value:
        return
    if value.startswith("-"):
        raise r.fail(
            key,
            f"{value!r} starts with '-' and would read as an installer option; give a URL or a"
            " path",
        )
    m = _SCHEME.match(value)
    if m is None:
        return  # a local path (pip and uv take a folder for --find-links and --index-url)
    scheme = m.group(1).lower()
    if scheme not in SOURCE_SCHEMES:
        raise r.fail(
            key,
            f"the URL scheme {scheme!r} is not allowed here; use {', '.join(SOURCE_SCHEMES)} "
            f"(or a local path), got {value!r}",
        )
    if any(c.isspace() for c in value):
        raise r.fail(key, f"a URL cannot hold whitespace (percent-encode it as %20), got {value!r}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - parses the port: ValueError when it is not a number in range
    except ValueError as exc:
        raise r.fail(key, f"not a valid URL ({exc}): {value!r}") from exc
    if scheme != "file" and not parts.hostname:
        raise r.fail(key, f"the URL names no host: {value!r}")


def _literal_password(raw: Any) -> bool:
    """Does the unexpanded ``raw`` URL hold a password written out (not a ${VAR})?"""
    if not isinstance(raw, str) or not _SCHEME.match(raw):
        return False
    try:
        password = urlsplit(raw).password
    except ValueError:
        return False
    return password is not None and password != "" and "${" not in password


def _parse_env(
    r: TomlReader, data: Mapping[str, Any], where: str, warnings: list[str]
) -> tuple[dict[str, str], dict[str, EnvFrom]]:
    """``[env]`` / ``step[i].env``: names are variable names; a value is a string or ``{ from_env =
    NAME }``."""
    value = data.get("env", {})
    path = f"{where}.env" if where else "env"
    if not isinstance(value, dict):
        raise r.fail(path, f"must be a table of strings, got {value!r}")
    literal: dict[str, str] = {}
    refs: dict[str, EnvFrom] = {}
    for name, v in value.items():
        key = f"{path}.{name}"
        if not ENV_NAME.match(name):
            raise r.fail(
                key,
                "the name is not an environment variable name: letters, digits and '_', not "
                "starting with a digit ([A-Za-z_][A-Za-z0-9_]*)",
            )
        if name in SHELL_RESERVED or name.startswith("BASH_FUNC_"):
            raise r.fail(
                key,
                f"{name} is the shell's own: a shell runs its value as commands or keeps its own "
                "value, so the env overlay that activate sources must not set it",
            )
        if isinstance(v, str):
            literal[name] = r.expand(v, key)
            if literal[name] and SECRET_NAME.search(name):
                warnings.append(
                    f"{r.path}: {key}: {name} looks like a secret, and a literal value is written"
                    " into the env "
                    f"overlay, `plan` output, a rendered Dockerfile and its image; take it from the"
                    f" environment "
                    f'at provision time instead: {name} = {{ from_env = "{name}" }}'
                )
        elif isinstance(v, dict):
            r.check_keys(v, ("from_env", "required"), key)
            source = v.get("from_env")
            if source != name:
                raise r.fail(
                    f"{key}.from_env",
                    f"must be {name!r}, the variable's own name, got {source!r}: "
                    f"envbuild passes the environment's {name} on as it is and never copies it "
                    f"(to use another variable, set {name} from it where envbuild runs)",
                )
            refs[name] = EnvFrom(name=name, required=r.bool_(v, "required", key, True))
        else:
            raise r.fail(key, f'must be a string or {{ from_env = "{name}" }}, got {v!r}')
    return literal, refs


def _parse_step(r: TomlReader, s: Any, i: int, warnings: list[str] | None = None) -> Step:
    where = f"step[{i}]"
    if not isinstance(s, dict):
        raise r.fail(where, "must be a table ([[step]])")
    r.check_keys(s, _STEP_KEYS, where)
    name = r.str_(s, "name", where)
    if not _STEP_NAME.match(name):
        raise r.fail(f"{where}.name", f"must be letters, digits, '.', '_' or '-', got {name!r}")
    packages = r.str_list(s, "packages", where)
    if not packages:
        raise r.fail(f"{where}.packages", "a step must install at least one package")
    for j, p in enumerate(packages, 1):
        try:
            Requirement(p)
        except InvalidRequirement as exc:
            raise r.fail(f"{where}.packages[{j}]", f"not a valid requirement {p!r}: {exc}") from exc
    strategy = r.str_(s, "upgrade_strategy", where, "only-if-needed")
    if strategy not in UPGRADE_STRATEGIES:
        raise r.fail(
            f"{where}.upgrade_strategy",
            f"must be one of {', '.join(UPGRADE_STRATEGIES)}, got"
            f" {strategy!r}{did_you_mean(strategy, list(UPGRADE_STRATEGIES))}",
        )
    index_url = r.opt_str(s, "index_url", where) or None
    replaces = []
    for j, raw in enumerate(r.str_list(s, "replaces", where), 1):
        if not _PROJECT.match(raw):
            raise r.fail(
                f"{where}.replaces[{j}]", f'must be a project name (such as "numpy"), got {raw!r}'
            )
        replaces.append(canonicalize_name(raw))
    sources = {
        "extra_index_urls": r.str_list(s, "extra_index_urls", where),
        "find_links": r.str_list(s, "find_links", where),
    }
    if index_url:
        _check_source(r, f"{where}.index_url", index_url)
    for key, values in sources.items():
        for j, u in enumerate(values, 1):
            _check_source(r, f"{where}.{key}[{j}]", u)
    notes = warnings if warnings is not None else []
    raw_sources: list[tuple[str, Any]] = [("index_url", s.get("index_url"))] + [
        (f"{key}[{j}]", u) for key in sources for j, u in enumerate(s.get(key) or [], 1)
    ]
    for source_key, u in raw_sources:
        if _literal_password(u):
            notes.append(
                f"{r.path}: {where}.{source_key}: the URL holds a password written into the spec;"
                " it is redacted in logs and receipts, but anyone who reads the spec or the lock"
                " has it: write it as ${VAR} or keep it in the installer's configuration"
                " (pip.conf, a build secret)"
            )
    env, env_from = _parse_env(r, s, where, notes)
    return Step(
        name=name,
        packages=packages,
        index_url=index_url,
        extra_index_urls=tuple(u for u in sources["extra_index_urls"] if u),
        find_links=tuple(u for u in sources["find_links"] if u),
        pre=r.bool_(s, "pre", where),
        no_deps=r.bool_(s, "no_deps", where),
        no_build_isolation=r.bool_(s, "no_build_isolation", where),
        upgrade=r.bool_(s, "upgrade", where),
        upgrade_strategy=strategy,
        reinstall=r.bool_(s, "reinstall", where),
        no_index=r.bool_(s, "no_index", where),
        env=env,
        env_from=env_from,
        replaces=tuple(dict.fromkeys(replaces)),
        source_vars=tuple(dict.fromkeys(v for _, u in raw_sources for v in variables(u))),
    )


def _check_baseline(r: TomlReader, spec: StackSpec) -> None:
    abi = spec.abi
    installers = [i for i, s in enumerate(spec.steps) if abi.package in s.names]
    if abi.adopt:
        if installers:
            raise r.fail(
                f"step[{installers[0] + 1}].packages",
                f"abi.adopt = true takes {abi.package} from the base environment, so no step may"
                " install it",
            )
        baseline = -1
    elif not installers:
        raise r.fail(
            "step",
            f"no step installs the ABI package {abi.package!r}: the baseline step is missing (add"
            f" it to a step, or set abi.adopt = true to use the base environment's {abi.package})",
        )
    elif len(installers) > 1:
        a, b = installers[:2]
        raise r.fail(
            f"step[{b + 1}].packages",
            f"{abi.package} is installed by two steps, {spec.steps[a].name!r} (step[{a + 1}]) and "
            f"{spec.steps[b].name!r} (step[{b + 1}]); only the baseline step may install it",
        )
    else:
        baseline = installers[0]
        step = spec.steps[baseline]
        req = next(q for q in step.requirements if canonicalize_name(q.name) == abi.package)
        if req.specifier and not req.specifier.contains(abi.version, prereleases=True):
            raise r.fail(
                f"step[{baseline + 1}].packages",
                f"{req} does not admit abi.version {abi.version!r}; pin the baseline to it",
            )
    for i, s in enumerate(spec.steps):
        if i <= baseline:
            continue
        for j, n in enumerate(s.replaces, 1):
            if abi.is_protected(n):
                raise r.fail(
                    f"step[{i + 1}].replaces[{j}]",
                    f"{n} is {'the ABI package' if n == abi.package else 'in the protected set'}:"
                    " it is frozen once the baseline step ran, and no later step may replace it",
                )
        for j, n in enumerate(s.names, 1):
            if n != abi.package and abi.is_protected(n):
                raise r.fail(
                    f"step[{i + 1}].packages[{j}]",
                    f"{n} is in the protected set (abi.protect) and is frozen once the baseline "
                    f"step ran; remove it from step {s.name!r}",
                )


# ----------------------------------------------------------------------------- profiles


def lockfiles_dirs() -> list[Path]:
    """Where ``--profile NAME`` looks, in order: $ENVBUILD_LOCKFILES, ./lockfiles, the repo's, the
    wheel's."""
    dirs: list[Path] = []
    if env := os.environ.get("ENVBUILD_LOCKFILES"):
        dirs.append(Path(env))
    dirs.append(Path.cwd() / "lockfiles")
    here = Path(__file__).resolve().parents[1]  # envbuild/
    dirs.append(here.parent / "lockfiles")  # a checkout or an editable install
    dirs.append(here / "_lockfiles")  # the copy inside an installed wheel
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def available_profiles() -> list[str]:
    names: set[str] = set()
    for d in lockfiles_dirs():
        if d.is_dir():
            names.update(p.parent.name for p in d.glob("*/stack.toml"))
    return sorted(names)


def profile_path(name: str) -> Path:
    for d in lockfiles_dirs():
        candidate = d / name / "stack.toml"
        if candidate.is_file():
            return candidate
    known = available_profiles()
    raise ConfigError(
        f"unknown profile {name!r}{did_you_mean(name, known)}; known profiles:"
        f" {', '.join(known) or 'none'} (looked in {', '.join(str(d) for d in lockfiles_dirs())})",
        hint="Use --stack FILE for a spec file outside lockfiles/.",
    )


def resolve_spec(
    profile: str | None, stack: Path | None, environ: Mapping[str, str] | None = None
) -> StackSpec:
    """The spec named on the command line; the embedded default is the ``cpu`` profile."""
    if profile and stack:
        raise ConfigError("give either --profile or --stack, not both")
    path = stack if stack is not None else profile_path(profile or "cpu")
    return load_spec(path, environ)
