"""The versions a run's numbers depend on, and a digest of ppt_dask's own source.

:func:`show_versions` prints them, as scikit-learn's and pandas' functions of that name do:
paste it into a bug report. The digest names the code exactly, whatever the version
number says: the notebooks print it in their first cell, and tests/test_notebooks.py
compares it with the package beside them, so outputs stored from older code are caught.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import platform
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
DIGEST_LENGTH = 12  # hex digits shown: enough to tell two states of the code apart


def source_digest(package: Path = PACKAGE) -> str:
    """SHA-256 of every ``.py`` file of the package (relative path and text, line ends
    made ``\\n``, in path order), its first :data:`DIGEST_LENGTH` hex digits."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()[:DIGEST_LENGTH]


def versions() -> dict[str, str]:
    """ppt_dask's version and source digest, Python's, and the packages' a run uses."""
    from ppt_dask import __version__

    found = {"ppt_dask": __version__, "source": source_digest(), "python": platform.python_version()}
    for name in ("dask", "distributed", "numpy", "bokeh", "tqdm", "scikit-learn", "ipywidgets"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def show_versions() -> None:
    """Print the versions a run depends on: ppt_dask and a digest of its source, then
    Python, Dask, numpy and the rest.

    The first line names the code (``ppt_dask 0.1.0, source 1a2b3c4d5e6f``): paste it
    into a bug report, or beside a measurement. The notebooks print it first, and their
    test compares the digest with the package's.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> ppt.show_versions()     # doctest: +ELLIPSIS
    ppt_dask ..., source ...
    """
    v = versions()
    print(f"ppt_dask {v.pop('ppt_dask')}, source {v.pop('source')}")
    print(", ".join(f"{name} {value}" for name, value in v.items()))
