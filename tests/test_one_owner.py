"""One owner for each fact: a second copy of a thing the tree already has fails here.

Each check reads the tree's source (AST, no import) for the shape a copy takes, and is shown to
find a planted copy as well as to pass the tree:

- project names: ``packaging.utils.canonicalize_name`` (PEP 503). An inline
  ``.lower().replace("_", "-")`` chain or a ``[-_.]+`` pattern is a second normaliser, and the
  inline chain is not even PEP 503 (``a__b`` stays ``a--b``).
- TOML: ``envbuild._io.parse_toml`` (compiled tomli, tomllib where tomli is absent). An import of
  tomli or tomllib anywhere else is a second shim, free to prefer the other library.
- downloads: ``envbuild.index.download.download``, retried by ``envbuild.index.net.retrying``
  (the one retry rule: its deadline, its backoff). A body streamed to a file elsewhere
  (``iter_content``, ``urlretrieve``) is a second downloader; a ``sleep`` in a loop that catches
  a network error is a second retry loop.
- the in-image install of envbuild: ``envbuild.images.tool`` (tests/test_image_tool.py reads the
  rendered images back); its ``pip install /src/envbuild`` written anywhere else is a copy.
- subprocesses: ``envbuild.run.run``. A ``subprocess`` call elsewhere in the package is listed
  below with its reason (``run.py``'s docstring names the same ones).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("envbuild", "tests", "docs/hooks", "bench", "lockfiles")

# path -> why it keeps its own copy. Each one runs where envbuild's dependencies are not installed.
OWN_NORMALISER = {
    "envbuild/proof/inventory.py": (
        "standalone: runs in the target interpreter, which need not have packaging"
    ),
    "bench/repack_installed.py": (
        "stdlib only: runs with the interpreter whose distributions it packs"
    ),
}


@functools.cache
def _sources() -> tuple[tuple[str, ast.Module], ...]:
    return tuple(_parse_all())


def _parse_all() -> Iterator[tuple[str, ast.Module]]:
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" in path.parts or ".venv" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def _chain(node: ast.expr) -> list[ast.Call]:
    """The method calls of ``x.a(..).b(..).c(..)``, outermost first."""
    calls = []
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        calls.append(node)
        node = node.func.value
    return calls


def _literal(node: ast.expr) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def name_normalisers(tree: ast.Module) -> list[int]:
    """Lines of inline project-name normalisers: a ``.lower()`` chained with a ``.replace`` of
    ``_`` or ``.`` by ``-`` (either order), or a regex of the separators ``[-_.]+``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            calls = _chain(node)
            methods = {c.func.attr for c in calls if isinstance(c.func, ast.Attribute)}
            dashes = any(
                isinstance(c.func, ast.Attribute)
                and c.func.attr == "replace"
                and len(c.args) == 2
                and _literal(c.args[0]) in ("_", ".")
                and _literal(c.args[1]) == "-"
                for c in calls
            )
            if "lower" in methods and dashes and node is calls[0]:
                lines.append(node.lineno)
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and sorted(node.value.removesuffix("+").strip("[]")) == sorted("-_.")
            and node.value.startswith("[")
            and "]" in node.value
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_inline_name_normaliser() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel not in OWN_NORMALISER
        for line in name_normalisers(tree)
    ]
    assert not found, (
        "project names normalised inline; use packaging.utils.canonicalize_name (PEP 503): "
        + ", ".join(found)
    )
    assert all(
        name_normalisers(ast.parse((ROOT / rel).read_text(encoding="utf-8")))
        for rel in OWN_NORMALISER
    ), "an exempted module no longer normalises names itself: remove it from OWN_NORMALISER"


def test_the_name_check_finds_a_planted_normaliser() -> None:
    planted = [
        'n = name.lower().replace("_", "-").replace(".", "-")',
        'n = name.replace(".", "-").lower()',
        'n = re.sub(r"[-_.]+", "-", name).lower()',
        '_SEP = re.compile(r"[._-]+")',
    ]
    for source in planted:
        assert name_normalisers(ast.parse(source)), source
    clean = [
        "n = canonicalize_name(name)",
        'k = text.lower().replace(" ", "-")',
        'm = name.replace("-", "_")',
    ]
    for source in clean:
        assert not name_normalisers(ast.parse(source)), source


def test_canonicalize_name_is_pep_503() -> None:
    """What the inline chain got wrong: runs of separators collapse to one dash."""
    assert canonicalize_name("a__b") == "a-b"
    assert canonicalize_name("Flash_Attn") == canonicalize_name("flash.attn") == "flash-attn"


