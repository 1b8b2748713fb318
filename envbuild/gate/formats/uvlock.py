"""uv.lock (version 1): entries per fork, and what each environment installs, from the lock's edges.

A uv.lock may hold one name several times (a ``version`` + ``source`` per fork or per conflicting
extra/group); an edge that must say which it means carries ``version`` and ``source`` too. So the
installed set of an environment is found the way ``uv sync`` finds it: from the workspace members
(``[manifest] members``, else the ``editable``/``virtual`` entries) along every edge whose marker
holds there, with the members' extras and groups switched on per the environment's choice.
Conflicting extras/groups are uv's pseudo-extras inside markers
(``extra == 'extra-{len(project)}-{project}-{extra}'``, ``'group-…'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.gate.formats._common import entry_lines, sha, toml_loads
from envbuild.gate.markers import InvalidMarker
from envbuild.gate.model import Entry, Grid, Item, LockParseError, ParsedLock, Reach
from envbuild.gate.names import canonical

__all__ = ["parse"]

_ROOT_SOURCES = ("editable", "virtual", "directory")


def pseudo(project: str, name: str, kind: str) -> str:
    """uv's encoding of a conflict item in markers: ``extra-7-trainer-cu128``, ``project-7-trainer``."""
    project = canonical(project)
    if kind == "project":
        return f"project-{len(project)}-{project}"
    return f"{kind}-{len(project)}-{project}-{canonical(name)}"


def _source_key(source: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(source, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in source.items()))


_STR: tuple[type, ...] = (str,)
_TABLE: tuple[type, ...] = (dict,)
_LIST: tuple[type, ...] = (list,)
# what each key the reader uses must be, where it appears (a key a later uv adds is not read)
_TOP: dict[str, tuple[type, ...]] = {"requires-python": _STR, "resolution-markers": _LIST, "supported-markers": _LIST, "conflicts": _LIST,
        "manifest": _TABLE, "package": _LIST}
_PACKAGE: dict[str, tuple[type, ...]] = {"name": _STR, "version": _STR, "source": _TABLE, "dependencies": _LIST, "optional-dependencies": _TABLE,
            "dev-dependencies": _TABLE, "wheels": _LIST, "sdist": _TABLE, "metadata": _TABLE,
            "resolution-markers": _LIST}
_FILE: dict[str, tuple[type, ...]] = {"url": _STR, "filename": _STR, "path": _STR, "hash": _STR}
_SOURCE: dict[str, tuple[type, ...]] = {"registry": _STR, "url": _STR, "git": _STR, "path": _STR, "editable": _STR, "virtual": _STR,
           "directory": _STR}
_EDGE: dict[str, tuple[type, ...]] = {"name": _STR, "version": _STR, "source": _TABLE, "marker": _STR, "extra": _LIST}


