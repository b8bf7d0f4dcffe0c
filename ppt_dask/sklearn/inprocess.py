"""A fit's rounds in this process, without Dask: where a cluster cannot be used or would not pay.

The rounds are those of the serial reference (:mod:`ppt_dask.algorithms.serial`): the
strategy's own work on every shard, the partials added along the same fixed tree, the same
update, so a seeded fit gives bitwise the weights a cluster gives for the same ``n_shards``.
It runs round by round, so that the estimator's ``on_round`` (the ``tol`` rule, early
stopping) stops it where :func:`ppt_dask.train` would, and it returns what that returns
(params, state, history, outcome). Pure numpy: what a joblib process, a thread or a Dask
task can run without waiting on anything.

The rounds run with ``BLAS_THREADS`` BLAS and OpenMP threads, as a worker of the default
LocalCluster computes them (its nanny gives each worker one): the steps' products are small,
and more threads only wait for each other. On scikit-learn's digits (1200 rows, 40 epochs of
``PPTClassifier()``) on the 2-core machine: 0.24-0.27 s on one thread, 0.93-4.6 s on two.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from ppt_dask.algorithms import localsgd
from ppt_dask.core import model, tree
from ppt_dask.core.outcome import Outcome

BLAS_THREADS = 1  # a default worker's (see the module's docstring)


@dataclass
class HereResult:
    """What :func:`train_here` leaves: the fields of :class:`ppt_dask.engine.result.Result`
    that the estimator reads."""

    params: np.ndarray
    state: object
    history: list = field(default_factory=list)
    outcome: Outcome = Outcome.MAX_EPOCHS
    stopped_because: str = "max_epochs"
    wall_seconds: float = 0.0
    learned: bool = False
    settings: dict = field(default_factory=dict)


def _round(net, strategy, state, shards: list, fan_in: int):
    """One round from ``state``: the new state and its (loss sum, wrong, patterns)."""
    if getattr(strategy, "shard_models", False):  # local SGD: every shard keeps its own model
        state, totals = localsgd.train_serial(net, shards, strategy, state, 1, fan_in)
        return state, totals[-1]
    r = state.round + 1
    broadcast = strategy.broadcast(state)
    parts = [strategy.work(net, broadcast, shard, s, r) for s, shard in enumerate(shards)]
    state = strategy.apply(net, state, tree.reduce_serial(parts, fan_in))
    return state, state.stats


def train_here(*args, **kwargs) -> HereResult:
    """:func:`_train_here` on ``BLAS_THREADS`` BLAS and OpenMP threads (put back after)."""
    with threadpool_limits(limits=BLAS_THREADS):
        return _train_here(*args, **kwargs)


def _train_here(net, X: np.ndarray, y: np.ndarray, strategy, epochs: int, *, n_shards: int, seed: int,
               params=None, fan_in: int = 2, on_round=None, state=None) -> HereResult:
    """Train ``epochs`` epochs of ``strategy`` on ``n_shards`` shards of (X, y) here.

    ``on_round(record)`` is called after every round with the trainer's record keys
    (``round``, ``epoch``, ``loss``, ``error_rate``, ``patterns``, ``wall_seconds``); a true
    answer stops the run after that round (``Outcome.STOPPED``). A round whose loss is not
    finite ends the run with the weights it started from (``Outcome.DIVERGED``). ``state``
    (a previous result's) goes on from its weights, optimizer state and round number, as
    :func:`ppt_dask.train`'s ``initial_state``.
    """
    if strategy.name == "async":
        raise ValueError("strategy='async' needs a cluster (its workers step on their own); fit it with a "
                         "client, or choose strategy='local' to train where the fit runs")
    X = np.ascontiguousarray(X, dtype=net.dtype)
    y = np.ascontiguousarray(y)
    net = model.for_rows(net, X.shape[1:])
    rows = tree.split_rows(len(X), n_shards)
    strategy = strategy.check([b - a for a, b in rows], seed, False)
    shards = [(X[a:b], y[a:b]) for a, b in rows]
    if state is None:
        state = strategy.init(net.init_params(seed) if params is None else np.asarray(params, dtype=net.dtype))
    rounds_per_epoch = strategy.rounds_per_epoch(len(X))
    first = state.round + 1
    max_rounds = max(1, math.ceil(epochs * rounds_per_epoch - 1e-9))
    history: list = []
    t_start = time.perf_counter()
    for r in range(first, first + max_rounds):
        t0 = time.perf_counter()
        before = state
        state, stats = _round(net, strategy, state, shards, fan_in)
        loss_sum, n_wrong, n = (float(v) for v in stats)
        now = time.perf_counter()
        record = {"round": r, "epoch": (r + 1) / rounds_per_epoch, "loss": loss_sum / n,
                  "error_rate": n_wrong / n, "patterns": n, "wall_seconds": now - t0,
                  "head_seconds": now - t0, "elapsed_seconds": now - t_start}
        if not math.isfinite(record["loss"]):
            return HereResult(before.params, before, history, Outcome.DIVERGED, Outcome.DIVERGED.words(f"round {r}"),
                              now - t_start)
        history.append(record)
        if on_round is not None and on_round(record):
            return HereResult(state.params, state, history, Outcome.STOPPED, Outcome.STOPPED.words(), now - t_start)
    return HereResult(state.params, state, history, wall_seconds=time.perf_counter() - t_start)
