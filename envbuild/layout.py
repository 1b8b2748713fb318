"""The data root, its ``$HOME`` links, the env overlay the venv's ``activate`` sources, and the
venv's ``bin/envbuild`` launcher.

Everything that grows lives under the data root (default ``/mnt/data``): the venv, the
repo checkout, data, caches (pip, uv, triton, inductor, HF), checkpoints, receipts, logs
and envbuild's own state. ``$HOME`` gets friendly links (``~/venv -> /mnt/data/venv``).

Idempotent, and it never deletes or replaces a real file or folder of the user's: a
conflict is a ``LayoutError`` unless ``force_links`` moves the thing aside (to
``<name>.envbuild-moved-<timestamp>``) and says where.

The launcher (``write_launcher``) keeps envbuild at hand in the environment it made: after
``. <root>/venv/bin/activate`` the venv's ``bin`` comes first on PATH, and its ``envbuild`` runs
the envbuild that provisioned it (that interpreter and that install, by absolute path), never a
copy installed into the stack. No installer's record owns it, so pip and uv leave it alone
(``uv sync`` removes distributions, not unknown files), and each provision writes it again.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from envbuild._io import atomic_write_text
from envbuild.errors import ConfigError, LayoutError
from envbuild.quoting import check_env_name, sh_export, sh_word
from envbuild.spec import StackSpec

# The NCCL / allocator baseline every training process starts from (the venv's activate sources
# it, and preflight checks the environment against it). CUDA_DEVICE_MAX_CONNECTIONS
# stays unset on purpose (it serialises FSDP2's all-gather / reduce-scatter overlap), and
# NCCL_MNNVL_ENABLE is left to NCCL's own detection.
RUNTIME_BASELINE: Mapping[str, str] = {
    "TORCH_NCCL_HIGH_PRIORITY": "1",
    "PYTORCH_ALLOC_CONF": "expandable_segments:True",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "7200",
}
UNSET_IN_BASELINE: tuple[str, ...] = ("CUDA_DEVICE_MAX_CONNECTIONS",)

CACHE_DIRS: Mapping[str, str] = {
    # variable -> folder under <root>/cache
    "PIP_CACHE_DIR": "pip",
    "UV_CACHE_DIR": "uv",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "HF_HOME": "huggingface",
    "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": "cute-dsl",
    "QUACK_CACHE_DIR": "quack",
    "CUDA_CACHE_PATH": "nv-compute",
}

OVERLAY_NAME = "envbuild-env.sh"


@dataclass(frozen=True)
class Paths:
    """Every path envbuild uses under one data root."""

    root: Path
    venv_name: str = "venv"

    @property
    def venv(self) -> Path:
        return self.root / self.venv_name

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def receipts(self) -> Path:
        return self.root / "receipts"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def state(self) -> Path:
        """envbuild's own state: manifest, constraints, requirement files."""
        return self.root / ".envbuild"

    @property
    def manifest(self) -> Path:
        return self.state / "manifest.json"

    @property
    def overlay(self) -> Path:
        return self.state / OVERLAY_NAME

    @property
    def import_verdict(self) -> Path:
        """The last passing import check and the fingerprint it holds for (``provision.verify``)."""
        return self.state / "import-verdict.json"

    @property
    def shared_files(self) -> Path:
        """The files the venv's distributions share, kept under their RECORDs' identities
        (``guard.shared_files``: the guard's overlap rules and the lock's overlaps read it)."""
        return self.state / "shared-files.json"

    @property
    def constraints(self) -> Path:
        """The file that pins the protected set; every later install reads it (PIP_CONSTRAINT
        too)."""
        return self.state / "constraints.txt"

    def cache_env(self) -> dict[str, str]:
        return {var: str(self.cache / sub) for var, sub in CACHE_DIRS.items()}

    def folders(self) -> list[Path]:
        return [
            self.root,
            self.data,
            self.checkpoints,
            self.receipts,
            self.logs,
            self.state,
            *(self.cache / sub for sub in CACHE_DIRS.values()),
        ]


