"""``envbuild wheelhouse {build,mirror,index}``: build CUDA wheels against the installed torch,
mirror every locked artifact, write a PEP 503 index over the folder."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    JsonArgs,
    StackArgs,
    Subparsers,
    add_build_cache_arg,
    count_arg,
    path_arg,
    seconds_arg,
)
from envbuild.commands.selection import WheelhouseMirrorArgs, add_selection_args
from envbuild.errors import ConfigError

if TYPE_CHECKING:
    from envbuild.commands.documents import (
        WheelhouseBuildItem,
        WheelhouseIndexDocument,
        WheelhouseMirrorDocument,
    )

DEFAULT_OUT = Path("wheelhouse")


@dataclass(frozen=True)
class WheelhouseBuildArgs(StackArgs, JsonArgs):
    """``wheelhouse build``'s options."""

    specs: list[str]
    venv: Path | None
    python: Path | None
    out: Path
    cache: Path | None
    sources: list[Path]
    source: list[str]
    no_cache: bool
    keep_work: bool
    build_cache: str | None


@dataclass(frozen=True)
class WheelhouseIndexArgs(JsonArgs):
    """``wheelhouse index``'s options."""

    dir: Path


def register(sub: Subparsers) -> None:
    p = sub.add_parser("wheelhouse", help="build, mirror and index the offline wheelhouse")
    wsub = p.add_subparsers(dest="wheelhouse_command", metavar="ACTION")
    wsub.required = True

    b = wsub.add_parser(
        "build", help="build wheels from wheelhouse_specs/*.toml against the target venv's torch"
    )
    b.add_argument(
        "specs", nargs="+", metavar="SPEC", help="a spec file, or a name under wheelhouse_specs/"
    )
    target = b.add_mutually_exclusive_group()
    target.add_argument(
        "--venv", type=path_arg, metavar="DIR", help="target venv (default: $VIRTUAL_ENV)"
    )
    target.add_argument(
        "--python", type=path_arg, metavar="PATH", help="target interpreter (instead of --venv)"
    )
    b.add_argument(
        "--out",
        type=path_arg,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="wheelhouse folder (default: ./wheelhouse)",
    )
    b.add_argument(
        "--cache",
        type=path_arg,
        metavar="DIR",
        help="build cache (default: ~/.cache/envbuild/wheelhouse)",
    )
    b.add_argument(
        "--sources",
        type=path_arg,
        action="append",
        default=[],
        metavar="DIR",
        help="folder holding sdists by file name (offline hosts); repeatable",
    )
    b.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="NAME=LOCATION",
        help="override a spec's source: folder, sdist path/URL#sha256=HEX, or git+URL@COMMIT",
    )
    b.add_argument(
        "--no-cache", action="store_true", help="rebuild even when the cache has the wheel"
    )
    b.add_argument(
        "--keep-work", action="store_true", help="keep the unpacked, patched source tree"
    )
    add_build_cache_arg(b)
    b.add_argument("--json", action="store_true", help="print JSON on stdout")
    lock = b.add_mutually_exclusive_group()
    lock.add_argument(
        "--profile",
        metavar="NAME",
        help=(
            "refuse to build (or reuse a build) against any torch but the one "
            "this profile's lock pins"
        ),
    )
    lock.add_argument(
        "--stack", metavar="FILE", type=path_arg, help="as --profile, for any stack spec file"
    )
    b.set_defaults(func=Handler(run_build, WheelhouseBuildArgs))

    m = wsub.add_parser(
        "mirror", help="download every artifact of a lock into the wheelhouse (hash-checked)"
    )
    src = m.add_mutually_exclusive_group()
    src.add_argument("--profile", metavar="NAME", help="the lock of lockfiles/NAME/ (default: cpu)")
    src.add_argument(
        "--lock",
        type=path_arg,
        metavar="DIR|FILE",
        help=(
            "a lock folder of hash-pinned *.txt files, or a uv.lock / pylock.toml file (the files"
            " one environment of it installs, chosen as provision --lock chooses it)"
        ),
    )
    src.add_argument(
        "--requirements",
        "-r",
        type=path_arg,
        action="append",
        metavar="FILE",
        help="a hash-pinned requirements file; repeatable",
    )
    m.add_argument(
        "--out",
        type=path_arg,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="wheelhouse folder (default: ./wheelhouse)",
    )
    m.add_argument(
        "--index-url",
        action="append",
        default=[],
        metavar="URL",
        help="also look for the pinned files here (credentials in the URL are never shown)",
    )
    m.add_argument(
        "--python-tag",
        metavar="TAG",
        help=(
            "only wheels for this interpreter, e.g. cp313 "
            "(default: the lock's Python and [target] platform)"
        ),
    )
    m.add_argument(
        "--platform", metavar="GLOB", help="only wheels for this platform, e.g. 'manylinux*_x86_64'"
    )
    m.add_argument(
        "--all-platforms",
        action="store_true",
        help=(
            "every locked file, for every Python and platform (default: what installs on the lock's"
            " target)"
        ),
    )
    m.add_argument(
        "--python",
        metavar="PATH",
        type=path_arg,
        help=(
            "the interpreter that builds the lock's git requirements into wheels (default:"
            " python<lock's Python>)"
        ),
    )
    m.add_argument(
        "--jobs", "-j", type=count_arg(1, 64), default=4, help="parallel downloads (default: 4)"
    )
    m.add_argument(
        "--deadline",
        type=seconds_arg(maximum=86400),
        default=None,
        metavar="SECONDS",
        help=(
            "how long a download may go without progress, retried meanwhile (default: "
            "$ENVBUILD_NET_DEADLINE or 30)"
        ),
    )
    m.add_argument("--json", action="store_true", help="print JSON on stdout")
    g = m.add_argument_group("--lock FILE: the environment of a uv.lock / pylock.toml to mirror")
    add_selection_args(g)
    g.add_argument(
        "--have",
        metavar="FILE",
        type=path_arg,
        help=(
            "--lock FILE: what the target environment already holds (`pip freeze` or `pip list"
            " --format json` of the base image): packages it has at the locked version are not"
            " mirrored, as provision --lock --venv keeps them"
        ),
    )
    m.set_defaults(func=Handler(run_mirror, WheelhouseMirrorArgs))

    i = wsub.add_parser("index", help="write PEP 503 pages over a wheelhouse folder")
    i.add_argument("dir", type=path_arg, metavar="DIR")
    i.add_argument("--json", action="store_true", help="print JSON on stdout")
    i.set_defaults(func=Handler(run_index, WheelhouseIndexArgs))