TOML_OWNER = "envbuild/_io.py"
OWN_TOML = {"bench/bench_gate.py": "measures the gate against the standard library's tomllib"}


def toml_imports(tree: ast.Module) -> list[int]:
    """Lines importing a TOML parser (tomli, tomllib) directly."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(n.split(".")[0] in ("tomli", "tomllib") for n in names):
            lines.append(node.lineno)
    return lines


def test_one_toml_import() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel != TOML_OWNER and rel not in OWN_TOML
        for line in toml_imports(tree)
    ]
    assert not found, (
        "TOML imported outside envbuild/_io.py; use envbuild._io.parse_toml: " + ", ".join(found)
    )
    assert toml_imports(ast.parse((ROOT / TOML_OWNER).read_text(encoding="utf-8")))


def test_the_toml_check_finds_a_planted_shim() -> None:
    planted = (
        "if sys.version_info >= (3, 11):\n    import tomllib\nelse:\n    import tomli as tomllib\n"
    )
    assert toml_imports(ast.parse(planted)) == [2, 4]
    assert toml_imports(ast.parse("def f():\n    from tomli import loads\n")) == [2]
    assert not toml_imports(ast.parse("from envbuild._io import parse_toml\nimport tomlkit\n"))


DOWNLOADER = "envbuild/index/download.py"
RETRY_RULE = "envbuild/index/net.py"
_STREAMING = {"iter_content", "iter_raw", "urlretrieve"}
_NETWORK_ERRORS = {
    "ConnectionError",
    "Timeout",
    "ReadTimeout",
    "ConnectTimeout",
    "RequestException",
    "ChunkedEncodingError",
    "HTTPError",
    "URLError",
    "_Retry",
}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def downloaders(tree: ast.Module) -> list[int]:
    """Lines that stream a response body (a downloader of their own)."""
    return sorted(
        {
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and (
                isinstance(n.func, ast.Attribute)
                and n.func.attr in _STREAMING
                or isinstance(n.func, ast.Name)
                and n.func.id in _STREAMING
            )
        }
    )


def retry_loops(tree: ast.Module) -> list[int]:
    """Lines of loops that catch a network error and sleep: a retry rule of their own."""
    lines = []
    for loop in ast.walk(tree):
        if not isinstance(loop, (ast.While, ast.For)):
            continue
        sleeps = any(isinstance(n, ast.Call) and "sleep" in _names(n.func) for n in ast.walk(loop))
        catches = any(
            isinstance(n, ast.ExceptHandler)
            and n.type is not None
            and _names(n.type) & _NETWORK_ERRORS
            for n in ast.walk(loop)
        )
        if sleeps and catches:
            lines.append(loop.lineno)
    return lines


def test_one_downloader_and_one_retry_rule() -> None:
    package = [(rel, tree) for rel, tree in _sources() if rel.startswith("envbuild/")]
    streams = [
        f"{rel}:{line}" for rel, tree in package if rel != DOWNLOADER for line in downloaders(tree)
    ]
    assert not streams, (
        "a body streamed outside envbuild/index/download.py; call its download(): "
        + ", ".join(streams)
    )
    loops = [
        f"{rel}:{line}" for rel, tree in package if rel != RETRY_RULE for line in retry_loops(tree)
    ]
    assert not loops, "a retry loop outside envbuild/index/net.py; use net.retrying: " + ", ".join(
        loops
    )
    owner = {rel: tree for rel, tree in package}
    assert downloaders(owner[DOWNLOADER])
    assert "retrying" in {
        f.name for f in ast.walk(owner[RETRY_RULE]) if isinstance(f, ast.FunctionDef)
    }


def test_the_download_check_finds_the_mirrors_old_loop() -> None:
    """The wheelhouse mirror's own downloader, as it was: both checks see it."""
    planted = ast.parse("""
def download_one(url, dest, sha256, *, http, retries=4, backoff=0.5):
    attempt = 0
    while True:
        try:
            with http.get(url, stream=True, timeout=TIMEOUT) as resp:
                with dest.open("wb") as f:
                    for chunk in resp.iter_content(CHUNK):
                        f.write(chunk)
        except (_Retry, requests.ConnectionError, requests.Timeout) as exc:
            if attempt >= retries:
                raise
            attempt += 1
            time.sleep(backoff * 2 ** attempt)
            continue
        return dest
""")
    assert downloaders(planted) == [8] and retry_loops(planted) == [4]
    polling = ast.parse(
        "while proc.poll() is None:\n    try:\n        x()\n    except OSError:\n        pass\n"
        "    time.sleep(0.05)\n"
    )
    assert not retry_loops(polling) and not downloaders(polling)


