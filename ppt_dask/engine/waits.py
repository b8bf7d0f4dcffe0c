"""Waits on the cluster that say what they waited for when they time out.

``distributed`` says only ``timed out after 600 s.``; the user needs to know which wait it
was, to look at the right worker or raise the right limit.
"""

from __future__ import annotations

import time

ROUND_TIMEOUT = 600.0  # seconds a single round may take before the run is abandoned
POLL_SECONDS = 2.0  # while waiting on a round, how often to check that no worker was lost


def result(future, timeout: float, what: str):
    """``future.result(timeout)``; on timeout a ``TimeoutError`` naming ``what`` and the limit."""
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        raise TimeoutError(f"waited {timeout:g} s for {what}; it did not come (a worker stuck, gone "
                           "or overloaded? the dashboard's task stream shows it)") from None


class WorkerLost(RuntimeError):
    """A worker holding shards left the cluster while a round was waiting on it."""


class Unanswered(WorkerLost):
    """Workers that were asked and did not answer (their connection closed: gone, though the
    scheduler lists them still), while a generation was planned: by
    :func:`ppt_dask.engine.wire.sharedmem.colocated`, or by the scatter of its start state
    (:func:`ppt_dask.engine.rounds.choose.place_state`); ``addresses`` names them."""

    def __init__(self, addresses: list, errors: list):
        super().__init__(f"worker(s) {addresses} did not answer: {[repr(e)[:120] for e in errors]}")
        self.addresses = addresses


class SchedulerLost(RuntimeError):
    """The head lost its scheduler (its host, or the link to it, went down): the run cannot
    go on; the message names the scheduler, its host and the checkpoint to resume from."""


def scheduler_gone(client, exc: BaseException | None = None) -> str | None:
    """``lost the scheduler at ADDRESS (host HOST)`` when ``client`` is no longer connected
    to its scheduler (reconnecting, or given up), or when ``exc`` is a failure to reach the
    scheduler's address (an ``OSError`` naming it: a new connection to a host whose link is
    down times out before the client's own connection notices); else None."""
    address = getattr(client.scheduler, "address", None) or "(unknown address)"
    unreachable = isinstance(exc, OSError) and address in str(exc)
    if client.status == "running" and not unreachable:
        return None
    host = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"lost the scheduler at {address} (host {host})"


WORKERS, SCHEDULER, OURS = "workers", "scheduler", "ours"  # who_is_gone's answers


def who_is_gone(client, workers, listed, *, wait_seconds: float = 0.0,
                blame_listed: bool = False, poll_seconds: float = 0.2) -> tuple[str, list]:
    """Who is gone after a call on ``workers`` failed: the one place that asks.

    Returns ``(SCHEDULER, [])`` when the client has lost its scheduler
    (:func:`scheduler_gone`) or the scheduler does not answer the question "which workers
    do you list?"; ``(WORKERS, gone)`` when the scheduler no longer lists the workers
    ``gone`` of ``workers``; else ``(OURS, [])``: the call failed for a reason of its own (or
    a timeout of ours), and the caller raises its error. The error itself is not read: a
    handler of the scheduler that failed on a worker's closed comm closes the head's
    connection with an error naming the scheduler's address, while the scheduler answers.

    ``listed(client)`` asks the scheduler which workers it lists now
    (:func:`ppt_dask.engine.placement.cluster.worker_addresses`; an ``OSError``: it does not
    answer). The waits each caller needs are its parameters:

    wait_seconds
        How long to wait for the scheduler to let a worker go (a worker killed a moment ago
        stays listed until the scheduler sees its comm close): 0 asks once, now.
    blame_listed
        Whether ``workers`` count as gone when the scheduler answers but still lists them
        (a scatter to a worker gone a moment ago fails before the scheduler drops it).
    """
    if scheduler_gone(client):
        return SCHEDULER, []
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            now = set(listed(client))
        except OSError:  # it does not answer: the scheduler is gone, whatever the client says yet
            return SCHEDULER, []
        gone = [w for w in workers if w not in now]
        if gone:
            return WORKERS, gone
        if time.monotonic() >= deadline:
            return (WORKERS, list(workers)) if blame_listed else (OURS, [])
        time.sleep(min(poll_seconds, max(0.0, deadline - time.monotonic())))


def round_result(future, shards, timeout: float = ROUND_TIMEOUT):
    """``future.result()``, checking every few seconds that the shards' workers are alive.

    A lost worker's resource label has no worker left, and a task pinned to it would wait
    there, so the head looks for lost workers itself instead of waiting for
    ``no-workers-timeout``.
    """
    return _watching(lambda t: future.result(timeout=t), shards, timeout, "a round did not finish")


def _watching(get, shards, timeout: float, what: str):
    """``get(seconds)`` again every ``POLL_SECONDS`` until it returns; ``WorkerLost`` as soon as a
    shard's worker is gone, ``TimeoutError`` (``what`` within ``timeout``) at the end."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return get(min(POLL_SECONDS, max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            lost = shards.lost_workers()
            if lost:
                raise WorkerLost(f"worker(s) {lost} left the cluster") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} within {timeout} s") from None
