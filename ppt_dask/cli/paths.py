"""The paths a command reads and writes, checked before any work.

A path that cannot serve (a file where a folder must be, a folder whose parent is missing,
an output that is a folder) is refused in one line that names the flag, the path and what
it must be, before a cluster starts or a run trains: a ``--json`` whose folder is missing
must not cost the run it would have summarized. What slips past these checks (a disk that
fills up, a file removed meanwhile) still ends in one line: :func:`flag_of_path` lets
:mod:`ppt_dask.cli.errors` put the flag in front of the system's message.
"""

from __future__ import annotations

import os
from pathlib import Path


def output_file(flag: str, path: str | None, what: str = "a file") -> None:
    """``path`` is a file the command writes: its folder exists, it is not a folder itself.

    >>> output_file("--json", None)  # not given: nothing to check
    """
    if not path:
        return
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"{flag}: {path!r} is a folder; {flag} takes the path of {what} to write")
    folder = target.absolute().parent
    if not folder.is_dir():
        kind = "is a file, not a folder" if folder.exists() else "does not exist"
        raise ValueError(f"{flag}: the folder of {path!r} ({str(folder)!r}) {kind}; make it first "
                         f"or give a path in an existing folder")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"{flag}: cannot write {path!r}: the folder {str(folder)!r} is not writable")


def output_folder(flag: str, path: str | None, holds: str) -> None:
    """``path`` is a folder the command writes into, made when missing: it is no file, and
    no file stands where one of its parents would be made.

    ``holds`` says what goes in it, for the message (``"checkpoint.npz"``).
    """
    if not path:
        return
    target = Path(path).expanduser()
    if target.exists() and not target.is_dir():
        raise ValueError(f"{flag}: {path!r} is a file; {flag} takes a folder (made when missing) "
                         f"to hold {holds}")
    for parent in target.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"{flag}: {str(parent)!r} is a file, so the folder {path!r} cannot "
                                 f"be made there; {flag} takes a folder to hold {holds}")
            if not target.exists() and not os.access(parent, os.W_OK):
                raise ValueError(f"{flag}: cannot make the folder {path!r}: {str(parent)!r} is not writable")
            break


def input_file(flag: str, path: str | None, what: str = "a file") -> None:
    """``path`` is a file the command reads: it exists and is not a folder."""
    if not path:
        return
    target = Path(path).expanduser()
    if target.is_dir():
        raise ValueError(f"{flag}: {path!r} is a folder; {flag} takes {what}")
    if not target.exists():
        raise ValueError(f"{flag}: no such file {path!r}; {flag} takes {what}")


def input_folder(flag: str, path: str | None, what: str) -> None:
    """``path`` is a folder the command reads: it exists and is not a file."""
    if not path:
        return
    target = Path(path).expanduser()
    if not target.exists():
        raise ValueError(f"{flag}: no such folder {path!r}; {flag} takes {what}")
    if not target.is_dir():
        raise ValueError(f"{flag}: {path!r} is a file; {flag} takes {what}")


def flag_of_path(filename, values: dict, flags: dict) -> str | None:
    """The flag whose value is ``filename`` or a folder above it, else None.

    Parameters
    ----------
    filename : str or path
        The ``filename`` of an :class:`OSError`.
    values : dict
        The parsed arguments (``vars(args)``): destination -> value.
    flags : dict
        Destination -> how the command line spells it (``--json``, or ``MODEL`` for a
        positional argument).

    >>> flag_of_path("out/x.json", {"json": "out/x.json"}, {"json": "--json"})
    '--json'
    >>> flag_of_path("d/mnist/f.gz", {"data_dir": "d", "json": None}, {"data_dir": "--data-dir"})
    '--data-dir'
    """
    if filename is None:
        return None
    failed = os.path.normpath(os.path.abspath(os.fspath(filename)))
    best, best_length = None, -1
    for dest, value in values.items():
        if not isinstance(value, (str, os.PathLike)) or dest not in flags or not os.fspath(value):
            continue
        given = os.path.normpath(os.path.abspath(os.path.expanduser(os.fspath(value))))
        inside = failed == given or failed.startswith(given.rstrip(os.sep) + os.sep)
        if inside and len(given) > best_length:  # the closest: --checkpoint d/c over --data-dir d
            best, best_length = flags[dest], len(given)
    return best
