"""How the gate's verdict reaches people: a console table per environment, a markdown PR comment,
JSON with a stable schema, and GitHub Actions annotations on the lock line that is wrong.

JSON (``--json``), schema 1::

    {"schema": 1, "ok": bool,
     "policy": {"package", "torch_min", "torch_local", "protect": [...]},
     "rules": {rule: what it means},
     "files": [{"file", "format", "ok",
                "torch": str | null (the one torch of every environment, else null), "torches": [str],
                "environments": [{"name", "torch": str | null, "findings": int}],
                "findings": [Finding], "accepted": [Finding],
                "notices": [str], "unverified": [str], "unchecked": [str], "seconds": float}]}
    Finding = {"file", "line": int | null, "package", "rule", "reason", "environments": [str],
               "accepted": str | null (the reviewed exception's reason)}

Fields are only ever added within a schema number.
"""

from __future__ import annotations

from typing import Any

from envbuild.gate.check import FileReport
from envbuild.gate.findings import RULES, Finding, Policy

__all__ = ["SCHEMA", "github_annotations", "document", "markdown", "table"]

SCHEMA = 1


def document(reports: list[FileReport], policy: Policy) -> dict[str, Any]:
    return {"schema": SCHEMA, "ok": all(r.ok for r in reports),
            "policy": {"package": policy.package, "torch_min": policy.minimum, "torch_local": policy.local,
                       "protect": list(policy.protect)},
            "rules": dict(RULES), "files": [r.to_json() for r in reports]}


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
            props = [f"file={_escape_property(r.file)}"]
            if f.line:
                props.append(f"line={f.line}")
            props.append(f"title={_escape_property(f'envbuild check-lock [{f.rule}]')}")
            where = f" (in {f.where()})" if f.environments else ""
            accepted = f" (accepted: {f.accepted})" if f.accepted else ""
            out.append(f"::{kind} {','.join(props)}::{_escape_data(f'{f.package}: {f.reason}{where}{accepted}')}")
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
        lines += [f"#### `{r.file}` ({r.format})", "", "| environment | torch | result |", "|---|---|---|"]
        for row in r.environments:
            lines.append(f"| {_md(row.name)} | {_md(row.torch or '-')} | "
                         f"{'ok' if not row.findings else str(row.findings) + ' finding(s)'} |")
        if not r.environments:
            lines.append("| - | - | " + ("not readable" if r.findings else "no environment") + " |")
        lines.append("")
        for f in r.failing:
            loc = f"`{r.file}:{f.line}`" if f.line else f"`{r.file}`"
            where = f" — *{_md(f.where())}*" if f.environments else ""
            lines.append(f"- **{f.rule}** {loc}: {_md(f.package)}: {_md(f.reason)}{where}")
        for f in r.accepted:
            lines.append(f"- ~~{f.rule}~~ {_md(f.package)}: accepted: {_md(f.accepted or '')} ({_md(f.reason)})")
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
        return (["environment", "torch", "result"],
                [[r.name, r.torch or "-", "ok" if not r.findings else f"{r.findings} finding(s)"] for r in rows], None)
    groups: dict[str, list[Any]] = {}
    for r in rows:
        groups.setdefault(r.torch or "-", []).append(r)
    out = []
    for torch, members in sorted(groups.items()):
        failing = [r for r in members if r.findings]
        out.append([f"{len(members)} environments (e.g. {members[0].name})", torch,
                    "ok" if not failing else f"findings in {len(failing)}"])
    return (["environments", "torch", "result"], out,
            f"{len(rows)} environments, grouped by torch; --json lists each, --environment/--python/--group narrow them")


def table(report: FileReport) -> Any:
    """The rich table of one file's environments."""
    from rich.table import Table

    columns, rows, note = table_rows(report)
    t = Table(title=f"{report.file} ({report.format})", title_justify="left", show_edge=False, pad_edge=False,
              caption=note, caption_justify="left")
    for c in columns:
        t.add_column(c)
    for row in rows:
        t.add_row(*row, style=None if row[2] == "ok" else "red")
    return t


def finding_line(f: Finding) -> str:
    text = f.text()
    return text + (f" (accepted: {f.accepted})" if f.accepted else "")
