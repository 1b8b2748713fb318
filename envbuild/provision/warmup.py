"""The import warm-up: torch's bytecode written in the background while the later steps install.

A fresh venv made by uv has no bytecode: its first ``import torch`` compiles about a thousand
modules, one after another (3-4 s on a GPU host; bare uv pays the same on the user's first
import). That work does not depend on the packages installed after the baseline, so once the
baseline step is in, envbuild starts one background process beside the remaining steps:

- **compile**: when an earlier provision of the same torch version and Python on this data root
  recorded which source files ``import torch`` loaded (``<root>/cache/envbuild/import-*.json``,
  written after every fresh import check), those files are compiled on every core at once;
- **import**: otherwise (a first or cold provision), ``python -c "import torch"``, on hosts with
  ``IMPORT_MODE_MIN_CPUS`` cores or more (``ENVBUILD_IMPORT_WARMUP=import`` forces it);
- **prepare**: where the import mode would run (``early_mode``), a lock's run that prepares
  before it installs (``provision.prepare``) starts it earlier, while the later steps still
  download: once the baseline step's scratch install is complete, ``python -S`` imports torch from
  that scratch folder (``site.addsitedir``), nice 10 beside the downloads. Its
  bytecode lands in the scratch folder's own ``__pycache__`` folders (uv links the files from its
  cache but makes the folders: its cache is not written to). When the final check is about to
  import, the warm-up is stopped where it has not finished (never waited for), and each ``.pyc``
  it wrote whose header matches the venv's copy of its source (same mtime and size: uv links both
  from its cache) is linked into the venv's ``__pycache__``, where the import would have written
  it; the check compiles the rest.

- **walk**: where the import mode would not run (fewer than ``IMPORT_MODE_MIN_CPUS`` cores, no
  listing), that prepare runs ``pycwalk.py`` instead, as soon as torch's own files are in their
  scratch folder (``provision.prepare`` gives torch's line a scratch install of its own): it reads
  the import statements from ``torch/__init__.py`` on (no import, none of torch's dependencies
  needed) and compiles the files an import meets, in its order, on cores nothing else wants
  (``SCHED_IDLE``): the downloads and unpacking never wait for it. Its ``.pyc`` are linked into
  the venv as the prepare mode's are.

Beside the final check's own ``import torch`` (a fresh import, not a reused verdict), wherever a
warm-up is wanted, ``pycwalk.py --reverse`` compiles from the other end, at nice 10 (``beside``):
the import runs on one core, and the two meet in the middle (0.68x of the import alone on two
cores of the GPU host; bench/README.md).

Either way, the ``.pyc`` files it writes are what the import itself would write, and the final
import check finds them in place. The warm-up is never a verdict: its exit status is ignored,
and the final check is a fresh ``import torch`` in the finished environment as before. Files a
later step replaces are recompiled by that check (Python checks each ``.pyc`` against its
source's mtime and size), and the guard never looks at ``__pycache__``. It is skipped where it
cannot help: the installer compiles bytecode itself (pip; uv with ``--compile-bytecode yes``),
``PYTHONDONTWRITEBYTECODE`` is set, only one step runs (``--step``), or
``ENVBUILD_IMPORT_WARMUP=0``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from envbuild import events
from envbuild._io import atomic_write_json, discard
from envbuild.installer.uv import compiles_at_install as uv_compiles

if TYPE_CHECKING:
    from envbuild.proof.receipt import WarmupJSON

__all__ = ["WALK_SCRIPT", "Warmup", "listing_path", "remember", "wanted"]

# standalone: run by the stack's interpreter (``python -S``), never imported by envbuild
WALK_SCRIPT = Path(__file__).resolve().with_name("pycwalk.py")
# beside the final check's import, below it: the import is the run's critical path
BESIDE_NICE = 10

_IMPORT = "import {module}\n"
# the prepare mode: the scratch target as a site folder (its .pth files read), nothing else of
# the interpreter's site-packages
_IMPORT_FROM = "import site, sys\nsite.addsitedir(sys.argv[1])\nimport {module}\n"
NICE = ("nice", "-n", "10")
# Compile the listed files (relative to site-packages) on every core, as an import would write
# them (timestamp-checked .pyc, optimization 0). The fork context: `-c` code has no importable
# __main__ for a spawn or forkserver child.
_COMPILE = """
import json, multiprocessing, os, py_compile, sys
site, listing = sys.argv[1], sys.argv[2]
with open(listing, encoding="utf-8") as f:
    files = [os.path.join(site, rel) for rel in json.load(f)["files"]]
