"""Pinning by resource labels: a worker slot's label, given to a worker, and the tasks that
wait for it.

A shard and every task that reads it carry the slot's label as a resource (``{label: 1}``),
and only the worker that holds the label (``1e9`` of it) may run them. Giving a label is
public (``Worker.set_resources`` through ``Client.run``). What is not: the scheduler looks at
the tasks waiting for a resource ("no-worker") again when a worker *joins*, not when a
worker's resources change, so after a lost slot's label moves to another worker the
waiting tasks are handed to the scheduler's own routine for a joined worker
(``Scheduler.bulk_schedule_unrunnable_after_adding_worker``, an internal). It lives here
alone; when a release renames it, :func:`reschedule_waiting` warns and the waiting tasks
stay until the scheduler looks again. ``tests/test_internals.py`` checks that it applies.
"""

from __future__ import annotations

import time
import warnings

INTERNAL = "bulk_schedule_unrunnable_after_adding_worker"


async def label_worker(labels: dict, dask_worker=None):
    """On a worker (``Client.run``): set its resource labels (``{label: amount}``)."""
    await dask_worker.set_resources(**labels)


def applies(dask_scheduler=None) -> bool:
    """On the scheduler: does it still have the routine :func:`reschedule_waiting` uses?"""
    return callable(getattr(dask_scheduler, INTERNAL, None))


def _reschedule_unrunnable(address: str, dask_scheduler=None) -> int:
    """On the scheduler: let tasks waiting for a label that ``address`` now carries run there."""
    ws = dask_scheduler.workers.get(address)
    if ws is None or not applies(dask_scheduler):
        return -1 if ws is not None else 0
    waiting = len(dask_scheduler.unrunnable)
    dask_scheduler.transitions(getattr(dask_scheduler, INTERNAL)(ws),
                               stimulus_id=f"ppt-relabel-{time.time()}")
    return waiting - len(dask_scheduler.unrunnable)


def reschedule_waiting(client, address: str) -> int:
    """Hand the tasks waiting for ``address``'s new labels to it; how many were (-1 and a
    warning when the scheduler no longer has the internal routine)."""
    moved = client.run_on_scheduler(_reschedule_unrunnable, address)
    if moved < 0:
        warnings.warn(f"the scheduler has no {INTERNAL} (a newer distributed?): tasks waiting for a "
                      "moved shard run only when the scheduler looks at them again", RuntimeWarning,
                      stacklevel=2)
    return moved
