"""One owner of wheel tags (``envbuild.index.wheeltags``): the gate and ``provision --lock`` agree
on which files of a package install in an environment, and no second tag generator appears.

Each statement both ways: a wheel that installs (a ``macosx_10_9`` one on macOS, which the gate
passed and ``provision --lock`` would not pick before) and one that does not (an x86_64-only
macOS wheel on arm64, a musllinux wheel on glibc Linux, a manylinux_2_39 wheel on a glibc 2.28
target); a tree with one generator passes the guard, a planted second one fails it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envbuild.gate.model import Entry
from envbuild.index.wheeltags import fits_target, installs_on, platform_tags, tag_rank
from envbuild.projectlock.stages import pick_artifact, target_tag_order

PACKAGE = Path(__file__).resolve().parents[1] / "envbuild"
OWNER = PACKAGE / "index" / "wheeltags.py"
# the names of packaging.tags that generate tags; only the owner may call them
GENERATORS = {
    "sys_tags",
    "cpython_tags",
    "compatible_tags",
    "generic_tags",
    "mac_platforms",
    "platform_tags",
    "android_platforms",
    "ios_platforms",
}

MAC_OLD = "numpy-2.2.0-cp312-cp312-macosx_10_9_x86_64.whl"
MAC_UNIVERSAL = "regex-2024.1.1-cp312-cp312-macosx_10_9_universal2.whl"
MUSL = "orjson-3.10.0-cp312-cp312-musllinux_1_2_x86_64.whl"
GLIBC_39 = "torch-2.11.0-cp312-cp312-manylinux_2_39_x86_64.whl"
WIN = "torch-2.11.0-cp312-cp312-win_amd64.whl"


def generators_in(source: str) -> set[str]:
    """The tag generators a module's source imports from ``packaging.tags`` (or reaches as
    ``packaging.tags.X``), and ``manylinux_2_{...}`` platform strings it builds itself."""
    found: set[str] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "packaging.tags":
            found |= {a.name for a in node.names if a.name in GENERATORS}
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in GENERATORS
            and isinstance(node.value, ast.Name)
            and node.value.id == "tags"
        ):
            found.add(node.attr)
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value
                for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            )
            if text.startswith(("manylinux_2_", "macosx_")) and any(
                isinstance(v, ast.FormattedValue) for v in node.values
            ):
                found.add("a platform-tag f-string")
    return found


def test_no_second_tag_generator() -> None:
    seconds = {
        str(p.relative_to(PACKAGE)): got
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != OWNER and (got := generators_in(p.read_text(encoding="utf-8")))
    }
    assert not seconds, f"tags are generated only in envbuild/index/wheeltags.py: {seconds}"
    assert generators_in(OWNER.read_text(encoding="utf-8")) >= {"cpython_tags", "compatible_tags"}


@pytest.mark.parametrize(
    "planted",
    [
        "from packaging.tags import cpython_tags\n",
        "import packaging.tags as tags\nx = list(tags.sys_tags())\n",
        (
            "def plats(arch: str) -> list[str]:\n"
            "    return [f'manylinux_2_{n}_{arch}' for n in range(28, 4, -1)]\n"
        ),
    ],
)
def test_the_guard_sees_a_planted_generator(planted: str) -> None:
    assert generators_in(planted)
    assert not generators_in("from packaging.tags import Tag\nname = f'{1}-manylinux'\n")


@pytest.mark.parametrize(
    ("wheel", "platform", "installs"),
    [
        (MAC_OLD, "macos x86_64", True),
        (MAC_OLD, "macos arm64", False),  # x86_64 code on an arm64 host: not pip's pick
        (MAC_UNIVERSAL, "macos arm64", True),
        (MUSL, "linux x86_64", False),  # the lockers' Linux is glibc Linux
        (GLIBC_39, "linux x86_64", True),
        (GLIBC_39, "linux aarch64", False),
        (WIN, "windows amd64", True),
        (WIN, "linux x86_64", False),
    ],
)
def test_gate_and_provision_agree(
    wheel: str, platform: str, installs: bool, tmp_path: Path
) -> None:
    assert installs_on(wheel, "3.12", platform) is installs
    assert installs_on(f"https://files.example/x/{wheel}#sha256=00", "3.12", platform) is installs
    order = {t: i for i, t in enumerate(target_tag_order("3.12", platform, glibc=45))}
    entry = Entry(
        key=0, name="pkg", version="1", files=((f"https://files.example/{wheel}", "0" * 64),)
    )
    picked = pick_artifact(entry, tmp_path, order)
    assert (picked is not None) is installs, (wheel, platform)


def test_provision_takes_the_best_tag_and_glibc_limits_linux(tmp_path: Path) -> None:
    old = "torch-2.11.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    entry = Entry(
        key=0,
        name="torch",
        version="2.11.0",
        files=((f"https://f/{old}", "1" * 64), (f"https://f/{GLIBC_39}", "2" * 64)),
    )
    newest = {t: i for i, t in enumerate(target_tag_order("3.12", "linux x86_64", glibc=45))}
    host_28 = {t: i for i, t in enumerate(target_tag_order("3.12", "linux x86_64", glibc=28))}
    best = pick_artifact(entry, tmp_path, newest)
    assert (
        best is not None and best.filename == GLIBC_39
    )  # the newer manylinux ranks first, as pip's
    on_28 = pick_artifact(entry, tmp_path, host_28)
    assert on_28 is not None and on_28.filename == old  # manylinux_2_39 needs glibc 2.39
    assert not installs_on(GLIBC_39, "3.12", "linux x86_64", glibc=28)
    assert fits_target(old, "3.12", "manylinux_2_28_x86_64") and not fits_target(
        GLIBC_39, "3.12", "manylinux_2_28_x86_64"
    )


def test_python_and_sdists() -> None:
    assert installs_on("x-1.0.tar.gz", "3.12", "macos arm64")  # an sdist builds anywhere
    assert not installs_on("x-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "3.12", "linux x86_64")
    assert installs_on("x-1.0-cp39-abi3-manylinux_2_17_x86_64.whl", "3.12", "linux x86_64")
    assert installs_on("x-1.0-py3-none-any.whl", "3.12", "windows amd64")
    pure = tag_rank("x-1.0-py3-none-any.whl", "3.12", "linux x86_64")
    built = tag_rank("x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "3.12", "linux x86_64")
    assert pure is not None and built is not None and built < pure  # pip prefers the built wheel
    with pytest.raises(ValueError):
        platform_tags("3.12", "plan9 mips")


def extension_lists_in(source: str) -> int:
    """How many literal collections name two CUDA-extension projects (a list of them)."""
    found = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple)):
            names = {
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str)
            }
            found += {"flash-attn", "causal-conv1d"} <= names or {"mamba-ssm", "xformers"} <= names
    return found


def test_one_list_of_extension_projects() -> None:
    owner = PACKAGE / "gate" / "model.py"  # KNOWN_EXTENSIONS: the gate's rule and the planner
    seconds = [
        str(p.relative_to(PACKAGE))
        for p in sorted(PACKAGE.rglob("*.py"))
        if p != owner and extension_lists_in(p.read_text(encoding="utf-8"))
    ]
    assert not seconds, f"the extension projects are listed in gate/model.py only: {seconds}"
    assert extension_lists_in(owner.read_text(encoding="utf-8")) == 1
    planted = 'BUILDS = frozenset({"flash-attn", "mamba-ssm", "causal-conv1d", "xformers"})\n'
    assert extension_lists_in(planted) == 1