def _shape(data: dict[str, Any]) -> None:
    """Raise ``LockParseError`` naming the first value that is not shaped as uv writes it: the
    reader below may then trust the types, and any other exception it raises is a bug of envbuild's."""
    _keys(data, _TOP, "the lock")
    for key in ("resolution-markers", "supported-markers"):
        _strings(data.get(key, []), f"`{key}`")
    for i, group in enumerate(data.get("conflicts", [])):
        if not isinstance(group, list) or not all(isinstance(x, dict) for x in group):
            raise LockParseError(f"`conflicts[{i}]` is not an array of tables")
        for item in group:
            for key in ("package", "extra", "group"):
                if key in item and not isinstance(item[key], str):
                    raise LockParseError(f"`conflicts[{i}]`: `{key}` is not a string")
    manifest = data.get("manifest", {})
    for key in ("members",):
        _strings(manifest.get(key, []), f"`manifest.{key}`")
    if not isinstance(manifest.get("dependency-metadata", []), list):
        raise LockParseError("`manifest.dependency-metadata` is not an array of tables")
    for i, p in enumerate(data.get("package", [])):
        if not isinstance(p, dict):
            raise LockParseError(f"package[{i}] is not a table")
        where = f"package[{i}]" + (f" ({p['name']})" if isinstance(p.get("name"), str) else "")
        _keys(p, _PACKAGE, where)
        if "name" not in p:
            raise LockParseError(f"{where} has no name")
        _strings(p.get("resolution-markers", []), f"{where}: `resolution-markers`")
        edges = [("dependencies", p.get("dependencies", []))]
        for table in ("optional-dependencies", "dev-dependencies"):
            for k, v in p.get(table, {}).items():
                edges.append((f"{table}.{k}", v))
        for key, items in edges:
            if not isinstance(items, list):
                raise LockParseError(f"{where}: `{key}` is not an array of tables")
            for d in items:
                if not isinstance(d, dict):
                    raise LockParseError(f"{where}: `{key}` holds a value that is not a table")
                _keys(d, _EDGE, f"{where}: an edge in `{key}`")
                _strings(d.get("extra", []), f"{where}: `extra` of an edge in `{key}`")
        for w in p.get("wheels", []):
            if not isinstance(w, dict):
                raise LockParseError(f"{where}: `wheels` holds a value that is not a table")
            _keys(w, _FILE, f"{where}: a wheel")
        _keys(p.get("sdist", {}), _FILE, f"{where}: `sdist`")
        _keys(p.get("source", {}), _SOURCE, f"{where}: `source`")
        meta = p.get("metadata", {})
        if not isinstance(meta.get("requires-dist", []), list):
            raise LockParseError(f"{where}: `metadata.requires-dist` is not an array")


def _keys(table: dict[str, Any], kinds: dict[str, tuple[type, ...]], where: str) -> None:
    for key, kind in kinds.items():
        if key in table and not isinstance(table[key], kind):
            raise LockParseError(f"{where}: `{key}` is a {type(table[key]).__name__}, "
                                 f"where uv writes a {'table' if kind is _TABLE else 'string' if kind is _STR else 'array'}")


def _strings(items: Any, where: str) -> None:
    if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
        raise LockParseError(f"{where} is not an array of strings")