def paths_for(spec: StackSpec, root: Path | None = None) -> Paths:
    chosen = (
        checked_path(root, "--root")
        if root is not None
        else checked_path(spec.layout.root, "layout.root")
    )
    return Paths(root=chosen, venv_name=spec.layout.venv)


def checked_path(path: Path | str, what: str) -> Path:
    """``path`` made absolute; an empty one is refused (``Path("")`` is the current folder, and an
    unset shell variable in ``--root "$DATA"`` must not provision into it)."""
    if not str(path).strip():
        raise ConfigError(
            f"{what} is empty (an unset shell variable?)",
            hint=(
                f"Give {what} a path; envbuild does not take an empty one to mean the current"
                " folder."
            ),
        )
    return Path(path).expanduser().absolute()


def overlay_env(spec: StackSpec, paths: Paths) -> dict[str, str]:
    """The environment overlay: cache dirs on the data root, the runtime baseline, the spec's
    env."""
    env = dict(paths.cache_env())
    env.update(RUNTIME_BASELINE)
    env.update(spec.env)
    return env


def create_folders(paths: Paths) -> None:
    for folder in paths.folders():
        if folder.is_symlink() and not folder.exists():
            raise LayoutError(f"{folder} is a dangling symlink; remove it or point it at a folder")
        if folder.exists() and not folder.is_dir():
            raise LayoutError(
                f"{folder} exists and is not a folder; envbuild needs a folder there and will not "
                "replace your file. Move it away, or choose another data root with --root."
            )
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LayoutError(f"cannot create {folder}: {exc.strerror}") from exc


def link_home(spec: StackSpec, paths: Paths, home: Path, *, force: bool = False) -> list[str]:
    """Create ``$HOME/<name> -> <root>/<target>`` links; returns what was done, one line each.

    An existing correct link is left alone. A link elsewhere, a file or a folder is a
    conflict: an error, or with ``force`` it is renamed aside (never deleted).
    """
    done: list[str] = []
    plans = check_links(spec, paths, home, force=force)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LayoutError(
            f"cannot create the home folder for the links, {home}: {exc.strerror}",
            hint="Pass --home DIR.",
        ) from exc
    for link, target in plans:
        target.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            aside = link.with_name(f"{link.name}.envbuild-moved-{time.strftime('%Y%m%d-%H%M%S')}")
            link.rename(aside)
            done.append(f"moved {link} aside to {aside}")  # the caller reports it, once
        link.symlink_to(target)
        done.append(f"linked {link} -> {target}")
    return done


def check_links(
    spec: StackSpec, paths: Paths, home: Path, *, force: bool = False
) -> list[tuple[Path, Path]]:
    """The links still to make, ``(link, target)``; a LayoutError for a conflict (unless ``force``).

    Reads only: provision calls it before it makes anything, so a refused run leaves nothing.
    """
    if home.exists() and not home.is_dir():
        raise LayoutError(
            f"the home folder for the links, {home}, is not a folder", hint="Pass --home DIR."
        )
    conflicts: list[str] = []
    plans: list[tuple[Path, Path]] = []
    for name, rel in spec.layout.links.items():
        target = paths.root / rel
        link = home / name
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        if link.is_symlink() or link.exists():
            conflicts.append(f"{link} ({_describe(link)})")
        plans.append((link, target))
    if conflicts and not force:
        raise LayoutError(
            "cannot create the $HOME links: "
            + "; ".join(conflicts)
            + " already exist and are not links into the data root. envbuild never deletes or"
            " replaces them.",
            hint=(
                "Move them away yourself, or re-run with --force-links to have envbuild rename them"
                " to <name>.envbuild-moved-<time> and link in their place."
            ),
        )
    return plans


def _describe(p: Path) -> str:
    if p.is_symlink():
        return f"a link to {os.readlink(p)}"
    if p.is_dir():
        return "a folder"
    return "a file"


