"""How the gate's verdict reaches people: a console table per environment, a markdown PR comment,
JSON with a stable schema, and GitHub Actions annotations on the lock line that is wrong. The same
writers serve envbuild's own locks (``check-lock`` without FILE), one report per stack.

JSON (``--json``), schema 1::

    {"schema": 1, "ok": bool,
     "policy": {"package", "torch_min", "torch_local", "protect": [...]},
     "rules": {rule: what it means},
     "files": [{"file", "format", "ok",
                "torch": str | null (the one torch of every environment, else null), "torches":
                [str], "environments": [{"name", "torch": str | null, "findings": int}],
                "findings": [Finding], "accepted": [Finding],
                "notices": [str], "unverified": [str], "unchecked": [str], "seconds": float}]}
    Finding = {"file", "line": int | null, "package", "rule", "reason", "environments": [str],
               "accepted": str | null (the reviewed exception's reason)}

    envbuild's own locks: "reports" (one per stack: "stack", "folder", then the keys of a
    "files" item, "file" being its lock.json) in place of "files", no "policy" (each stack's
    [abi] is its policy), and "rules" the own-lock rules.

Fields are only ever added within a schema number.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from envbuild.gate.findings import OWN_RULES, RULES, FileReport, FileReportJSON, Finding, Policy

__all__ = [
    "SCHEMA",
    "CheckLockDocument",
    "CheckLockOwnDocument",
    "PolicyJSON",
    "document",
    "finding_line",
    "github_annotations",
    "markdown",
    "notice_line",
    "summary",
    "table",
    "table_rows",
]

SCHEMA: Literal[1] = 1


class PolicyJSON(TypedDict):
    """What the lockfiles were judged against."""

    package: str  # the baseline distribution (torch)
    torch_min: str | None  # --torch-min: the lowest torch version allowed
    torch_local: str | None  # --torch-local: the local version label every torch must carry
    protect: list[str]  # --protect: the protected set


class CheckLockDocument(TypedDict):
    """`check-lock FILE... --json`: lockfiles judged against a policy."""

    schema: Literal[1]  # the schema number: fields are only ever added within it
    ok: bool  # true: no lockfile has a finding that is not accepted
    policy: PolicyJSON  # what they were judged against
    rules: dict[str, str]  # every rule of the gate: what it means
    files: list[FileReportJSON]  # one verdict per lockfile


class CheckLockOwnDocument(TypedDict):
    """`check-lock --json` without FILE: envbuild's own locks, each against its stack (its `[abi]`
    is its policy)."""

    schema: Literal[1]  # the schema number: fields are only ever added within it
    ok: bool  # true: no stack's lock has a finding that is not accepted
    rules: dict[str, str]  # every rule of the own-lock check: what it means
    # one verdict per stack: `stack` and `folder` first, `file` its lock.json
    reports: list[FileReportJSON]


def document(
    reports: list[FileReport], policy: Policy | None = None
) -> CheckLockDocument | CheckLockOwnDocument:
    """The ``--json`` document: lockfiles judged against ``policy``, or (no policy) envbuild's own
    locks, each against its stack."""
    ok = all(r.ok for r in reports)
    if policy is None:
        return {
            "schema": SCHEMA,
            "ok": ok,
            "rules": {rule: what for rule, (_, what) in OWN_RULES.items()},
            "reports": [r.to_json() for r in reports],
        }
    return {
        "schema": SCHEMA,
        "ok": ok,
        "policy": {
            "package": policy.package,
            "torch_min": policy.minimum,
            "torch_local": policy.local,
            "protect": list(policy.protect),
        },
        "rules": dict(RULES),
        "files": [r.to_json() for r in reports],
    }


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(reports: list[FileReport]) -> str:
    """GitHub Actions workflow commands: one ``::error`` per finding, on its lock line; accepted
    findings and notes as ``::notice``."""
    out = []
    for r in reports:
        for f in r.findings:
            kind = "error" if f.accepted is None else "notice"
            props = [f"file={_escape_property(f.file)}"]
            if f.line:
                props.append(f"line={f.line}")
            props.append(f"title={_escape_property(f'envbuild check-lock [{f.rule}]')}")
            where = f" (in {f.where()})" if f.environments else ""
            accepted = f" (accepted: {f.accepted})" if f.accepted else ""
            out.append(
                f"::{kind}"
                f" {','.join(props)}::{_escape_data(f'{f.package}: {f.reason}{where}{accepted}')}"
            )
        for n in r.notices:
            out.append(f"::notice file={_escape_property(r.file)}::{_escape_data(n)}")
    return "\n".join(out) + ("\n" if out else "")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(reports: list[FileReport], *, explain: bool = False) -> str:
    """A pull-request comment: per file a table of environments, then every finding and note."""
    failing = sum(len(r.failing) for r in reports)
    accepted = sum(len(r.accepted) for r in reports)
    head = f"❌ {failing} finding(s)" if failing else "✅ ok"
    if accepted:
        head += f", {accepted} accepted"
    lines = [f"### envbuild check-lock: {head}", ""]
    for r in reports:
        title = f"`{r.stack}` ({r.file})" if r.stack is not None else f"`{r.file}` ({r.format})"
        lines += [f"#### {title}", "", "| environment | torch | result |", "|---|---|---|"]
        for row in r.environments:
            lines.append(f"| {_md(row.name)} | {_md(row.torch or '-')} | {_md(row.result)} |")
        if not r.environments:
            lines.append("| - | - | " + ("not readable" if r.findings else "no environment") + " |")
        lines.append("")
        for f in r.failing:
            loc = f"`{f.file}:{f.line}`" if f.line else f"`{f.file}`"
            where = f" — *{_md(f.where())}*" if f.environments else ""
            lines.append(f"- **{f.rule}** {loc}: {_md(f.package)}: {_md(f.reason)}{where}")
        for f in r.accepted:
            lines.append(
                f"- ~~{f.rule}~~ {_md(f.package)}: accepted: {_md(f.accepted or '')}"
                f" ({_md(f.reason)})"
            )
        lines.append("")
    notes = [f"- `{r.file}`: {_md(n)}" for r in reports for n in r.notices]
    if explain:
        notes += [f"- `{r.file}`: not verified: {_md(u)}" for r in reports for u in r.unverified]
    if notes:
        lines += ["<details><summary>notes</summary>", "", *notes, "", "</details>"]
    return "\n".join(lines).rstrip() + "\n"


TABLE_ROWS = 40  # above this, the console table groups environments by torch


def table_rows(report: FileReport) -> tuple[list[str], list[list[str]], str | None]:
    """(columns, rows, a footnote) of one file's console table: a row per environment, or, for a
    lock of many environments (three conflict sets make hundreds), a row per torch."""
    rows = report.environments
    if len(rows) <= TABLE_ROWS:
        return (
            ["environment", "torch", "result"],
            [[r.name, r.torch or "-", r.result] for r in rows],
            None,
        )
    groups: dict[str, list[Any]] = {}
    for r in rows:
        groups.setdefault(r.torch or "-", []).append(r)
    out = []
    for torch, members in sorted(groups.items()):
        failing = [r for r in members if r.findings]
        out.append(
            [
                f"{len(members)} environments (e.g. {members[0].name})",
                torch,
                "ok" if not failing else f"findings in {len(failing)}",
            ]
        )
    return (
        ["environments", "torch", "result"],
        out,
        (
            f"{len(rows)} environments, grouped by torch; --json lists each,"
            " --environment/--python/--group narrow them"
        ),
    )


def table(report: FileReport) -> Any:
    """The rich table of one file's environments."""
    from rich.table import Table

    columns, rows, note = table_rows(report)
    t = Table(
        title=f"{report.file} ({report.format})",
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        caption=note,
        caption_justify="left",
    )
    for c in columns:
        t.add_column(c)
    for row in rows:
        bad = row[2].endswith("finding(s)")
        t.add_row(*row, style=None if row[2] == "ok" else "red" if bad else "yellow")
    return t


def finding_line(f: Finding) -> str:
    text = f.text()
    return text + (f" (accepted: {f.accepted})" if f.accepted else "")


def notice_line(report: FileReport, text: str) -> str:
    """A note on the console: named by its lockfile (a stack's notes name their step files
    themselves)."""
    return f"note: {text}" if report.stack is not None else f"note: {report.file}: {text}"


def summary(report: FileReport) -> str:
    """The console's last word on one report (an ``ok`` or a ``fail`` line)."""
    accepted = f", {len(report.accepted)} accepted" if report.accepted else ""
    if report.stack is not None:
        if report.ok:
            return f"{report.stack}: lock ok ({report.seconds * 1000:.0f} ms)"
        return f"{report.stack}: {len(report.failing)} finding(s)"
    if report.ok:
        torches = ", ".join(report.torches) or "-"
        return (
            f"{report.file} ({report.format}): torch {torches}, "
            f"{sum(r.count for r in report.environments)} environment(s), ok{accepted}"
        )
    return f"{report.file} ({report.format}): {len(report.failing)} finding(s){accepted}"
