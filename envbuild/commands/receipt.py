"""``envbuild receipt show|list|diff``: read receipts and show what drifted (exit 10 when something
did).

``show`` without a file shows the newest receipt of the environment's data root and ``list`` lists
them, newest first; the root is found as the other commands find it (``--root``,
``$ENVBUILD_ROOT``, the active venv; ``envbuild.commands.common``).

``diff`` shows three groups per receipt: what drifted in the environment (packages, torch, Python,
env, hardware), whether the *image* changed (another image digest / id, Modal image id, OS
release, or container vs not: drift) and whether the *run* changed (another task, job, pod,
container, host, boot or scheduler, same image: information). Exit 10 when any receipt drifted (an
image change is drift), 0 otherwise; a run change alone is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.commands import ui
from envbuild.commands.common import (
    Handler,
    JsonArgs,
    RootArgs,
    Subparsers,
    add_root_arg,
    find_environment,
    path_arg,
)
from envbuild.errors import ConfigError, ExitCode
from envbuild.proof.receipt import (
    VERIFIED_LOG,
    Difference,
    diff_receipts,
    failure,
    image_changed,
    load_receipt,
    outcome,
    receipt_files,
    run_changed,
    stopped_short,
    summary,
    verifications,
)

if TYPE_CHECKING:
    from envbuild.commands.documents import (
        DiffGroupsJSON,
        ReceiptDiffDocument,
        ReceiptListDocument,
        ReceiptListEntry,
        ReceiptListError,
    )

GROUPS = ("environment", "image", "run")


@dataclass(frozen=True)
class ReceiptShowArgs(JsonArgs, RootArgs):
    """``receipt show``'s options."""

    file: Path | None


@dataclass(frozen=True)
class ReceiptListArgs(JsonArgs, RootArgs):
    """``receipt list``'s options."""


@dataclass(frozen=True)
class ReceiptDiffArgs(JsonArgs):
    """``receipt diff``'s options."""

    receipts: list[Path]
    against: Path | None


def register(sub: Subparsers) -> None:
    p = sub.add_parser("receipt", help="show a receipt, or diff receipts (exit 10 on drift)")
    rsub = p.add_subparsers(dest="receipt_command", metavar="ACTION")
    rsub.required = True
    show = rsub.add_parser(
        "show", help="show one receipt (a file, the newest in a folder, or the root's newest)"
    )
    show.add_argument(
        "file",
        type=path_arg,
        metavar="FILE|DIR",
        nargs="?",
        help="a receipt, or a folder of them (default: the data root's newest receipt)",
    )
    add_root_arg(show, "data root whose newest receipt to show")
    show.add_argument("--json", action="store_true", help="print the whole receipt as JSON")
    show.set_defaults(func=Handler(run_show, ReceiptShowArgs))
    listing = rsub.add_parser("list", help="the data root's receipts, newest first, one line each")
    add_root_arg(listing, "data root whose receipts to list")
    listing.add_argument("--json", action="store_true", help="print the list as JSON")
    listing.set_defaults(func=Handler(run_list, ReceiptListArgs))
    diff = rsub.add_parser(
        "diff",
        help="what changed between receipts: packages, versions, hashes, env, hardware",
        description=(
            "diff A B, or diff --against REF R1 R2 ... for a fleet. "
            "Exit 10 when any receipt differs, 0 when all match."
        ),
    )
    diff.add_argument("receipts", type=path_arg, nargs="+", metavar="RECEIPT")
    diff.add_argument(
        "--against", type=path_arg, metavar="REF", help="compare every RECEIPT with this one"
    )
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")
    diff.set_defaults(func=Handler(run_diff, ReceiptDiffArgs))


def _root_receipts(args: RootArgs) -> Path:
    return find_environment(args).paths.receipts


