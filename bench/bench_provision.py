#!/usr/bin/env python3
"""Provision benchmark: envbuild (uv, pip) against the bare installers, side by side in one run.

    python bench/bench_provision.py [--quick] [--out results.json] [--stacks cpu,synth]

What it measures (every figure comes from this one process, variants interleaved round by
round so a noisy neighbour hits them all alike):

- ``cpu``: the cpu profile's full set, downloaded once (``pip download``) into
  ``.cache/bench/wheelhouse`` and served as a PEP 503 index + flat page over HTTP on 127.0.0.1
  with PyPI-like cache headers. Four variants, each cold (empty caches) and warm (caches kept,
  fresh venv): ``envbuild provision --backend uv|pip --offline --wheelhouse URL`` and the same
  steps, requirement files, flags and constraints run as bare ``uv pip install`` / ``pip
  install`` commands into a fresh venv. Then a re-run of each finished environment.
- the ABI guard per step (from provision's JSON, and timed directly on the finished venv)
  against a full ``import torch`` in that venv.
- ``synth``: a generated stack (a stand-in ``torch`` wheel as the baseline, N tiny wheels in four
  steps, one large wheel of incompressible bytes) at several N, so the growth of provision
  and guard time with package count and size shows.
- prefetch: the bare uv/pip sequences again, with ``envbuild/provision/prefetch.py`` warming step
  k+1's cache while step k installs, cold.

Nothing here is a test; figures vary with the machine. See bench/README.md.
"""

from __future__ import annotations

import argparse
import html
import http.server
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from envbuild import guard  # noqa: E402
from envbuild._io import sha256_file  # noqa: E402
from envbuild.installer import find_uv, installer_for, probe_python  # noqa: E402
from envbuild.plan import Backend, PlanOptions, installer_argv, make_plan  # noqa: E402
from envbuild.spec import StackSpec, load_spec, resolve_spec  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from envbuild.provision.prefetch import Prefetcher  # noqa: E402

CACHE = REPO / ".cache" / "bench"
VARIANTS = ("envbuild-uv", "envbuild-pip", "bare-uv", "bare-pip")


# ----------------------------------------------------------------------------- small helpers


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The host's pip/uv configuration must not leak in: the wheelhouse is the only source.

    PYTHONDONTWRITEBYTECODE is dropped too (some sandboxes set it): with it, every `import torch`
    in a uv-made venv (uv writes no .pyc) recompiles torch, which no normal host does."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_"))
        and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
    }
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "UV_NO_CONFIG": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "ENVBUILD_TORCH_INDEX": "",
        }
    )
    env.update(extra or {})
    return env


