"""Regenerate the example locks: ``vision/`` (healthy) and ``vision-mismatch/`` (its planted twin).

    .venv/bin/python lockfiles/examples/regenerate.py            # rewrites */pyproject.toml and */uv.lock here
    .venv/bin/python lockfiles/examples/regenerate.py --out DIR  # writes them under DIR instead

Each ``uv.lock`` is written by real ``uv lock`` (the uv envbuild depends on) from the
``pyproject.toml`` beside it, in the shape of uv's PyTorch guide: torch from a PyTorch index on
Linux (``[tool.uv.sources]`` with a marker, the index ``explicit``), from PyPI everywhere else,
and a prebuilt flash-attn wheel used by URL on Linux, whose local version names the torch it was
built for (``2.8.3+cu12torch2.10cxx11abiTRUE``, as on flash-attn's release page). The twin
differs in one thing: its flash-attn wheel was built for torch 2.9, so ``envbuild check-lock``
fails it (exit 8, ``extension-abi``, on that package's line) and passes the healthy one.

What is real and what stands in. This machine reaches PyPI and nothing else, so:

- Everything PyPI serves is real: torch 2.10.0 for macOS and Windows, and every package the
  Linux torch and flash-attn pull in (the ``nvidia-*-cu12`` runtime, ``triton``, ``sympy``,
  ``einops``, ...), with their real hashes. ``uv lock`` reads only their metadata (PEP 658), a
  few megabytes, not the 900 MB torch wheels. ``exclude-newer`` holds the resolution to a date,
  so a later run on any machine makes the same lock.
- The PyTorch index (download.pytorch.org) and the GitHub release page cannot be reached, and
  PyPI refuses local versions, so ``torch 2.10.0+cu128`` and the two flash-attn wheels are
  stand-ins: small wheels built here (``tests/support/wheels.py``, byte-reproducible, so their
  hashes never change) and served while uv locks, at ``http://127.0.0.1:8753`` (``/cu128/simple``
  for the index, ``/releases/files/`` for the wheels). The torch stand-in carries the
  ``Requires-Dist`` of PyPI's own Linux torch 2.10.0 wheel (read from PyPI on every run; the same
  CUDA 12.8 build the PyTorch index serves as ``+cu128``), so the Linux environment's runtime
  is the real one; flash-attn's declare ``torch`` and ``einops``, as the released wheels do.

So the locks read exactly like a project's, and ``check-lock`` judges them as such; installing
one on Linux needs this script's stand-in server running (nothing else serves those files).
That address is written into both ``pyproject.toml`` and ``uv.lock``; ``--port`` changes it
(``tests/test_example_locks.py`` uses a free port and compares with the port normalised).

Needs PyPI. Run from anywhere; the output folders are replaced whole.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from support.index import IndexServer  # noqa: E402  (tests/support: the repository's real local index)
from support.wheels import WheelSpec  # noqa: E402

PORT = 8753
TORCH = "2.10.0"
CUDA = "12.8"
EXCLUDE_NEWER = "2026-11-01T00:00:00Z"
REQUIRES_PYTHON = ">=3.10"
# The PyPI wheel whose metadata the torch stand-in copies: the Linux x86_64 build.
TORCH_METADATA_FROM = f"torch-{TORCH}-cp312-cp312-manylinux_2_28_x86_64.whl"
PYPI_SIMPLE = "https://pypi.org/simple"

# example folder -> the flash-attn release it locks (name-version as released: TRUE, not true)
EXAMPLES = {
    "vision": "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE",
    "vision-mismatch": "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE",
}

PYPROJECT = """\
# An example for `envbuild check-lock`, written by lockfiles/examples/regenerate.py (edit that,
# not this file). {what}
# The PyTorch index and the flash-attn release page are stand-ins served by that script at
# {server}: see its docstring for what is real and what stands in.
[project]
name = "{name}"
version = "0.1.0"
requires-python = "{requires_python}"
dependencies = [
    "torch=={torch}",
    "flash-attn==2.8.3 ; sys_platform == 'linux'",
]

[tool.uv]
package = false
exclude-newer = "{exclude_newer}"
# the stand-in index gives no upload times; torch is pinned exactly anyway
exclude-newer-package = {{ torch = false }}

