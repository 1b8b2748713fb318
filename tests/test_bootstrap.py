"""The README's fresh-host operator path, for real, on Python 3.10: a bare Ubuntu 22.04 root made
with mmdebstrap from archive.ubuntu.com (apt, python3 3.10, ca-certificates; no pip, no venv
module, no uv), run as a buildah container (chroot isolation).

Inside: the one-archive bootstrap (bootstrap/build.py) installs envbuild on the system Python
3.10 (3.10.12). jammy's own `python3.11` from apt is 3.11.0rc1, a release candidate torch cannot
run on (no `sys.get_int_max_str_digits`): `provision --profile cpu` refuses it with exit 3 and
one paragraph, having made nothing. The operator then installs a final CPython 3.11, as
deadsnakes' python3.11 or `uv python install 3.11` would give it (both unreachable from here:
this host's pyenv 3.11.7 stands in, mounted read-only; it needs only GLIBC <= 2.35, libssl3 and
libffi8, which jammy has, checked with ldd inside), and runs `provision --profile cpu --python
PATH`, `verify`, `smoke` and `dist-step --nproc 2`: all pass. The host's pip sources reach the
container as they reach an image build: a merged pip.conf and read-only mounts of the local
folders it names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STORE = os.environ.get("ENVBUILD_IMAGE_STORE", "/var/lib/envbuild-image")
RUNROOT = "/run/envbuild-image"
JAMMY = "localhost/envbuild-test/jammy:bare"
KEYRING_DEB = (
    "http://archive.ubuntu.com/ubuntu/pool/main/u/ubuntu-keyring/ubuntu-keyring_2021.03.26_all.deb"
)
# Ubuntu Archive Automatic Signing Key (2018)
ARCHIVE_KEY = "F6ECB3762474EDA9D21B7022871920D1991BC93C"

FINAL_311 = "/root/.pyenv/versions/3.11.7"  # this host's CPython 3.11.7 (pyenv), mounted read-only
RC1_NOTHING_MADE = "RC1-REFUSED-NOTHING-MADE"

# The operator on a fresh host, part 1: envbuild on the system Python 3.10, jammy's own
# python3.11 (3.11.0rc1) from apt, and provision refusing it before it makes anything.
OPERATOR_INSTALL = f"""
set -eu
cd /root
tar xzf envbuild-bootstrap-*.tar.gz
./envbuild-bootstrap/install.sh
/opt/envbuild-tool/bin/python -c 'import sys; print("envbuild runs on", sys.version.split()[0])'
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
    python3.11 python3.11-venv python3.11-dev g++ >/dev/null
