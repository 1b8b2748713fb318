"""Prebuilt CUDA extensions against the torch they are installed with.

An extension wheel binds to the C++ symbols of one torch minor, the runtime of one CUDA major and
one C++ ABI; paired with another torch it fails at import with ``undefined symbol``
(Dao-AILab/flash-attention#709, #836, #919, #931, #1717, #1832). The claim is read by
``envbuild.abitag`` (the one parser, shared with the wheelhouse that writes such labels) from the
entry's local version, else from its artifact file names; a conda package's (pixi.lock) from its
build string (the xformers channel's ``py312_cu12.1.0_pyt2.3.0``). The torch it is checked against
is the one the lock's own edge names (uv.lock), else the environment's one torch; a torch whose
version names no CUDA build (PyPI's ``2.8.0``) is a build of the CUDA major its locked
``nvidia-*-cuXX`` runtime names.

A prebuilt extension wheel whose tag this reader does not know is said in a notice (its ABI was
not compared), never left to ``--explain`` alone: a green gate must not look like a checked pair.
"""

from __future__ import annotations

from collections.abc import Iterable

from packaging.utils import canonicalize_name

from envbuild.abitag import (
    AbiClaim,
    mismatches,
    parse_claim,
    parse_conda_build,
    runtime_cuda,
    torch_build,
    unverifiable_reason,
)
from envbuild.gate.context import Context, View
from envbuild.gate.model import KNOWN_EXTENSIONS, Entry, ParsedLock

__all__ = ["KNOWN_EXTENSIONS", "check", "claim_of", "torch_runtime", "unread_tag"]

# a notice names this many wheels, then counts the rest (--explain and JSON list each)
NOTICE_NAMES = 5


def claim_of(entry: Entry) -> AbiClaim | None:
    if entry.version and "+" in entry.version:
        claim = parse_claim(entry.version)
        if claim is not None:
            return claim
    for url, _ in entry.files:
        if url.split("?", 1)[0].endswith(".whl"):
            claim = parse_claim(url)
            if claim is not None:
                return claim
    if entry.url:
        return parse_claim(entry.url)
    return None


def _file_name(url: str) -> str:
    return url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1].lower()


def _is_wheel(url: str) -> bool:
    return _file_name(url).endswith(".whl")


def _wheels(entry: Entry) -> list[str]:
    return [_file_name(u) for u in (entry.url, *(f for f, _ in entry.files)) if u and _is_wheel(u)]


def _prebuilt(entry: Entry, fmt: str) -> bool:
    """A built wheel rather than a source build: a direct wheel URL, a wheel by path (uv.lock:
    no registry, a wheel file), or a local version from an index. A git or directory source
    carries a local version too (``2.15.0+42b8400``), but it is built against the torch beside it.
    """
    if entry.url:
        return _is_wheel(entry.url)
    wheels = _wheels(entry)
    if entry.version and "+" in entry.version:
        if entry.files:  # the artifacts are recorded: a wheel among them
            return bool(wheels)
        # a requirements pin comes from an index
        return entry.index is not None or fmt == "requirements"
    return fmt == "uv.lock" and entry.index is None and bool(wheels)


def _pure_python(entry: Entry) -> bool:
    """Every wheel recorded is ``none-any``: no compiled code bound to torch's ABI (flash-attn-4's
    CuTe JIT)."""
    wheels = _wheels(entry)
    return bool(wheels) and all(w[:-4].split("-")[-2:] == ["none", "any"] for w in wheels)


def unread_tag(entry: Entry, fmt: str) -> bool:
    """A prebuilt extension wheel (a compiled wheel of a known extension project, or any wheel whose
    local version names torch) whose ABI tag ``envbuild.abitag`` does not read: nothing was
    compared, and going online would not change that."""
    if not _prebuilt(entry, fmt):
        return False
    local = entry.version.split("+", 1)[1].lower() if entry.version and "+" in entry.version else ""
    if "torch" not in local and (entry.name not in KNOWN_EXTENSIONS or _pure_python(entry)):
        return False
    return claim_of(entry) is None


def _runtime_like(name: str) -> bool:
    return name.startswith("nvidia-") or name == "cuda-toolkit"


