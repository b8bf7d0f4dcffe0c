"""Bounded-staleness asynchronous SGD as a strategy (seed 003; Downpour and Hogwild! in
004's references): what a worker's task computes. The head's loop that applies the
gradients as they arrive is :mod:`ppt_dask.engine.asyncloop`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppt_dask.algorithms.strategies import Sync, block_rows, shard_share
from ppt_dask.core.validation import check_int_at_least


@dataclass(frozen=True)
class Async(Sync):
    """Bounded-staleness asynchronous SGD.

    Parameters
    ----------
    lr, momentum, l2 : float
        As :class:`~ppt_dask.algorithms.strategies.Sync`; the head applies each worker's gradient as
        one SGD step (momentum runs across the sequence of applied updates).
    block : int or None
        Patterns per *cluster-wide* block, split over the shards as in ``Sync``; a worker's
        task covers its shards' parts, so each update sees about ``block / p`` patterns.
        None = each worker's whole shards.
    staleness : int
        The largest staleness (in updates) a gradient may have and still be applied.
    """

    staleness: int = 4

    name = "async"
    asynchronous = True

    def __post_init__(self):
        super().__post_init__()
        check_int_at_least("staleness", self.staleness, 0)

    @property
    def exact_stats(self) -> bool:
        return False

    def work(self, net, params, shard, s: int, step: int) -> tuple:
        X, y = shard
        share = None if self.block is None else shard_share(self.block, self.n_shards, s)
        rows = block_rows(len(X), share, step)
        return net.loss_grad_stats(params, X[rows], y[rows])
