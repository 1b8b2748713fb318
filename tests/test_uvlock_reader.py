"""The uv.lock reader piece by piece (issue 36): the file's tables and the errors that name a bad
field, which entry an edge means, the walk along the edges, what an item reaches, the conflict
items, and the ``ParsedLock`` the gate gets.

``APP_LOCK`` is what ``uv lock --offline`` (uv 0.13.9) wrote for ``APP_PYPROJECT`` beside a folder
of hand-made wheels (``find-links = ["../wheels"]``): a virtual project with a platform fork (libb
1.0 on Linux, 2.0 elsewhere), two conflicting extras (torchy 1.0 for cpu, 2.0 for gpu, each with
vision, whose edges to torchy carry uv's pseudo-extras), an extra of a dependency switched on by an
extra (``liba[fast]`` under cpu), a dev group and a ``[[tool.uv.dependency-metadata]]`` item. The
public locks under tests/data/publocks are read too, where a property must hold on real projects.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from envbuild.gate.environments import Narrow, enumerate_environments
from envbuild.gate.formats import parse
from envbuild.gate.formats._common import toml_loads
from envbuild.gate.formats.uvlock import (
    UvConflict,
    UvEdge,
    UvFile,
    UvGraph,
    UvIndex,
    UvLock,
    UvManifest,
    UvPackage,
    UvSource,
    UvSupplied,
    conflict_items,
    pseudo,
    sources_of,
)
from envbuild.gate.markers import MarkerCache
from envbuild.gate.model import Environment, EnvList, Item, LockParseError, ParsedLock

PUBLOCKS = Path(__file__).resolve().parent / "data" / "publocks"

APP_PYPROJECT = """\
[project]
name = "app"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = [
    "liba[fast]",
    "libb==1.0 ; sys_platform == 'linux'",
    "libb==2.0 ; sys_platform != 'linux'",
]

[project.optional-dependencies]
cpu = ["torchy==1.0", "vision", "liba[fast]"]
gpu = ["torchy==2.0", "vision"]

[dependency-groups]
dev = ["libc"]

[tool.uv]
package = false
no-index = true
find-links = ["../wheels"]
conflicts = [[{ extra = "cpu" }, { extra = "gpu" }]]


[[tool.uv.dependency-metadata]]
name = "vision"
version = "1.0"
requires-dist = ["torchy"]
"""

APP_LOCK = """\
version = 1
revision = 5
requires-python = ">=3.10"
resolution-markers = [
    "sys_platform == 'linux'",
    "sys_platform != 'linux'",
]
conflicts = [[
    { package = "app", extra = "cpu" },
    { package = "app", extra = "gpu" },
]]

[[manifest.dependency-metadata]]
name = "vision"
version = "1.0"
requires-dist = ["torchy"]

[[package]]
name = "app"
version = "0.1.0"
source = { virtual = "." }
dependencies = [
    { name = "liba", extra = ["fast"] },
    { name = "libb", version = "1.0", source = { registry = "../wheels" }, marker = "sys_platform == 'linux'" },
    { name = "libb", version = "2.0", source = { registry = "../wheels" }, marker = "sys_platform != 'linux'" },
]

[package.optional-dependencies]
cpu = [
    { name = "liba", extra = ["fast"], marker = "extra == 'extra-3-app-cpu'" },
    { name = "torchy", version = "1.0", source = { registry = "../wheels" } },
    { name = "vision" },
]
gpu = [
    { name = "torchy", version = "2.0", source = { registry = "../wheels" } },
    { name = "vision" },
]

[package.dev-dependencies]
dev = [
    { name = "libc" },
]

[package.metadata]
requires-dist = [
    { name = "liba", extras = ["fast"] },
    { name = "liba", extras = ["fast"], marker = "extra == 'cpu'" },
    { name = "libb", marker = "sys_platform != 'linux'", specifier = "==2.0" },
    { name = "libb", marker = "sys_platform == 'linux'", specifier = "==1.0" },
    { name = "torchy", marker = "extra == 'cpu'", specifier = "==1.0" },
    { name = "torchy", marker = "extra == 'gpu'", specifier = "==2.0" },
    { name = "vision", marker = "extra == 'cpu'" },
    { name = "vision", marker = "extra == 'gpu'" },
]
provides-extras = ["cpu", "gpu"]

[package.metadata.requires-dev]
dev = [{ name = "libc" }]

