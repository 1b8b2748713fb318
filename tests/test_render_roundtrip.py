"""Issue 23: every value a spec or the command line puts into a rendered file, read back by the real
consumer.

Hypothesis writes arbitrary strings (unicode, quotes, ``$(...)``, backticks, backslashes, ``\\r``,
line breaks, ``{{ ... }}``) into every field that reaches a rendered file: ``[env]`` names and
values, the venv folder, the image's data root, the command line a file's header repeats, the
Ansible variables. For each, either the spec (or argument) is refused with exit 2 naming the key
path, or the file, read by what reads it in earnest, gives back exactly the value and nothing else:

- the Dockerfile with ``dockerfile-parse``: the same instructions as for a plain spec, the same
  ``ENV`` values; the provision ``RUN`` lines run by ``bash`` (``envbuild`` a function that prints
  its arguments) give the same argv and touch nothing;
- the overlay with ``env -i bash -c 'set -e; . overlay; env -0'`` in an empty folder: the same
  variables, nothing else set, nothing written;
- the Modal file with ``ast.parse`` and ``ast.literal_eval`` of every constant;
- the Ansible variables with ``yaml.safe_load`` (``!unsafe`` read as the text it marks).

Plus, where the tools are here: a batch of the same values through buildah (a ``FROM scratch``
image's ``ENV``, no network), and Ansible itself not templating an ``!unsafe`` value.

Bounded for ``make test`` (``ENVBUILD_PROPERTY_EXAMPLES``, default 60 per test); ``make fuzz`` runs
more.
"""

from __future__ import annotations

import ast
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from envbuild.errors import ConfigError, ExitCode
from envbuild.images.ansible import ansible_vars, render_vars
from envbuild.images.docker import IMAGE_SPEC, DockerOptions, render
from envbuild.images.modal import ModalOptions, render_modal
from envbuild.layout import UNSET_IN_BASELINE, Paths, overlay_env, overlay_text
from envbuild.quoting import docker_env, shown
from envbuild.spec import StackSpec, load_spec
from envbuild.spec._toml import _VAR as VAR

dockerfile_parse = pytest.importorskip(
    "dockerfile_parse", reason="dockerfile-parse is a test extra"
)

