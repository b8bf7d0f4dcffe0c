"""The call curve: what one gradient call costs, timed on the real code.

The run-time model (:mod:`ppt_dask.perf.model`) charges a round's gradient phase by the
calls each worker makes. On a real machine the cost per pattern is not constant (it grows
with a call's working set, the first call of a task finds caches cold after the wait between
rounds, and workers that share a machine slow each other), so :mod:`ppt_dask.perf.calibrate`
measures a curve over call sizes instead of one Tf + Tb:

* :func:`time_calls`: the call back to back in one process (the serial program's cost);
* :func:`measure_calls`: the calls inside real training rounds on the live cluster, one
  worker alone and all at once (a :class:`CallCurve`).

Only :func:`measure_calls` needs a cluster (it imports the trainer when called).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from ppt_dask.algorithms import strategies
from ppt_dask.core.validation import check_int_at_least
from ppt_dask.engine import waits


@contextlib.contextmanager
def one_blas_thread():
    """One BLAS thread, as the workers ppt_dask starts have (cluster.WORKER_ENV): two
    BLAS threads on a shared core time the contention, not the network."""
    with threadpool_limits(1, user_api="blas"):
        yield


def curve_rows(n_rows: int, smallest: int = 8) -> list[int]:
    """Row counts of the call curve: powers of two times ``smallest`` up to ``n_rows``."""
    n_rows = check_int_at_least("n_rows", n_rows, 2)
    rows, r = [], max(1, min(int(smallest), int(n_rows) // 2))
    while r < n_rows:
        rows.append(r)
        r *= 2
    return rows + [int(n_rows)]


def curve_sizes(n_rows: int, workers: list, calls, rows=None) -> tuple[int, list[int]]:
    """The call counts and row counts of a curve timed with ``calls`` shards on each of
    ``workers`` out of ``n_rows`` rows: ``rows`` checked (default :func:`curve_rows` up to the
    rows a shard holds). ``ValueError`` naming the bad value otherwise."""
    calls = check_int_at_least("calls", calls, 2)
    largest = n_rows // (calls * len(workers))
    if largest < 2:
        raise ValueError(f"X has {n_rows} rows: too few for {calls} shards of 2 rows on each of "
                         f"{len(workers)} workers")
    rows = curve_rows(largest) if rows is None else sorted({int(r) for r in rows})
    if not rows or rows[0] < 1 or rows[-1] > largest:
        raise ValueError(f"rows must be in 1..{largest} (the rows of X per shard, {calls} shards on "
                         f"each of {len(workers)} workers), got {rows!r}")
    return calls, rows


def time_calls(net, X, y, rows, repeats: int = 7) -> list[float]:
    """Median seconds of ``net.loss_grad_stats`` over each row count in ``rows``.

    Each call takes the next ``r`` rows of ``X`` (wrapping round), as Sync's blocks walk
    through a shard; the sizes are interleaved, so a burst of load spreads over all, and
    each is called twice in a row and the second call timed (the serial program calls
    back to back: a small call right after a large one would find its caches cold).
    """
    with one_blas_thread():
        X = np.require(X, dtype=net.dtype, requirements=("C", "A"))
        y = np.require(y, requirements=("C", "A"))
        params = net.init_params(0)
        times: dict = {r: [] for r in rows}
        offset = 0
        for i in range(int(repeats) + 1):  # the first pass warms caches and the allocator
            for r in rows:
                for warm in (False, True):  # back to back: time the second of two calls
                    start = offset % (len(X) - r + 1)
                    t0 = time.perf_counter()
                    net.loss_grad_stats(params, X[start:start + r], y[start:start + r])
                    if i and warm:
                        times[r].append(time.perf_counter() - t0)
                    offset += r
        return [float(np.median(times[r])) for r in rows]


@dataclass(frozen=True)
class CallCurve:
    """Gradient calls of ``rows[i]`` rows timed in real rounds, and in a bare loop.

    ``first``: a ``ppt-grad`` task of one call on one worker; ``more``: each further call
    of a task of ``calls`` calls (its task less ``first``, over ``calls - 1``); ``bare``:
    the call back to back in one process; ``shared``: the tasks of ``calls`` calls on all
    workers at once, and ``factor`` their ratio to the same on one worker (>= 1; the last
    one held for larger rows).
    ``periods_*``: the rounds' periods (one worker / all), for what a round costs beyond
    its gradient phase. ``bare``, ``first``, ``more`` and ``periods_alone`` cover all
    ``rows``; ``shared`` and ``periods_shared`` the rows that fit ``calls`` shards on every
    worker. Seconds; all but ``bare`` empty for loop timings.
    """

    rows: tuple
    bare: tuple
    first: tuple = ()
    more: tuple = ()
    shared: tuple = ()
    calls: int = 1
    factor: tuple = ()
    periods_alone: tuple = ()
    periods_shared: tuple = ()

    def rest(self, shared: bool) -> float:
        """What a round costs beyond its gradient phase (Tu + Tr + Th): the median over the
        rounds but the third with the shortest tasks (where the scheduler's shortest phase
        could show)."""
        tasks = np.asarray(self.shared if shared else self.first)
        periods = self.periods_shared if shared else self.periods_alone
        if not periods:
            return float("nan")
        top = np.argsort(tasks)[len(tasks) // 3:]
        return float(np.median(np.asarray(periods)[top] - tasks[top]))

    def quantum(self, shared: bool) -> float:
        """``tq``: the smallest task's round beyond the rest (a gradient phase is never
        shorter than this, however short its calls)."""
        periods = self.periods_shared if shared else self.periods_alone
        if not periods:
            return float("nan")
        return max(periods[0] - self.rest(shared), 0.0)


def _round_tasks(client, net, X, y, workers, calls: int, rows, rounds: int, warmup: int):
    """Per row count r: the median longest ``ppt-grad`` task and the median round period
    of Sync rounds with ``calls`` shards on each of ``workers``, each call of r rows."""
    from ppt_dask.api import train
    from ppt_dask.core.stopping import Stop
    from ppt_dask.engine.placement.enter import enter_data, exit_data
    from ppt_dask.observe import diagnostics

    n_shards = calls * len(workers)
    n = rows[-1] * n_shards
    shards = enter_data(client, X[:n], y[:n], n_shards, dtype=net.dtype, workers=workers, keep_copy=False)
    tasks, periods = [], []
    try:
        for r in rows:
            block = r * n_shards
            result = train(net, shards, strategies.Sync(lr=1e-3, block=block),
                           Stop(max_epochs=(rounds + warmup) * block / shards.n_rows), exchange="all",
                           reproducible="any-p")  # a call a shard: the curve's calls
            longest: dict = {}
            for t in diagnostics.records_of(result).tasks:
                if t.prefix == "ppt-grad" and t.round is not None and t.round >= warmup:
                    longest[t.round] = max(longest.get(t.round, 0.0), t.compute)
            if not longest:
                return None, None  # no task records: the scheduler runs no collector
            tasks.append(float(np.median(list(longest.values()))))
            periods.append(float(np.median([h["wall_seconds"] for h in result.history[warmup:]])))
    finally:
        exit_data(shards)
    return tasks, periods


def measure_calls(client, net, X, y, workers=None, *, rows=None, calls: int = 4, rounds: int = 16,
                  warmup: int = 2) -> CallCurve:
    """The call curve of the model: real gradient calls timed inside real training rounds.

    Sync rounds with ``block = r * shards`` make every call ``r`` rows. Three layouts:
    one shard on the first worker (a task of one call), ``calls`` shards on it (what each
    further call of a task adds: a warm call plus a fixed cost, the per-shard work and the
    partial sums of the tree), and ``calls`` shards on each of ``workers`` (all workers
    computing at once: the factor by which that slows a task). The workers' own durations
    of the ``ppt-grad`` tasks (the run's task records), the median over ``rounds`` rounds
    after ``warmup`` of each round's
    longest, make the curves; the rounds' periods what a round costs beyond its gradient
    phase (:meth:`CallCurve.rest`, :meth:`CallCurve.quantum`). The same calls back to
    back in one process (:func:`time_calls`) make the serial program's curve. Rounds,
    not a bare loop, because on the machine of this project a loop of bare calls ran
    10-40% faster than the same calls in the round graph (the first call of a task finds
    cold caches after the wait between rounds, each call adds a partial sum, workers
    computing together contend for memory bandwidth), and rounds are what the model
    predicts. Without task records (a scheduler without the collector) only the loop is
    timed.
    """
    workers = cluster_workers(client, workers)
    calls, rows = curve_sizes(len(X), workers, calls, rows)
    # the bare calls reach the whole of X (the serial program calls a whole block at once)
    bare_rows = rows + [r for r in curve_rows(len(X)) if r > rows[-1]]
    data = client.scatter([np.asarray(X), np.asarray(y)], workers=workers[:1], hash=False)
    bare = client.submit(time_calls, net, *data, bare_rows, workers=workers[:1], pure=False)
    bare = waits.result(bare, 600, "the bare call timings on one worker")
    del data
    first, periods_alone = _round_tasks(client, net, X, y, workers[:1], 1, bare_rows, rounds, warmup)
    if first is None:
        return CallCurve(tuple(bare_rows), tuple(bare))
    several, _ = _round_tasks(client, net, X, y, workers[:1], calls, rows, rounds, warmup)
    shared, periods_shared = _round_tasks(client, net, X, y, workers, calls, rows, rounds, warmup)
    # a further call is a warm call plus a fixed cost (its partial sum, the per-shard work):
    # the median of what it adds beyond the bare call over the smaller half of the sizes,
    # where that cost is not lost in the noise of long tasks
    extra = (np.asarray(several) - np.asarray(first[:len(rows)])) / (calls - 1)
    small = slice(0, max(len(rows) // 2, 1))
    fixed = float(np.median((extra - np.asarray(bare[:len(rows)]))[small]))
    more = np.asarray(bare) + max(fixed, 0.0)
    factor = np.ones(len(bare_rows))
    if len(workers) > 1:
        # per size where the calls dominate the tasks (the larger half); below, their median
        # (tiny tasks give noisy ratios); beyond the rows all workers could time, the last
        ratio = np.maximum(np.divide(shared, several), 1.0)
        half = len(rows) // 2
        factor[:len(rows)], factor[len(rows):] = ratio, ratio[-1]
        factor[:half] = np.median(ratio[half:])
    return CallCurve(tuple(bare_rows), tuple(bare), tuple(first), tuple(more), tuple(shared), calls,
                     tuple(factor), tuple(periods_alone), tuple(periods_shared))


def cluster_workers(client, workers=None) -> list[str]:
    """The addresses ``workers`` (checked against the cluster), or all of the cluster's."""
    from ppt_dask.engine.placement.cluster import worker_addresses  # asks the scheduler; imports distributed

    known = worker_addresses(client)
    workers = known if workers is None else list(workers)
    if not workers or any(w not in known for w in workers):
        raise ValueError(f"workers must be addresses of this cluster {known}, got {workers!r}")
    return workers