files = [p for p in files if os.path.isfile(p)]
def one(path):
    try:
        py_compile.compile(path, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    except Exception:
        pass
cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
workers = max(1, min(cpus, 32))
if workers == 1 or len(files) < 64:
    for p in files:
        one(p)
else:
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        pool.map(one, files, chunksize=max(1, len(files) // (workers * 4)))
print(len(files))
"""  # noqa: E501 - code written out or run as it is
LISTING_SCHEMA = 1
# The import mode is one more single-threaded process beside the installer: on a 2-core host it
# took the installer's core and then compiled the same modules as the check (cold cpu profile,
# bench/results-cpu-warmup-2core.json: 17.3 s against 16.2 s without it). The compile mode is
# parallel and only ever runs where a listing exists; it won on 2 and on 16 cores.
IMPORT_MODE_MIN_CPUS = 4


def usable_cpus() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def early_mode(import_env: Mapping[str, str], listing: Path) -> Literal["prepare", "walk"] | None:
    """The warm-up a lock's run starts while it prepares: None where a listing from an earlier
    import on this root exists (the compile mode, in the venv beside the steps, measured faster;
    bench/README.md); the import from the prepared scratch (``prepare``) where the import mode would
    run (``IMPORT_MODE_MIN_CPUS`` cores or more, or ``ENVBUILD_IMPORT_WARMUP=import``); else the
    walk (``ENVBUILD_IMPORT_WARMUP=walk`` forces it): on two cores the import beside the downloads
    took their CPU for as long as it gave the check, and the walk takes only idle cores."""
    forced = import_env.get("ENVBUILD_IMPORT_WARMUP", "").strip()
    if forced == "walk":
        return "walk"
    if _usable(listing):
        return None
    return "prepare" if _import_mode_allowed(import_env) else "walk"


def _import_mode_allowed(env: Mapping[str, str]) -> bool:
    """The import mode's rule: ``IMPORT_MODE_MIN_CPUS`` cores or more, or forced."""
    forced = env.get("ENVBUILD_IMPORT_WARMUP", "").strip() == "import"
    return forced or usable_cpus() >= IMPORT_MODE_MIN_CPUS


def wanted(
    *,
    install_env: Mapping[str, str],
    import_env: Mapping[str, str],
    compiles_at_install: bool,
    single_step: bool,
) -> bool:
    """Whether a warm-up can shorten this run's final import check."""
    if import_env.get("ENVBUILD_IMPORT_WARMUP", "1").strip() in ("0", "no", "false", "off"):
        return False
    if compiles_at_install or uv_compiles(install_env) or single_step:
        return False
    return not import_env.get("PYTHONDONTWRITEBYTECODE")  # nothing would be written


def listing_path(cache_dir: Path, module: str, version: str, python_version: str) -> Path:
    """Where the files ``import <module>`` loaded are remembered: the data root's cache, per
    package version and Python (a cold provision, caches emptied, has none)."""
    safe = "".join(
        c if c.isalnum() or c in ".-_" else "_" for c in f"{module}-{version}-py{python_version}"
    )
    return cache_dir / "envbuild" / f"import-{safe}.json"


def remember(listing: Path, files: Sequence[str]) -> None:
    """Keep what a fresh import loaded, for the next provision's warm-up; never raises."""
    if not files:
        return
    with contextlib.suppress(OSError):
        atomic_write_json(listing, {"schema": LISTING_SCHEMA, "files": sorted(set(files))})


def _usable(listing: Path | None) -> int:
    """How many files ``listing`` names (0: absent or unreadable)."""
    if listing is None:
        return 0
    try:
        doc = json.loads(listing.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    files = (
        doc.get("files") if isinstance(doc, dict) and doc.get("schema") == LISTING_SCHEMA else None
    )
    return len(files) if isinstance(files, list) and all(isinstance(f, str) for f in files) else 0


_NOT_PASSED = ("PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE", "PYTHONSTARTUP")


def _header_fits(pyc: Path, source: Path) -> bool:
    """Whether ``pyc`` (timestamp-checked) was compiled from a file of ``source``'s mtime and size:
    the check the import itself makes before it trusts it."""
    try:
        with pyc.open("rb") as f:
            head = f.read(16)
        st = source.stat()
    except OSError:
        return False
    if len(head) < 16 or int.from_bytes(head[4:8], "little") != 0:  # 0: timestamp-checked
        return False
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


def harvest(scratch: Path, site: Path) -> int:
    """Link each ``.pyc`` the prepare-mode import wrote in ``scratch`` into the same place in
    ``site`` (``<folder>/__pycache__``), beside the same source, where none is there yet and its
    header fits the venv's copy of the source; returns how many. Never raises."""
    linked = 0
    for folder, dirs, names in os.walk(scratch):
        if Path(folder).name != "__pycache__":
            continue
        dirs.clear()
        rel = Path(folder).parent.relative_to(scratch)
        for name in names:
            parts = name.split(".")
            if len(parts) != 3 or parts[2] != "pyc":  # module.cpython-312.pyc
                continue
            pyc = Path(folder) / name
            source = site / rel / f"{parts[0]}.py"
            target = site / rel / "__pycache__" / name
            if target.exists() or not _header_fits(pyc, source):
                continue
            try:
                target.parent.mkdir(exist_ok=True)
                try:
                    os.link(pyc, target)
                except OSError:
                    shutil.copyfile(pyc, target)
            except OSError:
                continue
            linked += 1
    return linked


class Warmup:
    """One background process; ``stop`` ends it (it has usually finished by then).

    With a listing from an earlier provision of the same package version (``listing_path``), it
    compiles exactly the files that import loaded, on every core; without one, it imports.
    """

    def __init__(
        self,
        python: Path,
        module: str,
        env: Mapping[str, str],
        log_file: Path,
        *,
        site: Path | None = None,
        listing: Path | None = None,
    ) -> None:
        self.python, self.module, self.env, self.log_file = python, module, dict(env), log_file
        self.site, self.listing = site, listing
        self.mode: Literal["compile", "import", "prepare", "walk", "check"] = "import"
        self.scratch: Path | None = (
            None  # prepare mode: the scratch target, an empty folder to run in
        )
        self.workdir: Path | None = None
        self.tree: Path | None = None  # the prefix ``scratch`` is the site folder of (deleted too)
        self.files = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.seconds: float | None = None  # how long it ran, once stopped
        self.finished: bool | None = None  # whether it ended by itself before the check needed it
        self.side: subprocess.Popen[bytes] | None = None  # ``pycwalk --reverse`` beside the check
        self.beside: int | None = None  # the .pyc it wrote (None: it did not run)

    def start(self, after_step: str) -> bool:
        """Start it; False where it would not help (see ``IMPORT_MODE_MIN_CPUS``)."""
        self.files = _usable(self.listing) if self.site is not None else 0
        if self.files:
            self.mode = "compile"
            argv = [str(self.python), "-c", _COMPILE, str(self.site), str(self.listing)]
            what = (
                f"compiling the {self.files} files `import {self.module}` loaded last time, on"
                " every core"
            )
        else:
            if not _import_mode_allowed(self.env):
                return False
            argv = [str(self.python), "-c", _IMPORT.format(module=self.module)]
            what = f"`import {self.module}`"
        return self._spawn(
            argv,
            self.env,
            None,
            f"import warm-up after step {after_step}: {what} "
            "(its bytecode is written while the later steps install)",
        )

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: Path | None, said: str) -> bool:
        """Start the process, its output to the log; False where it could not start."""
        try:
            log = open(self.log_file, "ab")  # noqa: SIM115 - handed to the child, closed below
        except OSError:
            return False
        try:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
            )
        except OSError:
            self.proc = None
            return False
        finally:
            log.close()
        self.started = time.monotonic()
        events.emit("debug", said)
        return True

    def start_in(
        self,
        scratch: Path,
        workdir: Path,
        step: str,
        *,
        walk: bool = False,
        tree: Path | None = None,
    ) -> bool:
        """The prepare mode (module docstring): import from ``scratch``, in the empty ``workdir``,
        or with ``walk`` the walk mode (``pycwalk.py`` over ``scratch``, on idle cores); both
        folders (and ``tree``, the scratch prefix ``scratch`` is the site folder of) are this
        warm-up's from now on (``stop`` deletes them, unless ``moved`` took the prefix into the
        venv). False where it cannot help: ``PYTHONPYCACHEPREFIX`` is set (the check's import
        reads the bytecode from there)."""
        self.mode, self.scratch, self.workdir = ("walk" if walk else "prepare"), scratch, workdir
        self.tree = tree
        if self.env.get("PYTHONPYCACHEPREFIX"):
            return False
        shutil.rmtree(workdir, ignore_errors=True)
        env = {k: v for k, v in self.env.items() if k not in _NOT_PASSED}
        if walk:
            argv = [str(self.python), "-S", str(WALK_SCRIPT), str(scratch), self.module, "--idle"]
            what = f"compiling what `import {self.module}` meets, on idle cores"
        else:
            argv = [str(self.python), "-S", "-c", _IMPORT_FROM.format(module=self.module)]
            argv.append(str(scratch))
            what = f"`import {self.module}`"
            argv = [*NICE, *argv] if shutil.which("nice") else argv
        try:
            workdir.mkdir(parents=True)  # run in, not the caller's folder: nothing of it imported
        except OSError:
            return False
        return self._spawn(
            argv,
            env,
            workdir,
            f"import warm-up from the prepared step {step}: {what}, while the later steps download",
        )

    def beside_import(self, site: Path) -> None:
        """The final check's fresh import starts now: ``pycwalk.py --reverse`` over ``site``
        beside it, at nice ``BESIDE_NICE`` (``end_beside`` stops it). Never raises."""
        if self.side is not None or usable_cpus() < 2:  # one core: it would only slow the import
            return
        env = {k: v for k, v in self.env.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        argv = [str(self.python), "-S", str(WALK_SCRIPT), str(site), self.module, "--reverse"]
        try:
            self.side = subprocess.Popen(
                [*argv, "--nice", str(BESIDE_NICE)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError:
            self.side = None
            return
        events.emit("debug", f"compiling what `import {self.module}` meets last, beside it")

    def end_beside(self) -> None:
        """Stop the walk beside the check (after the file it is writing: SIGTERM) and note how
        many files it compiled. Never raises."""
        side, self.side = self.side, None
        if side is None:
            return
        if side.poll() is None:
            side.terminate()
        try:
            out, _ = side.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            side.kill()
            out, _ = side.communicate()
        try:
            doc = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
            self.beside = int(doc["compiled"])
        except (IndexError, ValueError, KeyError, TypeError):
            self.beside = 0

    def at_check(self, site: Path | None = None) -> None:
        """The final check starts now: note whether the warm-up is already done; in the prepare
        mode, wait for it and link its bytecode into the venv's ``site``."""
        if self.proc is not None and self.finished is None:
            self.finished = self.proc.poll() is not None
        self.site = site or self.site
        if self.mode not in ("prepare", "walk") or self.proc is None or self.site is None:
            return
        if self.proc.poll() is None:
            # what it compiled so far is kept (each .pyc is written whole, then renamed into
            # place); the check's own import compiles the rest, as it would have without it
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.scratch is not None:
            # its thirteen thousand links go after the check (``stop``): removed beside the
            # check's import they slowed it more (1.5 s on a docling run) than the exit waits
            self.files = harvest(self.scratch, self.site)

    def stop(self) -> None:
        """End it (kill if still running) and reap it; never raises."""
        self.end_beside()
        proc = self.proc
        if proc is None or self.seconds is not None:
            return
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        self.seconds = round(time.monotonic() - self.started, 3)
        for folder in (self.tree or self.scratch, self.workdir):
            if folder is not None:
                discard(folder)

    def running(self) -> bool:
        """Whether its process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def halt(self) -> None:
        """Stop it now, before the check needs it (the walk ends after the file it is writing:
        SIGTERM; each ``.pyc`` is written whole, then renamed into place). Never raises."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        self.finished = False
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    def bytecode(self) -> int:
        """How many ``.pyc`` files the prepare-mode scratch holds (what ``harvest`` would link)."""
        if self.scratch is None:
            return 0
        return sum(
            sum(1 for name in names if name.endswith(".pyc"))
            for folder, _, names in os.walk(self.scratch)
            if Path(folder).name == "__pycache__"
        )

    def moved(self, files: int) -> None:
        """The prepare-mode scratch, with the ``files`` ``.pyc`` it wrote (``bytecode``), was moved
        into the venv (``provision.movein``): nothing is left to link at the check."""
        self.scratch, self.files = None, files

    def to_json(self) -> WarmupJSON:
        code = self.proc.returncode if self.proc is not None else None
        return {
            "module": self.module,
            "mode": self.mode,
            "files": self.files,
            "seconds": self.seconds,
            "finished_before_check": self.finished,
            # None: not stopped yet; negative: killed by that signal (still running at the end)
            "exit": code,
            "beside_check": self.beside,
        }
