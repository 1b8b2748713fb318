"""Issue 23: every input is checked before anything is made, and nothing a spec holds runs as a
command.

Each case of the issue, through the real CLI (``envbuild.cli.main`` in this process, or
``python -m envbuild`` where the process itself is at stake): a spec that would have written a
command into a rendered file, a number that is not one, a path that is not a file. The verdict is
exit 2 naming the key path or the argument, given before anything is made or the host is looked at.
The property tests through the real parsers are in ``test_render_roundtrip.py``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from envbuild._io import parse_toml
from envbuild.cli import main
from envbuild.errors import ConfigError, ExitCode
from envbuild.spec import load_spec, parse_spec

GOOD = """\
schema = 1
name = "t"
python = "3.11"
[layout]
root = "/mnt/data"
[abi]
package = "torch"
version = "2.13.0+cpu"
local = "cpu"
[[step]]
name = "torch"
packages = ["torch==2.13.0+cpu"]
[[step]]
name = "rest"
packages = ["tqdm==4.70.1"]
no_deps = true
"""


def spec_with(
    tmp_path: Path, *, top: str = "", env: str = "", step: str = "", name: str = "stack.toml"
) -> Path:
    """GOOD with lines added: ``top`` before the tables, ``env`` as an [env] table, ``step`` in the
    last step."""
    text = GOOD.replace("[layout]", top + "\n[layout]", 1) if top else GOOD
    if env:
        text = text.replace("[[step]]", "[env]\n" + env + "\n[[step]]", 1)
    text += step
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def run(args: list[str | Path], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out = capsys.readouterr()
    text = out.out + out.err
    assert "Traceback" not in text, text
    return rc, out.err


# ----------------------------------------------------------------------------- the cases


def test_an_env_name_with_a_newline_is_refused_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newline in an [env] name ends the overlay's line (`touch /tmp/x=v` on a line of its own,
    run by every activate) and adds a RUN to the Dockerfile: refused at load, not found by the
    import check after provision has built the venv."""
    sentinel = tmp_path / "sentinel"
    stack = spec_with(tmp_path, env=f'"A=1\\ntouch {sentinel}" = "v"')
    rc, err = run(
        [
            "docker",
            "--stack",
            stack,
            "--no-lock",
            "-o",
            tmp_path / "out" / "Dockerfile",
            "--context",
            tmp_path / "out",
        ],
        capsys,
    )
    assert (
        rc == ExitCode.CONFIG
        and "env.A=1\\u000atouch" in err
        and "not an environment variable name" in err
    )
    assert not (tmp_path / "out").exists()
    rc, err = run(
        [
            "provision",
            "--stack",
            stack,
            "--root",
            tmp_path / "data",
            "--home",
            tmp_path / "home",
            "--python",
            sys.executable,
        ],
        capsys,
    )
    assert rc == ExitCode.CONFIG and "env.A=1" in err
    assert (
        not (tmp_path / "data").exists()
        and not (tmp_path / "home").exists()
        and not sentinel.exists()
    )


