"""The serial reference: the same rounds in one process, no Dask.

It runs the strategy's own ``work`` on every shard, adds the partials along the same
fixed tree (:func:`ppt_dask.core.tree.reduce_serial`) and applies the same update, so a seeded
distributed run must end with bitwise the same weights. With ``reproducible="same-p"`` and
``workers=p`` it runs what ``p`` workers run under that promise instead: each worker slot's
rows of a round in one pass (the strategy's ``slot_sums`` with ``whole``), the slots' partials
added along the tree over the slots. With ``n_shards=1`` it is also the plain serial program
that speedups are measured against (001's T_serial).
"""

from __future__ import annotations

import time

import numpy as np

from ppt_dask.algorithms import localsgd
from ppt_dask.core import model, tree


def train_serial(net, X: np.ndarray, y: np.ndarray, strategy, rounds: int, *, n_shards: int = 1,
                 seed: int = 0, params: np.ndarray | None = None, fan_in: int = 2,
                 replicate: bool = False, reproducible: str = "any-p", workers: int = 1):
    """Run ``rounds`` rounds of ``strategy`` on ``n_shards`` shards of (X, y) serially.

    ``reproducible="same-p"`` runs the rounds of ``workers`` worker slots that each compute their
    block of shards in one pass (:func:`ppt_dask.train`'s ``reproducible``); "any-p" (the
    default) every shard on its own, which is what any number of workers computes.

    ``net`` is any network of the model protocol (:mod:`ppt_dask.core.model`); ``X`` has
    shape ``(n, *net.row_shape)``.

    Returns
    -------
    params : ndarray, shape (net.n_params,)
        The weights after the last round.
    history : list of dict
        Per round: loss, error_rate (of the weights the round started from), seconds.
    """
    X = np.ascontiguousarray(X, dtype=net.dtype)
    y = np.ascontiguousarray(y)
    net = model.for_rows(net, X.shape[1:])
    rows = tree.split_rows(len(X), n_shards)
    if replicate:  # every shard is the whole set (000's replicated data)
        rows = [(0, len(X))] * n_shards
    strategy = strategy.check([b - a for a, b in rows], seed, replicate)
    shards = [(X[a:b], y[a:b]) for a, b in rows]
    state = strategy.init(net.init_params(seed) if params is None else params)
    if getattr(strategy, "shard_models", False):  # every shard keeps its own model (localsgd)
        state, totals = localsgd.train_serial(net, shards, strategy, state, rounds, fan_in)
        return state.params, [{"round": r, "loss": t[0] / t[2], "error_rate": t[1] / t[2]}
                              for r, t in enumerate(totals)]
    if reproducible not in ("any-p", "same-p"):
        raise ValueError(f"reproducible must be 'any-p' or 'same-p', got {reproducible!r}")
    slots = [(a, b) for a, b in tree.split_shards(n_shards, workers) if b > a] if reproducible == "same-p" else []
    history = []
    for r in range(rounds):
        t0 = time.perf_counter()
        broadcast = strategy.broadcast(state)
        if slots:  # one pass a slot: its leaf (0, k) of the tree over the slots
            parts = [strategy.slot_sums(net, broadcast, shards[a:b], range(a, b), r, ((0, k),), fan_in, len(slots),
                                        whole=True)[(0, k)] for k, (a, b) in enumerate(slots)]
        else:
            parts = [strategy.work(net, broadcast, shard, s, r) for s, shard in enumerate(shards)]
        state = strategy.apply(net, state, tree.reduce_serial(parts, fan_in))
        loss_sum, n_wrong, n = state.stats
        history.append({"round": r, "loss": loss_sum / n, "error_rate": n_wrong / n,
                        "wall_seconds": time.perf_counter() - t0})
    return state.params, history
