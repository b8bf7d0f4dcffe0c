"""Threads inside each worker: what they make of a gradient call, and the workers x threads
a machine's cores hold (seed 002's hybrid: OpenMP threads inside each MPI rank).

A worker of ``t`` threads runs each gradient call on ``t`` cores (a :class:`ppt_dask.TorchNet`
with ``t`` torch threads, NumPy's BLAS with ``t``: ``ppt.connect(threads_per_worker=t)``,
``--threads-per-worker t``); ``p`` workers of one thread split each round's rows ``p`` ways
but exchange their sums every round. Which pays depends on the network and the machine, so
it is measured: :func:`time_threads` times the real gradient call of a calibration's block
at 1, 2, 4 ... threads on one worker (in :func:`ppt_dask.perf.calibrate.calibrate`), and
:func:`layouts` prices every ``p x t`` that fits the cores with the run-time model
(:func:`ppt_dask.perf.model.epoch_seconds`), the gradient's terms divided by the measured
speedup of ``t`` threads (one factor for every call size: the block's).

Only :func:`time_threads` computes (numpy, threadpoolctl); the rest is pure.
"""

from __future__ import annotations

import copy
import dataclasses
import time

import numpy as np
from threadpoolctl import threadpool_limits

from ppt_dask.core.validation import check_int_at_least
from ppt_dask.perf import model as perfmodel

# the constants that time gradient work (per pattern, per call, the call curves): t threads divide them
GRADIENT_TERMS = ("tf_seconds", "tb_seconds", "tc_seconds", "call_seconds", "call_task_seconds",
                  "call_more_seconds", "stream_first_seconds", "stream_more_seconds")


def thread_counts(cores: int) -> list[int]:
    """1, 2, 4 ... up to ``cores``, and ``cores``: the counts timed."""
    cores = check_int_at_least("cores", cores, 1)
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def with_threads(net, threads: int):
    """``net`` computing with ``threads`` threads: a copy with ``threads`` set where it has
    the attribute (``ppt.TorchNet``), else ``net`` (its BLAS is limited around the call)."""
    if hasattr(net, "threads"):
        net = copy.copy(net)
        net.threads = int(threads)
    return net


def time_threads(net, X, y, rows: int, counts, repeats: int = 7) -> list[float]:
    """Median seconds of ``net.loss_grad_stats`` over ``rows`` rows at each thread count of
    ``counts`` (BLAS and OpenMP limited to it, a TorchNet set to it), in this thread.

    The counts are interleaved, repeat after repeat, so a burst of load spreads over all;
    each is called twice in a row and the second call timed (warm caches, as a loop's steps)."""
    rows = min(check_int_at_least("rows", rows, 1), len(X))
    X = np.require(X, dtype=net.dtype, requirements=("C", "A"))
    params = net.init_params(0)
    nets = {t: with_threads(net, t) for t in counts}
    times: dict = {t: [] for t in counts}
    offset = 0
    for i in range(int(repeats) + 1):  # the first pass warms caches, the allocator and the thread pools
        for t in counts:
            with threadpool_limits(limits=int(t)):
                for warm in (False, True):
                    start = offset % (len(X) - rows + 1)
                    t0 = time.perf_counter()
                    nets[t].loss_grad_stats(params, X[start:start + rows], y[start:start + rows])
                    if i and warm:
                        times[t].append(time.perf_counter() - t0)
                    offset += rows
    return [float(np.median(times[t])) for t in counts]


def scaled(c: perfmodel.Constants, speedup: float) -> perfmodel.Constants:
    """The constants of a worker whose gradient work runs ``speedup`` times faster."""
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup!r}")
    values = {}
    for name in GRADIENT_TERMS:
        value = getattr(c, name)
        values[name] = tuple(v / speedup for v in value) if isinstance(value, tuple) else value / speedup
    return dataclasses.replace(c, **values)


@dataclasses.dataclass(frozen=True)
class Layout:
    """``p`` workers of ``t`` threads at ``block``: the predicted seconds per epoch, and the
    measured speedup of a gradient call on ``t`` threads over one."""

    p: int
    threads: int
    block: int
    epoch_seconds: float
    thread_speedup: float


def layouts(n_patterns: int, n_weights: int, c: perfmodel.Constants, cores: int, timed: dict, blocks, *,
            n_test: int = 0, fan_in: int = 2, n_shards=None, exchange: str = "auto") -> list[Layout]:
    """Every ``p x t <= cores`` with ``t`` a timed thread count, at each block: its predicted
    epoch (:func:`ppt_dask.perf.model.epoch_seconds` with the gradient's terms divided by the
    speedup ``timed`` gives ``t``, on ``cores // t`` slots). ``timed``: a calibration's
    ``threads`` (``{"rows", "counts", "seconds"}``). Sorted fastest first; ties to fewer
    threads, then fewer workers."""
    cores = check_int_at_least("cores", cores, 1)
    counts, seconds = [int(t) for t in timed["counts"]], [float(s) for s in timed["seconds"]]
    if not counts or counts[0] != 1 or len(counts) != len(seconds) or min(seconds) <= 0:
        raise ValueError(f"threads timings need counts from 1 and as many positive seconds, got {timed!r}")
    out = []
    for t, s in zip(counts, seconds):
        if t > cores:
            continue
        speedup = seconds[0] / s
        ct = scaled(c, speedup)
        for p in range(1, cores // t + 1):
            for b in np.asarray(blocks).ravel():
                epoch = perfmodel.epoch_seconds(p, int(b), n_patterns, n_weights, ct, n_test=n_test, fan_in=fan_in,
                                                n_shards=n_shards, exchange=exchange, cores=cores // t)
                out.append(Layout(p, t, int(b), float(epoch), float(speedup)))
    return sorted(out, key=lambda lay: (lay.epoch_seconds, lay.threads, lay.p))


def why(best: Layout, options: list[Layout], timed: dict, cores: int) -> str:
    """In words: why ``best``, against the best layout of one thread per worker and one worker
    of all the threads timed, at the same block."""
    same = [o for o in options if o.block == best.block]
    alone = min((o for o in same if o.threads == 1), key=lambda o: o.epoch_seconds)
    widest = max(o.threads for o in same)
    one = min((o for o in same if o.p == 1 and o.threads == widest), key=lambda o: o.epoch_seconds)
    speed = ", ".join(f"{timed['seconds'][0] / x:.2f}x as fast on {t} threads"
                      for t, x in zip(timed["counts"][1:], timed["seconds"][1:]) if t <= cores)
    told = f"a gradient call of {timed['rows']} rows runs {speed or 'on one thread only'} as on 1 (measured)"
    if best.threads == 1:
        reason = "threads gain less on this network than workers, whose exchange costs less than the time they save"
    elif best.p == 1:
        reason = "threads make each step faster with no exchange, where more workers add one every round"
    else:
        reason = "this mix splits the rows over workers and runs each worker's calls on threads"
    others = [f"{o.p} x {o.threads} {o.epoch_seconds:.4g} s" for o in dict.fromkeys((alone, one)) if o != best]
    return (f"{told}; {reason}: on {cores} cores at block {best.block}, {best.p} x {best.threads} predicts "
            f"{best.epoch_seconds:.4g} s per epoch" + (f" ({', '.join(others)})" if others else ""))
