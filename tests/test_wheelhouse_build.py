"""Wheelhouse build: real builds of tests/packages/* against the real torch 2.13.0 CPU venv.

The build venv sees torch through a ``.pth`` file pointing at the shared ``torch_venv`` (so
torch is not installed twice) and holds setuptools + wheel, the no-isolation build needs.
"""

from __future__ import annotations

import io
import json
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support.cachedir import TEST_CACHE
from support.fixtures import cache_lock

from envbuild import events
from envbuild.cli import main
from envbuild.errors import ConfigError, WheelhouseError
from envbuild.wheelhouse import local_tag, provenance_mismatch, read_provenance
from envbuild.wheelhouse.build import BuildOptions, build
from envbuild.wheelhouse.repack import repack_wheel
from envbuild.wheelhouse.spec import load_wheel_spec

REPO = Path(__file__).resolve().parents[1]
PACKAGES = REPO / "tests" / "packages"
CACHE = TEST_CACHE
TORCH = "2.13.0+cpu"

pytestmark = pytest.mark.slow


def _venv_with_torch(path: Path, torch_venv: Path, *packages: str) -> Path:
    python = path / "bin" / "python"
    with cache_lock(path):  # pytest-xdist workers share .cache/tests
        if not python.exists():
            base = torch_venv / "bin" / "python"
            subprocess.run(
                [
                    str(base),
                    "-m",
                    "venv",
                    "--without-pip" if not packages else "--upgrade-deps",
                    str(path),
                ],
                check=True,
                capture_output=True,
            )
            site = subprocess.run(
                [str(base), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            mine = subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            (Path(mine) / "_envbuild_test_torch.pth").write_text(site + "\n")
            if packages:
                subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


@pytest.fixture(scope="session")
def build_python(torch_venv: Path) -> Path:
    """An interpreter that sees the real torch and has setuptools + wheel (cached across runs)."""
    return _venv_with_torch(CACHE / "wheelhouse-build-venv", torch_venv, "setuptools", "wheel")


def _spec(tmp_path: Path, name: str, version: str, source: str, extra: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'schema = 1\nname = "{name}"\nversion = "{version}"\n\n[source]\n{source}\n\n'
        f'[build]\nrequires = ["setuptools", "wheel"]\n{extra}'
    )
    return path


def _opts(tmp_path: Path, python: Path, **kw: Any) -> BuildOptions:
    return BuildOptions(python=python, out=tmp_path / "out", cache=tmp_path / "cache", **kw)


@pytest.mark.parametrize(
    ("project", "name", "version", "module", "check"),
    [
        ("pure_pkg", "pure-pkg", "0.3.1", "pure_pkg", "print(pure_pkg.greet())"),
        ("c_ext", "c-ext", "1.2.0", "c_ext", "print(c_ext.dot([1.0, 2.0], [3.0, 4.0]))"),
    ],
)
def test_build_strips_retags_records_and_installs(
    tmp_path: Path,
    build_python: Path,
    torch_venv: Path,
    project: str,
    name: str,
    version: str,
    module: str,
    check: str,
) -> None:
    spec = load_wheel_spec(
        _spec(
            tmp_path,
            name,
            version,
            f'path = "{PACKAGES / project}"',
            'env = { FIXTURE_FORCE_BUILD = "TRUE" }\n',
        )
    )
    opts = _opts(tmp_path, build_python)
    first = build(spec, opts)
    assert not first.cached
    assert first.version == f"{version}+cputorch2.13.0"
    assert first.wheel.name.startswith(f"{module}-{version}+cputorch2.13.0-")
    assert "torch" in first.removed_requires
    assert first.log_file is not None and first.log_file.is_file()

    with zipfile.ZipFile(first.wheel) as zf:
        di = f"{module}-{version}+cputorch2.13.0.dist-info"
        metadata = zf.read(f"{di}/METADATA").decode()
        prov = json.loads(zf.read(f"{di}/envbuild_provenance.json"))
    assert "Requires-Dist" not in metadata and "Provides-Extra" not in metadata
    assert f"Version: {version}+cputorch2.13.0" in metadata
    assert prov["torch"]["version"] == TORCH and prov["torch"]["git_version"]
    assert prov["spec"]["digest"] == spec.digest and prov["source"]["tree_sha256"]
    assert prov["build"]["env"]["FIXTURE_FORCE_BUILD"] == "TRUE"

    # RECORD is valid for `python -m wheel` and for pip
    unpacked = subprocess.run(
        [
            sys.executable,
            "-m",
            "wheel",
            "unpack",
            "-d",
            str(tmp_path / "unpacked"),
            str(first.wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    target = _venv_with_torch(tmp_path / "target", torch_venv)
    pip = subprocess.run(
        [
            str(build_python),
            "-m",
            "pip",
            "--python",
            str(target),
            "install",
            "--no-index",
            "--no-deps",
            str(first.wheel),
        ],
        capture_output=True,
        text=True,
    )
    if pip.returncode != 0 and "no such option: --python" in pip.stderr:  # pip < 22.3
        pip = subprocess.run(
            [
                str(build_python),
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-deps",
                "--target",
                str(tmp_path / "t"),
                str(first.wheel),
            ],
            capture_output=True,
            text=True,
        )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    run = subprocess.run(
        [str(target), "-c", f"import {module}; {check}"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr

    # the ABI guard's view of the installed wheel
    site = Path(
        subprocess.run(
            [str(target), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    installed = read_provenance(site / f"{module}-{version}+cputorch2.13.0.dist-info")
    assert installed is not None and installed["version"] == f"{version}+cputorch2.13.0"
    assert provenance_mismatch(installed, TORCH) is None
    assert provenance_mismatch(installed, TORCH, prov["torch"]["git_version"]) is None
    msg = provenance_mismatch(installed, "2.12.0.dev20260405+cu132")
    assert (
        msg is not None
        and "built against torch 2.13.0+cpu" in msg
        and "2.12.0.dev20260405+cu132" in msg
    )
    assert "another build" in (provenance_mismatch(installed, TORCH, "0" * 40) or "")

    # same spec, same torch: served from the cache, no rebuild: no build log, the wheel's file
    # left as it was (not written again), and the build says so
    logs = sorted((opts.out / "logs").iterdir())
    before = first.wheel.stat()
    said: list[events.Event] = []
    with events.sink(said.append):
        second = build(spec, opts)
    assert second.cached and second.log_file is None
    assert second.wheel == first.wheel
    after = second.wheel.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted((opts.out / "logs").iterdir()) == logs == [first.log_file]
    assert [(e.level, e.message) for e in said if e.level != "debug"] == [
        ("ok", f"{spec.label}: cached {first.wheel.name}")
    ]


def test_local_tag() -> None:
    assert local_tag("2.12.0.dev20260405+cu132", "13.2") == "cu132torch2.12.0.dev20260405"
    assert local_tag("2.13.0+cpu", None) == "cputorch2.13.0"
    assert read_provenance(Path("/nonexistent")) is None


def test_compiler_error_shows_log_tail_and_exits_9(
    tmp_path: Path, build_python: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "broken"
    shutil.copytree(PACKAGES / "c_ext", src)
    (src / "c_ext" / "fast.c").write_text("#include <Python.h>\nint broken( { this is not C }\n")
    spec = _spec(tmp_path, "c-ext", "1.2.0", f'path = "{src}"')
    code = main(
        [
            "wheelhouse",
            "build",
            str(spec),
            "--python",
            str(build_python),
            "--out",
            str(tmp_path / "out"),
            "--cache",
            str(tmp_path / "cache"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 9
    assert "building c-ext 1.2.0 failed" in err
    assert "fast.c" in err and "error" in err
    log = next((tmp_path / "out" / "logs").glob("c-ext-1.2.0-*.log"))
    assert f"full log: {log}" in err
    assert "Traceback" not in err


def _sdist(tmp_path: Path) -> Path:
    """A real sdist of tests/packages/pure_pkg."""
    out = tmp_path / "pure_pkg-0.3.1.tar.gz"
    with tarfile.open(out, "w:gz") as tf:
        tf.add(
            PACKAGES / "pure_pkg",
            arcname="pure_pkg-0.3.1",
            filter=lambda ti: None if "egg-info" in ti.name or "__pycache__" in ti.name else ti,
        )
    return out


def test_sdist_source_patch_and_offline_sources_folder(tmp_path: Path, build_python: Path) -> None:
    sdist = _sdist(tmp_path)
    from envbuild._io import sha256_file

    sha = sha256_file(sdist)
    patch = tmp_path / "greet.patch"
    patch.write_text(
        "--- a/src/pure_pkg/__init__.py\n+++ b/src/pure_pkg/__init__.py\n@@ -2,4 +2,4 @@\n \n \n"
        ' def greet() -> str:\n-    return "hello from pure_pkg"\n+    return "hello from the'
        ' patched pure_pkg"\n'
    )
    # the URL is unreachable: the sdist must come from the --sources folder, hash-checked
    spec = load_wheel_spec(
        _spec(
            tmp_path,
            "pure-pkg",
            "0.3.1",
            f'sdist = "https://user:s3cret@127.0.0.1:9/files/{sdist.name}"\nsha256 = "{sha}"',
            f'patches = ["{patch.name}"]\n',
        )
    )
    result = build(spec, _opts(tmp_path, build_python, sources=(tmp_path,)))
    with zipfile.ZipFile(result.wheel) as zf:
        assert b"patched" in zf.read("pure_pkg/__init__.py")
        prov = json.loads(
            zf.read("pure_pkg-0.3.1+cputorch2.13.0.dist-info/envbuild_provenance.json")
        )
    assert prov["source"]["sha256"] == sha
    assert "s3cret" not in json.dumps(prov)
    assert prov["source"]["patches"][0]["file"] == "greet.patch"


def test_a_changed_key_part_rebuilds_and_says_which(
    tmp_path: Path, build_python: Path, torch_venv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key holds torch's payload digest as the ABI guard computes it (never the RECORD's bytes,
    which differ per venv and installer) and the GPU archs the build sees; another arch list is
    another key: rebuilt, and the miss and the new wheel's provenance name the part that differs."""
    from envbuild import guard
    from envbuild.wheelhouse.build import probe_target

    target = probe_target(torch_venv / "bin" / "python")
    torch = guard.scan(guard.site_packages(torch_venv))["torch"]
    assert target.info["torch_payload_sha256"] == torch.payload_sha256()
    assert target.info["torch_git_version"] and target.info["torch_cuda"] is None

    spec = load_wheel_spec(
        _spec(tmp_path, "pure-pkg", "0.3.1", f'path = "{PACKAGES / "pure_pkg"}"')
    )
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    first = build(spec, _opts(tmp_path, build_python))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    second = build(spec, _opts(tmp_path, build_python))
    assert not first.cached and not second.cached and first.key != second.key
    assert (
        second.not_reused == f"{first.wheel.name} was built for another key (archs none, now 9.0)"
    )
    with zipfile.ZipFile(second.wheel) as zf:
        prov = json.loads(
            zf.read("pure_pkg-0.3.1+cputorch2.13.0.dist-info/envbuild_provenance.json")
        )
    assert (
        prov["build"]["not_reused"] == second.not_reused
        and prov["build"]["key_parts"]["archs"] == "9.0"
    )
    assert build(spec, _opts(tmp_path, build_python)).cached  # each key keeps its wheel
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    assert build(spec, _opts(tmp_path, build_python)).cached


def test_bad_inputs(tmp_path: Path, build_python: Path) -> None:
    sdist = _sdist(tmp_path)
    # missing sdist
    missing = load_wheel_spec(
        _spec(
            tmp_path,
            "pure-pkg",
            "0.3.1",
            f'sdist = "{tmp_path / "nope.tar.gz"}"\nsha256 = "{"0" * 64}"',
        )
    )
    with pytest.raises(WheelhouseError, match="sdist not found"):
        build(missing, _opts(tmp_path, build_python))
    # wrong hash
    wrong = load_wheel_spec(
        _spec(tmp_path, "pure-pkg", "0.3.1", f'sdist = "{sdist}"\nsha256 = "{"a" * 64}"')
    )
    with pytest.raises(WheelhouseError, match=f"expected {'a' * 64}, got [0-9a-f]{{64}}"):
        build(wrong, _opts(tmp_path, build_python))
    # failing patch: tail of the log and its path
    bad_patch = tmp_path / "bad.patch"
    bad_patch.write_text(
        "--- a/setup.py\n+++ b/setup.py\n@@ -1,1 +1,1 @@\n-nothing like this line\n+x\n"
    )
    from envbuild._io import sha256_file

    patched = load_wheel_spec(
        _spec(
            tmp_path,
            "pure-pkg",
            "0.3.1",
            f'sdist = "{sdist}"\nsha256 = "{sha256_file(sdist)}"',
            'patches = ["bad.patch"]\n',
        )
    )
    with pytest.raises(WheelhouseError, match="patch bad.patch does not apply") as exc:
        build(patched, _opts(tmp_path, build_python))
    assert "full log:" in str(exc.value)
    # private source not configured: a config error naming the variable
    private = load_wheel_spec(REPO / "wheelhouse_specs" / "qoptim-cuda.toml")
    with pytest.raises(ConfigError, match="QOPTIM_CUDA_SOURCE"):
        build(private, _opts(tmp_path, build_python, environ={}))
    src_override = BuildOptions(
        python=build_python,
        out=tmp_path / "out",
        cache=tmp_path / "cache",
        overrides={"qoptim-cuda": str(PACKAGES / "pure_pkg")},
        environ={},
    )
    # ... and given by --source, it gets as far as checking the venv: a CUDA build needs a CUDA
    # torch, refused before any build requirement is fetched
    with pytest.raises(WheelhouseError, match=r"is not a CUDA build"):
        build(private, src_override)
    assert not (tmp_path / "cache" / "requires").exists()
    # a source that builds another project than the spec names is refused
    other = load_wheel_spec(_spec(tmp_path, "other", "0.3.1", f'path = "{PACKAGES / "pure_pkg"}"'))
    with pytest.raises(
        WheelhouseError, match=r"the source built pure_pkg-0.3.1-py3-none-any.whl, not other 0.3.1"
    ):
        build(other, _opts(tmp_path, build_python))


def test_spec_validation_names_key_and_suggests(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(
        'schema = 1\nname = "x"\nversion = "1"\n[source]\npath = "."\n[build]\npatchs = []\n'
    )
    with pytest.raises(
        ConfigError, match=r"build\.patchs: unknown key \(did you mean 'patches'\?\)"
    ):
        load_wheel_spec(path)
    path.write_text(
        'schema = 1\nname = "x"\nversion = "1"\n[source]\ngit = "https://example.com/x.git"\ncommit'
        ' = "main"\n'
    )
    with pytest.raises(ConfigError, match="source.git: a git source needs a full 40-hex commit"):
        load_wheel_spec(path)
    for name in ("flash-attn", "causal-conv1d", "mamba-ssm", "qoptim-cuda"):
        spec = load_wheel_spec(REPO / "wheelhouse_specs" / f"{name}.toml")
        assert spec.name == name


def _zip(path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (("../evil.py", b"x", stat.S_IFREG | 0o644), "'..' path component"),
        (("/etc/evil.py", b"x", stat.S_IFREG | 0o644), "absolute path"),
        (("demo/link", b"/etc/passwd", stat.S_IFLNK | 0o777), "symbolic link"),
    ],
)
def test_repack_refuses_unsafe_archives(
    tmp_path: Path, bad: tuple[str, bytes, int], message: str
) -> None:
    meta = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: torch\n\n"
    wheel = _zip(
        tmp_path / "demo-1.0-py3-none-any.whl",
        [
            ("demo/__init__.py", b"", stat.S_IFREG | 0o644),
            bad,
            ("demo-1.0.dist-info/METADATA", meta, stat.S_IFREG | 0o644),
            ("demo-1.0.dist-info/RECORD", b"", stat.S_IFREG | 0o644),
        ],
    )
    with pytest.raises(WheelhouseError, match=message):
        repack_wheel(wheel, tmp_path / "out", "cputorch2.13.0", {})


def test_repack_rejects_a_corrupt_record(tmp_path: Path) -> None:
    record = (
        io.StringIO("demo/__init__.py,sha256=AAAA,1\ndemo-1.0.dist-info/RECORD,,\n")
        .getvalue()
        .encode()
    )
    wheel = _zip(
        tmp_path / "demo-1.0-py3-none-any.whl",
        [
            ("demo/__init__.py", b"x", stat.S_IFREG | 0o644),
            (
                "demo-1.0.dist-info/METADATA",
                b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\n",
                stat.S_IFREG | 0o644,
            ),
            ("demo-1.0.dist-info/RECORD", record, stat.S_IFREG | 0o644),
        ],
    )
    with pytest.raises(WheelhouseError, match="does not match its RECORD hash"):
        repack_wheel(wheel, tmp_path / "out", "cputorch2.13.0", {})


def test_cuda_spec_against_cpu_torch_is_refused_before_building(
    tmp_path: Path, build_python: Path
) -> None:
    spec = load_wheel_spec(PACKAGES / "cuda_ext" / "wheelhouse.toml")
    with pytest.raises(
        WheelhouseError,
        match=r"builds CUDA code \(arch_list 9.0\), but torch 2.13.0\+cpu .* is not a CUDA build",
    ):
        build(spec, _opts(tmp_path, build_python))


def test_missing_build_requirements_are_installed_beside_the_target(
    tmp_path: Path, build_python: Path, torch_venv: Path
) -> None:
    """A spec's build requirement the target environment lacks is installed for the build into a
    folder of the build cache (the build imports it), never into the target, whose torch stays the
    one installed; a requirement no source has gives the exact command instead."""
    from support.wheels import build_wheel

    from envbuild.guard import scan, site_packages

    links = tmp_path / "links"
    links.mkdir()
    build_wheel(
        links,
        "envbuild-test-helper",
        "1.0",
        files={"envbuild_test_helper/__init__.py": "STAMP = 'from the helper'\n"},
    )
    src = tmp_path / "needs-helper"
    (src / "needs_helper").mkdir(parents=True)
    (src / "needs_helper" / "__init__.py").write_text("")
    (src / "setup.py").write_text(
        "import envbuild_test_helper\n"  # the build fails unless its requirement is importable
        "from setuptools import setup\n"
        "setup(name='needs-helper', version='0.1.0', packages=['needs_helper'])\n"
    )
    spec = load_wheel_spec(_helper_spec(tmp_path, src))
    site = site_packages(build_python.parent.parent)
    torch_site = site_packages(torch_venv)  # the target sees this torch (a .pth)
    torch_before = scan(torch_site)["torch"].record_sha256
    environ = {"PIP_FIND_LINKS": str(links)}
    result = build(spec, _opts(tmp_path, build_python, environ=environ))
    assert result.wheel.is_file()
    folders = list((tmp_path / "cache" / "requires").iterdir())
    assert len(folders) == 1 and (folders[0] / "envbuild_test_helper").is_dir()
    assert "envbuild_test_helper" not in {p.name for p in site.iterdir()}
    assert "envbuild-test-helper" not in scan(site)
    assert scan(torch_site)["torch"].record_sha256 == torch_before
    assert "envbuild-test-helper" not in scan(torch_site)
    # no source has it: the error is the one command that installs it into the target
    (links / next(links.iterdir()).name).unlink()
    with pytest.raises(WheelhouseError, match="installing them for the build failed") as exc:
        build(spec, _opts(tmp_path / "again", build_python, environ={"PIP_NO_INDEX": "1"}))
    hint = exc.value.hint or ""
    assert f"--python {build_python} --no-deps envbuild_test_helper" in hint, hint


def _helper_spec(tmp_path: Path, src: Path) -> Path:
    path = tmp_path / "needs-helper.toml"
    path.write_text(
        'schema = 1\nname = "needs-helper"\nversion = "0.1.0"\n\n[source]\n'
        f'path = "{src}"\n\n[build]\nrequires = ["setuptools", "wheel", "envbuild_test_helper"]\n'
    )
    return path
