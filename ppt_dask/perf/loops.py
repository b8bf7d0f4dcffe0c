"""Streamed rounds timed for the run-time model: the links floor and the loops' gradient phase.

What ``ppt.train`` runs by default is streamed rounds
(:mod:`ppt_dask.engine.rounds.stream`): one loop per worker computes its shards' partial sums, sends
them to the other loops over direct links, takes theirs, adds them and applies the update, and
times each phase of each round itself (``result.breakdown()``). So the model's streamed terms
are timed on those loops, through ``ppt.train``, the way a user's run goes:

* :func:`links_floor`: the exchange alone, a strategy whose gradient and update do nothing
  (zeros of the real size): what remains of a round is ``transfer + idle + reduce + head``,
  the ``links`` way of ``graphs/exchange_floor.py``; :func:`measure_links` fits
  ``Tl(p) = tl0 + m tl1 + v tlw`` (:func:`ppt_dask.perf.model.links_seconds`) to it
  over p and vector sizes, as 001 fits eq. (4) to its Fig. 1 test program;
* :func:`measure_stream`: the real network's gradient phase inside real streamed Sync rounds
  at several call sizes, one worker alone and all workers at once (a :class:`StreamCurve`:
  the model interpolates between the sizes, :mod:`ppt_dask.perf.curves`).

Needs a cluster (imports the trainer when called).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np

from ppt_dask.algorithms import strategies
from ppt_dask.algorithms.strategies import ModelState
from ppt_dask.perf import fit as modelfit
from ppt_dask.perf.calls import cluster_workers, curve_sizes
from ppt_dask.perf.model import allreduce_terms

WARMUP = 3  # rounds of each run left out of the medians (links open, caches warm)
STREAM_ROUNDS = 40  # rounds timed per size and layout by the calibration (cheap: no scheduler hop a round)
PASSES = 3  # times each size is run over (the median of the passes' medians kept)
CALLS = 8  # shards a run places on one or two workers (`ppt-dask train`): the calls timed on one
SIZE_SECONDS = 1.5  # a size's run of long rounds ends once its timed rounds took this long ...
MIN_ROUNDS = 10  # ... and there are at least this many of them


@dataclass(frozen=True)
class Exchange(strategies.Sync):
    """A synchronous strategy that computes nothing: zero partial sums of ``size`` values of
    ``dtype``, an update that keeps the weights; the rounds are their exchange alone."""

    size: int = 16
    dtype: str = "float64"

    def work(self, net, params, shard, s, r):
        return np.zeros(self.size, dtype=self.dtype), np.array([0.0, 0.0, 1.0])

    def apply(self, net, state, total):
        return ModelState(state.params, state.opt_state, total[-1], state.round + 1)

    def partial_bytes(self, net) -> int:
        """The bytes of a shard's partial sums (what the allreduce's algorithm is chosen by)."""
        return self.size * np.dtype(self.dtype).itemsize


EXCHANGE_PHASES = ("transfer", "idle", "reduce", "head")  # a streamed round beyond its gradient and update


def exchange_phases(row: dict) -> float:
    """What a streamed round's row of the breakdown spends beyond its compute and update."""
    return sum(row[phase] for phase in EXCHANGE_PHASES)


def links_floor(client, workers, p: int, size: int, rounds: int, *, warmup: int = WARMUP,
                dtype: str = "float64", n_shards: int | None = None, allreduce: str = "auto") -> float:
    """Median seconds of a streamed round's exchange of ``size`` values on the first ``p`` of
    ``workers`` with no compute (the loops' own timing, rounds after ``warmup``). One shard a
    worker by default; with ``n_shards`` (at least ``p``) the round also adds that many shards'
    partial sums along the shard tree, as a real round of that layout does. ``allreduce``: the
    algorithm, as ``ppt.train`` takes it."""
    rows = floor_rows(client, workers, p, size, rounds, warmup=warmup, dtype=dtype, n_shards=n_shards,
                      allreduce=allreduce)
    return statistics.median(exchange_phases(r) for r in rows)


def floor_rows(client, workers, p: int, size: int, rounds: int, *, warmup: int = WARMUP,
               dtype: str = "float64", n_shards: int | None = None, allreduce: str = "auto") -> list[dict]:
    """The breakdown's rows (after ``warmup``) of :func:`links_floor`'s rounds, each phase
    apart (``graphs/exchange_floor.py`` sets them beside a real round's)."""
    import ppt_dask as ppt

    n = p if n_shards is None else int(n_shards)
    if n < p:
        raise ValueError(f"n_shards must be at least p = {p}, got {n_shards!r}")
    X = np.zeros((8 * n, 1), dtype=np.float32)
    shards = ppt.enter_data(client, X, np.zeros(8 * n, dtype=np.int64), n_shards=n, workers=list(workers[:p]),
                            dtype="float32")
    net = ppt.MLP((1, 2), output="softmax", dtype="float32")
    try:
        result = ppt.train(net, shards, Exchange(block=n, size=int(size), dtype=dtype),
                           ppt.Stop(max_epochs=(rounds + warmup) / 8), exchange="stream", allreduce=allreduce,
                           reproducible="any-p")  # every shard's sums added along the tree, as the layout's
    finally:
        ppt.exit_data(shards)
    return result.breakdown()[warmup:]