def run_show(args: ReceiptShowArgs) -> int:
    if args.file is not None and args.root is not None:
        raise ConfigError("give a receipt file or --root, not both")
    doc = load_receipt(args.file if args.file is not None else _root_receipts(args))
    if args.json:
        ui.print_json(doc)
        return 0
    ui.print_table(
        None, ["", ""], [[k, str(v)] for k, v in summary(doc).items()], max_width=ui.WIDTH, keep=1
    )
    path = Path(doc["_path"])
    confirmed = verifications(path.parent).get(path.name, [])
    if confirmed:
        last = confirmed[-1]
        ui.print_text(
            f"confirmed {len(confirmed)} time(s) since by a {last.get('kind')} that found nothing"
            f" new, last {last.get('created')} ({path.parent / VERIFIED_LOG})"
        )
    payload: Mapping[str, Any] = doc.get("payload") or {}  # its shape is the kind's
    if doc.get("kind") == "smoke":
        rows = [
            [
                c.get("name", ""),
                c.get("verdict", ""),
                f"{c['rel_err']:.2e}" if isinstance(c.get("rel_err"), (int, float)) else "-",
                f"{c.get('seconds', 0):.2f} s",
                c.get("reason") or "",
            ]
            for c in payload.get("checks", [])
        ]
        ui.print_table(
            "smoke",
            ["check", "verdict", "rel err", "time", "note"],
            rows,
            max_width=ui.WIDTH,
            keep=1,
        )
    elif doc.get("kind") == "dist-step":
        t, bw = payload.get("timing", {}), payload.get("allreduce")
        rows = [[k, "pass" if v else "FAIL"] for k, v in payload.get("checks", {}).items()]
        rows.append(["steady step", f"{1e3 * t.get('steady_step_seconds', 0):.1f} ms"])
        rows.append(["bus bandwidth", f"{bw['busbw_gbps']:.1f} GB/s" if bw else "n/a"])
        ui.print_table(
            f"dist-step ({payload.get('launch_regime')})",
            ["", ""],
            rows,
            max_width=ui.WIDTH,
            keep=1,
        )
    ok = payload.get("ok")
    if ok is not None:
        ui.print_text(f"result: {'ok' if ok else 'FAILED'}")
    said = stopped_short(doc)
    if said is not None:
        ui.print_text(f"result: FAILED: {said}")
    return 0


def run_list(args: ReceiptListArgs) -> int:
    folder = _root_receipts(args)
    confirmed = verifications(folder)
    rows: list[ReceiptListEntry | ReceiptListError] = []
    for path in receipt_files(folder):
        try:
            doc = load_receipt(path)
        except ConfigError as exc:
            rows.append({"file": path.name, "error": exc.message})
            continue
        payload: Mapping[str, Any] = doc["payload"]  # its shape is the kind's
        stopped = failure(doc) is not None
        ok = payload.get("ok", not stopped if doc["kind"] == "provision" else None)
        seen = confirmed.get(path.name, [])
        rows.append(
            {
                "file": path.name,
                "kind": doc["kind"],
                "created": doc["created"],
                "host": doc["provenance"].get("hostname"),
                "ok": ok if isinstance(ok, bool) else None,
                "stopped": outcome(doc) if stopped else None,
                "confirmed": len(seen),
                "last_confirmed": seen[-1].get("created") if seen else None,
            }
        )
    if args.json:
        listed: ReceiptListDocument = {
            "schema": "envbuild.receipt.list/1",
            "folder": str(folder),
            "receipts": rows,
        }
        ui.print_json(listed)
        return 0
    if not rows:
        ui.print_text(f"no receipts in {folder}")
        return 0
    ui.print_text(f"{len(rows)} receipt(s) in {folder}, newest first:")
    for row in rows:
        if "error" in row:
            ui.print_text(f"  {row['file']}: unreadable ({row['error'][:60]})")
            continue
        when = str(row["created"] or "-").replace("T", " ").rstrip("Z")
        result = {True: "ok", False: "FAILED", None: "-"}[row["ok"]]
        again = (
            f"  +{row['confirmed']} verified, last {str(row['last_confirmed'])[11:19]}"
            if row["confirmed"]
            else ""
        )
        how = f"  ({row['stopped']})" if row["stopped"] else ""
        ui.print_text(f"  {when}  {str(row['kind']):<9}  {result:<6}  {row['file']}{again}{how}")
    return 0


