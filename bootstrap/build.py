"""Build envbuild's one-archive bootstrap for a fresh Linux host: ``dist/envbuild-bootstrap-<version>.tar.gz``.

    python bootstrap/build.py [--python-version 3.10] [--platform manylinux_2_17_x86_64] [-o dist]

The archive holds ``envbuild-bootstrap/wheels/`` (envbuild's wheel, every dependency's wheel for
the target Python and platform, and pip's own wheel), ``install.sh`` and ``SHA256SUMS``. On the
host: ``tar xzf envbuild-bootstrap-*.tar.gz && ./envbuild-bootstrap/install.sh``: nothing but
the system ``python3`` (3.10+) and ``tar``, no network, no pip, no python3-venv.

Why a wheelhouse tarball and not a zipapp (shiv/pex): envbuild depends on uv, a platform binary
shipped as a wheel, which a zipapp cannot run from inside its archive (shiv and pex unpack it to
a cache folder first, which is a venv by another name and a tool of their own to trust). A
folder of wheels installs with the same pip, the same metadata and the same ``envbuild`` entry
point as ``pip install envbuild``; every file is hash-listed; nothing runs at build time but pip.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent


def _pip(*args: str) -> None:
    """pip, its output shown only when it fails: the notes a host's pip configuration makes it print
    (an extra index folder without the project, say) are not the build's output."""
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        raise SystemExit(f"pip {args[0]} failed (exit {done.returncode}); its output is above")


def build(out: Path, python_version: str, platform: str) -> Path:
    version = _version()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "envbuild-bootstrap"
        wheels = root / "wheels"
        wheels.mkdir(parents=True)
        _pip("wheel", "-q", "--no-deps", "-w", str(wheels), str(REPO))
        envbuild_whl = next(wheels.glob("envbuild-*.whl"))
        # every dependency for the *target* interpreter, as wheels only, plus pip itself for
        # install.sh. pip evaluates dependency markers for the interpreter it runs on, not for
        # --python-version, so the wheels' markers are evaluated here for the target and what
        # they add (tomli, typing_extensions on 3.10) is downloaded until nothing is missing.
        wanted = [str(envbuild_whl), "pip"]
        while wanted:
            _pip("download", "-q", "--only-binary=:all:", "--python-version", python_version, "--platform", platform,
                 "--implementation", "cp", "-d", str(wheels), *wanted)
            wanted = _missing(wheels, python_version)
        shutil.copy2(HERE / "install.sh", root / "install.sh")
        (root / "install.sh").chmod(0o755)
        sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(wheels.glob("*.whl"))]
        (root / "SHA256SUMS").write_text("\n".join(sums) + "\n")
        out.mkdir(parents=True, exist_ok=True)
        archive = out / f"envbuild-bootstrap-{version}-py{python_version}-{platform}.tar.gz"
        tmp_archive = archive.with_suffix(".tmp")
        with tarfile.open(tmp_archive, "w:gz") as tar:
            tar.add(root, arcname=root.name)
        os.replace(tmp_archive, archive)
    return archive


def _missing(wheels: Path, python_version: str) -> list[str]:
    """Requirements of the wheels in ``wheels`` that hold on ``python_version`` but have no wheel there."""
    import zipfile

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename

    env = {"python_version": python_version, "python_full_version": python_version + ".12",
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    have = {canonicalize_name(parse_wheel_filename(p.name)[0]) for p in wheels.glob("*.whl")}
    out: list[str] = []
    for whl in wheels.glob("*.whl"):
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            for line in z.read(meta).decode("utf-8", "replace").splitlines():
                if not line.startswith("Requires-Dist:"):
                    continue
                req = Requirement(line.split(":", 1)[1].strip())
                if canonicalize_name(req.name) in have or (req.marker and not req.marker.evaluate(env)):
                    continue
                out.append(str(req.name) + str(req.specifier))
    return sorted(set(out))


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise SystemExit("no version in pyproject.toml")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--python-version", default="3.10", help="the host's Python (default: 3.10, Ubuntu 22.04's)")
    p.add_argument("--platform", default="manylinux_2_17_x86_64", help="the host's wheel platform tag")
    p.add_argument("-o", "--output", type=Path, default=REPO / "dist", help="folder for the archive (default: dist/)")
    args = p.parse_args()
    print(build(args.output, args.python_version, args.platform))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