@dataclass(frozen=True)
class LinksFit:
    """``Tl(p) = tl0 + m tl1 + v tlw`` and the floors it was fitted to."""

    tl0_seconds: float
    tl1_seconds: float
    tlw_seconds_per_weight: float
    samples: tuple = ()  # (p, weights, median seconds of the exchange)


def measure_links(client, sizes, workers=None, *, rounds: int = 40, warmup: int = WARMUP,
                  dtype: str = "float64") -> LinksFit:
    """Fit the streamed exchange on the live cluster: :func:`links_floor` at p = 1 (``tl0``,
    the median over ``sizes``: one loop sends nothing) and at p = 2..len(workers) for each
    size; ``floor - tl0`` against ``(p - 1)`` and ``(p - 1) w``, least squares with both
    coefficients >= 0 (:func:`ppt_dask.perf.fit.fit_links`)."""
    workers = cluster_workers(client, workers)
    sizes = sorted({int(w) for w in sizes})
    if len(sizes) < 2 or sizes[0] < 1:
        raise ValueError(f"sizes needs at least two distinct vector lengths >= 1, got {sizes!r}")
    samples = [(1, w, links_floor(client, workers, 1, w, rounds, warmup=warmup, dtype=dtype)) for w in sizes]
    tl0 = float(np.median([s[2] for s in samples]))
    for p in range(2, len(workers) + 1):
        samples += [(p, w, links_floor(client, workers, p, w, rounds, warmup=warmup, dtype=dtype)) for w in sizes]
    more = [s for s in samples if s[0] > 1]
    itemsize = np.dtype(dtype).itemsize  # the messages and values of the algorithm each floor ran
    tl1, tlw = (0.0, 0.0) if not more else modelfit.fit_links(
        [s[0] for s in more], [s[1] for s in more], [max(s[2] - tl0, 0.0) for s in more],
        terms=[allreduce_terms(s[0], s[1], itemsize) for s in more])
    return LinksFit(tl0, tl1, tlw, tuple(samples))


@dataclass(frozen=True)
class StreamCurve:
    """The gradient phase of streamed Sync rounds whose calls have ``rows[i]`` rows.

    ``first``: one shard on one worker (a round of one call); ``several``: ``calls`` shards on
    it; ``more`` = ``(several - first) / (calls - 1)``, each further call; ``shared``:
    ``shared_calls`` shards on every worker at once (``calls`` in all, as a run spreads its
    shards), and ``factor`` its ratio to ``first + (shared_calls - 1) more``, the same calls on
    one worker alone (>= 1; below the middle size the median of the larger half, tiny phases
    give noisy ratios). ``rest_*``: the rounds' exchange phases (transfer, idle, reduce, head),
    one worker and all. Seconds.
    """

    rows: tuple
    first: tuple
    several: tuple
    more: tuple
    shared: tuple = ()
    factor: tuple = ()
    calls: int = 2
    workers: int = 1
    rest_alone: tuple = ()
    rest_shared: tuple = ()
    shared_calls: int = 0


def timed_rows(net, shards, strategy, most: int, warmup: int = WARMUP, seconds: float = SIZE_SECONDS,
               at_least: int = MIN_ROUNDS, **train) -> list[dict]:
    """The breakdown's rows, after ``warmup``, of plain ``ppt.train`` runs of ``strategy`` on
    ``shards`` (``train``: its further keywords): ``most`` rows, fewer once they took
    ``seconds`` of the loops' time (their ``wall``), never fewer than ``at_least``. A first run of
    ``at_least`` rounds tells a round's time, a second one the rounds still wanted.

    No ``on_round``: a call-back that may end the run at any round makes the head apply the
    stopping rule round by round (:func:`ppt_dask.engine.roundloop._loop_rule`), the older path
    whose head calls cost the loops a share of a round that a user's run no longer pays (the
    model fitted to it put a p = 2 round of 128 rows at 0.64 ms where the user's rounds took
    0.22 ms). Rounds of large calls are long and vary little: for MNIST's network over 16,384
    rows, a calibration took 64-68 s against 81-94 s with 40 rounds at every size (two runs each,
    interleaved, 2 cores), its curve within the spread of the runs of either kind."""
    import ppt_dask as ppt

    def run(n: int) -> list[dict]:
        stop = ppt.Stop(max_epochs=(n + warmup) * strategy.block / shards.n_rows)
        return ppt.train(net, shards, strategy, stop, **train).breakdown()[warmup:]

    rows = run(min(at_least, most))
    took = sum(row["wall"] for row in rows)
    if rows and took < seconds and len(rows) < most:
        wanted = most if took <= 0 else min(most, max(at_least, math.ceil(seconds * len(rows) / took)))
        if wanted > len(rows):
            rows += run(wanted - len(rows))
    return rows


