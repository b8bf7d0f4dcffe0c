"""Probe rounds of the engine's real round graph on the live cluster: the head's and the
scheduler's cost per round (:func:`measure_head`) and the reduce's (:func:`measure_reduce`),
the constants :func:`ppt_dask.perf.calibrate.calibrate` fits eq. (4) and ``Th`` with.

Gradient tasks that wait a known time and return a vector of a chosen size stand in for the
network's, over *virtual* workers (slots pinned in blocks onto the real ones), so the tasks
and tree of a cluster of that size are what is timed (001's Fig. 1 test program).
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from dataclasses import dataclass

import numpy as np

from ppt_dask.algorithms import strategies
from ppt_dask.engine import waits
from ppt_dask.perf import fit as modelfit
from ppt_dask.perf import model as perfmodel
from ppt_dask.perf.calls import cluster_workers

PROBE_WEIGHTS = 16  # "tiny" vector of the head probe: latency, not bandwidth


WARMUP = 5  # probe rounds left out of every median (the graph and the caches warm up)
MIN_MEASURED = 3  # rounds a median needs at the least


def check_rounds(rounds: int, warmup: int = WARMUP, flag: str = "rounds") -> int:
    """Probe rounds must leave ``MIN_MEASURED`` after the warm-up: raised before any work."""
    if isinstance(rounds, bool) or not isinstance(rounds, (int, np.integer)) or rounds < warmup + MIN_MEASURED:
        raise ValueError(f"{flag} must be at least {warmup + MIN_MEASURED} ({warmup} warm-up rounds and "
                         f"{MIN_MEASURED} measured), got {rounds!r}")
    return int(rounds)


# ---- the live cluster: probe rounds of the real graph ----------------------------------


def _probe_work(n_weights: int, spin_seconds: float, params, shard, s: int, r: int) -> tuple:
    """A gradient task of known length: busy for ``spin_seconds`` of wall time, then w values.

    Wall time, so a round costs exactly the spin plus what the model calls Th (and Tr):
    the gradient's own cost, sharing of the cores included, is the call curve's part.
    """
    end = time.perf_counter() + spin_seconds
    while time.perf_counter() < end:
        pass
    return np.ones(n_weights), np.array([1.0, 0.0, 1.0])


def _probe_apply(state, total):
    """Like Sync's update: weights plus an optimizer buffer of their size in the state."""
    vector, stats = total
    return strategies.ModelState(vector, np.zeros_like(vector), stats, state.round + 1)


@dataclass(frozen=True)
class _Probe:
    """The probe as a strategy of the engine's rounds: gradients of known length, Sync's update."""

    n_weights: int
    per_call: float

    def work(self, net, params, shard, s: int, r: int) -> tuple:
        return _probe_work(self.n_weights, self.per_call, params, shard, s, r)

    @staticmethod
    def apply(net, state, total):
        return _probe_apply(state, total)

    @staticmethod
    def broadcast(state):
        return state.params


READ_EVERY = 4  # probe rounds between the head's reads (the trainer reads in batches too)


