"""Send the scheduler's messages at once instead of batching them on a timer.

distributed batches the small messages between scheduler, workers and clients
(``BatchedSend``: every 5 ms from the scheduler to a worker, 2 ms from a worker or to a
client, 10 ms from a client). That saves work when thousands of tasks are in flight; a
training round is the opposite, a short chain of a few tasks (gradient, update, weights),
and every hop of the chain waited for a timer. On the 2-core machine of this project a
round of MNIST 784-64-64-10 with a block of 64 took 16.6 ms with the batching and
6.8-7.8 ms without it (block 4000: 32.5 ms and 25 ms).

:func:`fast_messages` sets the intervals to ``interval`` (default 0: send at once) on the
scheduler (for every worker, present and future, and for this client), on every worker
(present and future) and on this client. It changes attributes of distributed's
``BatchedSend`` objects (``interval``), which are not a public API: a release that renames
them makes this a no-op with a warning, never an error. :func:`ppt_dask.connect` calls it
(``batch_interval=None`` there keeps distributed's timers).
"""

from __future__ import annotations

import warnings

from distributed.diagnostics.plugin import SchedulerPlugin, WorkerPlugin

INTERVAL = 0.0  # seconds between batches: 0 sends every message at once
NAME = "ppt-fast-messages"


def _set(comm, interval: float) -> bool:
    if comm is None or not hasattr(comm, "interval"):
        return False
    comm.interval = interval
    return True


class SchedulerMessages(SchedulerPlugin):
    """On the scheduler: the interval of its stream to each worker, new ones included."""

    name = NAME

    def __init__(self, interval: float = INTERVAL):
        self.interval = float(interval)

    async def start(self, scheduler) -> None:
        for comm in scheduler.stream_comms.values():
            _set(comm, self.interval)

    def add_worker(self, scheduler, worker: str) -> None:
        _set(scheduler.stream_comms.get(worker), self.interval)


class WorkerMessages(WorkerPlugin):
    """On each worker: the interval of its stream to the scheduler."""

    name = NAME

    def __init__(self, interval: float = INTERVAL):
        self.interval = float(interval)

    def setup(self, worker) -> None:
        _set(getattr(worker, "batched_stream", None), self.interval)


def _client_stream(dask_scheduler, client_id: str, interval: float) -> bool:
    return _set(dask_scheduler.client_comms.get(client_id), interval)


def _registered_interval(dask_scheduler) -> float | None:
    """The interval of the scheduler's plugin of this module, None without one."""
    plugin = dask_scheduler.plugins.get(NAME)
    return getattr(plugin, "interval", None)


def _intervals(dask_scheduler) -> dict:
    """The scheduler's intervals (seconds), for checks: per worker and per client."""
    return {"workers": {w: c.interval for w, c in dask_scheduler.stream_comms.items()},
            "clients": {k: c.interval for k, c in dask_scheduler.client_comms.items()}}


def check_interval(interval) -> float:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 <= interval < 1:
        raise ValueError(f"batch interval must be seconds in [0, 1), got {interval!r}")
    return float(interval)


def fast_messages(client, interval: float = INTERVAL) -> bool:
    """Set the batching interval of scheduler, workers and ``client`` (seconds, >= 0).

    Returns False (with a warning) when the cluster did not take it, for example a
    scheduler that cannot import ppt_dask; training works either way, only slower.
    """
    interval = check_interval(interval)
    try:
        # a scheduler that already runs with this interval (another client's, every
        # `ppt-dask train --scheduler` on a cluster that lives on) keeps its plugins:
        # registering them again logs a warning on the scheduler each time
        if client.run_on_scheduler(_registered_interval) != interval:
            client.register_plugin(SchedulerMessages(interval))
            client.register_plugin(WorkerMessages(interval))
        client.run_on_scheduler(_client_stream, client_id=client.id, interval=float(interval))
        _set(getattr(client, "scheduler_comm", None), float(interval))
        return True
    except Exception as exc:  # never let a latency tweak stop a run
        warnings.warn(f"message batching left at distributed's defaults ({type(exc).__name__}: {exc})",
                      RuntimeWarning, stacklevel=2)
        return False