def overlay_text(spec: StackSpec, paths: Paths) -> str:
    """The env overlay: one ``export NAME='value'`` line per variable (``quoting.sh_export``), so
    sourcing it sets exactly these variables and runs nothing. ``from_env`` values are not in it:
    they stay in the environment of whoever sources it."""
    env = overlay_env(spec, paths)
    lines = [
        "# Written by envbuild: cache folders on the data root and the NCCL/allocator baseline.",
        "# Sourced by the venv's bin/activate. Edit the stack spec's [env] instead of this file.",
    ]
    lines += [sh_export(k, v, f"{spec.path}: env.{k}") for k, v in env.items()]
    lines += [f"unset {check_env_name(k, 'the runtime baseline')}" for k in UNSET_IN_BASELINE]
    lines.append(sh_export("PIP_CONSTRAINT", str(paths.constraints), "the constraints file's path"))
    if spec.env_from:
        lines.append(
            "# From the environment of the shell that sources this, never stored here (from_env): "
            + " ".join(check_env_name(k, "env") for k in spec.env_from)
        )
    return "\n".join(lines) + "\n"


def write_overlay(spec: StackSpec, paths: Paths) -> Path:
    """Write the env overlay file (sourced by the venv's activate script)."""
    text = overlay_text(spec, paths)
    try:  # a re-run: the same text, in our own private file, is left as it is (no write, no fsync)
        st = paths.overlay.lstat()
        same = (
            S_ISREG(st.st_mode)
            and st.st_mode & 0o077 == 0
            and st.st_uid == os.getuid()
            and paths.overlay.read_text(encoding="utf-8") == text
        )
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        atomic_write_text(paths.overlay, text, private=True)  # [env] values may be secrets
    return paths.overlay


def hook_activate(paths: Paths) -> bool:
    """Make the venv's ``bin/activate`` source the overlay (idempotent). False if no venv yet."""
    activate = paths.venv / "bin" / "activate"
    if not activate.is_file():
        return False
    marker = "# envbuild overlay"
    text = activate.read_text()
    if marker in text:
        return True
    overlay = sh_word(str(paths.overlay), "the overlay's path")
    line = f"\n{marker}\n[ -f {overlay} ] && . {overlay}\n"
    atomic_write_text(activate, text + line)
    return True


LAUNCHER_MARK = "# envbuild launcher: written by envbuild provision"
# Run with -E (no PYTHONPATH or PYTHONHOME from the activated shell: the tool's own packages) and
# with sys.path[0], the current folder under -c, replaced by the folder envbuild is installed in.
_LAUNCH = (
    "import sys; sys.path[0] = sys.argv.pop(1); from envbuild.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def launcher_text(python: str, installed_in: str) -> str:
    """The launcher: a shell script that runs envbuild's own ``python`` on its install folder."""
    return (
        "#!/bin/sh\n"
        f"{LAUNCHER_MARK}.\n"
        "# It runs the envbuild that made this environment, which is not installed in it.\n"
        f"exec {sh_word(python, 'the launcher')} -E -c {sh_word(_LAUNCH)}"
        f' {sh_word(installed_in, "the launcher")} "$@"\n'
    )


def write_launcher(paths: Paths) -> Path | None:
    """Write ``<venv>/bin/envbuild`` (idempotent): None where the folder is not a venv (no
    ``bin/activate``: an adopted environment) or its ``envbuild`` is not a launcher of ours."""
    import envbuild

    bindir = paths.venv / "bin"
    launcher = bindir / "envbuild"
    if not (bindir / "activate").is_file():
        return None
    text = launcher_text(sys.executable, str(Path(envbuild.__file__).resolve().parents[1]))
    if launcher.is_symlink() or launcher.exists():
        try:
            current = launcher.read_text()
        except (OSError, UnicodeDecodeError):
            return None
        if LAUNCHER_MARK not in current:
            return None  # the user's own envbuild there: never replaced
        if current == text:
            return launcher
    atomic_write_text(launcher, text)
    launcher.chmod(0o755)
    return launcher
