"""Reviewed exceptions: a team accepts one finding, with a reason, in a file it commits.

Read from the first of, for a lockfile at ``DIR/uv.lock``:

- ``--accept FILE`` (a TOML file with ``[[accept]]`` tables);
- ``DIR/envbuild-check-lock.toml`` (the same shape), beside the lock;
- ``[[tool.envbuild.check-lock.accept]]`` in ``DIR/pyproject.toml``.

Each exception::

    [[tool.envbuild.check-lock.accept]]
    rule = "extension-abi"              # one of envbuild.gate.findings.RULES
    package = "flash-attn"              # the finding's package ("*" for any)
    environment = "linux x86_64*"       # optional: shell-style pattern over environment names
    reason = "built from source in the image; the wheel is only for the dev container"

An accepted finding does not fail the gate; it is still counted and shown, with its reason.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from envbuild.errors import ConfigError
from envbuild.gate.findings import RULES, Finding
from envbuild.gate.project import Project

__all__ = ["Exception_", "apply", "load_for"]

BESIDE = "envbuild-check-lock.toml"


@dataclass(frozen=True)
class Exception_:
    rule: str
    package: str
    environment: str | None
    reason: str
    source: str

    def matches(self, finding: Finding, environment: str | None) -> bool:
        if self.rule != finding.rule:
            return False
        if self.package != "*" and canonicalize_name(self.package) != canonicalize_name(
            finding.package
        ):
            return False
        if self.environment is None:
            return True
        return environment is not None and fnmatch.fnmatchcase(environment, self.environment)


def _read_toml(path: Path) -> dict[str, Any]:
    from envbuild.gate.formats._common import toml_loads
    from envbuild.gate.model import LockParseError

    try:
        if path.stat().st_size > 1 << 20:
            raise ConfigError(
                f"{path}: {path.stat().st_size} bytes; an exceptions file is at most 1 MiB"
            )
        text = path.read_text(encoding="utf-8")
        return toml_loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from exc
    except LockParseError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _parse(items: Any, source: str, where: str) -> list[Exception_]:
    if not isinstance(items, list):
        raise ConfigError(f"{source}: `{where}` must be an array of tables ([[{where}]])")
    out = []
    for i, item in enumerate(items):
        key = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{source}: {key} is not a table")
        unknown = set(item) - {"rule", "package", "environment", "reason"}
        if unknown:
            raise ConfigError(
                f"{source}: {key} has unknown key(s) {', '.join(sorted(unknown))}; "
                "allowed: rule, package, environment, reason"
            )
        rule = item.get("rule")
        if rule not in RULES:
            close = difflib.get_close_matches(str(rule), list(RULES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{source}: {key}.rule is {rule!r}{hint}; one of: {', '.join(RULES)}")
        for field in ("package", "reason"):
            if not isinstance(item.get(field), str) or not item[field].strip():
                raise ConfigError(f"{source}: {key}.{field} is required (a non-empty string)")
        env = item.get("environment")
        if env is not None and (not isinstance(env, str) or not env.strip()):
            raise ConfigError(
                f"{source}: {key}.environment must be a non-empty string (a pattern such as "
                "'linux x86_64*')"
            )
        out.append(
            Exception_(
                rule, item["package"].strip(), env, item["reason"].strip(), f"{source} {key}"
            )
        )
    return out


def load_for(
    lockfile: Path, explicit: Path | None = None, project: Project | None = None
) -> list[Exception_]:
    """The exceptions that apply to ``lockfile`` (see the module's docstring for where from).
    ``project``: the project beside the lock, as the caller read it (its pyproject is read once)."""
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"--accept {explicit}: no such file")
        data = _read_toml(explicit)
        return _parse(data.get("accept", []), str(explicit), "accept")
    folder = lockfile.resolve().parent
    beside = folder / BESIDE
    if beside.is_file():
        return _parse(_read_toml(beside).get("accept", []), str(beside), "accept")
    if project is None or project.folder.resolve() != folder:
        project = Project(folder)
    settings = project.table("tool", "envbuild", "check-lock")
    if "accept" in settings:
        where = str(folder / "pyproject.toml")
        return _parse(settings["accept"], where, "tool.envbuild.check-lock.accept")
    return []


def apply(findings: list[Finding], exceptions: list[Exception_]) -> list[Finding]:
    """The findings, those an exception accepts marked (split by environment where only some
    match)."""
    if not exceptions:
        return findings
    out: list[Finding] = []
    for f in findings:
        if not f.environments:
            hit = next(
                (x for x in exceptions if x.matches(f, None) and x.environment is None), None
            )
            out.append(replace(f, accepted=hit.reason) if hit else f)
            continue
        groups: dict[str | None, list[str]] = {}
        for env in f.environments:
            hit = next((x for x in exceptions if x.matches(f, env)), None)
            groups.setdefault(hit.reason if hit else None, []).append(env)
        for reason, envs in groups.items():
            out.append(replace(f, environments=envs, accepted=reason))
    return out