EXAMPLES = int(os.environ.get("ENVBUILD_PROPERTY_EXAMPLES", "60"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NASTY = [
    "$(touch SENTINEL/sub)",
    "`touch SENTINEL/tick`",
    "'; touch SENTINEL/q; '",
    '"',
    "'",
    "\\",
    "\\\n",
    "\r",
    "\n",
    "\n#",
    "\nRUN touch /x",
    "${HOME}",
    "$HOME",
    "${X:-d}",
    "\\$",
    "$",
    "{{ lookup('pipe', 'id') }}",
    "{% raw %}",
    "#",
    " ",
    "\t",
    "é",
    "😀",
    "\u2028",
    "\u0085",
    "\u202e",
    "\x7f",
    "\x00",
    "<<EOF",
    "=",
    ",",
    "a=b c=d",
    "\\'",
    "--mount=type=bind",
    "!unsafe",
    "- x",
    ": x",
    "*",
    "&a",
    "?",
    "[",
    "{",
    "%",
    "@",
    "~",
]
text = st.lists(st.sampled_from(NASTY) | st.text(max_size=8), max_size=5).map("".join)
env_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True) | text
# names the renderers write themselves (a spec may override them; that is not what is tested here)
OWN = {
    "VIRTUAL_ENV",
    "PATH",
    "PIP_CONSTRAINT",
    "UV_CONSTRAINT",
    "DEBIAN_FRONTEND",
    "PYTHONDONTWRITEBYTECODE",
    "ENVBUILD_PROOF_BYTECODE",
    "PIP_DISABLE_PIP_VERSION_CHECK",
    "UV_LINK_MODE",
    *UNSET_IN_BASELINE,
}

BASE = """\
schema = 1
name = "t"
python = "3.11"
[layout]
root = "/mnt/data"
venv = {venv}
[abi]
package = "torch"
version = "2.13.0+cpu"
local = "cpu"
{env}
[[step]]
name = "torch"
packages = ["torch==2.13.0+cpu"]
[[step]]
name = "rest"
packages = ["tqdm==4.70.1"]
no_deps = true
"""


def toml_str(value: str) -> str:
    """A TOML basic string holding ``value`` (control characters escaped as TOML requires)."""
    out = []
    for ch in value:
        if ch in '"\\' or ord(ch) < 0x20 or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def write_spec(folder: Path, env: dict[str, str], venv: str = "venv") -> Path:
    table = (
        "[env]\n" + "".join(f"{toml_str(k)} = {toml_str(v)}\n" for k, v in env.items())
        if env
        else ""
    )
    path = folder / "stack.toml"
    path.write_text(BASE.format(venv=toml_str(venv), env=table), encoding="utf-8")
    return path


def load_or_refusal(path: Path, env: dict[str, str], venv: str) -> StackSpec | None:
    """The spec, or None after checking the refusal is exit 2 naming the key path of a bad value."""
    try:
        spec = load_spec(path, os.environ)
    except ConfigError as exc:
        event("spec refused")
        message = str(exc)
        assert exc.exit_code == ExitCode.CONFIG
        keys = [f"env.{shown(k)}" for k in env] + ["layout.venv"]
        assert any(f"{path}: {k}" in message for k in keys), message
        assert all(c == "\n" or ord(c) >= 0x20 for c in message), message
        return None
    event("spec loaded")
    return spec


@pytest.fixture(scope="module")
def box() -> Any:
    folder = Path(tempfile.mkdtemp(prefix="envbuild-roundtrip-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def fresh(box: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=box))


def parse_dockerfile(text: str, folder: Path) -> Any:
    parser = dockerfile_parse.DockerfileParser(fileobj=io.BytesIO())
    parser.content = text
    return parser


def instructions(parser: Any) -> list[str]:
    return [i["instruction"] for i in parser.structure]


def run_words(value: str) -> str:
    """A RUN's shell command, without its leading --mount=... flags."""
    words = value.split(" ")
    while words and words[0].startswith("--"):
        words.pop(0)
    return " ".join(words)


def run_in_bash(command: str, cwd: Path) -> list[str]:
    """Run a RUN line's command in bash with `envbuild` a function that prints its argv."""
    script = 'envbuild() { printf "%s\\0" "$@"; }\n' + command
    out = subprocess.run(
        ["/bin/bash", "-o", "pipefail", "-c", script],
        capture_output=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


# ----------------------------------------------------------------------------- Dockerfile


@PROPERTY
@given(
    env=st.dictionaries(env_names, text, max_size=4),
    venv=st.sampled_from(["venv", "envs/train"]) | text,
    root=st.sampled_from(["/opt/envbuild", "/opt/e+v@1.0"]) | text,
)
def test_dockerfile_env_and_run_lines_read_back_exactly(
    box: Path, env: dict[str, str], venv: str, root: str
) -> None:
    assume(not set(env) & OWN)
    folder = fresh(box)
    spec = load_or_refusal(write_spec(folder, env, venv), env, venv)
    if spec is None:
        return
    try:
        rendered = render(spec, DockerOptions(lock=False, steps_dir="steps", root=root))
    except ConfigError as exc:  # the image's data root: refused with the option's name
        assert "--root" in str(exc) and exc.exit_code == ExitCode.CONFIG
        return
    # the same spec with plain values: only its ${VAR} references kept (each one is an ARG)
    refs = {
        k: "v" + "".join(m.group(0) for m in VAR.finditer(v))
        for k, v in env.items()
        if k in spec.env
    }
    plain = render(
        load_spec(write_spec(fresh(box), refs), os.environ),
        DockerOptions(lock=False, steps_dir="steps"),
    )
    parsed = parse_dockerfile(rendered.dockerfile, folder)
    assert instructions(parsed) == instructions(parse_dockerfile(plain.dockerfile, fresh(box)))
    envs = parsed.envs
    venv_path = f"{root}/{spec.layout.venv}"
    expected = overlay_env(spec, Paths(root=Path(root), venv_name=spec.layout.venv))
    expected.pop("PIP_CACHE_DIR")
    expected.pop("UV_CACHE_DIR")
    for key, value in expected.items():
        assert envs[key] == value, (key, value, envs.get(key))
    assert envs["VIRTUAL_ENV"] == venv_path
    assert set(envs) == set(expected) | OWN - set(UNSET_IN_BASELINE)
    # the provision RUN lines, as bash runs them
    sentinel = fresh(box)
    runs = [
        i["value"]
        for i in parsed.structure
        if i["instruction"] == "RUN" and "envbuild provision" in i["value"]
    ]
    assert len(runs) == len(spec.steps)
    for step, value in zip(spec.steps, runs, strict=True):
        argv = run_in_bash(run_words(value), sentinel)
        assert argv == [
            "provision",
            "--stack",
            IMAGE_SPEC,
            "--root",
            root,
            "--home",
            "/root",
            "--step",
            step.name,
        ]
    assert list(sentinel.iterdir()) == []


def test_docker_env_values_through_buildah(tmp_path: Path) -> None:
    """The same escaping read by a real image builder: buildah (from_scratch, ENV only, no
    network)."""
    if shutil.which("buildah") is None or os.geteuid() != 0:
        pytest.skip("buildah (as root) is not here; dockerfile-parse above reads the same files")
    values = [
        v
        for v in NASTY
        if "\n" not in v
        and "\r" not in v
        and "\x00" not in v
        and "\x7f" not in v
        and "\u2028" not in v
        and "\u0085" not in v
        and "\u202e" not in v
    ]
    values += [
        "",
        "a b",
        "end\\",
        "\\\\",
        "'\\''",
        "$(id)",
        'it\'s "quoted" $HOME `x` \\$ \\\\n',
        "🙂 ünï",
    ]
    lines = [
        "FROM scratch",
        "ENV " + " \\\n    ".join(docker_env(f"V{i}", v, "test") for i, v in enumerate(values)),
    ]
    (tmp_path / "Dockerfile").write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = [
        "--root",
        str(tmp_path / "store"),
        "--runroot",
        str(tmp_path / "run"),
        "--storage-driver",
        "vfs",
    ]
    out = subprocess.run(
        ["buildah", *store, "bud", "--layers=false", "-q", "-t", "envbuild-escape-test", "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0 and "permission" in out.stderr.lower():
        pytest.skip(f"buildah cannot build here: {out.stderr[-300:]}")
    assert out.returncode == 0, out.stderr
    info = subprocess.run(
        ["buildah", *store, "inspect", "--type", "image", "envbuild-escape-test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got = dict(e.split("=", 1) for e in json.loads(info.stdout)["OCIv1"]["config"]["Env"])
    assert {k: got.get(k) for k in (f"V{i}" for i in range(len(values)))} == {
        f"V{i}": v for i, v in enumerate(values)
    }
    subprocess.run(["buildah", *store, "rmi", "-a", "-f"], capture_output=True, timeout=120)


# ----------------------------------------------------------------------------- the env overlay


def sourced(file: Path, cwd: Path) -> dict[str, str]:
    """The environment after ``. file`` in a bash started with none (``set -e``: any error
    fails)."""
    out = subprocess.run(
        [
            "/usr/bin/env",
            "-i",
            "/bin/bash",
            "--noprofile",
            "--norc",
            "-c",
            'set -e; . "$0"; exec /usr/bin/env -0',
            str(file),
        ],
        capture_output=True,
        cwd=cwd,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    return dict(
        item.split("=", 1)
        for item in out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    )


@PROPERTY
@given(
    env=st.dictionaries(env_names, text, max_size=4),
    root=st.sampled_from(["/mnt/data"])
    | text.filter(lambda t: t.strip() != "" and "\x00" not in t),
)
def test_overlay_sourced_by_bash_sets_exactly_the_variables(
    box: Path, env: dict[str, str], root: str
) -> None:
    assume(not set(env) & OWN)
    folder = fresh(box)
    spec = load_or_refusal(write_spec(folder, env), env, "venv")
    if spec is None:
        return
    paths = Paths(root=Path("/") / root, venv_name=spec.layout.venv)
    overlay = folder / "overlay.sh"
    overlay.write_text(overlay_text(spec, paths), encoding="utf-8", errors="surrogateescape")
    sentinel = fresh(box)
    empty = folder / "empty.sh"
    empty.write_text("")
    got = sourced(overlay, sentinel)
    expected = sourced(empty, sentinel)  # what bash itself sets (PWD, SHLVL)
    expected.update(overlay_env(spec, paths))
    expected["PIP_CONSTRAINT"] = str(paths.constraints)
    for name in UNSET_IN_BASELINE:
        expected.pop(name, None)
    assert got == expected
    assert list(sentinel.iterdir()) == []


# ----------------------------------------------------------------------------- Modal


def constants(source: str) -> tuple[str | None, dict[str, Any], list[str]]:
    """The module docstring, every top-level constant (evaluated as a literal), every top-level
    name."""
    tree = ast.parse(source)
    values: dict[str, Any] = {}
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            assert isinstance(target, ast.Name)
            names.append(target.id)
            if target.id not in ("HERE", "CONTEXT"):
                assert node.value is not None  # an annotation alone assigns nothing
                values[target.id] = ast.literal_eval(node.value)
        elif isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Expr)):
            names.append(getattr(node, "name", type(node).__name__))
        else:
            names.append(type(node).__name__)
    return ast.get_docstring(tree, clean=False), values, names


@PROPERTY
@given(env=st.dictionaries(env_names, text, max_size=4), command=text, root=text)
def test_modal_file_literals_read_back_exactly(
    box: Path, env: dict[str, str], command: str, root: str
) -> None:
    assume(not set(env) & OWN)
    folder = fresh(box)
    spec = load_or_refusal(write_spec(folder, env), env, "venv")
    if spec is None:
        return
    docker = DockerOptions(lock=False, steps_dir="steps", command=command, root="/opt/" + root)
    try:
        rendered = render_modal(
            spec, ModalOptions(docker=docker, context=".", dockerfile="x.Dockerfile")
        )
    except ConfigError as exc:
        assert exc.exit_code == ExitCode.CONFIG and (
            "--root" in str(exc) or "command line" in str(exc)
        ), str(exc)
        return
    doc, values, names = constants(rendered.source)
    plain = render_modal(
        load_spec(write_spec(fresh(box), {}), os.environ),
        ModalOptions(
            docker=DockerOptions(lock=False, steps_dir="steps"),
            context=".",
            dockerfile="x.Dockerfile",
        ),
    )
    assert names == constants(plain.source)[2]  # nothing added, nothing lost
    assert doc is not None and f"`{command}`" in doc
    root_path = "/opt/" + root
    paths = Paths(root=Path(root_path), venv_name="venv")
    expected = overlay_env(spec, paths)
    expected.pop("PIP_CACHE_DIR")
    expected.pop("UV_CACHE_DIR")
    assert {k: v for k, v in values["ENV"].items() if k not in ("VIRTUAL_ENV", "PATH")} == expected
    assert values["ENV"]["VIRTUAL_ENV"] == f"{root_path}/venv"
    assert shlex.split(values["PROVISION"]) == [
        "envbuild",
        "provision",
        "--stack",
        IMAGE_SPEC,
        "--root",
        root_path,
        "--home",
        "/root",
    ]
    assert values["STACK"] == spec.name and values["SECRETS"] == {}


# ----------------------------------------------------------------------------- Ansible


class AnsibleLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, plus Ansible's ``!unsafe`` tag (a string Ansible never
    templates)."""


AnsibleLoader.add_constructor(  # !unsafe tags a scalar
    "!unsafe", lambda loader, node: loader.construct_scalar(cast(yaml.ScalarNode, node))
)


@PROPERTY
@given(profile=text, root=text, command=text)
def test_ansible_vars_read_back_exactly(box: Path, profile: str, root: str, command: str) -> None:
    spec = load_spec(write_spec(fresh(box), {}), os.environ)
    try:
        text_ = render_vars(spec, profile=profile, root=root, command=command)
    except ConfigError as exc:
        assert exc.exit_code == ExitCode.CONFIG and "command line" in str(exc)
        return
    loaded = yaml.load(text_, Loader=AnsibleLoader)  # noqa: S506 - SafeLoader plus !unsafe
    assert loaded == ansible_vars(spec, profile=profile, root=root)
    plain = yaml.safe_load(text_.replace("!unsafe ", ""))  # the tag is all that marks it
    assert plain == ansible_vars(spec, profile=profile, root=root)


def test_ansible_does_not_template_an_unsafe_value(tmp_path: Path) -> None:
    """Ansible itself: a root of `{{ lookup('pipe', 'touch ...') }}` stays text, and runs
    nothing."""
    playbook_bin = Path(sys.executable).parent / "ansible-playbook"
    if not playbook_bin.exists():
        pytest.skip("ansible-core is a test extra")
    sentinel = tmp_path / "sentinel"
    root = "{{ lookup('pipe', 'touch " + str(sentinel) + "') }}"
    spec = load_spec(write_spec(tmp_path, {}), os.environ)
    (tmp_path / "vars.yml").write_text(
        render_vars(spec, profile="cpu", root=root, command="envbuild ansible-vars")
    )
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        '    - ansible.builtin.copy:\n        content: "{{ envbuild_root }}"\n        dest: '
        + str(tmp_path / "out")
        + "\n"
    )
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "t"),
        "ANSIBLE_HOME": str(tmp_path / "h"),
    }
    out = subprocess.run(
        [
            str(playbook_bin),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"@{tmp_path / 'vars.yml'}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            str(tmp_path / "play.yml"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert (tmp_path / "out").read_text() == root
    assert not sentinel.exists()


def test_the_playbook_parses() -> None:
    playbook_bin = Path(sys.executable).parent / "ansible-playbook"
    if not playbook_bin.exists():
        pytest.skip("ansible-core is a test extra")
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [
            str(playbook_bin),
            "--syntax-check",
            "-i",
            "localhost,",
            str(repo / "ansible" / "provision.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