[tool.uv.sources]
torch = [{{ index = "pytorch-cu128", marker = "sys_platform == 'linux'" }}]
flash-attn = {{ url = "{flash_attn_url}", marker = "sys_platform == 'linux'" }}

[[tool.uv.index]]
name = "pytorch-cu128"
url = "{index_url}"
explicit = true
"""

WHAT = {
    "vision": "torch 2.10.0 (+cu128 on Linux) with a flash-attn wheel built for torch 2.10: healthy.",
    "vision-mismatch": "The healthy example's twin: its flash-attn wheel was built for torch 2.9 (planted).",
}


def torch_metadata() -> tuple[list[str], str]:
    """(Requires-Dist, Requires-Python) of PyPI's Linux torch wheel, from its PEP 658 metadata file."""
    request = urllib.request.Request(f"{PYPI_SIMPLE}/torch/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    url = next((f["url"] for f in files if f["filename"] == TORCH_METADATA_FROM), None)
    if url is None:
        raise SystemExit(f"PyPI no longer lists {TORCH_METADATA_FROM}")
    with urllib.request.urlopen(url + ".metadata", timeout=60) as response:
        message = email.parser.BytesParser().parsebytes(response.read(), headersonly=True)
    return list(message.get_all("Requires-Dist") or []), str(message["Requires-Python"])


def build_standins(root: Path) -> None:
    """The stand-in wheels: ``root/cu128`` (the PyTorch index), ``root/releases`` (flash-attn's release page)."""
    requires, requires_python = torch_metadata()
    local = f"{TORCH}+cu{CUDA.replace('.', '')}"
    WheelSpec(
        name="torch", version=local, requires=tuple(requires), requires_python=requires_python,
        summary=f"stand-in for torch {local} (Requires-Dist of PyPI's torch {TORCH}; none of its files)",
        files={"torch/__init__.py": f"__version__ = {local!r}\n", "torch/version.py": f"cuda = {CUDA!r}\n"},
    ).build(root / "cu128")
    for key in EXAMPLES.values():
        name, version = key.split("-", 1)
        path = WheelSpec(name=name, version=version, requires=("torch", "einops"),
                         summary=f"stand-in for the released {key} wheel").build(root / "releases")
        path.rename(path.with_name(f"{key}-py3-none-any.whl"))  # the release's own spelling (TRUE)


def uv_env(cache: Path) -> dict[str, str]:
    """This environment without UV_* settings or user config; a fresh cache (nothing read from an earlier run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    env.update({"UV_CACHE_DIR": str(cache), "XDG_CONFIG_HOME": str(cache / "config"), "UV_PYTHON_DOWNLOADS": "never"})
    return env


def uv_bin() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def regenerate(out: Path, port: int) -> list[Path]:
    """Write ``out/<example>/{pyproject.toml,uv.lock}`` for every example; returns the locks."""
    written = []
    with tempfile.TemporaryDirectory(prefix="envbuild-examples-") as tmp:
        standins = Path(tmp) / "standins"
        build_standins(standins)
        with IndexServer({"cu128": standins / "cu128", "releases": standins / "releases"}, port=port) as server:
            for name, key in EXAMPLES.items():
                folder = out / name
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir(parents=True)
                (folder / "pyproject.toml").write_text(PYPROJECT.format(
                    what=WHAT[name], server=server.url, name=name, requires_python=REQUIRES_PYTHON, torch=TORCH,
                    exclude_newer=EXCLUDE_NEWER, index_url=server.simple_url("cu128"),
                    flash_attn_url=server.file_url("releases", f"{key}-py3-none-any.whl"),
                ), encoding="utf-8")
                subprocess.run([uv_bin(), "lock", "--quiet", "--python", sys.executable], cwd=folder, env=uv_env(Path(tmp) / f"cache-{name}"),
                               check=True, timeout=600)
                written.append(folder / "uv.lock")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE, help="where the example folders go (default: beside this script)")
    parser.add_argument("--port", type=int, default=PORT, help=f"the stand-in server's port (default {PORT}; 0: any free port)")
    args = parser.parse_args(argv)
    for lock in regenerate(args.out, args.port):
        print(f"wrote {lock}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