python3.11 -c 'import sys; print("jammy python3.11 is", sys.version.split()[0])'
set +e
envbuild provision --profile cpu
echo "PROVISION-RC=$?"
set -e
if [ ! -e /mnt/data ] && [ -z "$(find /root -maxdepth 3 -type l)" ]; then echo {RC1_NOTHING_MADE}; fi
"""  # noqa: E501 (embedded shell script: the text is the value)

# Part 2: a final CPython 3.11 (what deadsnakes' python3.11 or `uv python install 3.11` give a
# real host; both unreachable from here) and the whole operator path on it.
OPERATOR_PATH = f"""
set -eu
PY={FINAL_311}/bin/python3.11
for f in $PY {FINAL_311}/lib/libpython3.11.so.1.0 {FINAL_311}/lib/python3.11/lib-dynload/*.so; do
    case $f in *_tkinter*) continue;; esac  # Tk: not the stack's (deadsnakes ships it apart, python3.11-tk)
    if ldd "$f" | grep -q "not found"; then echo "MISSING-LIB in $f"; ldd "$f"; fi
done
getent hosts "$(hostname)" >/dev/null || echo "HOSTNAME-UNRESOLVED $(hostname)"
$PY -c 'import ssl, ctypes, sqlite3, lzma, bz2, zlib, sys; print("final python", sys.version.split()[0])'
envbuild provision --profile cpu --python $PY
envbuild verify --profile cpu
/mnt/data/venv/bin/python -c 'import sys; print("stack python", sys.version.split()[0])'
envbuild smoke --profile cpu
envbuild dist-step --profile cpu --nproc 2 || {{ grep -E "Error|error:|\\[rank" /mnt/data/logs/dist-step.log | tail -12; exit 7; }}
echo OPERATOR-PATH-DONE
"""  # noqa: E501 (embedded shell script: the text is the value)


def _cannot_run() -> str | None:
    if os.geteuid() != 0:
        return "buildah's chroot isolation needs root here"
    for tool in ("buildah", "mmdebstrap", "gpg", "dpkg-deb"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install buildah mmdebstrap gpg)"
    try:
        urllib.request.urlopen(
            "http://archive.ubuntu.com/ubuntu/dists/jammy/Release", timeout=5
        ).close()
    except OSError as exc:
        return f"the Ubuntu archive (archive.ubuntu.com) is unreachable from here: {exc}"
    return None


def buildah(
    *args: str, check: bool = True, timeout: float = 3000
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["buildah", "--root", STORE, "--runroot", RUNROOT, "--storage-driver", "overlay", *args],
        check=check,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "BUILDAH_ISOLATION": "chroot"},
    )


def _keyring(work: Path) -> Path:
    """Ubuntu's archive keyring, from its .deb, checked against the published key fingerprint."""
    deb = work / "keyring.deb"
    urllib.request.urlretrieve(KEYRING_DEB, deb)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "x")], check=True)
    keyring = work / "x" / "usr" / "share" / "keyrings" / "ubuntu-archive-keyring.gpg"
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    keys = subprocess.run(
        ["gpg", "--show-keys", "--with-colons", str(keyring)],
        capture_output=True,
        text=True,
        env={**os.environ, "GNUPGHOME": str(gnupg)},
    ).stdout
    assert f"fpr:::::::::{ARCHIVE_KEY}:" in keys, keys
    return keyring


def _make_jammy() -> None:
    if buildah("inspect", "--type", "image", JAMMY, check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        work = Path(tmp)
        # apt verifies as its own user (_apt): a keyring under a 0700 folder is no keyring to it
        # (NO_PUBKEY 871920D1991BC93C, the very key the file holds)
        work.chmod(0o755)
        hooks = []
        crts = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
        if crts:  # a TLS-intercepting egress proxy's CA, as the image build's base has it
            hooks = [
                '--customize-hook=mkdir -p "$1/usr/local/share/ca-certificates"',
                (
                    f"--customize-hook=copy-in {' '.join(map(str, crts))}"
                    " /usr/local/share/ca-certificates/"
                ),
                '--customize-hook=chroot "$1" update-ca-certificates',
            ]
        made = subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--include=apt,python3,ca-certificates",
                "--components=main,universe",
                f"--keyring={_keyring(work)}",
                *hooks,
                "jammy",
                str(work / "jammy.tar"),
                "deb http://archive.ubuntu.com/ubuntu jammy main universe",
                "deb http://archive.ubuntu.com/ubuntu jammy-updates main universe",
                "deb http://security.ubuntu.com/ubuntu jammy-security main universe",
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert made.returncode == 0, f"mmdebstrap failed: {made.stderr[-3000:]}"
        ctr = buildah("from", "scratch").stdout.strip()
        buildah("add", ctr, str(work / "jammy.tar"), "/")
        buildah(
            "config",
            "--cmd",
            "/bin/bash",
            "--env",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ctr,
        )
        buildah("commit", "-q", "--rm", ctr, JAMMY)


def _host_sources(work: Path) -> list[str]:
    """-v arguments: the host's effective pip settings as /etc/pip.conf, uv told to use the system
    CA store, and the local folders pip.conf names, read-only."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    vals = dict(re.findall(r"^[^.]*\.([a-z0-9-]+)='(.*)'$", listing, re.M))
    lines, mounts = ["[global]"], set()
    for key in ("index-url", "extra-index-url", "find-links", "cert", "default-timeout"):
        if key in vals:
            lines.append(f"{key} = {vals[key]}")
            for tok in vals[key].split() if key != "cert" else ():
                p = tok.removeprefix("file://")
                if p.startswith("/") and os.path.exists(p):
                    mounts.add(
                        os.path.dirname(p.rstrip("/")) if p.rstrip("/").endswith("/simple") else p
                    )
    (work / "pip.conf").write_text("\n".join(lines) + "\n")
    (work / "uv.toml").write_text("native-tls = true\n")
    args = [
        "-v",
        f"{work / 'pip.conf'}:/etc/pip.conf:ro",
        "-v",
        f"{work / 'uv.toml'}:/etc/uv/uv.toml:ro",
    ]
    for m in sorted(mounts):
        args += ["-v", f"{m}:{m}:ro"]
    return args


@pytest.mark.slow
@pytest.mark.image
def test_fresh_ubuntu_2204_operator_path_on_python_310(tmp_path: Path) -> None:
    reason = _cannot_run()
    if reason:
        pytest.skip(reason)
    if not Path(FINAL_311, "bin", "python3.11").exists():
        pytest.skip(
            f"no final CPython 3.11 at {FINAL_311} to stand in for deadsnakes' (pyenv install"
            " 3.11.7)"
        )
    _make_jammy()
    archive = (
        subprocess.run(
            [sys.executable, str(REPO / "bootstrap" / "build.py"), "-o", str(tmp_path / "dist")],
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    ctr = buildah("from", "-q", "--pull=never", JAMMY).stdout.strip()
    try:
        bare = buildah(
            "run",
            "--isolation",
            "chroot",
            ctr,
            "--",
            "sh",
            "-c",
            "python3 -V; python3 -m pip --version 2>&1; command -v uv || echo no-uv",
            check=False,
        ).stdout
        assert "Python 3.10." in bare and "No module named pip" in bare and "no-uv" in bare, bare
        buildah("copy", ctr, archive, "/root/")
        # No --hostname: the container's hostname resolves nowhere, and dist-step's one-node
        # rendezvous is on 127.0.0.1, not on the hostname (it used to hang here on it).
        common = [
            "--isolation",
            "chroot",
            "--network",
            "host",
            *_host_sources(tmp_path),
            "--env",
            "ENVBUILD_TORCH_INDEX=",
        ]
        first = buildah("run", *common, ctr, "--", "sh", "-c", OPERATOR_INSTALL, check=False)
        out = first.stdout + first.stderr
        assert first.returncode == 0, out[-8000:]
        assert "envbuild runs on 3.10." in out and "jammy python3.11 is 3.11.0rc1" in out, out[
            -4000:
        ]
        # the check refuses jammy's rc1 in one paragraph, before the data root or the venv exist
        assert "PROVISION-RC=3" in out, out[-4000:]
        refusal = " ".join(out.split())
        assert (
            "/usr/bin/python3.11 (found as /usr/bin/python3.11), the only Python 3.11 here, is"
            " Python 3.11.0rc1, a release candidate, a pre-release" in refusal
        ), refusal[-3000:]
        assert "sys.get_int_max_str_digits" in refusal and "Nothing was made" in refusal
        assert "Pass --python PATH to a final release of Python 3.11" in refusal
        assert "uv python install 3.11" in refusal and "Traceback" not in out
        assert RC1_NOTHING_MADE in out, out[-3000:]
        # the operator installs a final 3.11 and points provision at it
        second = buildah(
            "run",
            *common,
            "-v",
            f"{FINAL_311}:{FINAL_311}:ro",
            ctr,
            "--",
            "sh",
            "-c",
            OPERATOR_PATH,
            check=False,
        )
        out = second.stdout + second.stderr
        print(out[-6000:])  # the operator's view, for -s / a failure report
        assert second.returncode == 0, out[-8000:]
        assert "MISSING-LIB" not in out and "final python 3.11.7" in out
        assert "HOSTNAME-UNRESOLVED" in out  # what used to hang dist-step's rendezvous
        assert "torch 2.13.0+cpu intact" in out  # verify
        assert "stack python 3.11.7" in out
        # smoke's line per check (``ok   NAME  rel err ...``), and its verdict
        assert re.search(r"(?m)^\s*ok\s+torch\.compile\s+rel err", out), out[-4000:]
        assert re.search(r"(?m)^\s*ok\s+matmul\s+rel err", out), out[-4000:]
        assert re.search(r"smoke passed: \d+ passed", out), out[-4000:]
        assert "OPERATOR-PATH-DONE" in out, out[-4000:]
    finally:
        buildah("rm", ctr, check=False)
