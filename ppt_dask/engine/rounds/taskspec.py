"""The one door to ``dask._task_spec``: the task specification dask builds its own graphs from.

The round graphs are built task by task (:mod:`ppt_dask.engine.rounds.graph`, ``onehop``,
``overlap``): a ``Task`` per key, ``TaskRef`` for a dependency, ``DataNode`` for a constant
that must not be traversed, ``parse_input`` for a list of references. The module is not a
public API of dask; it is imported here alone, so that a release that changes it breaks
one file. Versions outside the range tested here (``TESTED``, the same bounds as the
package's requirement) get a warning on import; ``tests/test_internals.py`` checks that the
names still build and run a graph.
"""

from __future__ import annotations

import warnings

import dask
from dask._task_spec import DataNode, Task, TaskRef, parse_input  # noqa: F401 (re-exported)

TESTED = ("2026.3.0", "2026.9.0")  # [low, high): pyproject.toml's bounds for dask and distributed


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def outside_tested(version: str = dask.__version__) -> str | None:
    """Why ``version`` is outside the tested range, or None when it is inside."""
    low, high = TESTED
    if _version(version) < _version(low):
        return f"dask {version} is older than {low}, the oldest tested with ppt_dask"
    if _version(version) >= _version(high):
        return f"dask {version} is newer than the versions tested with ppt_dask (below {high})"
    return None


if outside_tested():
    warnings.warn(f"{outside_tested()}: its task specification (dask._task_spec) may have "
                  "changed", RuntimeWarning, stacklevel=2)

__all__ = ["DataNode", "Task", "TaskRef", "parse_input", "TESTED", "outside_tested"]
