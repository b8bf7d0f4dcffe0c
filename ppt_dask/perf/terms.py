"""The terms of one round in the run-time model (:mod:`ppt_dask.perf.model` adds them up to
rounds, epochs and speedups): the weights counted, a gradient call and a task of calls, workers
sharing cores, the tree reduce, the loops' links and allreduce, the lag of the slowest worker and
the head's cost of a round. Sources and symbols: :mod:`ppt_dask.perf.model`."""

from __future__ import annotations

import numpy as np

from ppt_dask.core import allreduce
from ppt_dask.core.validation import check_int_array_at_least
from ppt_dask.perf import curves
from ppt_dask.perf.constants import Constants, check_constants
from ppt_dask.perf.tasks import EXCHANGES, tasks_per_round, tree_levels


def count_weights(layers, biases: bool = True) -> int:
    """Parameters of a fully connected network; 001's ``w`` (Table IV) has no biases.

    >>> count_weights((2, 128, 128, 1), biases=False)
    16768
    """
    layers = [int(x) for x in layers]
    if len(layers) < 2 or min(layers) < 1:
        raise ValueError(f"layers must be >= 2 positive sizes, got {layers!r}")
    return sum(a * z + (z if biases else 0) for a, z in zip(layers[:-1], layers[1:]))


def floats(x):
    """A scalar as a float, an array as an array of floats."""
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


def call_seconds(rows, c: Constants):
    """Seconds of one gradient call over ``rows`` patterns, as the serial program makes it.

    Without a call curve, ``tc + rows (Tf + Tb)``; with one, linear interpolation between
    the timed row counts, 001's line through the nearest timed call outside them
    (:func:`ppt_dask.perf.curves.along`). Broadcasts ``rows`` (>= 0; 0 rows cost nothing).
    """
    return floats(curves.call_seconds(rows, check_constants(c)))


def task_seconds(rows, calls, c: Constants, workers=1, *, streamed: bool = False):
    """Seconds of one worker's gradient work in a round: ``calls`` calls of ``rows`` each.

    ``first(rows) + (calls - 1) more(rows)``, times the shared factor when ``workers > 1``:
    a ``ppt-grad`` task of the round graph, or with ``streamed`` a loop's gradient phase
    (:func:`ppt_dask.perf.curves.task_seconds`). Without a call curve, ``calls (tc + rows
    (Tf + Tb))``. Broadcasts all three.
    """
    return floats(curves.task_seconds(rows, calls, check_constants(c), workers, streamed))


def oversubscription(workers, cores=None):
    """How much longer a phase that every worker computes at once takes when ``workers``
    share ``cores`` cores: ``max(1, workers / cores)`` (the cores time-slice the workers,
    so a round's compute serializes), 1 where ``cores`` is None (a core per worker)."""
    w = np.asarray(workers, dtype=float)
    if cores is None:
        return np.ones_like(w)
    n = check_int_array_at_least("cores", cores, 1)
    return np.maximum(1.0, w / n)


def reduce_seconds(p, n_weights, c: Constants, fan_in: int = 2):
    """All-reduce time ``Tr(p) = Tw * w * ceil(log_k p) + Ti``: 001 eq. (4), k = 2 there.

    p = 1 communicates nothing, so ``Tr(1) = 0`` (eq. (4) would give Ti). Broadcasts
    ``p`` against ``n_weights``.
    """
    c = check_constants(c)
    levels = np.asarray(tree_levels(p, fan_in))
    w = check_int_array_at_least("n_weights", n_weights, 1)
    tr = c.tw_seconds_per_weight * w * levels + c.ti_seconds
    return floats(np.where(levels > 0, tr, 0.0))