RUNNER = "envbuild/run.py"
# path -> why it starts a child without envbuild.run
OWN_SUBPROCESS = {
    "envbuild/index/pipconf.py": (
        "below the runner: envbuild.run imports the package sources' redaction"
    ),
    "envbuild/provision/warmup.py": "a background child left running while the steps go on",
    "envbuild/proof/smoke/smoke_early.py": (
        "standalone: runs in the target interpreter without envbuild (nvidia-smi without NVML)"
    ),
    "envbuild/proof/smoke/smoke_fla.py": (
        "standalone: runs in the target interpreter without envbuild (fla's compile processes)"
    ),
    "envbuild/proof/smoke/smoke_part.py": (
        "standalone: runs in the target interpreter without envbuild (the torch.compile check's"
        " process)"
    ),
    "envbuild/proof/smoke/__init__.py": (
        "the planted competing loads: children left running while "
        "the smoke workers run, stopped after them"
    ),
}
_SPAWN = {
    "run",
    "Popen",
    "call",
    "check_call",
    "check_output",
    "getoutput",
    "getstatusoutput",
    "system",
    "popen",
    "execv",
    "execvp",
    "spawnv",
}


def spawns(tree: ast.Module) -> list[int]:
    """Lines that start a child process through ``subprocess`` or ``os`` directly."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SPAWN
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("subprocess", "os")
            or isinstance(node, ast.ImportFrom)
            and node.module == "subprocess"
            and {a.name for a in node.names} & _SPAWN
        ):
            lines.append(node.lineno)
    return lines


def test_one_runner() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith("envbuild/") and rel != RUNNER and rel not in OWN_SUBPROCESS
        for line in spawns(tree)
    ]
    assert not found, (
        "a subprocess started outside envbuild/run.py; use envbuild.run.run: " + ", ".join(found)
    )
    stale = [
        rel
        for rel in OWN_SUBPROCESS
        if not spawns(ast.parse((ROOT / rel).read_text(encoding="utf-8")))
    ]
    assert not stale, f"no longer starts a child itself, remove from OWN_SUBPROCESS: {stale}"
    doc = ast.get_docstring(ast.parse((ROOT / RUNNER).read_text(encoding="utf-8"))) or ""
    missing = [rel for rel in OWN_SUBPROCESS if rel.removeprefix("envbuild/") not in doc]
    assert not missing, f"envbuild/run.py's docstring does not name these exceptions: {missing}"


def test_the_runner_check_finds_a_planted_call() -> None:
    assert spawns(ast.parse("out = subprocess.run([uv, '--version'], capture_output=True)")) == [1]
    assert spawns(ast.parse("from subprocess import check_output\n")) == [1]
    assert spawns(ast.parse("os.system('ls')")) == [1]
    assert not spawns(
        ast.parse("out = run([uv, '--version'], capture=True)\nx = subprocess.DEVNULL")
    )


TOOL_SNIPPET = "envbuild/images/tool.py"


def install_snippets(tree: ast.Module) -> list[int]:
    """Lines of string constants that install envbuild from its copied source."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and "pip install /src/envbuild" in n.value
    ]


def test_one_in_image_install() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith("envbuild/") and rel != TOOL_SNIPPET
        for line in install_snippets(tree)
    ]
    assert not found, (
        "envbuild installed in an image outside envbuild/images/tool.py: " + ", ".join(found)
    )
    planted = ast.parse(
        'cmd = f"{TOOL_VENV}/bin/python -m pip install /src/envbuild && envbuild --version"'
    )
    assert install_snippets(planted) == [1]


NVIDIA_OWNER = "envbuild/nvidia.py"
# path -> why it asks the driver itself: the scripts that run in the target venv without envbuild
OWN_NVIDIA = {
    "envbuild/proof/smoke/smoke_early.py": (
        "a smoke worker module: runs in the target venv, which has no envbuild to import"
    ),
}


def nvidia_smi_calls(tree: ast.Module) -> list[int]:
    """Lines that start ``nvidia-smi`` or read the driver's GPU folder: a string constant that is
    the program's name alone (an argv's first item) or ``/proc/driver/nvidia/gpus``."""
    return sorted(
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and n.value in ("nvidia-smi", "/proc/driver/nvidia/gpus")
    )