def parse(path: Path, text: str) -> ParsedLock:
    data = toml_loads(text)
    _shape(data)
    raw_packages = data.get("package", [])
    lines = text.splitlines()
    headers = entry_lines(lines, "[[package]]")
    marker_texts: list[str] = []
    for key in ("resolution-markers", "supported-markers"):
        marker_texts += [m for m in data.get(key, []) or [] if isinstance(m, str)]
    entries: list[Entry] = []
    by_name: dict[str, list[int]] = {}
    by_exact: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}
    fork_markers: dict[int, list[str]] = {}
    for i, p in enumerate(raw_packages):
        if not isinstance(p, dict) or not isinstance(p.get("name"), str):
            raise LockParseError(f"package[{i}] has no name")
        name = canonical(p["name"])
        source: dict[str, Any] = p["source"] if isinstance(p.get("source"), dict) else {}
        wheels: list[tuple[str, str | None]] = []
        for w in p.get("wheels", []) or []:
            if isinstance(w, dict):
                wheels.append((str(w.get("url") or w.get("filename") or w.get("path") or ""), sha(w.get("hash"))))
        if isinstance(p.get("sdist"), dict):
            s = p["sdist"]
            wheels.append((str(s.get("url") or s.get("path") or ""), sha(s.get("hash"))))
        meta: dict[str, Any] = p["metadata"] if isinstance(p.get("metadata"), dict) else {}
        requires = None
        if isinstance(meta.get("requires-dist"), list):
            requires = tuple(
                f"{r['name']}{r.get('specifier', '')}" + (f"; {r['marker']}" if r.get("marker") else "")
                for r in meta["requires-dist"] if isinstance(r, dict) and isinstance(r.get("name"), str))
        dep_names = [canonical(d["name"]) for d in p.get("dependencies", []) or []
                     if isinstance(d, dict) and isinstance(d.get("name"), str)]
        version = p.get("version")
        entry = Entry(
            key=i, name=name, version=str(version) if version is not None else None,
            raw=f"{p['name']}=={version}" if version is not None else p["name"], line=headers[i] if i < len(headers) else None,
            hashes=tuple(h for _, h in wheels if h), index=source.get("registry"),
            url=source.get("url"), files=tuple((u, h) for u, h in wheels if u), requires=requires,
            dependencies=tuple(dep_names))
        entries.append(entry)
        by_name.setdefault(name, []).append(i)
        by_exact[(name, entry.version or "", _source_key(source))] = i
        rm = [m for m in p.get("resolution-markers", []) or [] if isinstance(m, str)]
        if rm:
            fork_markers[i] = rm
            marker_texts += rm

    owners: dict[str, int] = {}

    def edges(deps: Any, owner: int) -> list[tuple[tuple[int, ...], str | None, frozenset[str]]]:
        out: list[tuple[tuple[int, ...], str | None, frozenset[str]]] = []
        for d in deps or []:
            if not isinstance(d, dict) or not isinstance(d.get("name"), str):
                continue
            name = canonical(d["name"])
            if "version" in d or "source" in d:
                hit = by_exact.get((name, str(d.get("version", "")), _source_key(d.get("source"))))
                targets: tuple[int, ...] = (hit,) if hit is not None else tuple(
                    k for k in by_name.get(name, []) if "version" not in d or entries[k].version == str(d["version"]))
            else:
                targets = tuple(by_name.get(name, []))
            marker = d.get("marker") if isinstance(d.get("marker"), str) else None
            if marker:
                marker_texts.append(marker)
                owners.setdefault(marker, owner)
            extras = frozenset(str(canonical(x)) for x in d.get("extra", []) or [] if isinstance(x, str))
            out.append((targets, marker, extras))
        return out

    plain: list[list[tuple[tuple[int, ...], str | None, frozenset[str]]]] = []
    optional: list[dict[str, list[tuple[tuple[int, ...], str | None, frozenset[str]]]]] = []
    dev: list[dict[str, list[tuple[tuple[int, ...], str | None, frozenset[str]]]]] = []
    for owner, p in enumerate(raw_packages):
        plain.append(edges(p.get("dependencies"), owner))
        opt: dict[str, Any] = p["optional-dependencies"] if isinstance(p.get("optional-dependencies"), dict) else {}
        optional.append({str(canonical(k)): edges(v, owner) for k, v in opt.items()})
        groups: dict[str, Any] = p["dev-dependencies"] if isinstance(p.get("dev-dependencies"), dict) else {}
        dev.append({str(canonical(k)): edges(v, owner) for k, v in groups.items()})

    manifest: dict[str, Any] = data["manifest"] if isinstance(data.get("manifest"), dict) else {}
    members = {canonical(m) for m in manifest.get("members", []) or [] if isinstance(m, str)}
    roots = [e.key for e in entries
             if (e.name in members or not members)
             and any(k in (raw_packages[e.key].get("source") or {}) for k in _ROOT_SOURCES)]
    if not roots:  # no workspace member recorded: everything nothing depends on
        pointed = {k for per in plain for targets, _, _ in per for k in targets}
        roots = [e.key for e in entries if e.key not in pointed]

    lock = ParsedLock(path, "uv.lock", entries, sorted({e.index for e in entries if e.index}),
                requires_python=data.get("requires-python") if isinstance(data.get("requires-python"), str) else None,
                environments=[m for m in data.get("supported-markers", []) or [] if isinstance(m, str)],
                marker_texts=marker_texts)
    lock.extra["marker_owner"] = owners
    # requirements a project supplied by hand for packages whose own metadata is unusable
    # (flash-attn, mamba-ssm): what uv resolved with, so what a declared-requirement rule reads
    supplied: dict[tuple[str, str | None], tuple[str, ...]] = {}
    for item in manifest.get("dependency-metadata", []) or []:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            reqs = tuple(r for r in item.get("requires-dist", []) or [] if isinstance(r, str))
            version = item.get("version")
            supplied[(canonical(item["name"]), str(version) if version is not None else None)] = reqs
    lock.extra["supplied_requires"] = supplied
    _choices(lock, data, entries, roots, optional, dev)
    root_set = frozenset(roots)

    def walk(grid: Grid) -> Reach:
        """Every environment in one walk: each node carries the bit mask of the environments that
        reach it, and an edge passes on the bits where its marker holds."""
        everywhere = grid.everything
        marker_mask: dict[str, int] = {}

        def mask(marker: str | None) -> int:
            if not marker:
                return everywhere
            got = marker_mask.get(marker)
            if got is None:
                try:
                    got = grid.marker_mask(marker, lock.markers) & everywhere
                except InvalidMarker:
                    got = everywhere  # followed everywhere; the marker is a finding (``broken-marker``)
                marker_mask[marker] = got
            return got

        tag_masks: dict[str, int] = {}

        def where(tag: str) -> int:
            got = tag_masks.get(tag)
            if got is None:
                got = tag_masks[tag] = grid.tag_mask(tag) & everywhere
            return got

        fork_mask = {k: _any(mask(m) for m in ms) for k, ms in fork_markers.items()}
        reach: dict[tuple[int, frozenset[str]], int] = {}
        edge_masks: dict[int, dict[str, list[tuple[int, int]]]] = {}
        work: list[tuple[tuple[int, frozenset[str]], int]] = []
        for k in roots:
            reach[(k, frozenset())] = everywhere
            work.append(((k, frozenset()), everywhere))
        while work:
            (key, extras), delta = work.pop()
            lists: list[tuple[list[tuple[tuple[int, ...], str | None, frozenset[str]]], int]] = [(plain[key], delta)]
            lists += [(optional[key].get(x, []), delta) for x in extras]
            if key in root_set:
                project = entries[key].name
                lists += [(v, delta & where(pseudo(project, x, "extra"))) for x, v in optional[key].items()]
                lists += [(v, delta & where(pseudo(project, g, "group"))) for g, v in dev[key].items()]
            for edge_list, bits in lists:
                if not bits:
                    continue
                for targets, marker, dep_extras in edge_list:
                    m = bits & mask(marker)
                    if not m:
                        continue
                    if len(targets) > 1:
                        parts, assigned = [], 0
                        for t in targets:
                            mt = m & fork_mask.get(t, everywhere)
                            assigned |= mt
                            parts.append((t, mt))
                        left = m & ~assigned
                        pushes = [(t, mt | left) for t, mt in parts]
                    else:
                        pushes = [(t, m) for t in targets]
                    for t, mt in pushes:
                        if not mt:
                            continue
                        slots = edge_masks.setdefault(key, {}).setdefault(entries[t].name, [])
                        for i, (tk, old) in enumerate(slots):
                            if tk == t:
                                slots[i] = (t, old | mt)
                                break
                        else:
                            slots.append((t, mt))
                        node = (t, dep_extras)
                        new = mt & ~reach.get(node, 0)
                        if new:
                            reach[node] = reach.get(node, 0) | new
                            work.append((node, new))
        by_key: dict[int, int] = {}
        for (k, _), bits in reach.items():
            by_key[k] = by_key.get(k, 0) | bits
        return Reach(entries, by_key, root_set, edge_masks)

    def reaches(item: Item) -> set[str]:
        """Every name the item's own edges lead to, along every edge whatever its marker."""
        start: list[tuple[tuple[int, ...], str | None, frozenset[str]]] = []
        for k in roots:
            project = entries[k].name
            for x, v in optional[k].items():
                if pseudo(project, x, "extra") in item.extras:
                    start += v
            for g, v in dev[k].items():
                if pseudo(project, g, "group") in item.extras:
                    start += v
            if item.kind == "project" and pseudo(project, "", "project") in item.extras:
                start += plain[k]
        seen: set[tuple[int, frozenset[str]]] = set()
        todo = [(t, x) for targets, _, x in start for t in targets]
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            k, extras = node
            nxt = list(plain[k]) + [e for x in extras for e in optional[k].get(x, [])]
            todo += [(t, x) for targets, _, x in nxt for t in targets]
        return {entries[k].name for k, _ in seen}

    lock.walker = walk
    lock.reaches = reaches
    return lock


