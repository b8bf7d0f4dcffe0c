"""001's per-pattern constants (Tf, Tb, Tu, Tm, Ts, To and the call cost tc) measured in one
process on the network's own functions: what :func:`ppt_dask.perf.calibrate.calibrate` runs on
a worker before it probes the cluster."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ppt_dask.algorithms import average, strategies
from ppt_dask.core.validation import check_int_at_least
from ppt_dask.perf import fit as modelfit
from ppt_dask.perf import model as perfmodel
from ppt_dask.perf.calls import one_blas_thread


def _median_seconds(fn, repeats: int) -> float:
    fn()  # warm caches and allocator
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _row_counts(block: int, n_rows: int) -> list[int]:
    # small calls pin the fixed cost of a call, large ones the cost per pattern
    rows = {min(n_rows, max(1, r)) for r in (1, 8, block // 8, block // 4, block // 2, block, 2 * block)}
    if len(rows) < 2:
        rows |= {1, n_rows}
    if len(rows) < 2:
        raise ValueError(f"need at least 2 rows to fit per-pattern times, got {n_rows}")
    return sorted(rows)


def measure_constants(net, X, y, *, block: int, repeats: int = 7, momentum: float = 0.9
                      ) -> perfmodel.Constants:
    """Tf, Tb, Tu, Tm, Ts, To (001 Tables II/III), Ta (eq. (9)) and tc, timed here.

    Parameters
    ----------
    net : a network of the model protocol (:mod:`ppt_dask.core.model`)
        Without a ``forward`` method, its ``stats`` is timed as the forward pass (Ts is then 0).
    X : ndarray, shape (n, *net.row_shape); y : targets for the n rows
        A few thousand rows suffice; one epoch over them times To.
    block : int
        Block size of interest; per-pattern lines are fitted over 1 .. 2b rows.
    repeats : int
        Timings per point (the median is kept).

    Returns ``perfmodel.Constants`` with the communication and head fields 0 (see
    :func:`measure_reduce`, :func:`measure_head`).
    """
    with one_blas_thread():
        return _measure_constants(net, X, y, block, repeats, momentum)


def _measure_constants(net, X, y, block, repeats, momentum) -> perfmodel.Constants:
    from ppt_dask.algorithms import serial

    X = np.require(X, dtype=net.dtype, requirements=("C", "A"))  # aligned as placed shards
    y = np.require(y, requirements=("C", "A"))
    if len(X) != len(y) or len(X) < 1:
        raise ValueError(f"X and y need the same number of rows (>= 1), got {len(X)} and {len(y)}")
    if isinstance(block, bool) or int(block) != block or not 1 <= block <= len(X):
        raise ValueError(f"block must be an integer in 1..{len(X)}, got {block!r}")
    repeats = check_int_at_least("repeats", repeats, 1)
    block, params = int(block), net.init_params(0)
    rows = _row_counts(block, len(X))
    forward = getattr(net, "forward", None)
    calls = {  # the real functions of the hot path, not single operations
        "forward": (lambda r: forward(params, X[:r])) if forward else (lambda r: net.stats(params, X[:r], y[:r])),
        "stats": lambda r: net.stats(params, X[:r], y[:r]),
        "grad": lambda r: net.loss_grad_stats(params, X[:r], y[:r]),
    }
    times = {(name, r): [] for name in calls for r in rows}
    for name, r in times:
        calls[name](r)  # warm caches and allocator
    for _ in range(repeats):  # interleaved, so a burst of load spreads over all points
        for (name, r), seen in times.items():
            t0 = time.perf_counter()
            calls[name](r)
            seen.append(time.perf_counter() - t0)
    fits = {name: modelfit.fit_per_pattern(rows, [np.median(times[name, r]) for r in rows],
                                            relative=True) for name in calls}
    tf, t_stats, (t_grad, tc) = fits["forward"][0], fits["stats"][0], fits["grad"]

    strategy = strategies.Sync(lr=0.1, momentum=momentum, block=block)
    state = strategy.init(params)
    total = net.loss_grad_stats(params, X[:block], y[:block])
    tu = _median_seconds(lambda: strategy.apply(net, state, total), repeats)
    tm = _median_seconds(params.copy, repeats)
    # Ta (eq. (9)): a worker scales its weights by the patterns it saw, the update
    # divides the sum (average.Average: work's last line, then apply)
    averaging = average.Average(block=block)
    ta = _median_seconds(lambda: averaging.apply(net, state, (params * block, total[-1])), repeats)
    parts = perfmodel.Constants(tf, max(t_grad - tf, 0.0), tu, tm, max(t_stats - tf, 0.0), 0.0,
                                ta_seconds=ta, tc_seconds=tc)

    # To: one epoch of the serial program beyond its modelled parts (001 eq. (3))
    n_rounds = max(2, len(X) // block)
    n_used = min(len(X), n_rounds * block)
    epoch = _median_seconds(lambda: serial.train_serial(
        net, X[:n_used], y[:n_used], strategy, n_rounds), max(3, repeats // 2))
    to = epoch - perfmodel.sequential_epoch_seconds(block, n_rounds * block, parts)
    return dataclasses.replace(parts, to_seconds=max(float(to), 0.0))