def test_one_nvidia_smi_caller() -> None:
    """nvidia-smi is run, its CSV read and the GPU list made in ``envbuild/nvidia.py`` alone."""
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith("envbuild/") and rel != NVIDIA_OWNER and rel not in OWN_NVIDIA
        for line in nvidia_smi_calls(tree)
    ]
    assert not found, (
        "nvidia-smi run or the driver's GPU list read outside envbuild/nvidia.py; use"
        " envbuild.nvidia (smi, query, parse_query, visible_gpus): " + ", ".join(found)
    )
    assert nvidia_smi_calls(ast.parse((ROOT / NVIDIA_OWNER).read_text(encoding="utf-8")))
    for rel in OWN_NVIDIA:
        assert nvidia_smi_calls(ast.parse((ROOT / rel).read_text(encoding="utf-8"))), rel


def test_the_nvidia_check_finds_the_old_callers() -> None:
    planted = ast.parse(
        'res = run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])\n'
        'topo = _capture(["nvidia-smi", "topo", "-m"])\n'
        'PROC_GPUS = "/proc/driver/nvidia/gpus"\n'
    )
    assert nvidia_smi_calls(planted) == [1, 2, 3]
    assert not nvidia_smi_calls(ast.parse('answer = nvidia.smi(["topo", "-m"])  # nvidia-smi\n'))


# ----------------------------------------------------------------------------- the lock path


REQUIREMENT_SEPARATORS = ("==", "@", " @ ", "[", ">=", "<=", "~=", "!=")


def requirement_name_parsers(tree: ast.Module) -> list[int]:
    """Lines that take a requirement's name apart by hand: ``text.split("==")[0]`` (or ``@``,
    ``;``, ``[``, ``>=`` ...), ``.partition(" @ ")[0]``, a ``re.split`` on requirement operators, a
    ``startswith(("torch=", "torch>", ...))`` of a requirement, a regex of a name followed by ``@``
    or ``==``. The owner is ``packaging.requirements.Requirement``."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and _literal(node.slice) == 0
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in ("split", "partition", "rsplit")
            and node.value.args
            and _literal(node.value.args[0]) in REQUIREMENT_SEPARATORS
            and node.value.func.attr != "rsplit"
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if "[A-Za-z0-9._-]" in text and ("@" in text or "==" in text):
                lines.append(node.lineno)  # a requirement line's name by regex
            if "=<>!~@" in text.replace("\\", "") or "[\\s=<>!~@" in text:
                lines.append(node.lineno)  # split at the first requirement operator
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "startswith"
            and node.args
            and isinstance(node.args[0], ast.Tuple)
            and any(
                isinstance(e, ast.Constant)
                and isinstance(e.value, str)
                and len(e.value) > 1
                and e.value[-1] in "=<>~!"
                and e.value[:-1].replace("-", "").isalnum()
                for e in node.args[0].elts
            )
        ):
            lines.append(node.lineno)
    return sorted(set(lines))


# path -> why it splits requirement-shaped text itself
OWN_REQUIREMENT_SPLIT: dict[str, str] = {}
LOCK_PATH = ("envbuild/projectlock/", "envbuild/commands/")


def test_requirement_names_are_read_by_packaging() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith(LOCK_PATH) and rel not in OWN_REQUIREMENT_SPLIT
        for line in requirement_name_parsers(tree)
    ]
    assert not found, (
        "a requirement's name taken apart by hand; use packaging.requirements.Requirement: "
        + ", ".join(found)
    )


def test_the_requirement_check_finds_the_old_parsers() -> None:
    """The copies the lock path had: the stack's, the image's, the record's, the builds' and
    ``_depends_on_torch``'s."""
    planted = [
        'canonicalize_name(re.split(r"[\\s=<>!~@\\[;]", package, maxsplit=1)[0])',
        'wanted = {p.split("==")[0] for p in step.packages}',
        'n = str(p).split("==")[0].split(" @ ")[0].strip()',
        '_LINE = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)\\s*@\\s*(?P<url>\\S+)")',
        'r.split(";")[0].replace(" ", "").lower().startswith(("torch=", "torch>", "torch<"))',
        'name = line.split("@", 1)[0].strip()',
    ]
    for source in planted:
        assert requirement_name_parsers(ast.parse(source)), source
    clean = [
        "name = Requirement(text).name",
        'head, _, rest = c.partition(":")',
        'base = url.rsplit("@", 1)[0]',
        "parts = line.split()",
    ]
    for source in clean:
        assert not requirement_name_parsers(ast.parse(source)), source


