"""conda packages (pixi.lock) against the conda-forge ``pytorch`` they are installed with.

A conda-forge package built against torch (an extension such as ``flash-attn``, ``xformers``,
``pytorch_scatter``, or any package that does) pins the ``pytorch``/``libtorch`` it was built
for in its ``depends``: a version range (``pytorch >=2.7.1,<2.8.0a0``), and often a build
(``libtorch 2.8.0 cuda129_mkl_*``, ``pytorch * cuda*``). The lock's solver honoured them when it
wrote the lock; a lock edited by hand, merged, or with a package from another channel may not:
such a package beside another pytorch build is a ``conda-torch-build`` finding in the
environments that install both. Conda match specs are read here (``name version build``; ``|``
is or, ``,`` is and; ``*`` globs); a version this does not read is not judged.

A pixi environment may install the same module twice, from conda and from PyPI: conda ``pytorch`` /
``pytorch-gpu`` / ``pytorch-cpu`` / ``libtorch`` beside a PyPI ``torch`` wheel, and the same for
``torchvision``, ``xformers`` and ``triton`` (the pytorch channel's ``torchtriton``). Both own the
module, the one installed last wins and the other's libraries are left beside it: a
``conda-and-pypi`` finding in each environment that installs both, whatever their versions.
"""

from __future__ import annotations

import fnmatch
import re

from envbuild.gate.context import Context
from envbuild.gate.formats.pixi import CONDA_TORCH, CondaPackage, conda_packages

__all__ = ["check", "spec_matches"]

_TORCH_PARTS = (CONDA_TORCH, "libtorch", "pytorch-gpu", "pytorch-cpu")
_CLAUSE = re.compile(r"^(>=|<=|==|!=|~=|>|<|=)?\s*(.+)$")


def _compare(have: object, op: str, bound: object) -> bool | None:
    from packaging.version import Version

    assert isinstance(have, Version) and isinstance(bound, Version)
    if op == ">=":
        return have >= bound
    if op == "<=":
        return have <= bound
    if op == ">":
        return have > bound
    if op == "<":
        return have < bound
    if op in ("==", "~="):
        return have == bound if op == "==" else have >= bound
    if op == "!=":
        return have != bound
    return None


def _clause(version: str, text: str) -> bool | None:
    from packaging.version import InvalidVersion, Version

    m = _CLAUSE.match(text.strip())
    if m is None:
        return None
    op, want = m.group(1) or "", m.group(2)
    if want == "*":
        return True
    if op in ("", "=") or (op == "==" and "*" in want):  # fuzzy: 2.8, 2.8.*, =2.8
        stem = want.rstrip("*").rstrip(".")
        return version == stem or version.startswith(stem + ".")
    try:
        return _compare(Version(version), op, Version(want.rstrip("*").rstrip(".")))
    except InvalidVersion:
        return None


def _version_ok(version: str, spec: str) -> bool | None:
    """Whether ``version`` meets a conda version spec (None: not read)."""
    answers = []
    for alternative in spec.split("|"):
        got = [_clause(version, c) for c in alternative.split(",") if c.strip()]
        if any(g is None for g in got):
            return None
        answers.append(all(got))
    return any(answers)


def spec_matches(spec: str, pkg: CondaPackage) -> bool | None:
    """Whether conda match spec ``spec`` (``pytorch >=2.7,<2.8``; ``libtorch 2.8.0 cuda129_*``)
    accepts ``pkg``; None where it is not read."""
    parts = spec.split()
    if len(parts) >= 2:
        ok = _version_ok(pkg.version, parts[1])
        if ok is not True:
            return ok
    return len(parts) < 3 or fnmatch.fnmatchcase(pkg.build, parts[2])


# module -> the conda packages that install it (the PyPI distribution has the module's name)
TWICE = {
    "torch": (CONDA_TORCH, "pytorch-gpu", "pytorch-cpu", "libtorch"),
    "torchvision": ("torchvision",),
    "xformers": ("xformers",),
    "triton": ("triton", "torchtriton"),
}


def check(ctx: Context) -> None:
    conda = conda_packages(ctx.lock)
    if not conda:
        return
    _twice(ctx, conda)
    for view in ctx.views:
        parts: dict[str, CondaPackage] = {}
        for entry in view.members.entries:
            pkg = conda.get(entry.key)
            if pkg is not None and pkg.name in (CONDA_TORCH, "libtorch"):
                parts[pkg.name] = pkg
        if CONDA_TORCH not in parts:
            continue
        for entry in view.members.entries:
            pkg = conda.get(entry.key)
            if pkg is None or pkg.name in _TORCH_PARTS:
                continue
            for spec in pkg.torch_depends:
                target = parts.get(spec.split(" ", 1)[0])
                if target is None or spec_matches(spec, target) is not False:
                    continue
                ctx.add(
                    entry.name,
                    "conda-torch-build",
                    f"conda {pkg.words()} depends on `{spec}`, but the lock installs "
                    f"{target.words()} "
                    "beside it: it was built for another torch build and will fail to import or "
                    "crash; re-solve the environment (pixi lock) so both agree",
                    view.env,
                    entry,
                )


def _twice(ctx: Context, conda: dict[int, CondaPackage]) -> None:
    """A module installed from conda and from PyPI in one environment."""
    for view in ctx.views:
        for module, conda_names in TWICE.items():
            from_conda = [
                conda[e.key]
                for e in view.members.entries
                if e.key in conda and conda[e.key].name in conda_names
            ]
            wheels = [e for e in view.by_name.get(module, []) if e.key not in conda]
            if not from_conda or not wheels:
                continue
            pypi = wheels[0]
            ctx.add(
                module,
                "conda-and-pypi",
                f"conda {', '.join(p.words() for p in from_conda)} and PyPI {pypi.label()} are both"
                f" installed: both own the `{module}` module, the one installed last wins; keep"
                " one (pixi: drop it from [pypi-dependencies] or [dependencies])",
                view.env,
                pypi,
            )