# ----------------------------------------------------------------------------- build


def _target_python(args: WheelhouseBuildArgs) -> Path:
    if args.python:
        return Path(args.python)
    venv = args.venv or (Path(os.environ["VIRTUAL_ENV"]) if os.environ.get("VIRTUAL_ENV") else None)
    if venv is None:
        raise ConfigError(
            "no target environment: give --venv DIR (the venv with the stack's torch) or --python"
            " PATH"
        )
    python = Path(venv) / "bin" / "python"
    if not python.exists():
        raise ConfigError(f"{venv}: not a venv (no bin/python)")
    return python


def run_build(args: WheelhouseBuildArgs) -> int:
    from envbuild.wheelhouse.build import BuildOptions, build, default_cache
    from envbuild.wheelhouse.sharedcache import open_shared
    from envbuild.wheelhouse.spec import find_spec_file, load_wheel_spec

    specs = [load_wheel_spec(find_spec_file(s)) for s in args.specs]
    overrides: dict[str, str] = {}
    for item in args.source:
        name, sep, loc = item.partition("=")
        if not sep or not name or not loc:
            raise ConfigError(f"--source {item.split('=')[0]}=...: write NAME=LOCATION")
        from packaging.utils import canonicalize_name

        overrides[canonicalize_name(name)] = loc
    python = _target_python(args)
    if args.profile or args.stack:
        _refuse_another_torch(args, python)
    opts = BuildOptions(
        python=python,
        out=args.out.resolve(),
        cache=(args.cache or default_cache()).resolve(),
        sources=tuple(p.resolve() for p in args.sources),
        overrides=overrides,
        use_cache=not args.no_cache,
        keep_work=args.keep_work,
        shared=open_shared(args.build_cache),
    )
    results = []
    # progress (ninja's counter, the last log line) is drawn by ui's live display from the events
    for spec in specs:
        results.append(build(spec, opts))
    if args.json:
        built: list[WheelhouseBuildItem] = [
            {
                "name": r.name,
                "version": r.version,
                "wheel": str(r.wheel),
                "cached": r.cached,
                "seconds": round(r.seconds, 3),
                "cache_key": r.key,
                "log": str(r.log_file) if r.log_file else None,
                "removed_requires": list(r.removed_requires),
                "origin": r.origin.to_json(),
            }
            for r in results
        ]
        ui.print_json(built)  # a list, one object per wheel: no schema key (docs/reference/json.md)
    else:
        ui.print_table(
            None,
            ["package", "wheel", "status", "time"],
            [[r.name, r.wheel.name, r.origin.shown, f"{r.seconds:.1f} s"] for r in results],
        )
    return 0


