"""The one HTTP session: envbuild's client trusts and routes as pip does (truststore, pip's
``cert``, ``client-cert`` and ``proxy``).

pip (24.2 and newer) verifies TLS against the system trust store (truststore), or the CA bundle
its ``cert`` option names; it sends a client certificate where ``client-cert`` names one, goes
through ``proxy`` or the ``HTTP(S)_PROXY`` variables, and takes credentials from the URL or
``~/.netrc``. ``session()`` does the same, so any index pip reaches (a TLS-inspecting proxy's CA in
the system store, a private CA in pip.conf) envbuild reaches too, in a plain shell and inside an
image build:

- the system store through truststore (OpenSSL's default paths on Linux, so ``SSL_CERT_FILE``
  and ``SSL_CERT_DIR`` count);
- beside it, the CA bundle of ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (requests reads them
  itself), else of pip's ``cert``, else certifi's roots (requests' default);
- pip's ``client-cert`` and ``proxy``; the proxy variables, ``NO_PROXY`` and ``~/.netrc`` by
  requests' own environment handling.

Credentials are never logged: every URL envbuild shows goes through ``index.net.redact``.
"""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Any

from envbuild import __version__

if TYPE_CHECKING:
    import requests
    from requests.adapters import HTTPAdapter

__all__ = ["session"]


def _truststore_adapter() -> HTTPAdapter | None:
    """An HTTPAdapter whose connections verify against the system store (None without
    truststore)."""
    try:
        import truststore
    except ImportError:
        return None
    from requests.adapters import HTTPAdapter

    class TrustStoreAdapter(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["ssl_context"] = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            return super().init_poolmanager(*args, **kwargs)

        def proxy_manager_for(self, *args: Any, **kwargs: Any) -> Any:
            kwargs["ssl_context"] = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            return super().proxy_manager_for(*args, **kwargs)

    return TrustStoreAdapter()


def session() -> requests.Session:
    """A ``requests.Session`` for one run (connections kept alive), configured as pip is."""
    import requests  # here, not at module level: it costs a tenth of every CLI start

    from envbuild.index.pipconf import pip_network

    s = requests.Session()
    s.headers["User-Agent"] = f"envbuild/{__version__}"
    conf = pip_network()
    adapter = _truststore_adapter()
    if adapter is not None:
        s.mount("https://", adapter)
    if conf.cert:  # loaded beside the system store, as pip loads it into its truststore context
        s.verify = conf.cert
    if conf.client_cert:
        s.cert = conf.client_cert
    if conf.proxy:
        s.proxies.update({"http": conf.proxy, "https": conf.proxy})
    return s