def probe_rounds(client, workers, n_virtual: int, n_weights: int, spin_seconds: float, *,
                 rounds: int = 25, warmup: int = WARMUP, fan_in: int = 2) -> np.ndarray:
    """Seconds per round (after ``warmup``) of the engine's default round graph with probe tasks.

    ``n_virtual`` gradient slots, each owning one shard, are pinned in contiguous blocks
    onto the real ``workers`` (so ``n_virtual == len(workers)`` is the real layout); the
    busiest real worker spins ``spin_seconds`` in all per round. The rounds are the per-round
    graph :func:`ppt_dask.train` runs with ``exchange="all"`` (:func:`ppt_dask.engine.rounds.choose.choose_graph`:
    one hop, by recursive doubling where it applies), all submitted ahead; the head reads the
    stats every ``READ_EVERY`` rounds, and each value returned is the seconds per round
    between two reads.
    """
    from ppt_dask.core import keys
    from ppt_dask.engine.placement.enter import enter_data, exit_data
    from ppt_dask.engine.rounds import choose, graph

    if rounds <= warmup:
        raise ValueError(f"rounds must be > warmup = {warmup} (the first {warmup} rounds are "
                         f"not timed), got {rounds}")
    n_real = len(workers)
    X, y = np.zeros((n_virtual, 1)), np.zeros(n_virtual)
    shards = enter_data(client, X, y, n_virtual, workers=list(workers), keep_copy=False)
    engine = None
    try:
        slot_of = {s: slot for slot, (a, b) in enumerate(shards.blocks) for s in range(a, b)}
        plan = graph.make_plan([(shards.label(slot_of[v]), v, v + 1) for v in range(n_virtual)],
                               n_virtual, fan_in)
        probe = _Probe(int(n_weights), spin_seconds / -(-n_virtual // n_real))
        params = np.zeros(int(n_weights))
        engine = choose.start(choose.choose_graph(plan), client, plan, shards.futures,
                                    probe, None, keys.generation(uuid.uuid4().hex[:8], 0),
                                    strategies.ModelState(params, np.zeros_like(params)), 0, rounds - 1)
        engine.submit(0, rounds - 1)
        wait = functools.partial(waits.round_result, shards=shards)
        reads = [warmup - 1, *range(warmup - 1 + READ_EVERY, rounds - 1, READ_EVERY), rounds - 1]
        periods, last = [], None
        for before, r in zip([None, *reads], reads):
            engine.read_stats(r, r, wait)
            now = time.perf_counter()
            if before is not None:
                periods.append((now - last) / (r - before))
            last = now
    finally:
        if engine is not None:
            engine.cancel()
        exit_data(shards)
    return np.array(periods)


@dataclass(frozen=True)
class HeadFit:
    """``Th(p) = th0 + th1 * tasks_per_round(p)`` and the shortest gradient phase ``tq``."""

    th0_seconds: float
    th1_seconds: float
    tq_seconds: float
    samples: tuple = ()  # (p, tasks, spin_seconds, median_round_seconds)


def measure_head(client, workers=None, *, p_values=(1, 2, 4, 8, 16, 32, 64),
                 spin_seconds: float = 0.01, rounds: int = 25, warmup: int = WARMUP,
                 fan_in: int = 2) -> HeadFit:
    """Th(p) against tasks per round, from probe rounds over virtual cluster sizes.

    The probe keeps its worker busy for ``spin_seconds`` of wall time (a gradient phase)
    and returns a tiny vector, so ``round - spin`` is the
    head/scheduler cost; :func:`modelfit.fit_head` fits it over
    :func:`perfmodel.tasks_per_round` (relative residuals), then ``th0`` is set so that
    the line passes through the one-worker rounds (the sizes at or below ``len(workers)``
    on average when ``p_values`` has no 1): the virtual sizes give the growth, a real
    one the level. One worker fetches nothing; what real rounds over more workers cost
    beyond the line is the reduce term's (:func:`measure_reduce`'s ``Ti``). The same
    rounds without the spin, at the real sizes 1..min(len(workers), 2), give ``tq`` (how much longer than
    ``Th`` they take).

    A virtual cluster runs its gradient tasks on fewer processes, so per-task *worker*
    overhead is serialised here and ``th1`` errs high for a real cluster of that size.
    """
    workers = cluster_workers(client, workers)
    samples, tasks, head = [], [], []
    for p in p_values:
        median = float(np.median(probe_rounds(client, workers, p, PROBE_WEIGHTS, spin_seconds,
                                              rounds=rounds, warmup=warmup, fan_in=fan_in)))
        n_tasks = perfmodel.tasks_per_round(p, fan_in)
        samples.append((int(p), n_tasks, spin_seconds, median))
        tasks.append(n_tasks)
        head.append(max(median - spin_seconds, 1e-6))
    th0, th1 = modelfit.fit_head(tasks, head, relative=True)  # small p count as much
    # the slope from all sizes, the level from one worker (else the real sizes on average)
    real = ([(t, h) for p, t, h in zip(p_values, tasks, head) if p == 1]
            or [(t, h) for p, t, h in zip(p_values, tasks, head) if p <= len(workers)])
    if real:
        th0 = max(float(np.mean([h - th1 * t for t, h in real])), 0.0)
    quick = []
    for p in range(1, min(len(workers), 2) + 1):
        median = float(np.median(probe_rounds(client, workers, p, PROBE_WEIGHTS, 0.0,
                                              rounds=rounds, warmup=warmup, fan_in=fan_in)))
        n_tasks = perfmodel.tasks_per_round(p, fan_in)
        samples.append((p, n_tasks, 0.0, median))
        quick.append(median - (th0 + th1 * n_tasks))
    return HeadFit(th0, th1, max(float(np.median(quick)), 0.0), tuple(samples))


def measure_reduce(client, sizes, workers=None, fan_in: int = 2, *, head=None,
                   spin_seconds: float = 0.01, rounds: int = 25, warmup: int = WARMUP,
                   samples: list | None = None) -> tuple[float, float]:
    """Fit 001's eq. (4) on the live cluster: ``Tr(p) = Tw w ceil(log_k p) + Ti``.

    Probe rounds over 2..len(workers) real workers (one shard each) reduce vectors of
    each size in ``sizes`` (weights; the tree reduce, the update and the weights'
    fan-out to the next round are all real). What a round costs beyond the spin and
    beyond ``Th(p)`` (``head``: a :class:`HeadFit` or ``(th0, th1)``) is fitted with
    :func:`modelfit.fit_reduce`; without ``head`` the baseline is the same round with
    a tiny vector, so ``Ti`` comes out near 0. Raw rows are appended to ``samples``.

    Returns ``(tw_seconds_per_weight, ti_seconds)``.
    """
    workers = cluster_workers(client, workers)
    if len(workers) < 2:
        raise ValueError(f"a reduction needs at least 2 workers, got {len(workers)}")
    sizes = [int(w) for w in sizes]
    if len(set(sizes)) < 2 or min(sizes) < 1:
        raise ValueError(f"sizes needs at least two distinct vector lengths >= 1, got {sizes!r}")
    ps, ws, extra = [], [], []
    for p in range(2, len(workers) + 1):
        real = workers[:p]
        if head is None:
            base = float(np.median(probe_rounds(client, real, p, PROBE_WEIGHTS, spin_seconds,
                                                rounds=rounds, warmup=warmup, fan_in=fan_in)))
        else:
            th0, th1 = (head.th0_seconds, head.th1_seconds) if isinstance(head, HeadFit) else head
            base = spin_seconds + th0 + th1 * perfmodel.tasks_per_round(p, fan_in)
        for w in sizes:
            median = float(np.median(probe_rounds(client, real, p, w, spin_seconds,
                                                  rounds=rounds, warmup=warmup, fan_in=fan_in)))
            ps.append(p)
            ws.append(w)
            extra.append(max(median - base, 0.0))
            if samples is not None:
                samples.append((p, w, spin_seconds, median))
    return modelfit.fit_reduce(ps, ws, extra, fan_in)


def worker_cores(client, workers) -> int:
    """The cores the ``workers`` share in all: each host's (``os.cpu_count`` there) once,
    however many of the workers run on it. What the model charges oversubscribed workers
    against (:func:`ppt_dask.perf.model.oversubscription`)."""
    from urllib.parse import urlsplit

    counts = client.run(os.cpu_count, workers=list(workers))
    hosts = {urlsplit(address).hostname: n for address, n in counts.items()}
    return int(sum(n or 1 for n in hosts.values()))