def _phases(client, net, X, y, layouts, rows, rounds: int, warmup: int, passes: int = PASSES):
    """Per layout ``(workers, calls)`` and row count r, the median gradient phase and exchange
    of streamed Sync rounds with ``calls`` shards on each of ``workers``, each call of r rows.
    The layouts are placed at once and run in turn at each size, so a burst of load from
    other processes spreads over all of them rather than bending one curve; the sizes are
    run ``passes`` times over and the median of their medians kept (the least, kept before,
    left the model 12-30% under the rounds it was checked against: a quiet moment is not what
    a run sees). A run has ``rounds`` rounds after ``warmup``, fewer when they are long
    (:func:`timed_rows`)."""
    import ppt_dask as ppt

    placed = []
    try:
        for workers, calls in layouts:
            n_shards = calls * len(workers)
            n = rows[-1] * n_shards
            placed.append(ppt.enter_data(client, X[:n], y[:n], n_shards, dtype=net.dtype, workers=list(workers),
                                         keep_copy=False))
        seen: dict = {}
        for _ in range(passes):
            for j, r in enumerate(rows):
                for i, shards in enumerate(placed):
                    block = r * shards.n_shards
                    kept = timed_rows(net, shards, strategies.Sync(lr=1e-3, block=block), rounds, warmup,
                                      exchange="stream", reproducible="any-p")  # a call a shard: the curve's calls
                    seen.setdefault((i, j), []).append((float(np.median([row["gradient"] for row in kept])),
                                                        float(np.median([exchange_phases(row) for row in kept]))))
    finally:
        for shards in placed:
            ppt.exit_data(shards)
    gradient = [[float(np.median([g for g, _ in seen[i, j]])) for j in range(len(rows))] for i in range(len(layouts))]
    rest = [[float(np.median([e for _, e in seen[i, j]])) for j in range(len(rows))] for i in range(len(layouts))]
    return gradient, rest


def measure_stream(client, net, X, y, workers=None, *, rows=None, calls: int = CALLS, rounds: int = 40,
                   warmup: int = WARMUP) -> StreamCurve:
    """The streamed rounds' gradient phase of ``net``, timed by the loops in real rounds.

    Sync rounds with ``block = r * shards`` make every call ``r`` rows (``rows``: default
    :func:`ppt_dask.perf.calls.curve_rows` up to what ``X`` holds for ``calls`` shards).
    Three layouts: one shard on the first worker, ``calls`` shards on it, and ``calls`` shards
    spread over ``workers`` (``calls // len(workers)`` each, at least one: the others busy as
    in a run), the same thread and process arrangement as the user's run (``ppt.train`` on
    this cluster). A run's shards on one worker are then timed, not extrapolated from fewer
    (``first + 7 more`` from four calls multiplied their noise by 2.3). Each layout runs
    ``rounds`` rounds at each size (after ``warmup``): streamed rounds cost no scheduler
    hop, so 40 rounds of a small network take a fraction of a second, and their median holds
    against the load of a shared machine where a dozen did not (a curve that fell with size).
    Long rounds stop sooner: once ``MIN_ROUNDS`` of them took ``SIZE_SECONDS``.
    """
    workers = cluster_workers(client, workers)
    calls, rows = curve_sizes(len(X), workers[:1], calls, rows)
    per_worker = max(calls // len(workers), 1)
    layouts = [(workers[:1], 1), (workers[:1], calls)] + ([(workers, per_worker)] if len(workers) > 1 else [])
    gradient, rest = _phases(client, net, X, y, layouts, rows, rounds, warmup)
    (first, several), rest_alone = gradient[:2], rest[0]
    more = np.maximum((np.asarray(several) - np.asarray(first)) / (calls - 1), 0.0)
    factor, shared, rest_shared = np.ones(len(rows)), [], []
    if len(workers) > 1:
        shared, rest_shared = gradient[2], rest[2]
        alone = np.asarray(first) + (per_worker - 1) * more
        ratio = np.maximum(np.divide(shared, alone), 1.0)
        half = len(rows) // 2
        factor = ratio.copy()
        factor[:half] = np.median(ratio[half:])
    return StreamCurve(tuple(rows), tuple(first), tuple(several), tuple(float(m) for m in more), tuple(shared),
                       tuple(float(f) for f in factor), calls, len(workers), tuple(rest_alone), tuple(rest_shared),
                       per_worker if len(workers) > 1 else 0)