[[package]]
name = "liba"
version = "1.0"
source = { registry = "../wheels" }
dependencies = [
    { name = "libb", version = "1.0", source = { registry = "../wheels" }, marker = "sys_platform == 'linux'" },
    { name = "libb", version = "2.0", source = { registry = "../wheels" }, marker = "sys_platform != 'linux'" },
]
wheels = [
    { path = "liba-1.0-py3-none-any.whl" },
]

[package.optional-dependencies]
fast = [
    { name = "libc" },
]

[[package]]
name = "libb"
version = "1.0"
source = { registry = "../wheels" }
resolution-markers = [
    "sys_platform == 'linux'",
]
wheels = [
    { path = "libb-1.0-py3-none-any.whl" },
]

[[package]]
name = "libb"
version = "2.0"
source = { registry = "../wheels" }
resolution-markers = [
    "sys_platform != 'linux'",
]
wheels = [
    { path = "libb-2.0-py3-none-any.whl" },
]

[[package]]
name = "libc"
version = "1.0"
source = { registry = "../wheels" }
wheels = [
    { path = "libc-1.0-py3-none-any.whl" },
]

[[package]]
name = "torchy"
version = "1.0"
source = { registry = "../wheels" }
resolution-markers = [
    "sys_platform == 'linux'",
    "sys_platform != 'linux'",
]
wheels = [
    { path = "torchy-1.0-py3-none-any.whl" },
]

[[package]]
name = "torchy"
version = "2.0"
source = { registry = "../wheels" }
resolution-markers = [
    "sys_platform == 'linux'",
    "sys_platform != 'linux'",
]
wheels = [
    { path = "torchy-2.0-py3-none-any.whl" },
]

[[package]]
name = "vision"
version = "1.0"
source = { registry = "../wheels" }
dependencies = [
    { name = "torchy", version = "1.0", source = { registry = "../wheels" }, marker = "extra == 'extra-3-app-cpu'" },
    { name = "torchy", version = "2.0", source = { registry = "../wheels" }, marker = "extra == 'extra-3-app-gpu'" },
]
wheels = [
    { path = "vision-1.0-py3-none-any.whl" },
]
"""  # noqa: E501 (uv.lock text: TOML inline tables cannot span lines)


def tables(text: str = APP_LOCK) -> UvLock:
    return UvLock.from_dict(toml_loads(text))


def graph_of(text: str = APP_LOCK) -> UvGraph:
    lock = tables(text)
    return UvGraph.of(lock, [p.entry(i, None) for i, p in enumerate(lock.packages)])


def parsed(tmp_path: Path, text: str = APP_LOCK, pyproject: str = APP_PYPROJECT) -> ParsedLock:
    (tmp_path / "pyproject.toml").write_text(pyproject)
    lock = tmp_path / "uv.lock"
    lock.write_text(text)
    return parse(lock, text, "uv.lock")


def key(graph: UvGraph, label: str) -> int:
    return next(e.key for e in graph.entries if e.label() == label)


def envs_of(lock: ParsedLock, *wanted: str) -> list[Environment]:
    """The lock's environments for Python 3.12 named ``wanted`` (``"linux x86_64, extra cpu"``)."""
    by_name = {env.name: env for env in enumerate_environments(lock, Narrow(python=("3.12",)))}
    return [by_name[w] for w in wanted]


# ----------------------------------------------------------------------------- the tables