def _any(masks: Any) -> int:
    bits = 0
    for m in masks:
        bits |= m
    return bits


def _choices(lock: ParsedLock, data: dict[str, Any], entries: list[Entry], roots: list[int],
             optional: list[dict[str, Any]], dev: list[dict[str, Any]]) -> None:
    """uv's ``conflicts`` as items of conflict sets; every other extra/group of a member is on.

    An item is an extra, a group, or a package's own dependencies (``{ package = "x" }``, uv's
    ``project-N-x`` pseudo-extra, on whenever that package is installed). The locker's default
    switches on the projects and their default groups (``[tool.uv] default-groups`` of the
    pyproject.toml beside the lock, else uv's default, ``dev``)."""
    conflicting: set[str] = set()
    root_names = [str(entries[k].name) for k in roots]
    defaults = _default_groups(lock.path)
    sets: list[list[Item]] = []
    for group in data.get("conflicts", []) or []:
        if not isinstance(group, list):
            continue
        items = []
        for raw in group:
            if not isinstance(raw, dict):
                continue
            project = str(canonical(str(raw.get("package") or (root_names[0] if root_names else ""))))
            kind = "extra" if "extra" in raw else "group" if "group" in raw else "project"
            name = str(canonical(str(raw[kind]))) if kind != "project" else project
            tag = pseudo(project, name if kind != "project" else "", kind)
            conflicting.add(tag)
            if kind == "project":
                words = f"project {project}"
            else:
                words = f"{kind} {name}" if len(set(root_names)) <= 1 else f"{kind} {project}[{name}]"
            default = kind == "project" or (kind == "group" and (defaults is True or name in (defaults or ())))
            items.append(Item(tag, words, frozenset({tag}), frozenset({name} if kind == "group" else ()),
                              name=name, kind=kind, default=default))
        if items:
            sets.append(items)
    always: set[str] = set()
    for k in roots:
        project = str(entries[k].name)
        always |= {t for x in optional[k] if (t := pseudo(project, x, "extra")) not in conflicting}
        always |= {t for g in dev[k] if (t := pseudo(project, g, "group")) not in conflicting}
        if (t := pseudo(project, "", "project")) not in conflicting:
            always.add(t)
    lock.conflicts = sets
    lock.always_extras = frozenset(always)
    # what an extra/group of a workspace member switches on through its edges' extras (a root extra
    # ``cu128 = ["cosmos-oss[cu128-torch27]"]``): the environments follow it, as uv does
    implies: dict[str, set[str]] = {}
    for k in roots:
        project = str(entries[k].name)
        for kind, table in (("extra", optional[k]), ("group", dev[k])):
            for name, edges in table.items():
                for targets, _, extras in edges:
                    for t in targets:
                        for x in extras:
                            implies.setdefault(pseudo(project, name, kind), set()).add(
                                pseudo(str(entries[t].name), x, "extra"))
    lock.extra["implies"] = {tag: frozenset(v) for tag, v in implies.items()}


def _default_groups(path: Path) -> bool | tuple[str, ...]:
    """``[tool.uv] default-groups`` of the project beside the lock (True: "all"); uv's ``dev`` without one."""
    project = path.parent / "pyproject.toml"
    try:
        data = toml_loads(project.read_text(encoding="utf-8")) if project.is_file() else {}
    except (OSError, UnicodeDecodeError, LockParseError):
        data = {}
    tool: dict[str, Any] = data["tool"] if isinstance(data.get("tool"), dict) else {}
    uv: dict[str, Any] = tool["uv"] if isinstance(tool.get("uv"), dict) else {}
    got = uv.get("default-groups")
    if got == "all":
        return True
    if isinstance(got, list):
        return tuple(str(canonical(str(g))) for g in got)
    return ("dev",)