def run_diff(args: ReceiptDiffArgs) -> int:
    if args.against is None and len(args.receipts) != 2:
        raise ConfigError(
            f"receipt diff takes two receipts (got {len(args.receipts)})",
            hint="Use --against REF R1 R2 ... to compare many receipts with one reference.",
        )
    ref = load_receipt(args.against or args.receipts[0])
    others = args.receipts if args.against is not None else args.receipts[1:]
    results = []
    for path in others:
        doc = load_receipt(path)
        diffs = diff_receipts(ref, doc)
        results.append((doc, diffs))
    drifted = [doc for doc, diffs in results if any(d.drift for d in diffs)]
    if args.json:
        out: ReceiptDiffDocument = {
            "schema": "envbuild.receipt.diff/1",
            "reference": ref["_path"],
            "drift": bool(drifted),
            "image_changed": any(image_changed(diffs) for _, diffs in results),
            "run_changed": any(run_changed(diffs) for _, diffs in results),
            "receipts": [
                {
                    "file": doc["_path"],
                    "host": doc["provenance"].get("hostname"),
                    "drift": any(d.drift for d in diffs),
                    "image_changed": image_changed(diffs),
                    "run_changed": run_changed(diffs),
                    "differences": [d.to_dict() for d in diffs],
                    "groups": _groups(diffs),
                }
                for doc, diffs in results
            ],
        }
        ui.print_json(out)
    else:
        for doc, diffs in results:
            host = doc["provenance"].get("hostname")
            title = f"{ref['_path']} -> {doc['_path']} ({host})"
            if not diffs:
                ui.print_text(f"{title}: identical")
                continue
            ui.print_text(f"{title}: {_verdict(diffs)}")
            for group in GROUPS:
                rows = [
                    [d.section, d.key, _show(d.a), _show(d.b), "" if d.drift else "info"]
                    for d in diffs
                    if _group(d) == group
                ]
                if rows:
                    sides = ["reference", "receipt"] if args.against else ["A", "B"]
                    ui.print_table(
                        _GROUP_TITLES[group],
                        ["section", "what", *sides, ""],
                        rows,
                        max_width=ui.WIDTH,
                        keep=2,
                    )
        if len(results) > 1:
            ui.print_table(
                "fleet",
                ["receipt", "host", "drifted items"],
                [
                    [
                        doc["_path"],
                        str(doc["provenance"].get("hostname")),
                        str(sum(d.drift for d in diffs)),
                    ]
                    for doc, diffs in results
                ],
            )
        ui.print_text(
            f"{len(drifted)} of {len(results)} receipt(s) drifted" if drifted else "no drift"
        )
    return int(ExitCode.DRIFT) if drifted else 0


_GROUP_TITLES = {
    "environment": "environment (packages, torch, python, env, hardware, provenance)",
    "image": "image: what the software came from",
    "run": "run: where it ran (task, job, pod, container, host, boot)",
}


def _group(d: Difference) -> str:
    return d.section if d.section in ("image", "run") else "environment"


def _groups(diffs: list[Difference]) -> DiffGroupsJSON:
    """The differences by group, in ``GROUPS``' order."""
    return {
        "environment": [d.to_dict() for d in diffs if _group(d) == "environment"],
        "image": [d.to_dict() for d in diffs if _group(d) == "image"],
        "run": [d.to_dict() for d in diffs if _group(d) == "run"],
    }


def _verdict(diffs: list[Difference]) -> str:
    env = any(d.drift and _group(d) == "environment" for d in diffs)
    parts = [
        "the image changed" if image_changed(diffs) else None,
        (
            ("the run changed" + ("" if image_changed(diffs) else " (same image)"))
            if run_changed(diffs)
            else None
        ),
        "the environment drifted" if env else None,
    ]
    return "; ".join(p for p in parts if p) or "information only"


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)