TAGS_OWNER = "envbuild/index/wheeltags.py"


def tag_rankers(tree: ast.Module) -> list[int]:
    """Lines that judge a wheel's tags by hand: a loop over ``wheel_tags(...)`` (or
    ``map(str, wheel_tags(...))``), a wheel file name's tags taken from
    ``parse_wheel_filename(...)[3]``, a tag's ``.interpreter`` read."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.comprehension):
            it = node.iter
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "map":
                it = it.args[-1] if it.args else it
            if isinstance(it, ast.Call) and "wheel_tags" in _names(it.func):
                lines.append(it.lineno)
        if (
            isinstance(node, ast.Subscript)
            and _literal(node.slice) == 3
            and isinstance(node.value, ast.Call)
            and "parse_wheel_filename" in _names(node.value.func)
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.Attribute) and node.attr == "interpreter":
            lines.append(node.lineno)
    return sorted(set(lines))


def test_one_owner_of_wheel_tags() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith("envbuild/") and rel != TAGS_OWNER
        for line in tag_rankers(tree)
    ]
    assert not found, (
        "a wheel's tags judged outside envbuild/index/wheeltags.py (tag_rank, rank_among, is_pure,"
        " fits_tag_filter): " + ", ".join(found)
    )
    assert tag_rankers(ast.parse((ROOT / TAGS_OWNER).read_text(encoding="utf-8")))


def test_the_tag_check_finds_the_old_rankers() -> None:
    """The copies of ``projectlock/stages.py``, ``projectlock/offlinebuilds.py`` and
    ``wheelhouse/mirror.py``."""
    planted = ast.parse(
        "got = min((order[t] for t in map(str, wheel_tags(a.filename)) if t in order), default=0)\n"
        "tags = [str(t) for t in parse_wheel_filename(filename)[3]]\n"
        "ok = any(_fits_python(t.interpreter, t.abi, python) for t in tags)\n"
        'pure = all(t.endswith("-any") for t in map(str, wheel_tags(art.filename)))\n'
    )
    assert tag_rankers(planted) == [1, 2, 3, 4]
    assert not tag_rankers(ast.parse("rank = rank_among(name, order)\nok = is_pure(name)\n"))


PYLOCK_OWNER = "envbuild/gate/formats/pylock.py"
_PEP751_TABLES = ("wheels", "sdist")


def pylock_readers(tree: ast.Module) -> list[int]:
    """Lines that read a PEP 751 file themselves: ``Pylock.from_dict``, or a package's ``wheels``
    or ``sdist`` taken from a dict by hand."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_dict"
            and "Pylock" in _names(node.func.value)
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and _literal(node.args[0]) in _PEP751_TABLES
        ) or (isinstance(node, ast.Subscript) and _literal(node.slice) in _PEP751_TABLES):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_one_pep751_reader() -> None:
    found = [
        f"{rel}:{line}"
        for rel, tree in _sources()
        if rel.startswith("envbuild/") and rel != PYLOCK_OWNER
        for line in pylock_readers(tree)
    ]
    assert not found, (
        "a PEP 751 file read outside envbuild/gate/formats/pylock.py; use its read_pylock: "
        + ", ".join(found)
    )
    assert pylock_readers(ast.parse((ROOT / PYLOCK_OWNER).read_text(encoding="utf-8")))


def test_the_pylock_check_finds_the_old_readers() -> None:
    """uv's export read by hand (``gate/uvsync.py``), ``uv pip compile``'s
    (``projectlock/offlinebuilds.py``)."""
    planted = ast.parse(
        'for f in [*(p.get("wheels") or []), p.get("sdist") or {}]:\n    pass\n'
        'archive, folder, vcs = (_table(p, k) for k in ("archive", "directory", "vcs"))\n'
        "lock = Pylock.from_dict(data)\n"
        'url = w["sdist"]\n'
    )
    assert pylock_readers(planted) == [1, 4, 5]
    assert not pylock_readers(ast.parse("lock = read_pylock(text)\nw = lock.packages[0].wheels\n"))


_TOML_PARSERS = {"toml_loads", "parse_toml", "parse_pyproject", "parse"}


