"""Package sources: the one PEP 503/691 client, its network and its caches.

- ``client.py``     pages, ``Artifact``, file names, one timeout, ``SourceError``
- ``index/net.py``        the network rule: deadlines, retries, reachability probes, redaction
- ``index/download.py``   the one downloader: streamed, retried by net's rule, resumed,
  sha256-checked
- ``index/metacache.py``  the metadata cache by sha256 (light: check-lock reads it without the
  client)
- ``index/sdistreqs.py``  an sdist's build requirements (its pyproject.toml), by sha256
- ``index/wheeltags.py``  which wheels install on a lock's target; what a wheelhouse holds

Nothing is re-exported here: importing ``envbuild.index.metacache`` must not import the client.
"""

# What this package owns on disk (docs/architecture.md's file table; ``()``: nothing).
OWNS: tuple[str, ...] = (
    "``$ENVBUILD_CACHE_DIR/metadata/<sha256>.json``",
    "``$ENVBUILD_CACHE_DIR/file-hashes/``",
    "``$ENVBUILD_CACHE_DIR/build-requires/<sha256>.json``",
    "``$ENVBUILD_CACHE_DIR/pip-config/<key>.json``",
)

# the package index where nothing else is configured (pip's, uv's default)
PYPI = "https://pypi.org/simple"
