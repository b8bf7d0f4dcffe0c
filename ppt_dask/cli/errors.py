"""How ``ppt-dask`` ends on an error: one line naming the flag, the traceback on request.

Bad input is a ``ValueError``/``OSError`` raised before cluster work (exit status 2);
anything else is a fault (status 1); Ctrl-C is status 130. Each prints one line on
stderr. ``--debug`` (anywhere on the line) or ``PPT_DASK_DEBUG=1`` lets the exception
through, with its traceback.

The library names its parameters (``lr must be > 0``); a message that starts with the
parameter behind a flag gets the flag in front (``--lr: lr must be > 0``), so every
error a user can cause from the command line names what to change.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from ppt_dask.cli import paths
from ppt_dask.engine import interrupt
from ppt_dask.engine.interrupt import EXIT_STATUS, Interrupted
from ppt_dask.engine.waits import SchedulerLost

DEBUG_ENV = "PPT_DASK_DEBUG"

# Library parameter names whose flag has another name.
PARAMETER_FLAGS = {"n_shards": "--shards", "n_workers": "--workers", "max_epochs": "--epochs",
                   "p_max": "--p-max", "checkpoint_dir": "--checkpoint"}

_LEADING_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\b")


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """``--debug`` on the parser and on every subcommand's parser, nested ones too."""
    _add(parser, default=False)


def _add(parser, default):
    parser.add_argument("--debug", action="store_true", default=default,
                        help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                # SUPPRESS: a subcommand without --debug keeps the value set before it
                _add(child, default=argparse.SUPPRESS)


def flags_of(parser: argparse.ArgumentParser, positionals: bool = False) -> dict[str, str]:
    """Every option's destination to its long flag, over all subcommands; with
    ``positionals``, each positional argument's to its metavar (or upper-case name) too."""
    found: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                for dest, spelled in flags_of(child, positionals).items():
                    found.setdefault(dest, spelled)
        elif action.option_strings:
            found.setdefault(action.dest, max(action.option_strings, key=len))
        elif positionals and action.dest != argparse.SUPPRESS:
            found.setdefault(action.dest, action.metavar or action.dest.upper())
    return found


def os_error_line(exc: OSError, args, parser: argparse.ArgumentParser) -> str:
    """An OSError about a file in one line that names the argument whose path it is:
    ``--json: no such file or directory: 'out/x.json'``, not ``[Errno 2] ...``."""
    if exc.filename is None or not exc.strerror:
        return str(exc)
    values = vars(args) if args is not None else {}
    spelled = paths.flag_of_path(exc.filename, values, flags_of(parser, positionals=True))
    text = f"{exc.strerror[:1].lower()}{exc.strerror[1:]}: {str(exc.filename)!r}"
    if exc.filename2 is not None:
        text += f" -> {str(exc.filename2)!r}"
    return f"{spelled}: {text}" if spelled else text


def name_the_flag(message: str, flags: dict[str, str]) -> str:
    """``message`` with the flag of the parameter it starts with put in front.

    >>> name_the_flag("lr must be > 0, got -1.0", {"lr": "--lr"})
    '--lr: lr must be > 0, got -1.0'
    >>> name_the_flag("--report: the folder does not exist", {"report": "--report"})
    '--report: the folder does not exist'
    """
    match = _LEADING_NAME.match(message)
    if not match:
        return message
    name = match.group(1)
    flag = PARAMETER_FLAGS.get(name) or flags.get(name)
    return f"{flag}: {message}" if flag else message


def debugging(args=None) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def run(command, args, parser: argparse.ArgumentParser) -> int:
    """``command(args)``, its errors turned into one line and an exit status."""
    try:
        quiet = not debugging(args)
        with interrupt.sigint_never_dropped(quiet=quiet), interrupt.reconnects_unlogged(quiet):
            return command(args)
    except Interrupted as exc:  # Ctrl-C during a run: where it was and how to go on
        if debugging(args):
            raise
        print(f"ppt-dask: {exc}", file=sys.stderr)
        return EXIT_STATUS
    except KeyboardInterrupt:  # before or after the run: nothing to resume from
        if debugging(args):
            raise
        print("ppt-dask: interrupted", file=sys.stderr)
        return EXIT_STATUS
    except (ValueError, OSError) as exc:
        if debugging(args):
            raise
        text = os_error_line(exc, args, parser) if isinstance(exc, OSError) else str(exc)
        print(f"ppt-dask: error: {name_the_flag(text, flags_of(parser))}", file=sys.stderr)
        return 2
    except SchedulerLost as exc:  # its host or link went down: which, and where to go on from
        if debugging(args):
            raise
        print(f"ppt-dask: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a fault, not bad input: say what it was, in one line
        if debugging(args):
            raise
        text = " ".join(str(exc).split()) or "(no message)"
        print(f"ppt-dask: error: {type(exc).__name__}: {text} (--debug shows the traceback)",
              file=sys.stderr)
        return 1