def test_an_env_value_with_a_newline_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newline in an [env] value (`NL = "a\\nRUN touch ..."`) would render `RUN touch ...` as an
    instruction of its own in the Dockerfile."""
    stack = spec_with(tmp_path, env=f'NL = "a\\nRUN touch {tmp_path / "x"}"')
    rc, err = run(
        [
            "docker",
            "--stack",
            stack,
            "--no-lock",
            "-o",
            tmp_path / "out" / "Dockerfile",
            "--context",
            tmp_path / "out",
        ],
        capsys,
    )
    assert rc == ExitCode.CONFIG, err
    assert "env.NL: holds a line break (U+000A LINE FEED) at position 2" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["smoke"],
        ["dist-step"],
        ["verify"],
        ["provision", "--import-timeout"],
        ["provision", "--step-timeout"],
        ["preflight", "--index-timeout"],
        ["dist-step", "--stall-timeout"],
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e300", "ten"])
def test_a_duration_that_is_not_one_is_a_usage_error_before_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], value: str
) -> None:
    """`nan` and `inf` pass a `<= 0` test, so a duration must be a finite number in range; and the
    command line is judged before the host (a missing root is exit 3 only for a valid one)."""
    option = command[1] if len(command) > 1 else "--timeout"
    argv = [command[0], "--profile", "cpu", "--root", str(tmp_path / "missing"), option, value]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert f"argument {option}:" in err and "Traceback" not in err
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["dist-step", "--nproc", "0"], "argument --nproc: 0 is out of range"),
        (["dist-step", "--nproc", "100000"], "argument --nproc"),
        (["dist-step", "--steps", "1"], "argument --steps"),
        (["dist-step", "--tp", "-2"], "argument --tp"),
        (["dist-step", "--bw-mb", "nan"], "argument --bw-mb"),
        (["dist-step", "--nnodes", "2"], "--nnodes 2 needs --rdzv-endpoint"),
        (["dist-step", "--nproc", "3", "--tp", "2"], "tp 2 does not divide the world size 3"),
        (["smoke", "--only", "nosuch"], "argument --only"),
    ],
)
def test_every_argument_check_comes_before_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    """The root does not exist (exit 3 once the host is looked at): a bad argument is exit 2
    first."""
    args = [*argv, "--profile", "cpu", "--root", str(tmp_path / "missing")]
    try:
        rc = main(args)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == ExitCode.CONFIG and needle in err, err


def test_mirror_counts_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--jobs", "0"], ["--jobs", "1e9"], ["--deadline", "-1"]):
        with pytest.raises(SystemExit) as info:
            main(["wheelhouse", "mirror", "--out", str(tmp_path / "w"), *argv])
        assert info.value.code == ExitCode.CONFIG
    assert "argument --jobs" in capsys.readouterr().err and not (tmp_path / "w").exists()


def _limited() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_a_spec_is_read_only_from_a_regular_file(tmp_path: Path) -> None:
    """`--stack /dev/zero` would be read until the process is killed for memory, a FIFO would wait
    for a writer forever: a spec is read only from a regular file of bounded size."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    cases = {
        "/dev/zero": "this is a character device",
        str(fifo): "this is a FIFO",
        str(tmp_path): "this is a folder",
        str(big): (
            "the stack spec is 2.0 MiB (2097155 bytes); envbuild reads at most 1.0 MiB (1048576"
            " bytes)"
        ),
    }
    for path, needle in cases.items():
        out = subprocess.run(
            [sys.executable, "-m", "envbuild", "plan", "--stack", path],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limited,
        )
        assert out.returncode == ExitCode.CONFIG, (path, out.stderr[-2000:])
        assert needle in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_fifo_is_not_waited_on_by_the_loader(tmp_path: Path) -> None:
    fifo = tmp_path / "stack.toml"
    os.mkfifo(fifo)
    result: list[BaseException] = []
    t = threading.Thread(
        target=lambda: result.append(pytest.raises(ConfigError, load_spec, fifo, {}).value),
        daemon=True,
    )  # a loader that waits for a writer must not hold the test run
    t.start()
    t.join(10)
    assert not t.is_alive() and "must be a regular file" in str(result[0])


# ----------------------------------------------------------------------------- every string of a
# spec


