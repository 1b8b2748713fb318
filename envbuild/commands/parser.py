"""The command line: the parser (the command table ``COMMAND_MODULES``, the global flags, the
exit-code epilog; each command adds its own arguments with ``register``) and ``main``, the one
place where errors become exit statuses. ``envbuild.cli`` (the console script) and
``check_changed`` (the pre-commit hook) both run ``main``; no command imports ``envbuild.cli``.

Each subcommand lives in ``envbuild/commands/<name>.py`` and exposes ``register(subparsers)``
(its own arguments; the types several commands share are in ``commands/common.py`` and
``commands/selection.py``); its handler returns an exit code or raises an ``EnvbuildError``, which
``main`` turns into one paragraph on stderr and the documented exit status (the codes:
``envbuild.errors``). Events are drawn by ``commands/ui.py``. Tracebacks are shown only for bugs
(exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from types import FrameType

from envbuild import __version__
from envbuild.commands import ui
from envbuild.errors import EXIT_CODE_DOCS, EnvbuildError, ExitCode
from envbuild.spec._toml import did_you_mean

__all__ = ["COMMAND_MODULES", "COMMAND_NAMES", "build_parser", "main"]

# Module names under envbuild.commands, in the order `envbuild --help` lists them.
COMMAND_MODULES = (
    "plan",
    "provision",
    "verify",
    "lock",
    "check_lock",
    "wheelhouse",
    "preflight",
    "smoke",
    "dist_step",
    "receipt",
    "docker",
    "modal",
    "ansible_vars",
)

COMMAND_NAMES = tuple(m.replace("_", "-") for m in COMMAND_MODULES)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser; with ``only``, just that subcommand (the others' imports cost every
    start)."""
    epilog = "exit codes:\n" + "\n".join(
        f"  {int(code):>3}  {text}" for code, text in EXIT_CODE_DOCS.items()
    )
    parser = argparse.ArgumentParser(
        prog="envbuild",
        description="Build reproducible, verified training environments on fresh GPU hosts.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"envbuild {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show debug events")
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help=(
            "no live progress display and no informational lines (warnings and results still print)"
        ),
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in (only,) if only else COMMAND_MODULES:
        importlib.import_module(f"envbuild.commands.{name}").register(sub)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The module of the subcommand ``argv`` names, if it names one (flags before it allowed)."""
    for arg in argv:
        if arg in ("-h", "--help"):
            return None  # top-level help lists every command
        if arg.startswith("-"):
            continue
        module = arg.replace("-", "_")
        return module if module in COMMAND_MODULES else None
    return None


def _unknown_command(argv: Sequence[str]) -> str | None:
    """The command word of ``argv`` when it names no command; None when it does or there is none."""
    for arg in argv:
        if arg in ("-h", "--help", "--version"):
            return None
        if not arg.startswith("-"):
            return None if arg in COMMAND_NAMES else arg
    return None


def _unknown_flags(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> int:
    """Exit 2 for arguments no option of the command takes, naming the nearest flag of that
    command."""
    command = getattr(args, "command", None)
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    target = sub.choices.get(command, parser) if sub is not None and command else parser
    flags = [o for a in target._actions for o in a.option_strings if o.startswith("--")]
    groups: list[list[str]] = []
    for arg in extra:  # a flag with the values that followed it
        if arg.startswith("-") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    words = []
    for group in groups:
        flag = group[0].split("=", 1)[0]
        words.append(" ".join(group) + (did_you_mean(flag, flags) if flag.startswith("-") else ""))
    target.print_usage(sys.stderr)
    print(f"{target.prog}: error: unrecognized arguments: {'; '.join(words)}", file=sys.stderr)
    return int(ExitCode.CONFIG)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    unknown = _unknown_command(args_in)
    if unknown is not None:  # a typo: one line with the nearest command, not argparse's usage dump
        ui.configure()
        ui.error_text(f"unknown command {unknown!r}{did_you_mean(unknown, list(COMMAND_NAMES))}")
        ui.error_text_plain("`envbuild --help` lists the commands and what each does.")
        ui.close()
        return int(ExitCode.CONFIG)
    parser = build_parser(_command_in(args_in))
    args, extra = parser.parse_known_args(args_in)
    # a mistyped flag: the command's own usage and the nearest flag, not the top-level usage
    if extra:
        return _unknown_flags(parser, args, extra)
    # --json / --markdown: stdout holds only the document; progress and notes go to stderr
    document = bool(getattr(args, "json", False) or getattr(args, "markdown", False))
    ui.configure(verbose=args.verbose, json_mode=document, quiet=args.quiet)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        code = args.func(args)
        return int(code or 0)
    except EnvbuildError as exc:
        ui.error(exc, causes=args.verbose)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        ui.error_text("interrupted")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # the reader went away (`envbuild check-lock ... | head`): as any Unix filter, stop quietly;
        # stdout is pointed at /dev/null so that the interpreter's own flush at exit says nothing
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:
        # The file system said no (full disk, read-only, permissions, a missing folder): the host's
        # problem, not a bug. Everything envbuild writes is written atomically, so nothing is
        # half-done.
        where = f": {exc.filename}" if exc.filename else ""
        reason = (
            "the disk is full"
            if exc.errno == errno.ENOSPC
            else (exc.strerror or type(exc).__name__)
        )
        ui.error_text(f"{reason}{where}")
        ui.error_text_plain(
            "Check the path and its permissions and free space, or choose other folders "
            "(--root, --out, --output); then run the same command again."
        )
        return int(ExitCode.PREFLIGHT)
    except Exception:  # noqa: BLE001 - a bug: show everything
        traceback.print_exc()
        ui.error_text("internal error in envbuild (this is a bug; the traceback is above)")
        return int(ExitCode.INTERNAL)
    finally:
        signal.signal(signal.SIGTERM, previous)
        ui.close()