def test_the_tables_hold_what_uv_wrote() -> None:
    lock = tables()
    assert lock.requires_python == ">=3.10"
    assert lock.resolution_markers == ("sys_platform == 'linux'", "sys_platform != 'linux'")
    assert lock.supported_markers == ()
    assert lock.conflicts == (
        (UvConflict(package="app", extra="cpu"), UvConflict(package="app", extra="gpu")),
    )
    assert lock.manifest == UvManifest(
        dependency_metadata=(UvSupplied(name="vision", version="1.0", requires_dist=("torchy",)),)
    )
    assert [(p.name, p.version) for p in lock.packages] == [
        ("app", "0.1.0"),
        ("liba", "1.0"),
        ("libb", "1.0"),
        ("libb", "2.0"),
        ("libc", "1.0"),
        ("torchy", "1.0"),
        ("torchy", "2.0"),
        ("vision", "1.0"),
    ]
    app, liba, libb1 = lock.packages[:3]
    assert app.source.kinds == {"virtual"} and app.source.is_project and not liba.source.is_project
    assert liba.source.registry == "../wheels" and liba.source.identity == (
        ("registry", "../wheels"),
    )
    assert app.dependencies[0] == UvEdge(name="liba", extra=("fast",))
    assert app.dependencies[1] == UvEdge(
        name="libb", version="1.0", source=liba.source, marker="sys_platform == 'linux'"
    )
    assert app.dependencies[1].pinned and not app.dependencies[0].pinned
    assert list(app.optional_dependencies) == ["cpu", "gpu"] and list(app.dev_dependencies) == [
        "dev"
    ]
    assert [e.name for e in app.optional_dependencies["cpu"]] == ["liba", "torchy", "vision"]
    assert app.optional_dependencies["cpu"][0].marker == "extra == 'extra-3-app-cpu'"
    assert app.requires_dist is not None and app.requires_dist[:2] == (
        "liba",
        "liba; extra == 'cpu'",
    )
    assert "libb==2.0; sys_platform != 'linux'" in app.requires_dist
    assert app.wheels == () and app.sdist is None
    assert liba.requires_dist is None  # uv records no metadata of a registry package
    assert liba.wheels == (UvFile(path="liba-1.0-py3-none-any.whl"),)
    assert libb1.resolution_markers == ("sys_platform == 'linux'",)


def test_a_package_with_files_and_hashes_becomes_an_entry() -> None:
    data = toml_loads((PUBLOCKS / "nanochat" / "uv.lock").read_text())
    i, table = next((i, p) for i, p in enumerate(data["package"]) if p["name"] == "annotated-types")
    package = UvPackage.from_dict(table, i)
    assert package.sdist is not None and package.sdist.url == table["sdist"]["url"]
    entry = package.entry(i, 42)
    wheel, sdist = table["wheels"][0], table["sdist"]
    assert entry.files == (
        (wheel["url"], wheel["hash"].removeprefix("sha256:")),
        (sdist["url"], sdist["hash"].removeprefix("sha256:")),
    )
    assert entry.hashes == tuple(h for _, h in entry.files)
    assert (entry.key, entry.name, entry.version, entry.raw, entry.line) == (
        i,
        "annotated-types",
        "0.7.0",
        "annotated-types==0.7.0",
        42,
    )
    assert entry.index == "https://pypi.org/simple" and entry.url is None
    assert entry.dependencies == () and entry.requires is None