FIELDS = {  # key path -> how to put VALUE there (a TOML basic string)
    "name": lambda v: GOOD.replace('name = "t"', f"name = {v}"),
    "description": lambda v: GOOD.replace('name = "t"', f'name = "t"\ndescription = {v}'),
    "layout.root": lambda v: GOOD.replace('root = "/mnt/data"', f"root = {v}"),
    "layout.venv": lambda v: GOOD.replace('root = "/mnt/data"', f'root = "/mnt/data"\nvenv = {v}'),
    "layout.links.data": lambda v: GOOD.replace(
        'root = "/mnt/data"', f'root = "/mnt/data"\nlinks = {{ data = {v} }}'
    ),
    "abi.version": lambda v: GOOD.replace('version = "2.13.0+cpu"', f"version = {v}"),
    "abi.cuda": lambda v: GOOD.replace('local = "cpu"', f'local = "cpu"\ncuda = {v}'),
    "abi.protect[1]": lambda v: GOOD.replace('local = "cpu"', f'local = "cpu"\nprotect = [{v}]'),
    "host.gpu_name": lambda v: GOOD.replace("[abi]", f"[host]\ngpu_name = {v}\n[abi]"),
    "env.X": lambda v: GOOD.replace("[[step]]", f"[env]\nX = {v}\n[[step]]", 1),
    "step[2].name": lambda v: GOOD.replace('name = "rest"', f"name = {v}"),
    "step[2].packages[1]": lambda v: GOOD.replace(
        'packages = ["tqdm==4.70.1"]', f"packages = [{v}]"
    ),
    "step[2].index_url": lambda v: GOOD + f"index_url = {v}\n",
    "step[2].extra_index_urls[1]": lambda v: GOOD + f"extra_index_urls = [{v}]\n",
    "step[2].find_links[1]": lambda v: GOOD + f"find_links = [{v}]\n",
    "step[2].env.X": lambda v: GOOD + f"env = {{ X = {v} }}\n",
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize(
    "char", ["\\n", "\\r", "\\u001b", "\\u007f", "\\u0085", "\\u2028", "\\u202e", "\\u0000"]
)
def test_a_control_character_is_refused_in_every_string(
    tmp_path: Path, field: str, char: str
) -> None:
    """Every string, not only the fields with a grammar (python, step names, requirements): a
    control character anywhere can end a line of a file that is rendered from the spec."""
    value = f'"ok{char}ok"'
    path = tmp_path / "stack.toml"
    path.write_text(FIELDS[field](value), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_spec(path, {})
    message = str(info.value)
    assert f"{path}: {field}" in message, message
    assert all(ord(c) >= 0x20 or c == "\n" for c in message), message  # shown escaped, never raw


def test_tab_is_kept(tmp_path: Path) -> None:
    spec = load_spec(spec_with(tmp_path, env='X = "a\\tb"'), {})
    assert spec.env["X"] == "a\tb"


def test_a_control_character_from_the_environment_is_refused(tmp_path: Path) -> None:
    stack = spec_with(tmp_path, env='X = "${FROM_ENV}"')
    # a line break; an undecodable byte (os.environ's surrogateescape)
    for value in ("a\nb", "a\udcffb"):
        with pytest.raises(
            ConfigError,
            match=r"env\.X: holds .* \(after expanding \$\{\.\.\.\} from the environment\)",
        ):
            load_spec(stack, {"FROM_ENV": value})


@pytest.mark.parametrize("name", ["1A", "A-B", "A B", "A.B", "", "A=1", "Ä"])
def test_env_names_are_variable_names(tmp_path: Path, name: str) -> None:
    for env, where in ((f'"{name}" = "v"', "env."), ("", "step[2].env.")):
        stack = spec_with(tmp_path, env=env, step="" if env else f'env = {{ "{name}" = "v" }}\n')
        with pytest.raises(ConfigError, match="not an environment variable name") as info:
            load_spec(stack, {})
        assert where in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("index_url", "ftp://mirror/simple", "the URL scheme 'ftp' is not allowed"),
        ("index_url", "javascript:alert(1)", "the URL scheme 'javascript' is not allowed"),
        ("index_url", "git+ssh://host/repo", "'git+ssh' is not allowed"),
        ("index_url", "http:///simple", "names no host"),
        ("index_url", "https://host:99999/simple", "not a valid URL"),
        ("index_url", "https://host/a b", "cannot hold whitespace"),
        ("index_url", "--trusted-host=evil", "would read as an installer option"),
        ("find_links", "-f/tmp", "would read as an installer option"),
        ("extra_index_urls", "ssh://host/x", "'ssh' is not allowed"),
    ],
)
def test_index_and_find_links_locations(tmp_path: Path, key: str, value: str, needle: str) -> None:
    line = f'{key} = "{value}"\n' if key == "index_url" else f'{key} = ["{value}"]\n'
    with pytest.raises(ConfigError) as info:
        load_spec(spec_with(tmp_path, step=line), {})
    assert f"step[2].{key}" in str(info.value) and needle in str(info.value)


def test_good_locations_load(tmp_path: Path) -> None:
    spec = load_spec(
        spec_with(
            tmp_path,
            step=(
                'index_url = "https://download.pytorch.org/whl/cpu"\n'
                'extra_index_urls = ["http://127.0.0.1:8080/simple", "file:///srv/simple"]\n'
                'find_links = ["/mnt/data/wheelhouse", "wheels", "${W-}"]\n'
            ),
        ),
        {},
    )
    step = spec.steps[1]
    assert step.extra_index_urls == ("http://127.0.0.1:8080/simple", "file:///srv/simple")
    assert step.find_links == ("/mnt/data/wheelhouse", "wheels")


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        # before: docker wrote <out>/../../etc.steps/
        ('name = "../../etc"', "name: must be letters, digits"),
        ('name = "a b"', "name: must be letters"),
        ('name = "-x"', "name: must be letters"),
    ],
)
def test_the_stack_name_names_files(tmp_path: Path, line: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_spec(parse_toml(GOOD.replace('name = "t"', line)), tmp_path / "s.toml", {})


@pytest.mark.parametrize("venv", ["/etc", "../outside", "a/../../b", ".", "v env", "venv/"])
def test_the_venv_stays_under_the_data_root(tmp_path: Path, venv: str) -> None:
    """`venv = "/etc"` would make /etc the venv, and delete it on a re-provision."""
    with pytest.raises(ConfigError, match="layout.venv: must be a folder under the data root"):
        load_spec(
            _write(
                tmp_path, GOOD.replace('root = "/mnt/data"', f'root = "/mnt/data"\nvenv = "{venv}"')
            ),
            {},
        )


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "key"),
    [
        # before: spliced into a RUN of the Dockerfile
        ('cuda = "13.2\\"; touch /tmp/pwned; \\""', "abi.cuda"),
        ('cuda = "13"', "abi.cuda"),
        ('triton_provider = "torch; rm -rf /"', "abi.triton_provider"),
        ('triton_provider = "a b"', "abi.triton_provider"),
        ('protect = ["nvidia-*", "$(id)"]', "abi.protect[2]"),
    ],
)
def test_abi_strings_have_a_grammar(tmp_path: Path, line: str, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_spec(_write(tmp_path, GOOD.replace('local = "cpu"', f'local = "cpu"\n{line}')), {})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--root", "/opt/a b"),
        ("--root", "relative"),
        ("--root", "/opt/x\nRUN id"),
        ("--root", "/opt/$HOME"),
    ],
)
def test_docker_image_paths_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    rc, err = run(
        [
            "docker",
            "--profile",
            "cpu",
            "--no-lock",
            option,
            value,
            "-o",
            tmp_path / "out" / "Dockerfile",
            "--context",
            tmp_path / "out",
        ],
        capsys,
    )
    assert rc == ExitCode.CONFIG and option in err, err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- secrets