def _reads_named(tree: ast.Module, filename: str, parsers: set[str]) -> list[int]:
    """Lines of functions that name ``filename`` and parse text themselves (a call of one of
    ``parsers``)."""
    lines = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        named = any(
            isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value == filename
            for n in ast.walk(fn)
        )
        parses = any(
            isinstance(n, ast.Call)
            and (
                isinstance(n.func, ast.Name)
                and n.func.id in parsers
                or isinstance(n.func, ast.Attribute)
                and n.func.attr in parsers
                and n.func.attr != "parse"
            )
            for n in ast.walk(fn)
        )
        if named and parses:
            lines.append(fn.lineno)
    return lines


PYPROJECT_OWNER = "envbuild/gate/project.py"
UVLOCK_OWNER = "envbuild/gate/formats/uvlock.py"


def test_one_pyproject_reader_and_one_uvlock_reader() -> None:
    """Only ``gate/project.py`` reads a project's ``pyproject.toml`` (``Project``, read once per
    command and handed down); only the format reader parses a ``uv.lock``."""
    package = [(rel, tree) for rel, tree in _sources() if rel.startswith("envbuild/")]
    pyprojects = [
        f"{rel}:{line}"
        for rel, tree in package
        if rel != PYPROJECT_OWNER
        for line in _reads_named(tree, "pyproject.toml", _TOML_PARSERS)
    ]
    assert not pyprojects, (
        "a pyproject.toml read outside envbuild/gate/project.py; use its Project: "
        + ", ".join(pyprojects)
    )
    uvlocks = [
        f"{rel}:{line}"
        for rel, tree in package
        if rel != UVLOCK_OWNER
        for line in _reads_named(tree, "uv.lock", _TOML_PARSERS)
    ]
    assert not uvlocks, (
        "a uv.lock parsed outside envbuild/gate/formats/uvlock.py; read it with"
        " gate.lockfile (gate.selection.read_project_lock): " + ", ".join(uvlocks)
    )
    owner = ast.parse((ROOT / PYPROJECT_OWNER).read_text(encoding="utf-8"))
    assert _reads_named(owner, "pyproject.toml", _TOML_PARSERS)
    uvlock = ast.parse((ROOT / UVLOCK_OWNER).read_text(encoding="utf-8"))
    assert _reads_named(uvlock, "uv.lock", _TOML_PARSERS)


def test_the_reader_checks_find_a_planted_copy() -> None:
    planted = ast.parse(
        "def settings(folder):\n"
        '    return toml_loads((folder / "pyproject.toml").read_text())\n'
        "def requires_python(path):\n"
        '    if path.name == "uv.lock":\n'
        "        return parse_toml(path.read_text())['requires-python']\n"
    )
    assert _reads_named(planted, "pyproject.toml", _TOML_PARSERS) == [1]
    assert _reads_named(planted, "uv.lock", _TOML_PARSERS) == [3]
    clean = ast.parse(
        "def settings(project):\n"
        '    return project.table("tool", "uv")\n'
        "def hint(lock):\n"
        '    return "keep the lock beside its pyproject.toml" if lock.project.exists() else ""\n'
    )
    assert not _reads_named(clean, "pyproject.toml", _TOML_PARSERS)


def test_the_uv_floor_is_pyprojects_and_an_older_uv_is_refused(tmp_path: Path) -> None:
    """``installer.python.UV_FLOOR`` is the floor of pyproject.toml's ``uv`` requirement (read
    there without importlib.metadata), and a uv that answers an older version is refused naming
    both."""
    import stat

    import pytest
    from packaging.requirements import Requirement

    from envbuild._io import parse_toml
    from envbuild.errors import ConfigError
    from envbuild.installer.python import UV_FLOOR, _check_uv

    requires = parse_toml((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    uv = next(Requirement(r) for r in requires if Requirement(r).name == "uv")
    assert [s.version for s in uv.specifier if s.operator == ">="] == [UV_FLOOR]

    old = tmp_path / "uv"
    old.write_text("#!/bin/sh\necho 'uv 0.5.1'\n")
    old.chmod(old.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(ConfigError) as caught:
        _check_uv.__wrapped__(str(old))
    assert f"uv 0.5.1 ({old}) is older than envbuild needs: uv {UV_FLOOR} or newer" in str(
        caught.value.message
    )
    new = tmp_path / "uv-new"
    new.write_text(f"#!/bin/sh\necho 'uv {UV_FLOOR}'\n")
    new.chmod(old.stat().st_mode)
    _check_uv.__wrapped__(str(new))  # the floor itself passes