def test_an_entry_keeps_the_name_as_written_in_raw_and_canonical_in_name() -> None:
    package = UvPackage.from_dict(
        {
            "name": "Flash_Attn",
            "version": "2.8.3",
            "source": {"url": "https://example.org/f.whl"},
            "dependencies": [{"name": "Torch"}, {"version": "1"}],
            "wheels": [{"filename": "f.whl", "hash": "sha256:AB"}],
        },
        3,
    )
    entry = package.entry(3, None)
    assert (entry.name, entry.raw, entry.url, entry.index) == (
        "flash-attn",
        "Flash_Attn==2.8.3",
        "https://example.org/f.whl",
        None,
    )
    # an edge without a name is skipped
    assert entry.files == (("f.whl", "ab"),) and entry.dependencies == ("torch",)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'requires-python = ">=3.10"',
            "requires-python = 310",
            "the lock: `requires-python` is a int, where uv writes a string",
        ),
        (
            (
                'resolution-markers = [\n    "sys_platform == \'linux\'",\n    "sys_platform !='
                " 'linux'\",\n]\nconflicts"
            ),
            "resolution-markers = [1]\nconflicts",
            "`resolution-markers` is not an array of strings",
        ),
        (
            '{ package = "app", extra = "gpu" }',
            '{ package = "app", extra = 7 }',
            "`conflicts[0]`: `extra` is not a string",
        ),
        ("conflicts = [[", 'conflicts = ["x", [', "`conflicts[0]` is not an array of tables"),
        (
            'name = "vision"\nversion = "1.0"\nrequires-dist',
            'name = "vision"\nversion = "1.0"\nrequires-dist = 1\nx',
            "`manifest.dependency-metadata[0]`: `requires-dist` is a int, where uv writes a array",
        ),
        (
            'name = "liba"\nversion = "1.0"',
            'name = "liba"\nversion = 1',
            "package[1] (liba): `version` is a int, where uv writes a string",
        ),
        ('name = "liba"\nversion = "1.0"', 'version = "1.0"', "package[1] has no name"),
        (
            'name = "libc"\nversion = "1.0"\nsource = { registry = "../wheels" }',
            'name = "libc"\nversion = "1.0"\nsource = { registry = 7 }',
            "package[4] (libc): `source`: `registry` is a int, where uv writes a string",
        ),
        (
            '{ name = "liba", extra = ["fast"] },\n    { name = "libb", version = "1.0"',
            '{ name = "liba", extra = [1] },\n    { name = "libb", version = "1.0"',
            "package[0] (app): `extra` of an edge in `dependencies` is not an array of strings",
        ),
        (
            '"../wheels" }\ndependencies = [\n    { name = "libb", version = "1.0"',
            '"../wheels" }\ndependencies = [\n    { name = "libb", version = 1.0',
            (
                "package[1] (liba): an edge in `dependencies`: `version` is a float, where uv"
                " writes a string"
            ),
        ),
        (
            (
                'gpu = [\n    { name = "torchy", version = "2.0", source = { registry = "../wheels"'
                ' } },\n    { name = "vision" },\n]'
            ),
            'gpu = "torchy"',
            "package[0] (app): `optional-dependencies.gpu` is not an array of tables",
        ),
        (
            'dev = [\n    { name = "libc" },\n]',
            'dev = ["libc"]',
            "package[0] (app): `dev-dependencies.dev` holds a value that is not a table",
        ),
        (
            '{ path = "libc-1.0-py3-none-any.whl" }',
            "{ path = 1 }",
            "package[4] (libc): a wheel: `path` is a int, where uv writes a string",
        ),
        (
            'wheels = [\n    { path = "libc-1.0-py3-none-any.whl" },\n]',
            'wheels = ["libc.whl"]',
            "package[4] (libc): `wheels` holds a value that is not a table",
        ),
        (
            "[package.metadata]\nrequires-dist = [",
            '[package.metadata]\nrequires-dist = "liba"\nx = [',
            "package[0] (app): `metadata.requires-dist` is not an array",
        ),
    ],
)
def test_a_value_shaped_wrong_is_named_with_its_path(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    assert APP_LOCK.count(old) == 1, old
    with pytest.raises(LockParseError) as err:
        tables(APP_LOCK.replace(old, new))
    assert str(err.value) == said
    # what parse (and so check-lock) says too
    (tmp_path / "uv.lock").write_text(APP_LOCK.replace(old, new))
    with pytest.raises(LockParseError) as err:
        parse(tmp_path / "uv.lock", APP_LOCK.replace(old, new), "uv.lock")
    assert str(err.value) == said


def test_each_table_checks_only_its_own_keys() -> None:
    with pytest.raises(
        LockParseError, match=re.escape("w: `hash` is a list, where uv writes a string")
    ):
        UvFile.from_dict({"url": "u", "hash": ["sha256:ab"]}, "w")
    # keys it does not read
    assert UvFile.from_dict({"url": "u", "size": 12, "upload-time": "2025"}, "w") == UvFile(url="u")
    with pytest.raises(LockParseError, match=re.escape("p: `source`: `path` is a int")):
        UvSource.from_dict({"path": 1}, "p: `source`")
    # an edge's source is compared, not checked
    assert UvSource.from_dict({"path": 1}).identity == (("path", "1"),)
    assert UvEdge.from_dict({"version": "1"}, "p", "dependencies") is None
    with pytest.raises(
        LockParseError, match=re.escape("`conflicts[2]`: `package` is not a string")
    ):
        UvConflict.from_dict({"package": 1, "extra": "cpu"}, 2)
    assert [
        UvConflict.from_dict(d, 0).kind for d in ({"extra": "a"}, {"group": "b"}, {"package": "c"})
    ] == ["extra", "group", "project"]
    with pytest.raises(
        LockParseError, match=re.escape("`manifest.members` is not an array of strings")
    ):
        UvManifest.from_dict({"members": "app"})
    with pytest.raises(
        LockParseError, match=re.escape("`manifest.dependency-metadata` is not an array of tables")
    ):
        UvManifest.from_dict({"dependency-metadata": {"name": "x"}})
    assert (
        UvSupplied.from_dict({"version": "1"}, 0) is None and UvSupplied.from_dict("x", 0) is None
    )
    assert UvSupplied.from_dict(
        {"name": "x", "version": 2, "requires-dist": ["a", 3]}, 0
    ) == UvSupplied(name="x", version="2", requires_dist=("a",))


def test_pseudo_is_uvs_encoding() -> None:
    assert pseudo("My_App", "CU128", "extra") == "extra-6-my-app-cu128"
    assert pseudo("app", "Dev", "group") == "group-3-app-dev"
    assert pseudo("Cosmos.OSS", "", "project") == "project-10-cosmos-oss"


# ----------------------------------------------------------------------------- edges to entries


def test_an_edge_means_the_entry_its_version_and_source_name() -> None:
    lock = tables()
    entries = [p.entry(i, None) for i, p in enumerate(lock.packages)]
    index = UvIndex(entries, [p.source for p in lock.packages])
    registry = UvSource.from_dict({"registry": "../wheels"})
    assert index.targets(UvEdge(name="libb", version="2.0", source=registry)) == (3,)
    # a version alone: the entries of it
    assert index.targets(UvEdge(name="LibB", version="1.0")) == (2,)
    # the name alone: every entry, the forks decide
    assert index.targets(UvEdge(name="libb")) == (2, 3)
    assert index.targets(UvEdge(name="libb", version="3.0", source=registry)) == ()
    assert index.targets(
        UvEdge(name="libb", source=UvSource.from_dict({"registry": "https://pypi.org/simple"}))
    ) == (2, 3)
    assert index.targets(UvEdge(name="nothing")) == ()
    link = index.link(UvEdge(name="Liba", marker="", extra=("Fast",)))
    assert link == ((1,), None, frozenset({"fast"}))


@pytest.mark.parametrize("project", sorted(p.name for p in PUBLOCKS.iterdir()))
def test_every_pinned_edge_of_a_public_lock_finds_its_one_entry(project: str) -> None:
    """uv writes ``version``/``source`` on an edge exactly where a name has several entries: each
    such edge leads to one entry, of that version; every edge leads somewhere."""
    lock = tables((PUBLOCKS / project / "uv.lock").read_text())
    entries = [p.entry(i, None) for i, p in enumerate(lock.packages)]
    index = UvIndex(entries, [p.source for p in lock.packages])
    edges = [
        e
        for p in lock.packages
        for es in (p.dependencies, *p.optional_dependencies.values(), *p.dev_dependencies.values())
        for e in es
    ]
    pinned = [e for e in edges if e.pinned]
    assert edges and all(index.targets(e) for e in edges)
    for edge in pinned:
        targets = index.targets(edge)
        assert len(targets) == 1 and entries[targets[0]].version == edge.version, edge


# ----------------------------------------------------------------------------- the graph


def test_the_walk_from_the_project_follows_markers_forks_and_extras(tmp_path: Path) -> None:
    lock = parsed(tmp_path)
    assert isinstance(lock.graph, UvGraph) and lock.graph.roots == (0,)
    envs = envs_of(
        lock, "linux x86_64, extra cpu", "macos arm64, extra gpu", "windows amd64, default"
    )
    reach = lock.graph.walk(EnvList(envs), MarkerCache())
    installed = [sorted(e.label() for e in reach.members(j).entries) for j in range(len(envs))]
    assert installed == [
        ["app 0.1.0", "liba 1.0", "libb 1.0", "libc 1.0", "torchy 1.0", "vision 1.0"],
        ["app 0.1.0", "liba 1.0", "libb 2.0", "libc 1.0", "torchy 2.0", "vision 1.0"],
        ["app 0.1.0", "liba 1.0", "libb 2.0", "libc 1.0"],  # libc: the dev group, on by default
    ]
    assert reach.roots == {0} and reach.key_masks == lock.walk(EnvList(envs)).key_masks
    vision = lock.entries[7]
    cpu, gpu, plain = (reach.members(j) for j in range(3))
    # the edge of uv's pseudo-extra
    assert cpu.target_of(vision, "torchy", lock.entries) == lock.entries[5]
    assert gpu.target_of(vision, "torchy", lock.entries) == lock.entries[6]
    assert plain.target_of(vision, "torchy", lock.entries) is None  # vision is not installed there
    assert [m.entries for m in lock.members_of(envs)] == [cpu.entries, gpu.entries, plain.entries]


def test_an_edge_of_a_name_alone_goes_where_the_fork_holds(tmp_path: Path) -> None:
    """liba's two pinned edges to libb made one edge of the name alone: the entries' forks
    (``resolution-markers``) decide which libb each platform gets."""
    text = APP_LOCK.replace(
        '{ name = "libb", version = "1.0", source = { registry = "../wheels" }, marker ='
        ' "sys_platform == \'linux\'" },\n    { name = "libb", version = "2.0", source = { registry'
        ' = "../wheels" }, marker = "sys_platform != \'linux\'" },\n',
        "",
        1,
    )  # app's own: libb only through liba
    text = text.replace(
        '{ name = "libb", version = "1.0", source = { registry = "../wheels" }, marker ='
        ' "sys_platform == \'linux\'" },\n    { name = "libb", version = "2.0", source = { registry'
        ' = "../wheels" }, marker = "sys_platform != \'linux\'" },\n',
        '{ name = "libb" },\n',
        1,
    )
    lock = parsed(tmp_path, text)
    assert isinstance(lock.graph, UvGraph) and lock.graph.plain[1][0].targets == (2, 3)
    envs = envs_of(lock, "linux aarch64, default", "macos x86_64, default")
    linux, macos = lock.members_of(envs)
    liba = lock.entries[1]
    assert [e.label() for e in linux.named("libb")] == ["libb 1.0"] and [
        e.label() for e in macos.named("libb")
    ] == ["libb 2.0"]
    assert linux.target_of(liba, "libb", lock.entries) == lock.entries[2]
    assert macos.target_of(liba, "libb", lock.entries) == lock.entries[3]


def test_an_item_reaches_along_every_edge_whatever_its_marker() -> None:
    graph = graph_of()
    assert graph.reaches(Item("extra-3-app-cpu", "extra cpu", frozenset({"extra-3-app-cpu"}))) == {
        # liba[fast] -> libc; both libbs, whatever the platform
        "liba",
        "libb",
        "libc",
        "torchy",
        "vision",
    }
    assert graph.reaches(Item("extra-3-app-gpu", "extra gpu", frozenset({"extra-3-app-gpu"}))) == {
        "torchy",
        "vision",
    }
    assert graph.reaches(
        Item("group-3-app-dev", "group dev", frozenset({"group-3-app-dev"}), kind="group")
    ) == {"libc"}
    assert graph.reaches(
        Item("project-3-app", "project app", frozenset({"project-3-app"}), kind="project")
    ) == {"liba", "libb", "libc"}
    # an extra's kind
    assert (
        graph.reaches(Item("project-3-app", "project app", frozenset({"project-3-app"}))) == set()
    )
    assert (
        graph.reaches(Item("extra-3-app-cuda", "extra cuda", frozenset({"extra-3-app-cuda"})))
        == set()
    )


def test_the_walk_starts_at_the_workspace_members() -> None:
    editable = APP_LOCK.replace(
        'name = "liba"\nversion = "1.0"\nsource = { registry = "../wheels" }',
        'name = "liba"\nversion = "1.0"\nsource = { editable = "liba" }',
    )
    assert graph_of(editable).roots == (0, 1)  # no member recorded: every tree of the workspace
    members = editable.replace(
        "[[manifest.dependency-metadata]]",
        '[manifest]\nmembers = ["app"]\n\n[[manifest.dependency-metadata]]',
    )
    assert graph_of(members).roots == (0,)
    registry = APP_LOCK.replace('source = { virtual = "." }', 'source = { registry = "../wheels" }')
    # no tree at all: what no entry's own dependencies point at (libc and vision come only through
    # extras and groups)
    assert graph_of(registry).roots == (0, 4, 7)


def test_an_extra_that_switches_on_an_extra_of_a_dependency_is_implied() -> None:
    assert graph_of().implies() == {"extra-3-app-cpu": frozenset({"extra-4-liba-fast"})}


# ----------------------------------------------------------------------------- conflicts, and what
# the gate gets


GROUP_CONFLICT = APP_LOCK.replace(
    "]]\n\n[[manifest",
    '], [\n    { package = "app", group = "dev" },\n    { package = "liba" },\n]]\n\n[[manifest',
    1,
)


@pytest.mark.parametrize(("defaults", "dev_default"), [(("dev",), True), ((), False), (True, True)])
def test_conflict_sets_become_items_and_the_rest_is_always_on(
    defaults: bool | tuple[str, ...], dev_default: bool
) -> None:
    lock = tables(GROUP_CONFLICT)
    graph = UvGraph.of(lock, [p.entry(i, None) for i, p in enumerate(lock.packages)])
    sets, always = conflict_items(lock, graph, defaults)
    assert [[(it.key, it.words, it.kind, it.name, it.default) for it in s] for s in sets] == [
        [
            ("extra-3-app-cpu", "extra cpu", "extra", "cpu", False),
            ("extra-3-app-gpu", "extra gpu", "extra", "gpu", False),
        ],
        [
            ("group-3-app-dev", "group dev", "group", "dev", dev_default),
            ("project-4-liba", "project liba", "project", "liba", True),
        ],
    ]
    assert (
        sets[1][0].groups == {"dev"}
        and sets[1][0].extras == {"group-3-app-dev"}
        and sets[0][0].groups == set()
    )
    assert always == {"project-3-app"}  # app's dev group conflicts now


@pytest.mark.parametrize(
    ("tool_uv", "dev_default"),
    [
        ("", True),
        ("default-groups = []\n", False),
        ('default-groups = "all"\n', True),
        ('default-groups = ["Dev"]\n', True),
    ],
)
def test_the_default_groups_come_from_the_project_beside_the_lock(
    tmp_path: Path, tool_uv: str, dev_default: bool
) -> None:
    pyproject = APP_PYPROJECT.replace("[tool.uv]\n", "[tool.uv]\n" + tool_uv)
    lock = parsed(tmp_path, GROUP_CONFLICT, pyproject)
    assert lock.conflicts[1][0].default is dev_default


def test_the_gate_gets_a_parsed_lock(tmp_path: Path) -> None:
    lock = parsed(tmp_path)
    assert (lock.format, lock.requires_python, lock.environments, lock.indexes) == (
        "uv.lock",
        ">=3.10",
        [],
        ["../wheels"],
    )
    lines = APP_LOCK.splitlines()
    assert [lines[e.line - 1] for e in lock.entries if e.line] == [
        f'version = "{e.version}"' for e in lock.entries
    ]
    assert [e.dependencies for e in lock.entries[:2]] == [
        ("liba", "libb", "libb", "libc"),  # app's edge liba[fast]: liba's extra brings libc
        ("libb", "libb"),
    ]
    assert (
        lock.always_extras == {"group-3-app-dev", "project-3-app"} and lock.always_groups == set()
    )
    assert [it.key for s in lock.conflicts for it in s] == ["extra-3-app-cpu", "extra-3-app-gpu"]
    assert lock.marker_texts == [
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",  # the lock's forks
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",  # libb's
        # torchy's
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",
        # app's edges
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",
        "extra == 'extra-3-app-cpu'",
        "sys_platform == 'linux'",
        "sys_platform != 'linux'",  # liba's
        "extra == 'extra-3-app-cpu'",
        "extra == 'extra-3-app-gpu'",
    ]  # vision's
    assert lock.extra == {
        "marker_owner": {
            "sys_platform == 'linux'": 0,
            "sys_platform != 'linux'": 0,
            "extra == 'extra-3-app-cpu'": 0,
            "extra == 'extra-3-app-gpu'": 7,
        },
        "supplied_requires": {("vision", "1.0"): ("torchy",)},
        "implies": {"extra-3-app-cpu": frozenset({"extra-4-liba-fast"})},
        "sources": {0: {"virtual": "."}, **{k: {"registry": "../wheels"} for k in range(1, 8)}},
    }
    assert sources_of(lock) is lock.extra["sources"]


def test_a_lock_read_again_is_the_same_tables_and_a_copy_of_its_own() -> None:
    """``toml_loads`` of one text twice: the second read equals a fresh parse, and a caller
    changing what it got changes nothing another caller gets; a broken text is refused every
    time, never remembered (a command reads its lock once, ``gate.lockfile``)."""
    from envbuild._io import parse_toml
    from envbuild.gate.model import LockParseError

    text = (PUBLOCKS / "cosmos-reason2" / "uv.lock").read_text()
    first = toml_loads(text)
    first["package"].clear()
    first["planted"] = True
    second, third = toml_loads(text), toml_loads(text)
    assert second == parse_toml(text) and "planted" not in second and second["package"]
    assert second is not third and second["package"] is not third["package"]
    broken = text + "\n[[package]\n"
    for _ in range(2):
        with pytest.raises(LockParseError, match="not valid TOML"):
            toml_loads(broken)