def sh(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    check: bool = True,
) -> tuple[float, str]:
    t = time.monotonic()
    out = subprocess.run(
        [str(a) for a in argv],
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    dt = time.monotonic() - t
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("a") as f:
            f.write(
                f"$ {' '.join(map(str, argv))}\n{out.stdout}\n[{dt:.2f} s, exit {out.returncode}]\n"
            )
    if check and out.returncode != 0:
        raise SystemExit(
            f"command failed ({out.returncode}): {' '.join(map(str, argv))}\n{out.stdout[-3000:]}"
        )
    return dt, out.stdout


def rm(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def median(xs: Iterable[float]) -> float | None:
    xs = list(xs)
    return statistics.median(xs) if xs else None


def best(xs: Iterable[float]) -> float | None:
    """Best of N: on a shared machine noise only ever adds time, so the minimum is the estimate."""
    xs = list(xs)
    return min(xs) if xs else None


# ----------------------------------------------------------------------------- HTTP wheelhouse


def write_index(wheels: Path, www: Path, repo: str) -> None:
    """``www/<repo>/{files,simple,flat}``: a PEP 503 index and a flat --find-links page over
    ``wheels``."""
    from packaging.utils import canonicalize_name, parse_wheel_filename

    base = www / repo
    rm(base)
    (base / "files").mkdir(parents=True)
    projects: dict[str, list[tuple[str, str]]] = {}
    for whl in sorted(wheels.glob("*.whl")):
        target = base / "files" / whl.name
        try:
            os.link(whl, target)
        except OSError:
            shutil.copy2(whl, target)
        sidecar = whl.with_name(whl.name + ".sha256")
        if sidecar.is_file() and sidecar.stat().st_mtime >= whl.stat().st_mtime:
            digest = sidecar.read_text().strip()
        else:
            digest = sha256_file(whl)
            sidecar.write_text(digest)
        projects.setdefault(str(canonicalize_name(parse_wheel_filename(whl.name)[0])), []).append(
            (whl.name, digest)
        )

    def page(title: str, links: Iterable[tuple[str, str]]) -> str:
        rows = "\n".join(
            f'    <a href="{html.escape(h)}">{html.escape(t)}</a><br/>' for h, t in links
        )
        return (
            '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
            f"<title>{html.escape(title)}</title></head><body>\n{rows}\n</body></html>\n"
        )

    (base / "simple").mkdir()
    (base / "simple" / "index.html").write_text(
        page("Simple index", ((f"{p}/", p) for p in sorted(projects)))
    )
    for p, files in projects.items():
        (base / "simple" / p).mkdir()
        (base / "simple" / p / "index.html").write_text(
            page(f"Links for {p}", ((f"../../files/{n}#sha256={d}", n) for n, d in files))
        )
    (base / "flat").mkdir()
    (base / "flat" / "index.html").write_text(
        page(
            f"Files in {repo}",
            ((f"../files/{n}#sha256={d}", n) for _, fs in sorted(projects.items()) for n, d in fs),
        )
    )


class _Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    rate: float = 0.0  # bytes per second per connection; 0: as fast as the disk

    def copyfile(self, source: Any, outputfile: Any) -> None:
        if not self.rate:
            return super().copyfile(source, outputfile)
        chunk = 1 << 16
        t0, sent = time.monotonic(), 0
        while data := source.read(chunk):
            outputfile.write(data)
            sent += len(data)
            ahead = sent / self.rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib name
        pass

    def end_headers(self) -> None:
        # PyPI-like caching: artifacts are immutable, index pages short-lived.
        if self.path.split("#")[0].endswith(".whl"):
            self.send_header("Cache-Control", "max-age=365000000, immutable, public")
        else:
            self.send_header("Cache-Control", "max-age=600, public")
        super().end_headers()


def prime(www: Path) -> None:
    """Read every served file once, so the first variant of a cold round does not pay for the disk
    (every later one would find the wheelhouse in the page cache)."""
    for path in www.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                while f.read(1 << 22):
                    pass


def serve(www: Path, rate_mb: float = 0.0) -> tuple[subprocess.Popen[bytes], str]:
    """Serve ``www`` from a separate process (so the bench's own threads cannot slow it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            str(www),
            "--port",
            str(port),
            "--throttle-mb",
            str(rate_mb),
        ],
        stdin=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the wheelhouse server did not start")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up early (uv does) are not news


def serve_forever(www: Path, port: int, rate_mb: float = 0.0) -> None:
    _Handler.rate = rate_mb * 1e6
    handler = lambda *a, **k: _Handler(*a, directory=str(www), **k)  # noqa: E731
    _Server(("127.0.0.1", port), handler).serve_forever()


# ----------------------------------------------------------------------------- the stacks


def locked_for(spec: StackSpec) -> tuple[dict[str, Path], list[str]]:
    """The lock provision would use, and the CLI flag that makes it use exactly that."""
    try:
        from envbuild.stacklock.serve import locked_requirements
    except ImportError:
        return {}, []
    try:
        return dict(locked_requirements(spec)), []
    except Exception as exc:  # noqa: BLE001 - a stale or absent lock: resolve from the spec, in both variants
        log(f"lock not usable ({exc}); all variants resolve from the spec (--no-lock)")
        return {}, ["--no-lock"]


def download_cpu_wheelhouse(spec: StackSpec, locked: Mapping[str, Path], dest: Path) -> None:
    """``pip download`` the stack's full set once, with the host's own pip config (find-links for
    torch)."""
    stamp = dest / ".complete"
    if stamp.exists() and stamp.read_text() == spec.digest + json.dumps(
        sorted(map(str, locked.values()))
    ):
        return
    dest.mkdir(parents=True, exist_ok=True)
    plan = make_plan(spec, PlanOptions(backend="pip", locked=locked))
    cons = dest.parent / "download-constraints.txt"
    cons.write_text(f"{spec.abi.package}=={spec.abi.version}\n")
    for s in plan.steps:
        log(f"downloading step {s.name} into {dest}")
        reqs = ["-r", str(s.locked_file)] if s.locked_file else list(s.requirements)
        argv = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-d",
            str(dest),
            "--only-binary=:all:",
            "--disable-pip-version-check",
            *reqs,
        ]
        sources = [
            a
            for a in s.args
            if a
            not in (
                "--upgrade",
                "--upgrade-strategy",
                "only-if-needed",
                "eager",
                "--no-build-isolation",
                "--force-reinstall",
                "--no-input",
            )
        ]
        argv += [a for a in sources if not a.startswith("--disable")]
        if s.locked_file is not None and "--no-deps" not in argv:
            argv.append("--no-deps")  # a lock lists every dependency itself
        if s.constrained:
            argv += ["-c", str(cons)]
        sh(argv, log_file=dest.parent / "download.log")
    stamp.write_text(spec.digest + json.dumps(sorted(map(str, locked.values()))))


def synth_stack(n: int, big_mb: int, python: str, folder: Path, seeds: Path) -> Path:
    """A stack of a stand-in torch, ``n`` tiny wheels in four steps and one ``big_mb`` MB wheel."""
    from wheel.wheelfile import WheelFile

    wheels = folder / "wheels"
    stack = folder / "stack.toml"
    stamp = folder / ".complete"
    key = f"{n}/{big_mb}/{python}/v1"
    if stamp.exists() and stamp.read_text() == key:
        return stack
    rm(folder)
    wheels.mkdir(parents=True)
    info = {"date_time": (1980, 1, 2, 0, 0, 0)}

    def build(name: str, version: str, files: Mapping[str, bytes], stored: bool = False) -> None:
        dist = f"{name}-{version.replace('+', '_')}"
        di = f"{name}-{version}.dist-info"
        path = wheels / f"{name}-{version}-py3-none-any.whl"
        import zipfile

        with WheelFile(path, "w") as wf:
            for rel, data in files.items():
                zi = zipfile.ZipInfo(rel, **info)  # type: ignore[arg-type]
                zi.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
                wf.writestr(zi, data)
            wf.writestr(
                zipfile.ZipInfo(f"{di}/METADATA", **info),  # type: ignore[arg-type]
                f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n".encode(),
            )
            wf.writestr(
                zipfile.ZipInfo(f"{di}/WHEEL", **info),  # type: ignore[arg-type]
                b"Wheel-Version: 1.0\nGenerator: envbuild-bench\nRoot-Is-Purelib: true\nTag:"
                b" py3-none-any\n",
            )
        del dist

    # the stand-in torch: a version, a version.py, and a RECORD of ~2000 files (real torch: ~12k)
    tv = "2.13.0+cpu"
    tfiles = {
        "torch/__init__.py": f"__version__ = {tv!r}\nfrom . import version\n".encode(),
        "torch/version.py": f"__version__ = {tv!r}\ncuda = None\n".encode(),
    }
    for i in range(2000):
        tfiles[f"torch/_part{i // 100:02d}/m{i:04d}.py"] = f"X = {i}\n".encode()
    build("torch", tv, tfiles)
    names = [f"synth_pkg_{i:04d}" for i in range(n)]
    for i, name in enumerate(names):
        build(
            name,
            "1.0",
            {
                f"{name}/__init__.py": f"N = {i}\n".encode(),
                f"{name}/core.py": b"def f(x):\n    return x + 1\n" * 20,
                f"{name}/data.txt": os.urandom(512).hex().encode(),
            },
        )
    build(
        "synth_big",
        "1.0",
        {"synth_big/__init__.py": b"", "synth_big/blob.bin": os.urandom(big_mb << 20)},
        stored=True,
    )
    # pip/setuptools/wheel: what `uv venv --seed` installs, offline
    for seed in seeds.glob("*.whl"):
        os.link(seed, wheels / seed.name)
    groups = [names[i::4] for i in range(4)]
    steps = ['[[step]]\nname = "torch"\npackages = ["torch==2.13.0+cpu"]\n']
    for k, g in enumerate(groups):
        if g:
            steps.append(
                f'[[step]]\nname = "small-{k + 1}"\npackages ='
                f" {json.dumps([f'{x}==1.0' for x in g])}\n"
            )
    steps.append('[[step]]\nname = "big"\npackages = ["synth-big==1.0"]\n')
    stack.write_text(
        f'schema = 1\nname = "synth-{n}"\ndescription = "bench: {n} tiny wheels + one {big_mb} MB'
        f' wheel"\npython = "{python}"\n\n[layout]\nroot ='
        ' "/tmp/envbuild-bench-unused"\nmin_free_gb = 1\n\n[abi]\npackage = "torch"\nversion ='
        f' "{tv}"\nlocal = "cpu"\n\n' + "\n".join(steps)
    )
    stamp.write_text(key)
    return stack


def prefetch_stack(cpu: StackSpec, cpu_wheels: Path, big_mb: int, folder: Path) -> Path:
    """The cpu profile with a ``big_mb`` MB exact-pinned wheel in a step right after torch: the
    shape of the real stacks, whose prebuilt CUDA wheels (flash-attn, mamba-ssm, ...) follow the
    torch step.
    """
    from wheel.wheelfile import WheelFile

    wheels, stack, stamp = folder / "wheels", folder / "stack.toml", folder / ".complete"
    key = f"{cpu.digest}/{big_mb}/v1"
    if stamp.exists() and stamp.read_text() == key:
        return stack
    rm(folder)
    wheels.mkdir(parents=True)
    for whl in cpu_wheels.glob("*.whl"):
        os.link(whl, wheels / whl.name)
    import zipfile

    info = {"date_time": (1980, 1, 2, 0, 0, 0)}
    with WheelFile(wheels / "prebuilt_kernels-1.0-py3-none-any.whl", "w") as wf:
        for rel, data in {
            "prebuilt_kernels/__init__.py": b"",
            "prebuilt_kernels/kernels.bin": os.urandom(big_mb << 20),
            "prebuilt_kernels-1.0.dist-info/METADATA": (
                b"Metadata-Version: 2.1\nName: prebuilt-kernels\nVersion: 1.0\n\n"
            ),
            "prebuilt_kernels-1.0.dist-info/WHEEL": (
                b"Wheel-Version: 1.0\nGenerator: envbuild-bench\n"
                b"Root-Is-Purelib: true\nTag: py3-none-any\n"
            ),
        }.items():
            zi = zipfile.ZipInfo(rel, **info)  # type: ignore[arg-type]
            zi.compress_type = zipfile.ZIP_STORED
            wf.writestr(zi, data)
    text = cpu.path.read_text()
    marker = '[[step]]\nname = "fla"'
    assert marker in text, "the cpu profile's fla step moved"
    text = text.replace(
        marker,
        '[[step]]\nname = "prebuilt"\npackages = ["prebuilt-kernels==1.0"]\nno_deps = true\n\n'
        + marker,
    )
    text = text.replace('name = "cpu"', 'name = "cpu-prebuilt"', 1)
    stack.write_text(text)
    stamp.write_text(key)
    return stack


def seed_wheels(src: Path, dest: Path, python: str) -> Path:
    """pip, setuptools and wheel wheels (for ``uv venv --seed``), from the cpu wheelhouse or
    downloaded."""
    dest.mkdir(parents=True, exist_ok=True)
    if not any(dest.glob("pip-*.whl")):
        found = (
            [w for w in src.glob("*.whl") if w.name.split("-")[0] in ("pip", "setuptools", "wheel")]
            if src.is_dir()
            else []
        )
        if found:
            for w in found:
                shutil.copy2(w, dest / w.name)
        else:
            sh(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-d",
                    str(dest),
                    "--only-binary=:all:",
                    "--python-version",
                    python,
                    "pip",
                    "setuptools",
                    "wheel",
                ]
            )
    return dest


# ----------------------------------------------------------------------------- the variants


class Runner:
    def __init__(
        self,
        spec_path: Path,
        spec: StackSpec,
        url: str,
        python: str,
        work: Path,
        lock_flag: list[str],
        locked: Mapping[str, Path],
    ) -> None:
        self.spec_path, self.spec, self.url, self.python, self.work = (
            spec_path,
            spec,
            url,
            python,
            work,
        )
        self.lock_flag, self.locked = lock_flag, locked
        self.uv = find_uv()
        self.logs = work / "logs"

    def root(self, variant: str) -> Path:
        return self.work / variant

    def reset(self, variant: str, *, keep_cache: bool) -> None:
        root = self.root(variant)
        if not keep_cache:
            rm(root)
            return
        for p in root.iterdir() if root.exists() else []:
            if p.name != "data":
                rm(p)
        data = root / "data"
        for p in data.iterdir() if data.exists() else []:
            if p.name != "cache":
                rm(p)

    # -- envbuild
    def envbuild(
        self,
        variant: str,
        backend: Backend,
        extra_env: Mapping[str, str] | None = None,
        extra_args: Sequence[str] = (),
    ) -> dict[str, Any]:
        root = self.root(variant)
        argv = [
            sys.executable,
            "-m",
            "envbuild",
            "provision",
            "--stack",
            str(self.spec_path),
            "--root",
            str(root / "data"),
            "--home",
            str(root / "home"),
            "--backend",
            backend,
            "--python",
            self.python,
            "--offline",
            "--wheelhouse",
            self.url,
            "--json",
            *self.lock_flag,
            *extra_args,
        ]
        t = time.monotonic()
        out = subprocess.run(
            argv, env=clean_env(extra_env), capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        wall = time.monotonic() - t
        (self.logs / f"{variant}.log").parent.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{variant}.log").open("a") as f:
            f.write(f"$ {' '.join(argv)}\n{out.stderr}\n{out.stdout}\n[{wall:.2f} s]\n")
        if out.returncode != 0:
            raise SystemExit(
                f"{variant} failed ({out.returncode}); log: {self.logs / (variant + '.log')}\n"
                f"{out.stderr[-3000:]}"
            )
        data = json.loads(out.stdout[out.stdout.index("{") :])
        return {
            "wall": wall,
            "seconds": data["seconds"],
            "guard_seconds": data["guard_seconds"],
            "ran": data["ran"],
            "venv": data["venv"],
            "timings": data.get("timings", {}),
        }

    # -- bare: the same steps, requirement files, flags and constraints, as plain commands
    def bare(
        self,
        variant: str,
        backend: Backend,
        prefetch: bool = False,
        extra_env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        root = self.root(variant)
        # envbuild's layout: reset() keeps the cache
        venv, cache = root / "data" / "venv", root / "data" / "cache"
        env = clean_env(
            {
                "PIP_CACHE_DIR": str(cache / "pip"),
                "UV_CACHE_DIR": str(cache / "uv"),
                "VIRTUAL_ENV": str(venv),
                **(extra_env or {}),
            }
        )
        plan = make_plan(
            self.spec, PlanOptions(backend=backend, wheelhouse=self.url, locked=self.locked)
        )
        reqdir = root / "data" / "req"
        reqdir.mkdir(parents=True, exist_ok=True)
        cons = reqdir / "constraints.txt"
        cons.write_text(f"{self.spec.abi.package}=={self.spec.abi.version}\n")
        lf = self.logs / f"{variant}.log"
        t = time.monotonic()
        if backend == "uv":
            assert self.uv
            sh(
                [
                    self.uv,
                    "venv",
                    "--seed",
                    "--no-index",
                    "--find-links",
                    self.url,
                    "--python",
                    self.python,
                    str(venv),
                ],
                env=env,
                log_file=lf,
            )
        else:
            sh([self.python, "-m", "venv", str(venv)], env=env, log_file=lf)
        py = venv / "bin" / "python"
        pre = (
            Prefetcher(
                installer=installer_for(backend),
                python=py,
                scratch_root=cache / "prefetch",
                logs=self.logs / f"{variant}-prefetch",
                env=env,
            )
            if prefetch
            else None
        )
        try:
            for i, s in enumerate(plan.steps):
                if pre is not None:
                    pre.wait(s.name)
                    if i + 1 < len(plan.steps):
                        pre.start(plan.steps[i + 1])
                if s.locked_file is not None:
                    req = s.locked_file
                else:
                    req = reqdir / f"{s.number:02d}-{s.name}.in"
                    req.write_text("\n".join(s.requirements) + "\n")
                argv = installer_argv(
                    s,
                    backend=backend,
                    python=py,
                    uv=self.uv,
                    requirements_file=req,
                    constraints_file=cons if s.constrained else None,
                )
                step_env = dict(env)
                step_env.update(s.env)
                sh(argv, env=step_env, log_file=lf)
        finally:
            if pre is not None:
                pre.close()
        wall = time.monotonic() - t
        # not part of the bare figure: what envbuild's one full check costs in this same fresh venv
        first_import, _ = sh([py, "-c", guard.FULL_CHECK], env=env, log_file=lf)
        return {"wall": wall, "venv": str(venv), "first_import": first_import}

    def run(self, variant: str, **kw: Any) -> dict[str, Any]:
        if variant == "envbuild-uv":
            return self.envbuild(variant, "uv", **kw)
        if variant == "envbuild-pip":
            return self.envbuild(variant, "pip", **kw)
        if variant == "bare-uv":
            return self.bare(variant, "uv", **kw)
        if variant == "bare-pip":
            return self.bare(variant, "pip", **kw)
        if variant == "bare-uv+prefetch":
            return self.bare(variant, "uv", prefetch=True)
        if variant == "bare-pip+prefetch":
            return self.bare(variant, "pip", prefetch=True)
        if variant == "envbuild-uv+compile":
            return self.envbuild(variant, "uv", extra_args=("--compile-bytecode", "yes"))
        if variant == "envbuild-uv-nocompile":
            return self.envbuild(variant, "uv", extra_args=("--compile-bytecode", "no"))
        # no bytecode compile and no background import warm-up
        if variant == "envbuild-uv-nowarmup":
            return self.envbuild(
                variant,
                "uv",
                extra_env={"ENVBUILD_IMPORT_WARMUP": "0"},
                extra_args=("--compile-bytecode", "no"),
            )
        if variant == "bare-uv+compile":
            return self.bare(variant, "uv", extra_env={"UV_COMPILE_BYTECODE": "1"})
        if variant == "envbuild-uv+prefetch":
            return self.envbuild(variant, "uv", extra_args=("--prefetch", "yes"))
        if variant == "envbuild-uv-noprefetch":
            return self.envbuild(variant, "uv", extra_args=("--prefetch", "no"))
        raise ValueError(variant)


def compare(
    runner: Runner,
    variants: Sequence[str],
    *,
    warm_rounds: int,
    rerun_rounds: int,
    cold_rounds: int = 1,
) -> dict[str, Any]:
    """Cold round, warm rounds (fresh venv, caches kept), re-runs: variants interleaved each
    round."""
    res: dict[str, Any] = {
        v: {"cold": [], "warm": [], "rerun": [], "guard": [], "first_import": []} for v in variants
    }
    for _ in range(cold_rounds):
        for v in variants:
            runner.reset(v, keep_cache=False)
            r = runner.run(v)
            res[v]["cold"].append(r["wall"])
            res[v].setdefault("timings_cold", []).append(r.get("timings"))
            res[v]["guard"] += r.get("guard_seconds", [])
            res[v]["first_import"] += [r["first_import"]] if "first_import" in r else []
            res[v]["venv"] = r["venv"]
            log(f"  {v:22s} cold  {r['wall']:7.2f} s")
    for _ in range(warm_rounds):
        for v in variants:
            runner.reset(v, keep_cache=True)
            r = runner.run(v)
            res[v]["warm"].append(r["wall"])
            res[v].setdefault("timings_warm", []).append(r.get("timings"))
            res[v]["guard"] += r.get("guard_seconds", [])
            res[v]["first_import"] += [r["first_import"]] if "first_import" in r else []
            res[v]["venv"] = r["venv"]
            log(f"  {v:22s} warm  {r['wall']:7.2f} s")
    for _ in range(rerun_rounds):
        for v in variants:
            if v.startswith("envbuild"):
                r = runner.run(v)
                assert not r["ran"], r
                res[v]["rerun"].append(r["wall"])
                log(f"  {v:22s} rerun {r['wall']:7.2f} s")
    return res


def guard_vs_import(venv: Path, spec: StackSpec, repeats: int) -> dict[str, Any]:
    """The metadata guard (uncached and cached scans) and a full ``import torch``, on one venv."""
    site = guard.site_packages(venv)
    probed = probe_python(venv / "bin" / "python")
    assert probed is not None, f"{venv}/bin/python does not run"
    mk = probed.marker_env
    base = guard.take_baseline(spec.abi, site, mk)
    cold, warm = [], []
    for _ in range(repeats):
        if hasattr(guard, "clear_cache"):
            guard.clear_cache()
        cold.append(guard.check(spec, base, site, marker_env=mk).seconds)
        warm.append(guard.check(spec, base, site, marker_env=mk).seconds)
    imports = []
    for _ in range(repeats):
        dt, _out = sh([venv / "bin" / "python", "-c", guard.FULL_CHECK])
        imports.append(dt)
    return {
        "dists": len(guard.scan(site)),
        "guard_first_s": median(cold),
        "guard_repeat_s": median(warm),
        "import_s": median(imports),
    }


# ----------------------------------------------------------------------------- report


def fmt(x: float | None, unit: str = "s") -> str:
    return "-" if x is None else f"{x:.2f} {unit}" if unit else f"{x:.2f}"


def summarize(res: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for v, r in res.items():
        out[v] = {k: best(r[k]) for k in ("cold", "warm", "rerun")}
        out[v]["guard_median"] = median(r["guard"])
        out[v]["first_import"] = best(r.get("first_import", []))
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def print_table(title: str, summary: Mapping[str, Any]) -> None:
    print(f"\n{title}")
    print(
        f"  {'variant':24s} {'cold':>10s} {'warm':>10s} {'re-run':>10s} {'guard/step':>11s}"
        f" {'1st import':>11s}"
    )
    for v, s in summary.items():
        g = s.get("guard_median")
        print(
            f"  {v:24s} {fmt(s['cold']):>10s} {fmt(s['warm']):>10s} {fmt(s['rerun']):>10s} "
            f"{('-' if g is None else f'{1000 * g:.0f} ms'):>11s} {fmt(s.get('first_import')):>11s}"
        )


def targets(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The targets of issue #17 part 4: envbuild-uv within 1.05x of bare uv *plus the same first
    ``import torch``* (the fair baseline: a provision is not done until torch imports), cold and
    warm; the ratio to bare uv alone is shown for information (no limit)."""
    s = summary
    rows = []

    def add(name: str, value: float | None, limit: float | None, less: bool = True) -> None:
        ok = (
            None if value is None or limit is None else (value <= limit if less else value >= limit)
        )
        rows.append({"target": name, "value": value, "limit": limit, "ok": ok})

    uv_variants = [v for v in s if v.startswith("envbuild-uv")]
    for mode in ("cold", "warm"):
        if "bare-uv" in s:
            imp = s["bare-uv"].get("first_import")
            for v in uv_variants:
                if imp is not None and s[v][mode] is not None:
                    add(
                        f"{v} / (bare-uv + its first import) ({mode})",
                        ratio(s[v][mode], s["bare-uv"][mode] + imp),
                        1.05,
                    )
                add(f"  {v} / bare-uv alone ({mode})", ratio(s[v][mode], s["bare-uv"][mode]), None)
        if "envbuild-pip" in s and "bare-pip" in s:
            add(
                f"envbuild-pip / bare-pip ({mode})",
                ratio(s["envbuild-pip"][mode], s["bare-pip"][mode]),
                1.15,
            )
    if "envbuild-uv" in s and "envbuild-pip" in s:
        add(
            "envbuild-uv / envbuild-pip (warm)",
            ratio(s["envbuild-uv"]["warm"], s["envbuild-pip"]["warm"]),
            0.5,
        )
    for v in ("envbuild-uv", "envbuild-pip"):
        if v in s:
            add(f"{v} re-run of a finished env (s)", s[v]["rerun"], 1.0)
            add(f"{v} guard per step, median (s)", s[v]["guard_median"], 0.2)
    return rows


def print_targets(rows: Sequence[Mapping[str, Any]]) -> None:
    for r in rows:
        if r["limit"] is None:
            print(f"  {r['target']:60s} {fmt(r['value'], ''):>8s}")
            continue
        mark = "?" if r["ok"] is None else ("ok" if r["ok"] else "MISSED")
        print(f"  {r['target']:60s} {fmt(r['value'], ''):>8s}  (target <= {r['limit']:g})  {mark}")


def print_phases(raw: Mapping[str, Any]) -> None:
    """Where envbuild's time went, in its best cold and best warm run (provision's own
    `timings`)."""
    for v, r in raw.items():
        for mode in ("cold", "warm"):
            walls, phases = r.get(mode) or [], r.get(f"timings_{mode}") or []
            if not walls or len(phases) != len(walls) or not phases[walls.index(min(walls))]:
                continue
            t = phases[walls.index(min(walls))]
            print(f"  {v} {mode} phases: " + ", ".join(f"{k} {t[k]:.2f} s" for k in t))


def report(results: Mapping[str, Any]) -> None:
    """Print the tables (also from a saved JSON: --report FILE)."""
    cfg = results.get("config", {})
    rounds = cfg.get("rounds", 1)
    print("\n" + "=" * 78)
    h = results["host"]
    print(
        f"envbuild provision benchmark  ({h['cpus']} CPUs, Python {h['python']}, {h['uv']}; "
        f"total {results['total_s']} s)"
    )
    if results.get("throttle_mb_per_s"):
        print(f"  wheelhouse throttled to {results['throttle_mb_per_s']:g} MB/s per connection")
    if "cpu" in results:
        c = results["cpu"]
        size = f", {cfg['wheelhouse_gb']} GB" if cfg.get("wheelhouse_gb") else ""
        print_table(
            f"{c.get('stack', 'cpu')} stack ({cfg.get('wheels', '?')} wheels{size}, from a local"
            " HTTP wheelhouse); best of N, wall time incl. CLI start",
            c["summary"],
        )
        print_targets(c["targets"])
        print_phases(c["raw"])
        g = c["guard_vs_import"]
        print(
            f"  ABI guard on the finished venv ({g['dists']} dists): first"
            f" {1000 * g['guard_first_s']:.0f} ms, repeat (RECORDs cached)"
            f" {1000 * g['guard_repeat_s']:.0f} ms; full `import torch`: {g['import_s']:.2f} s"
        )
        if "prefetch" in c:
            print_table(f"prefetch (bare sequences, cold, best of {max(2, rounds)})", c["prefetch"])
    if "prefetch_stack" in results:
        ps = results["prefetch_stack"]
        print_table(
            f"cpu profile + one {ps['big_mb']} MB prebuilt wheel after torch (cold, best of"
            f" {rounds})",
            ps["summary"],
        )
        print_phases(ps["raw"])
    if "synth" in results:
        big = cfg.get("big_mb", "?")
        print(
            f"\nsynthetic stacks (stand-in torch + N tiny wheels in 4 steps + one {big} MB wheel)"
        )
        print(
            f"  {'N':>5s} {'variant':14s} {'cold':>9s} {'warm':>9s} {'re-run':>9s}"
            f" {'guard/step':>10s} {'guard 1st':>10s} {'cached':>8s} {'import':>8s}"
        )
        for n, r in results["synth"].items():
            g = r["guard_vs_import"]
            for v, s in r["summary"].items():
                gm = s["guard_median"]
                print(
                    f"  {n:>5s} {v:14s} {fmt(s['cold']):>9s} {fmt(s['warm']):>9s}"
                    f" {fmt(s['rerun']):>9s} {('-' if gm is None else f'{1000 * gm:.0f} ms'):>10s}"
                    f" {1000 * g['guard_first_s']:>7.0f} ms {1000 * g['guard_repeat_s']:>5.0f} ms"
                    f" {g['import_s']:>6.2f} s"
                )
            print_targets([t for t in r["targets"] if "/" in t["target"]])
    if "torch_python" in results:
        g = results["torch_python"]
        print(
            f"\n{g['prefix']}: ABI guard ({g['dists']} dists) first {1000 * g['guard_first_s']:.0f}"
            f" ms, repeat {1000 * g['guard_repeat_s']:.0f} ms; full `import torch`"
            f" {g['import_s']:.2f} s"
        )


# ----------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: small synthetic stack only, one round (< 2 min)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="cold rounds (default 1)")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument(
        "--stacks",
        default=None,
        help="comma list of cpu,synth,prefetch (default: cpu,synth; --quick: synth)",
    )
    ap.add_argument("--profile", default="cpu", help="the real stack to bench (default: cpu)")
    ap.add_argument(
        "--stack",
        type=Path,
        default=None,
        help=(
            "bench this stack spec instead of --profile, from --wheelhouse (resolved from the spec)"
        ),
    )
    ap.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="with --stack: a folder holding every wheel the stack needs (nothing is downloaded)",
    )
    ap.add_argument(
        "--python",
        default=None,
        help=(
            "interpreter for the venvs (default: python<spec.python>, for synth: this interpreter)"
        ),
    )
    ap.add_argument(
        "--sizes", default=None, help="synthetic stack sizes (default 50,200,500; --quick 30)"
    )
    ap.add_argument(
        "--big-mb", type=int, default=None, help="size of the large wheel (default 200; --quick 20)"
    )
    ap.add_argument(
        "--warm-rounds",
        type=int,
        default=None,
        help="warm rounds per variant (default 2; --quick 1)",
    )
    ap.add_argument(
        "--torch-python",
        default=None,
        help=(
            "also time the guard and `import torch` against this interpreter's environment "
            "(read-only; e.g. the GPU machine's python3)"
        ),
    )
    ap.add_argument(
        "--prefetch",
        choices=("auto", "yes", "no"),
        default="auto",
        help="measure prefetch: auto = the uv pair unless --quick; yes = the uv and pip pairs",
    )
    ap.add_argument(
        "--seeds",
        type=Path,
        default=None,
        help="folder with pip/setuptools/wheel wheels for `uv venv --seed` (offline hosts)",
    )
    ap.add_argument(
        "--variants", default=None, help=f"comma list from {','.join(VARIANTS)} (default: all)"
    )
    ap.add_argument(
        "--work", type=Path, default=None, help="scratch folder (default: .cache/bench/work)"
    )
    ap.add_argument(
        "--throttle-mb",
        type=float,
        default=0.0,
        help=(
            "serve at most this many MB/s per connection (emulate a remote index; default:"
            " unthrottled)"
        ),
    )
    ap.add_argument("--report", type=Path, help="print the tables of a saved results JSON and exit")
    ap.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        serve_forever(args.serve, args.port, args.throttle_mb)
        return 0

    if args.report:
        report(json.loads(args.report.read_text()))
        return 0
    quick = args.quick
    stacks = (args.stacks or ("synth" if quick else "cpu,synth")).split(",")
    sizes = [int(x) for x in (args.sizes or ("30" if quick else "50,200,500")).split(",")]
    big_mb = args.big_mb if args.big_mb is not None else (20 if quick else 200)
    warm_rounds = args.warm_rounds if args.warm_rounds is not None else (1 if quick else 2)
    variants = tuple(args.variants.split(",")) if args.variants else VARIANTS
    rounds = args.rounds if args.rounds is not None else 1
    do_prefetch = args.prefetch == "yes" or (args.prefetch == "auto" and not quick)
    work = (args.work or CACHE / "work").resolve()
    rm(work)
    work.mkdir(parents=True)
    www = CACHE / "www"
    www.mkdir(parents=True, exist_ok=True)
    t_all = time.monotonic()
    uv_ver = subprocess.run(
        [find_uv() or "uv", "--version"], capture_output=True, text=True
    ).stdout.strip()
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv or sys.argv[1:])]),
        "host": {
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "uv": uv_ver,
            "kernel": platform.release(),
            "node": platform.node(),
        },
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }

    # the wheelhouses, then one server over all of them
    cpu_spec = None
    locked: dict[str, Path] = {}
    lock_flag: list[str] = []
    wheelhouse = CACHE / "wheelhouse"
    if "cpu" in stacks and args.stack is not None:
        if args.wheelhouse is None:
            ap.error("--stack needs --wheelhouse DIR")
        cpu_spec = load_spec(args.stack, clean_env())
        lock_flag = ["--no-lock"]
        wheelhouse = args.wheelhouse.resolve()
        write_index(wheelhouse, www, "cpu")
    elif "cpu" in stacks:
        cpu_spec = resolve_spec(args.profile, None, clean_env())
        locked, lock_flag = locked_for(cpu_spec)
        t = time.monotonic()
        download_cpu_wheelhouse(cpu_spec, locked, wheelhouse)
        write_index(wheelhouse, www, "cpu")
        results["wheelhouse_prep_s"] = round(time.monotonic() - t, 2)
    synth_py = args.python or sys.executable
    synth_ver = subprocess.run(
        [synth_py, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    synth_specs: dict[int, Path] = {}
    prefetch_spec = None
    if "prefetch" in stacks:
        base = resolve_spec(args.profile, None, clean_env())
        if "cpu" not in stacks:
            download_cpu_wheelhouse(base, locked_for(base)[0], CACHE / "wheelhouse")
        pstack = prefetch_stack(base, CACHE / "wheelhouse", big_mb, CACHE / f"prefetch-{big_mb}mb")
        prefetch_spec = load_spec(pstack, clean_env())
        write_index(pstack.parent / "wheels", www, "prefetch")
    if "synth" in stacks:
        seeds = seed_wheels(
            args.seeds or CACHE / "wheelhouse", CACHE / f"seeds-{synth_ver}", synth_ver
        )
        for n in sizes:
            t = time.monotonic()
            synth_specs[n] = synth_stack(
                n, big_mb, synth_ver, CACHE / f"synth-{n}-{big_mb}mb-py{synth_ver}", seeds
            )
            write_index(synth_specs[n].parent / "wheels", www, f"synth-{n}")
            log(f"synthetic stack {n} wheels + {big_mb} MB: {time.monotonic() - t:.1f} s")
    prime(www)
    server, base_url = serve(www, args.throttle_mb)
    results["throttle_mb_per_s"] = args.throttle_mb
    try:
        if cpu_spec is not None:
            log(f"{cpu_spec.name} stack from {base_url}/cpu/flat/ (wheelhouse {wheelhouse})")
            py = args.python or f"python{cpu_spec.python}"
            runner = Runner(
                cpu_spec.path,
                cpu_spec,
                f"{base_url}/cpu/flat/",
                shutil.which(py) or py,
                work / "cpu",
                lock_flag,
                locked,
            )
            raw = compare(
                runner,
                variants,
                warm_rounds=warm_rounds,
                rerun_rounds=warm_rounds,
                cold_rounds=rounds,
            )
            summary = summarize(raw)
            gi = guard_vs_import(
                Path(next(r["venv"] for r in raw.values() if "venv" in r)), cpu_spec, 3
            )
            results["cpu"] = {
                "raw": raw,
                "summary": summary,
                "targets": targets(summary),
                "guard_vs_import": gi,
                "stack": cpu_spec.name,
            }
            if do_prefetch:
                pre_variants: tuple[str, ...] = ("bare-uv", "bare-uv+prefetch")
                if args.prefetch == "yes":
                    pre_variants += ("bare-pip", "bare-pip+prefetch")
                log("prefetch: bare sequences with and without prefetch, cold")
                pr = compare(
                    runner, pre_variants, warm_rounds=0, rerun_rounds=0, cold_rounds=max(2, rounds)
                )
                results["cpu"]["prefetch"] = summarize(pr)
        if prefetch_spec is not None:
            log(f"prefetch stack: the cpu profile + one {big_mb} MB prebuilt wheel after torch")
            py = args.python or f"python{prefetch_spec.python}"
            runner = Runner(
                prefetch_spec.path,
                prefetch_spec,
                f"{base_url}/prefetch/flat/",
                shutil.which(py) or py,
                work / "prefetch",
                ["--no-lock"],
                {},
            )
            pv = (
                tuple(args.variants.split(","))
                if args.variants
                else ("envbuild-uv+prefetch", "envbuild-uv-noprefetch")
            )
            raw = compare(runner, pv, warm_rounds=0, rerun_rounds=0, cold_rounds=rounds)
            results["prefetch_stack"] = {"raw": raw, "summary": summarize(raw), "big_mb": big_mb}
        for n, stack in synth_specs.items():
            spec = load_spec(stack, clean_env())
            log(f"synthetic stack: {n} tiny wheels + one {big_mb} MB wheel")
            runner = Runner(
                stack,
                spec,
                f"{base_url}/synth-{n}/flat/",
                shutil.which(synth_py) or synth_py,
                work / f"synth-{n}",
                ["--no-lock"],
                {},
            )
            vs = (
                variants
                if (quick or n == min(sizes))
                else tuple(v for v in variants if v.endswith("-uv"))
            )
            raw = compare(
                runner,
                vs,
                warm_rounds=warm_rounds if quick or n == min(sizes) else 1,
                rerun_rounds=1,
            )
            summary = summarize(raw)
            gi = guard_vs_import(
                Path(next(r["venv"] for r in raw.values() if "venv" in r)), spec, 3
            )
            results.setdefault("synth", {})[str(n)] = {
                "raw": raw,
                "summary": summary,
                "targets": targets(summary),
                "guard_vs_import": gi,
                "big_mb": big_mb,
            }
        if args.torch_python:
            tp = subprocess.run(
                [args.torch_python, "-c", "import sys; print(sys.prefix)"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            spec = cpu_spec or load_spec(next(iter(synth_specs.values())), clean_env())
            from dataclasses import replace

            from envbuild.spec import ABI

            adopted = replace(
                spec, abi=replace(spec.abi, local=None, version="", adopt=True, cuda=None)
            )
            assert isinstance(adopted.abi, ABI)
            try:
                results["torch_python"] = {"prefix": tp, **guard_vs_import(Path(tp), adopted, 3)}
            except (LookupError, SystemExit, FileNotFoundError, RuntimeError) as exc:
                log(f"--torch-python {args.torch_python}: no torch to measure there ({exc!s:.200})")
    finally:
        server.terminate()
        server.wait()
    results["total_s"] = round(time.monotonic() - t_all, 1)

    results["config"] = {
        "rounds": rounds,
        "warm_rounds": warm_rounds,
        "big_mb": big_mb,
        "sizes": sizes,
        "wheels": len(list(wheelhouse.glob("*.whl"))) if cpu_spec else None,
        "wheelhouse_gb": (
            round(sum(f.stat().st_size for f in wheelhouse.glob("*.whl")) / 1e9, 2)
            if cpu_spec
            else None
        ),
    }
    report(results)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str))
        print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
