"""The gate's marker reader and evaluator agree with packaging's ``Marker.evaluate`` (Hypothesis:
random markers over the clauses lockers write, random environments), and a set of active extras
behaves as uv's pseudo-extras need (several at once, tested one by one)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.markers import Marker

from envbuild.gate.markers import InvalidMarker, MarkerCache

ATOMS = [
    "sys_platform == 'linux'",
    "sys_platform != 'darwin'",
    "'win32' == sys_platform",
    "platform_machine == 'x86_64'",
    "platform_machine != 'aarch64'",
    "python_full_version >= '3.11'",
    "python_full_version < '3.12.1'",
    "python_version == '3.10'",
    "python_version <= '3.12'",
    "'3.13' > python_version",
    'os_name == "nt"',
    "platform_system == 'Linux'",
    "extra == 'cu128'",
    "extra != 'cpu'",
    "implementation_name == 'cpython'",
    "python_version ~= '3.11'",
    "python_full_version != '3.11.*'",
]
ENVS = st.fixed_dictionaries(
    {
        "sys_platform": st.sampled_from(["linux", "darwin", "win32"]),
        "platform_machine": st.sampled_from(["x86_64", "aarch64", "arm64", "AMD64"]),
        "python_full_version": st.sampled_from(["3.10.0", "3.11.0", "3.11.5", "3.12.1", "3.13.0"]),
        "os_name": st.sampled_from(["posix", "nt"]),
        "platform_system": st.sampled_from(["Linux", "Darwin", "Windows"]),
        "implementation_name": st.just("cpython"),
    }
)


@st.composite
def markers(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 2 or draw(st.booleans()):
        return draw(st.sampled_from(ATOMS))
    left = draw(markers(depth + 1))
    right = draw(markers(depth + 1))
    text = f"{left} {draw(st.sampled_from(['and', 'or']))} {right}"
    return f"({text})" if draw(st.booleans()) else text


@settings(max_examples=400, deadline=None)
@given(text=markers(), env=ENVS, extra=st.sampled_from(["", "cu128", "cpu"]))
def test_agrees_with_packaging(text: str, env: dict[str, str], extra: str) -> None:
    values = {**env, "python_version": ".".join(env["python_full_version"].split(".")[:2])}
    expected = Marker(text).evaluate({**values, "extra": extra})
    cache = MarkerCache()
    got = cache.evaluate(text, values, frozenset({extra} if extra else ()), frozenset(), [])
    assert got == expected, text
    # the bit-mask form agrees too
    assert cache.masks(text, [_Env(values, extra)], []) == int(expected)


class _Env:
    def __init__(self, values: dict[str, str], extra: str) -> None:
        self.values, self.extras = values, frozenset({extra} if extra else ())
        self.groups = frozenset[str]()


def test_several_active_extras_and_broken_markers() -> None:
    cache = MarkerCache()
    both = frozenset({"extra-7-trainer-cu128", "group-7-trainer-dev"})
    text = (
        "extra == 'extra-7-trainer-cu128' and extra != 'extra-7-trainer-cpu' and extra =="
        " 'group-7-trainer-dev'"
    )
    assert cache.evaluate(text, {}, both, frozenset(), [])
    assert not cache.evaluate(text, {}, both | {"extra-7-trainer-cpu"}, frozenset(), [])
    assert cache.evaluate("'dev' in dependency_groups", {}, frozenset(), frozenset({"dev"}), [])
    for bad in (
        "sys_platform == 'linux' and and",
        "sys_platform ==",
        "(sys_platform == 'linux'",
        "nonsense == 'x'",
    ):
        try:
            cache.check(bad)
        except InvalidMarker:
            continue
        raise AssertionError(f"{bad!r} was accepted")