def test_a_literal_secret_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stack = spec_with(
        tmp_path,
        env=(
            'HF_TOKEN = "hf_abc"\nTOKENIZERS_PARALLELISM = "false"\nWANDB_API_KEY = ""\n'
            'OK_TOKEN = { from_env = "OK_TOKEN" }'
        ),
        step=(
            'env = { DB_PASSWORD = "x" }\nextra_index_urls = ["https://bob:hunter2@h/simple", '
            '"https://bob:${PW-}@h/simple"]\n'
        ),
    )
    rc, err = run(["plan", "--stack", stack, "--no-lock", "--backend", "pip"], capsys)
    assert rc == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3, err
    assert "env.HF_TOKEN: HF_TOKEN looks like a secret" in warnings[0]
    assert 'HF_TOKEN = { from_env = "HF_TOKEN" }' in warnings[0]
    assert "step[2].extra_index_urls[1]: the URL holds a password" in err
    assert "step[2].env.DB_PASSWORD" in err
    assert "hf_abc" not in err and "hunter2" not in err
    assert "TOKENIZERS" not in err and "WANDB" not in err and "OK_TOKEN" not in err


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ('{ from_env = "OTHER" }', "env.HF_TOKEN.from_env: must be 'HF_TOKEN'"),
        ("{ from_env = 1 }", "env.HF_TOKEN.from_env: must be 'HF_TOKEN'"),
        (
            '{ from_env = "HF_TOKEN", required = "no" }',
            "env.HF_TOKEN.required: must be true or false",
        ),
        ('{ from_env = "HF_TOKEN", default = "x" }', "env.HF_TOKEN.default: unknown key"),
        ("1", "env.HF_TOKEN: must be a string or"),
    ],
)
def test_from_env_is_checked(tmp_path: Path, value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        load_spec(spec_with(tmp_path, env=f"HF_TOKEN = {value}"), {})


def test_from_env_is_not_in_the_overlay_and_is_required_by_provision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from envbuild.layout import Paths, overlay_env, overlay_text

    stack = spec_with(
        tmp_path,
        env='HF_TOKEN = { from_env = "HF_TOKEN" }',
        step=(
            'env = { PRIVATE_TOKEN = { from_env = "PRIVATE_TOKEN" }, '
            'OPTIONAL_TOKEN = { from_env = "OPTIONAL_TOKEN", required = false } }\n'
        ),
    )
    monkeypatch.setenv("HF_TOKEN", "hf-planted")
    spec = load_spec(stack)
    assert "HF_TOKEN" not in overlay_env(spec, Paths(root=tmp_path))
    assert "hf-planted" not in overlay_text(spec, Paths(root=tmp_path))
    assert [k for k, _ in spec.env_refs()] == [
        "env.HF_TOKEN",
        "step[2].env.PRIVATE_TOKEN",
        "step[2].env.OPTIONAL_TOKEN",
    ]
    monkeypatch.delenv("PRIVATE_TOKEN", raising=False)
    rc, err = run(
        [
            "provision",
            "--stack",
            stack,
            "--root",
            tmp_path / "data",
            "--home",
            tmp_path / "home",
            "--python",
            sys.executable,
        ],
        capsys,
    )
    assert rc == ExitCode.CONFIG, err
    assert "step[2].env.PRIVATE_TOKEN take their value from the environment (from_env)" in err
    assert "--secret id=PRIVATE_TOKEN,env=PRIVATE_TOKEN" in err
    assert not (tmp_path / "data").exists()
    # only the steps that run need theirs
    rc, err = run(
        ["provision", "--stack", stack, "--step", "nosuch", "--root", tmp_path / "data"], capsys
    )
    assert rc == ExitCode.CONFIG and "no step named 'nosuch'" in err