def torch_runtime(view: View, torch: Entry, lock: ParsedLock) -> tuple[int, str] | None:
    """The CUDA major of the NVIDIA runtime installed with ``torch`` in ``view`` (and the package
    that says so): along torch's own edges where the lock records them (uv.lock, poetry.lock;
    pip-compile's ``# via torch``), else from whatever runtime the environment installs."""
    if torch.dependencies is None and torch.via is None:  # no graph: the environment's runtime
        return runtime_cuda(_versions(e for e in view.members.entries if _runtime_like(e.name)))
    linked: list[Entry] = []
    for name in torch.dependencies or ():
        if not _runtime_like(name):
            continue
        target = view.members.target_of(torch, name, lock.entries)
        if target is None and view.members.edge_masks is None:  # names only: the one installed here
            target = next(iter(view.by_name.get(name, ())), None)
        if target is not None:
            linked.append(target)
    for entries in view.by_name.values():
        linked += [
            e
            for e in entries
            if e.via
            and _runtime_like(e.name)
            and any(canonicalize_name(v) == torch.name for v in e.via)
        ]
    return runtime_cuda(_versions(linked))


def _versions(entries: Iterable[Entry]) -> Iterable[tuple[str, str | None]]:
    return ((e.name, e.version) for e in entries)


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def check(ctx: Context) -> None:
    protected = ctx.policy.protected
    torch_name = ctx.policy.torch
    claims: dict[int, AbiClaim | None] = {}
    unread: dict[int, str] = {}  # entry key -> label
    runtimes: dict[tuple[int, int], tuple[int, str] | None] = {}
    from envbuild.gate.formats.pixi import conda_packages

    conda = conda_packages(ctx.lock)  # conda packages: ``rules.conda`` reads their depends
    for v, view in enumerate(ctx.views):
        platform = "linux" if view.env.system == "linux" else view.env.system or "linux"
        for entry in view.members.entries:
            if entry.name in protected or entry.key in view.members.roots:
                continue
            if entry.key not in claims:
                if entry.key in conda:  # its build string, where it names a torch; else its depends
                    claims[entry.key] = parse_conda_build(conda[entry.key].build)
                else:
                    claims[entry.key] = claim_of(entry)
                    if claims[entry.key] is None and unread_tag(entry, ctx.lock.format):
                        unread[entry.key] = entry.label()
            claim = claims[entry.key]
            if claim is None and entry.key in conda:
                continue
            if (
                claim is None
                and entry.key not in unread
                and entry.name not in KNOWN_EXTENSIONS
                and not entry.url
            ):
                continue
            if ctx.no_file(entry, view):
                continue
            torch = view.torch_for(entry, ctx.lock, torch_name)
            if torch is None or torch.version is None:
                if claim is not None:
                    ctx.explained(
                        f"{entry.label()}: claims {claim.text}, but there is no single torch to "
                        "compare it with",
                        view.env,
                    )
                elif entry.key in unread:
                    ctx.explained(
                        f"{entry.label()}: no ABI tag envbuild reads in its version or file name, "
                        "and no single torch to compare it with",
                        view.env,
                    )
                continue
            runtime = None
            if claim is not None and claim.cuda is not None:
                if (v, torch.key) not in runtimes:
                    runtimes[(v, torch.key)] = torch_runtime(view, torch, ctx.lock)
                runtime = runtimes[(v, torch.key)]
            build = torch_build(torch.version, runtime)
            if claim is not None:
                for m in mismatches(claim, build, platform):
                    ctx.add(
                        entry.name,
                        "extension-abi",
                        f"{entry.label()} is {m.message}: it will fail to import (undefined"
                        f" symbol); use the wheel built for torch {torch.version} or build it from"
                        " source against it",
                        view.env,
                        entry,
                    )
            why = unverifiable_reason(claim, build, platform)
            if why:
                ctx.explained(f"{entry.label()} with torch {torch.version}: {why}", view.env)
    if unread:
        # one per release: its platform wheels are entries of their own
        labels = list(dict.fromkeys(unread.values()))
        n = len(labels)
        shown = ", ".join(labels[:NOTICE_NAMES]) + (
            f" and {n - NOTICE_NAMES} more" if n > NOTICE_NAMES else ""
        )
        ctx.note(
            f"{n} extension {_plural(n, 'wheel carries', 'wheels carry')} no ABI tag envbuild"
            f" reads, so {_plural(n, 'its', 'their')} torch, CUDA and C++ ABI were not compared"
            f" with the locked torch: {shown}"
        )