def links_seconds(p, n_weights, c: Constants, itemsize: int = 8):
    """A streamed round's exchange, ``Tl(p) = tl0 + m(p) tl1 + v(p, w) tlw``.

    Each loop sends ``m`` messages of ``v`` values in all over direct links
    (:mod:`ppt_dask.engine.rounds.allreduce`), takes the others', adds them and leaves the round for
    the head. The algorithm is the one ``ppt.train`` picks for ``w`` values of ``itemsize``
    bytes (:func:`ppt_dask.core.allreduce.choose`; loops of one host, the calibration's, pass
    their sums through shared memory, :func:`allreduce_terms`): sending whole sums to every other loop,
    ``m = p - 1`` and ``v = (p - 1) w`` (``tl0 + (p - 1)(tl1 + tlw w)``), or a reduce-scatter
    and all-gather, ``v = 2 (p - 1) w / p`` in ``m = 2 (p - 1)`` messages (pairwise, the choice
    of "auto") or ``m = 2 log2 p`` (recursive halving and doubling): MPI's bandwidth-optimal
    allreduce (Thakur, Rabenseifner and Gropp 2005), where 001's eq. (4) charges
    ``w ceil(log2 p)``. Calibrated from the links floor of ``graphs/exchange_floor.py``
    (:func:`ppt_dask.perf.loops.measure_links`). Broadcasts ``p`` against ``n_weights``.

    >>> c = Constants(0, 0, 0, 0, 0, 0, tl1_seconds=1e-4, tlw_seconds_per_weight=1e-9)
    >>> round(links_seconds(2, 10**5, c), 6), round(links_seconds(8, 10**4, c), 6)  # one host: shared memory
    (0.0004, 0.00028)
    """
    c = check_constants(c)
    p = check_int_array_at_least("p", p, 1)
    w = check_int_array_at_least("n_weights", n_weights, 1)
    p, w = np.broadcast_arrays(p, w)
    terms = [allreduce_terms(int(q), int(n), itemsize) for q, n in zip(p.ravel(), w.ravel())]
    m = np.array([t[0] for t in terms], dtype=float).reshape(p.shape)
    v = np.array([t[1] for t in terms], dtype=float).reshape(p.shape)
    return floats(c.tl0_seconds + m * c.tl1_seconds + v * c.tlw_seconds_per_weight)


def allreduce_terms(p: int, n_weights: int, itemsize: int = 8, algorithm: str = "auto",
                    shared: bool = True) -> tuple[int, float]:
    """Messages and values of a streamed round's exchange on its critical path: ``(m, v)`` of
    :func:`links_seconds` (a power-of-two p is taken to hold equal aligned blocks, as
    ``ppt-dask train``'s shards do, where ``algorithm`` asks for "halving"). ``shared``: the
    loops are on one host, as on the cluster the model was calibrated on (a LocalCluster), so
    "auto" takes the shared-memory exchange, a reduce-scatter inside shared memory over ``k``
    adding loops (:func:`ppt_dask.core.allreduce.adders`): with one, two hops a round whatever p
    (the last loop's token to loop 0, loop 0's back; the other tokens arrive while loop 0 waits
    for the last), and the ``p`` loops' sums loop 0 adds, ``m = 2``, ``v = p w``; with more, an
    adder's tokens (``m = k - 1 + p - 1``) and its ``1 / k`` of the ``p`` loops' sums,
    ``v = p w / k``; else what each loop sends by the socket algorithms."""
    used = allreduce.choose(algorithm, p, n_weights * itemsize, halves=p & (p - 1) == 0, shared=shared)
    if used == "shared":
        k = allreduce.adders(p, n_weights * itemsize)
        return (2 if k == 1 else allreduce.messages(used, p, n_weights * itemsize)), float(p * n_weights / k)
    return allreduce.messages(used, p), allreduce.sent_values(used, p, n_weights)


def lag_seconds(p, compute, c: Constants):
    """On streamed rounds of ``p >= 2`` loops, the wait for the slowest one:
    ``stream_lag_ratio`` times the gradient phase ``compute`` (seconds).

    The loops' gradient phases differ from round to round, and a synchronous round ends
    with the longest, so the others wait in proportion to the phase (the links floor,
    timed with no compute, has no such wait). Fitted over the calibration's sizes
    (:func:`ppt_dask.perf.fit.fit_lag`) at the calibration's workers; the slowest of more
    loops is slower still (the largest of more phases), which one ratio for every p >= 2
    does not follow. 0 for one loop. Broadcasts ``p`` and ``compute``.
    """
    c = check_constants(c)
    p = check_int_array_at_least("p", p, 1)
    return floats(np.where(p > 1, c.stream_lag_ratio * np.asarray(compute, dtype=float), 0.0))


def head_seconds(p, c: Constants, fan_in: int = 2, n_shards=None, exchange: str = "auto"):
    """Dask head/scheduler cost of one round, ``Th(p) = th0 + th1 * tasks_per_round(p)``.

    Not in 001 (MPI has no head); calibrate with :func:`ppt_dask.perf.fit.fit_head`.
    ``exchange`` is the round graph whose tasks are counted ("stream" counts the one-hop graph's).
    """
    c = check_constants(c)
    graph = exchange if exchange in EXCHANGES else "auto"
    tasks = np.asarray(tasks_per_round(p, fan_in, n_shards, graph))
    return floats(c.th0_seconds + c.th1_seconds * tasks)
