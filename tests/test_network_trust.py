"""envbuild's HTTP client trusts and routes as pip does: a local HTTPS index whose CA only pip's
``cert`` (or only the system store, through ``SSL_CERT_FILE``) holds, a wrong CA, and an HTTP
proxy on loopback. pip and envbuild are each run for real, in their own process, with the same
configuration; both succeed or both fail, and envbuild's failure names the host."""

from __future__ import annotations

import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import urlopen

import pytest
from support.fixtures import installer_env
from support.rangeserver import RangeServer
from support.wheels import build_wheel

pytestmark = pytest.mark.slow  # real pip runs beside envbuild's own client

ENVBUILD_GET = (
    "import sys\nfrom envbuild.index.client import read_bytes\nfrom envbuild.errors import"
    " EnvbuildError\ntry:\n    print('ok', len(read_bytes(sys.argv[1])))\nexcept EnvbuildError as"
    " exc:\n    print('error', exc.message)\n"
)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.pem",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )
    return folder / f"{name}.pem", folder / f"{name}.key"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tls")
    if subprocess.run(["openssl", "version"], capture_output=True).returncode != 0:
        pytest.skip("no openssl here to make a CA")
    ca, ca_key = _ca(folder, "test-ca")
    other, _ = _ca(folder, "other-ca")
    (folder / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        cwd=folder,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "server.pem",
        "-extfile",
        "san.ext",
        cwd=folder,
    )
    wheels = folder / "files"
    build_wheel(wheels, "tiny", "1.0")
    return {
        "ca": ca,
        "other": other,
        "cert": folder / "server.pem",
        "key": folder / "server.key",
        "files": wheels,
    }


def _https(tls: dict[str, Path]) -> RangeServer:
    server = RangeServer(tls["files"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls["cert"], tls["key"])
    server.httpd.socket = ctx.wrap_socket(server.httpd.socket, server_side=True)
    return server


def _env(tmp: Path, pip_conf: str, **extra: str) -> dict[str, str]:
    conf = tmp / "pip.conf"
    conf.write_text(pip_conf)
    env = installer_env(
        tmp / "home",
        {"PIP_CONFIG_FILE": str(conf), "ENVBUILD_CACHE_DIR": str(tmp / "cache"), **extra},
    )
    for k in (
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        if k not in extra:
            env.pop(k, None)
    return env


def _both(url: str, env: dict[str, str], tmp: Path) -> tuple[str, subprocess.CompletedProcess[str]]:
    ours = subprocess.run(
        [sys.executable, "-c", ENVBUILD_GET, url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-index",
            "--retries",
            "0",
            "-d",
            str(tmp / "dl"),
            url,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return ours.stdout.strip() or ours.stderr, pip


@pytest.mark.parametrize("how", ["pip-cert", "system-store"])
def test_a_private_ca_pip_trusts_envbuild_trusts(
    tls: dict[str, Path], tmp_path: Path, how: str
) -> None:
    pip_conf = f"[global]\ncert = {tls['ca']}\n" if how == "pip-cert" else "[global]\n"
    extra = {"SSL_CERT_FILE": str(tls["ca"])} if how == "system-store" else {}
    with _https(tls) as server:
        url = f"{server.url.replace('http:', 'https:')}/tiny-1.0-py3-none-any.whl"
        ours, pip = _both(url, _env(tmp_path, pip_conf, **extra), tmp_path)
    assert pip.returncode == 0, pip.stderr
    assert ours.startswith("ok "), ours


def test_a_wrong_ca_fails_both_naming_the_host(tls: dict[str, Path], tmp_path: Path) -> None:
    with _https(tls) as server:
        url = f"{server.url.replace('http:', 'https:')}/tiny-1.0-py3-none-any.whl"
        ours, pip = _both(url, _env(tmp_path, f"[global]\ncert = {tls['other']}\n"), tmp_path)
    assert pip.returncode != 0
    assert ours.startswith("error cannot reach https://127.0.0.1:"), ours
    assert (
        "its TLS certificate is not trusted (CERTIFICATE_VERIFY_FAILED)" in ours
        and "Traceback" not in ours
    )


class _Proxy(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # an absolute URI: a forward proxy's request
        _Proxy.seen.append(self.path)
        with urlopen(self.path, timeout=30) as upstream:  # loopback only
            body = upstream.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize("how", ["pip-proxy", "env-proxy"])
def test_the_proxy_pip_goes_through_envbuild_goes_through(
    tls: dict[str, Path], tmp_path: Path, how: str
) -> None:
    proxy = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
    _Proxy.seen.clear()
    try:
        with RangeServer(tls["files"]) as server:
            url = f"{server.url}/tiny-1.0-py3-none-any.whl"
            pip_conf = f"[global]\nproxy = {proxy_url}\n" if how == "pip-proxy" else "[global]\n"
            extra = {"HTTP_PROXY": proxy_url} if how == "env-proxy" else {}
            ours, pip = _both(url, _env(tmp_path, pip_conf, **extra), tmp_path)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert pip.returncode == 0, pip.stderr
    assert ours.startswith("ok "), ours
    # both went through it
    assert sum(1 for p in _Proxy.seen if p.endswith("tiny-1.0-py3-none-any.whl")) >= 2, _Proxy.seen
