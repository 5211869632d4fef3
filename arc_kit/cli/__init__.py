"""The ``arc-kit`` command line: one sub-command per job; each parses, makes one call into the package, prints.

The method's options are generated from the settings dataclasses (``settings.options``), so
``--help`` shows the defaults a command really uses (its preset's). Errors in the user's input
(bad files, unknown names, a run folder that cannot be resumed, an output folder the kit did not make)
end with a one-line message and exit status 1, never a traceback; an error of the operating system
names the file and what to do (``outputs.describe_os_error``); ``--debug`` shows the traceback of
anything unexpected. SIGINT (Ctrl-C) and SIGTERM end a command with one line saying what it kept and how
to go on (exit status 130 and 143, as the signals' own), after every ``finally`` has run: locks are
given back, a run's workers and the Ray it started stopped.

This module holds the top parser, ``main`` (the ``arc-kit`` console script) and how errors and warnings are
shown; the commands live in one module per group (``data``, ``solve``, ``kaggle``, ``model``, ``sudoku``),
the options they share and the table of commands in ``options``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from contextlib import contextmanager

# Each group's module registers its commands (``options.COMMANDS``) as it is imported: ``--help`` lists the
# commands in this order.
# isort: off
from arc_kit.cli import data, solve, kaggle, model, sudoku  # noqa: F401
# isort: on
from arc_kit.cli.options import COMMANDS
from arc_kit.outputs import Claim, claimed, describe_os_error
from arc_kit.provenance import __version__


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is (as Ctrl-C raises KeyboardInterrupt), so that it unwinds cleanly."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arc-kit", description="ARC-AGI with a product of experts: solve, "
                                     "score and submit.")
    parser.add_argument("--version", action="version", version=f"arc-kit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help_text, setup) in COMMANDS.items():
        sub = subparsers.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(run=setup(sub))
    return parser


def main(argv: list[str] | None = None) -> int:
    from arc_kit.data.grids import check_max_side
    from arc_kit.data.tasks import InvalidDataError
    from arc_kit.model.bases import BaseUnavailableError
    from arc_kit.model.devices import UnsupportedSetupError, stay_offline

    stay_offline()  # first: every library the command (and each worker it starts) imports stays off the network
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    for stream in (sys.stdout, sys.stderr):  # a character no terminal can take (a lone surrogate) is escaped
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    formatting, warnings.formatwarning = warnings.formatwarning, _one_line_warnings(args.command)
    earlier = len(claimed())
    try:
        if getattr(args, "max_side", None) is not None:  # up front, before any file or model is read
            check_max_side(args.max_side, "--max-side")
        with _terminate_raises():
            return args.run(args) or 0
    except InvalidDataError as error:
        print(f"arc-kit {args.command}: {error}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head` and the like
        return 0
    except (FileNotFoundError, KeyError, ValueError, OSError, UnsupportedSetupError, BaseUnavailableError) as error:
        if args.debug:
            raise
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        message = describe_os_error(error) if isinstance(error, OSError) else message
        print(f"arc-kit {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:
        signal_name, status = ("SIGTERM", 143) if isinstance(stop, Terminated) else ("SIGINT", 130)
        print(f"arc-kit {args.command}: stopped by {signal_name}; {_what_was_kept(claimed()[earlier:], args)}",
              file=sys.stderr)
        return status
    finally:
        warnings.formatwarning = formatting


@contextmanager
def _terminate_raises():
    """While the block runs, SIGTERM raises ``Terminated`` (in the main thread only: Python allows no other)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(number, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _what_was_kept(claims: list[Claim], args: argparse.Namespace) -> str:
    """What a stopped command leaves behind and how to go on from there, in a few words, naming the command's own
    option that would start over instead (``--restart``, ``--no-resume``), if it has one."""
    if not claims:
        return "nothing was written"
    last = claims[-1]  # the output it was writing (a command claims its output again as it goes)
    if last.kind is None:
        return f"{last.path} may be incomplete: delete it, then run the same command again"
    if last.kind.resumable:
        over = next((f" (without {flag})" for flag, given in (("--restart", "restart"), ("--no-resume", "no_resume"))
                     if hasattr(args, given)), "")
        return f"kept {last.path} ({last.kind.kept}): run the same command again{over} to go on from there"
    return f"{last.path} holds {last.kind.kept}: run the same command with --overwrite to make it again"


def _one_line_warnings(command: str):
    """A ``warnings.formatwarning`` that writes ``arc-kit COMMAND: warning: MESSAGE``, one line: not the
    line of the kit's source that warned, which Python shows by default."""
    def format_warning(message, category, filename, lineno, line=None) -> str:
        kind = "" if category is UserWarning else f" ({category.__name__})"
        return f"arc-kit {command}: warning{kind}: {' '.join(str(message).split())}\n"
    return format_warning


if __name__ == "__main__":
    sys.exit(main())
