"""``provision --lock FILE``: the lock installed stage by stage, and what it prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envbuild import events
from envbuild.commands import ui
from envbuild.commands.selection import (
    lock_request,
)
from envbuild.errors import Interrupted
from envbuild.projectlock.record import write_record
from envbuild.projectlock.run import (
    provision_lock,
    provision_slice,
)
from envbuild.quoting import sh_word

if TYPE_CHECKING:
    from envbuild.commands.documents import (
        ProvisionLockDocument,
        ProvisionSliceDocument,
        WarmKernelsPart,
    )
    from envbuild.commands.selection import ProvisionArgs


def provision_from_lock(args: ProvisionArgs, lock: Path) -> int:
    """``provision --lock FILE``, with provision's own options for the data root, venv and
    installer."""
    from envbuild.provision.options import ProvisionOptions

    options = ProvisionOptions(
        root=args.root,
        home=args.home,
        python=args.python,
        venv=args.venv,
        backend=args.backend,
        force_links=args.force_links,
        strict=args.strict,
        compile_bytecode=args.compile_bytecode,
        prefetch=args.prefetch,
        step_timeout=args.step_timeout,
        import_timeout=args.import_timeout,
        build_cache=args.build_cache,
    )
    try:
        if lock.suffix == ".json" and _is_slice(lock):  # one layer of `envbuild docker --lock`
            spec, source, result = provision_slice(lock, options)
            write_record(result.paths.venv, result.paths.root, spec, source)
            if args.json:
                layer: ProvisionSliceDocument = {
                    "schema": "envbuild.provision.slice/1",
                    **source,
                    "root": str(result.paths.root),
                    "venv": str(result.paths.venv),
                    "ran": result.ran,
                    "skipped": result.skipped,
                    "seconds": round(result.seconds, 3),
                    "receipt": str(result.receipt) if result.receipt else None,
                }
                ui.print_json(layer)
            else:
                events.emit(
                    "ok",
                    f"{lock}: {len(result.ran)} stages run, {len(result.skipped)} already done "
                    f"({result.seconds:.1f} s)",
                )
            return 0
        req = lock_request(
            args, lock, step=args.step, replace_torch=args.replace_torch, inexact=args.inexact
        )
        prepared, result = provision_lock(req, options)
    except (KeyboardInterrupt, Interrupted) as exc:
        message = exc.message if isinstance(exc, Interrupted) else "interrupted"
        raise Interrupted(
            message, hint="The state is saved: run the same command again to resume."
        ) from exc
    chosen = prepared.chosen
    recorded = write_record(
        result.paths.venv,
        result.paths.root,
        result.plan.spec,
        {**chosen.to_json(), "adopted_torch": prepared.adopted},
    )
    warmed = None
    if args.warm_kernels:  # the checks smoke will run for what the lock installed
        from envbuild.commands.smoke import warm_after_provision
        from envbuild.projectlock.record import read_record, smoke_selection

        lock_record = read_record(result.paths.venv)
        only = smoke_selection(lock_record).only if lock_record is not None else None
        warmed = warm_after_provision(result.plan.spec, result.paths, result.paths.venv, only)
    if args.json:
        warm: WarmKernelsPart = {} if warmed is None else {"warm_kernels": warmed}
        doc: ProvisionLockDocument = {
            "schema": "envbuild.provision.lock/1",
            **prepared.plan.to_json(),
            **warm,
            "root": str(result.paths.root),
            "venv": str(result.paths.venv),
            "ran": result.ran,
            "skipped": result.skipped,
            "adopted_torch": prepared.adopted,
            "warnings": result.warnings,
            "seconds": round(result.seconds, 3),
            "receipt": str(result.receipt) if result.receipt else None,
        }
        ui.print_json(doc)
        return 0
    where = f"{chosen.path} ({chosen.env.name})"
    if result.removed:
        events.emit(
            "ok",
            f"{where}: {result.paths.venv} holds the selection and nothing else: "
            f"removed {', '.join(result.removed)} ({len(result.ran)} stages run)",
        )
    elif result.restored:
        events.emit(
            "ok",
            f"{where}: put back {', '.join(result.restored)}, which the selection installs and "
            f"{result.paths.venv} no longer held ({len(result.ran)} stages run)",
        )
    elif not result.ran:
        events.emit(
            "ok", f"{where}: already provisioned and verified at {result.paths.venv}; nothing to do"
        )
    else:
        events.emit(
            "ok",
            f"{where}: provisioned {result.paths.venv} in {result.seconds:.1f} s "
            f"({len(result.ran)} stages run, {len(result.skipped)} already done)",
        )
    ui.print_text(
        f"activate: . {sh_word(str(result.paths.venv / 'bin' / 'activate'), '--venv')}"
        + ("  (smoke, verify and receipt then find this environment)" if recorded else "")
    )
    if result.receipt:
        ui.print_text(f"receipt: {result.receipt}")
    return 0


def _is_slice(lock: Path) -> bool:
    """``projectlock.image.is_slice``, imported only for a ``.json`` file (a lock is not one: the
    image module's imports are not a no-op provision's)."""
    from envbuild.projectlock.image import is_slice

    return is_slice(lock)
