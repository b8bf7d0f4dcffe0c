"""A task's own timing of its parts, carried to the scheduler with its result.

A one-hop round runs the reduce, the optimizer step and the gradient in one task
(:mod:`ppt_dask.engine.rounds.onehop`), so the scheduler's own records of the task (its ``startstops``)
cannot tell them apart. The task times its parts and stores them in the metadata that
distributed sends with every finished task (``TaskFinishedMsg.metadata``, which the
scheduler passes to ``SchedulerPlugin.transition``): no extra message, no extra task.

Writing that metadata from inside a task uses the worker's task state
(``Worker.state.tasks[key].metadata``), which is not a public API of distributed. This
module is the only place that touches it; :func:`applies` says whether it still works (a
test checks it), and :func:`record` warns once and does nothing when it does not: the
breakdown then counts the whole task as gradient work. The scheduler's side reads the
entry back with :func:`ppt_dask.core.keys.phases_of`.
"""

from __future__ import annotations

import warnings

from ppt_dask.core import keys

_warned = False


def _task_state():
    """The worker-side state of the task running in this thread, or None outside a worker."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return None  # not inside a task on a worker (the serial path, a plain call)
    try:
        return worker.state.tasks[worker.get_current_task()]
    except (AttributeError, KeyError) as exc:
        _warn(exc)
        return None


def _warn(exc: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"ppt_dask cannot attach phase timings to its tasks with this version of "
                      f"distributed ({type(exc).__name__}: {exc}); the time breakdown counts fused "
                      "tasks as gradient work", RuntimeWarning, stacklevel=3)


def record(phases: dict) -> bool:
    """Attach ``phases`` (name -> seconds) to the running task's metadata; False if not."""
    ts = _task_state()
    if ts is None:
        return False
    try:
        ts.metadata[keys.PHASES] = {str(k): float(v) for k, v in phases.items()}
    except (AttributeError, TypeError) as exc:
        _warn(exc)
        return False
    return True


def applies() -> bool:
    """Whether :func:`record` works here: run it as a task on a worker (a test does)."""
    ts = _task_state()
    return ts is not None and isinstance(getattr(ts, "metadata", None), dict)