def _refuse_another_torch(args: WheelhouseBuildArgs, python: Path) -> None:
    """The wheels must be built against the torch the stack's lock pins: a target venv still on the
    torch the lock moved away from would make (or take from the cache) wheels for the old one."""
    from envbuild.errors import WheelhouseError
    from envbuild.spec import resolve_spec
    from envbuild.stacklock.model import read_stack_lock
    from envbuild.wheelhouse.build import probe_target

    spec = resolve_spec(args.profile, args.stack)
    lock = read_stack_lock(spec.path.parent)
    want = (
        lock.abi.version
        if lock is not None and lock.abi is not None and lock.abi.version
        else spec.abi.version
    )
    have = probe_target(python).torch_version
    if have != want:
        raise WheelhouseError(
            f"{python} has torch {have}, but the lock of {spec.name!r} pins torch {want}: wheels"
            " built (or reused from the cache) against it would be for the old torch",
            hint=(
                f"Provision the stack first (envbuild provision --stack {spec.path}), then build"
                " against that venv."
            ),
        )


# ----------------------------------------------------------------------------- mirror / index


def run_mirror(args: WheelhouseMirrorArgs) -> int:
    if not (args.lock is not None and args.lock.is_file()):
        from envbuild.commands.selection import refuse_lock_options

        refuse_lock_options(args, have=args.have)
    if args.lock is not None and args.lock.is_file():
        from envbuild.commands.mirror_lock import mirror_from_lock

        return mirror_from_lock(args, args.lock)
    from envbuild.wheelhouse.stackmirror import StackMirrorRequest, mirror_stack

    done = mirror_stack(
        StackMirrorRequest(
            out=args.out,
            lock_dir=args.lock,
            profile=args.profile,
            requirements=tuple(args.requirements or ()),
            index_urls=tuple(args.index_url),
            python_tag=args.python_tag,
            platform=args.platform,
            all_platforms=args.all_platforms,
            python=Path(args.python) if args.python else None,
            jobs=args.jobs,
            deadline=args.deadline,
        )
    )
    result, target, built = done.result, done.target, done.built
    if args.json:
        doc: WheelhouseMirrorDocument = {
            "schema": "envbuild.wheelhouse.mirror/1",
            "out": str(args.out),
            "downloaded": [p.name for p in result.downloaded],
            "present": [p.name for p in result.present],
            "manifest": str(result.manifest),
            "index": str(done.index),
            "target": {"python": target[0], "platform": target[1]} if target else None,
            "left_out": list(done.left_out),
            "bytes_saved": done.bytes_saved,
            "bytes_unknown": done.bytes_unknown,
            "bytes_mirrored": done.bytes_mirrored,
            "built": [
                {
                    "name": b.name,
                    "step": b.step,
                    "wheel": b.wheel.name,
                    "sha256": b.sha256,
                    "source": b.source,
                    "commit": b.commit,
                    "reused": b.reused,
                }
                for b in built
            ],
        }
        ui.print_json(doc)
    else:
        ui.print_text(
            f"{len(result.downloaded)} downloaded, {len(result.present)} already present "
            f"({done.bytes_mirrored / 1e6:.1f} MB); index: {done.index}"
        )
        if target:
            ui.print_text(
                f"for Python {target[0]} on {target[1]}: {len(done.left_out)} files for other"
                f" targets left out, {done.bytes_saved / 1e6:.1f} MB saved"
                + (f" (+{done.bytes_unknown} of unknown size)" if done.bytes_unknown else "")
                + "; --all-platforms mirrors them"
            )
        for b in built:
            if not b.reused:
                ui.print_text(
                    f"built {b.wheel.name} from {b.source} (sha256 {b.sha256[:16]}...); lock.json"
                    " records it: commit the lock"
                )
    return 0


def run_index(args: WheelhouseIndexArgs) -> int:
    from envbuild.wheelhouse.pages import write_index

    result = write_index(args.dir)
    if args.json:
        doc: WheelhouseIndexDocument = {
            "schema": "envbuild.wheelhouse.index/1",
            "root": str(result.root),
            "projects": result.projects,
        }
        ui.print_json(doc)
    else:
        ui.print_text(
            f"indexed {result.files} files of {len(result.projects)} projects: "
            f"{result.root / 'simple'}/ (PEP 503), {result.root / 'index.html'} (find-links)"
        )
    return 0
