"""Training strategies: what each shard's task computes and how the total is applied.

A strategy is a frozen dataclass (picklable, validated in ``__post_init__``) with

* ``work(net, params, shard, s, r) -> partial``: the worker-side pure function for shard
  ``s`` in round ``r`` (a tuple of arrays that add up, ending with the stats vector
  ``[loss_sum, n_wrong, n]``);
* ``apply(net, state, total) -> ModelState``: the update task's step;
* ``rounds_per_epoch(n_rows)``.

All run on the same placed shards, the same round graph and the same tree reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .optimizers import SGD, init_state, sgd_step


@dataclass
class ModelState:
    """What lives on the cluster between rounds (the output of an update task)."""

    params: np.ndarray
    opt_state: Any
    stats: np.ndarray = field(default_factory=lambda: np.zeros(3))  # [loss_sum, n_wrong, n]
    round: int = -1


def block_rows(n_rows: int, block: int | None, round_index: int) -> np.ndarray | slice:
    """Rows of a shard used in round ``round_index`` when it takes ``block`` rows a round.

    The shard is walked in order and wraps around, so ``n_rows / block`` rounds make one
    pass (one epoch). ``block=None`` means the whole shard (learning by epoch).
    """
    if block is None or block >= n_rows:
        return slice(0, n_rows)
    start = (round_index * block) % n_rows
    if start + block <= n_rows:
        return slice(start, start + block)  # a view: no copy in the hot loop
    return np.r_[start:n_rows, 0:start + block - n_rows]


def shard_share(total: int, n_shards: int, s: int) -> int:
    """Shard ``s``'s part of ``total`` patterns (parts differ by at most one)."""
    return (s + 1) * total // n_shards - s * total // n_shards


@dataclass(frozen=True)
class Sync:
    """Synchronous gradient descent: by epoch (``block=None``) or by block (001).

    Every round each shard computes the gradient sum over its part of the block; the
    tree reduce adds them in shard order; the update applies one SGD step with momentum
    and L2 to the mean gradient (``optimizers.sgd_step``).

    Parameters
    ----------
    lr, momentum, l2 : float
        See :class:`ppt_dask.optimizers.SGD`.
    block : int or None
        Patterns per update over all shards (split over them); None = the whole set.
    n_shards : int
        Filled in by the trainer from the shard set (needed to split the block).
    """

    lr: float = 0.1
    momentum: float = 0.0
    l2: float = 0.0
    block: int | None = None
    n_shards: int = 1

    def __post_init__(self):
        SGD(self.lr, self.momentum, self.l2)  # validates
        if self.block is not None and (isinstance(self.block, bool) or int(self.block) != self.block
                                       or self.block < 1):
            raise ValueError(f"block must be a positive integer or None, got {self.block!r}")

    @property
    def name(self) -> str:
        return "epoch" if self.block is None else "block"

    @property
    def optimizer(self) -> SGD:
        return SGD(self.lr, self.momentum, self.l2)

    @property
    def exact_stats(self) -> bool:
        """True when a round's stats cover the whole training set."""
        return self.block is None

    def check(self, n_rows: int, n_shards: int) -> "Sync":
        """Validate against the data; return a copy that knows the shard count."""
        if self.block is not None and self.block < n_shards:
            raise ValueError(f"block ({self.block}) must be at least the number of shards ({n_shards})")
        if self.block is not None and self.block > n_rows:
            raise ValueError(f"block ({self.block}) is larger than the training set ({n_rows} rows)")
        return replace(self, n_shards=n_shards)

    def rounds_per_epoch(self, n_rows: int) -> float:
        return 1.0 if self.block is None else n_rows / self.block

    def rounds_for(self, epochs: float, n_rows: int) -> int:
        return max(1, math.ceil(epochs * self.rounds_per_epoch(n_rows) - 1e-9))

    def init(self, params: np.ndarray) -> ModelState:
        return ModelState(params, init_state(self.optimizer, params))

    def work(self, net, params, shard, s: int, r: int) -> tuple:
        X, y = shard
        share = None if self.block is None else shard_share(self.block, self.n_shards, s)
        rows = block_rows(len(X), share, r)
        return net.loss_grad_stats(params, X[rows], y[rows])

    def apply(self, net, state: ModelState, total: tuple) -> ModelState:
        grad_sum, stats = total
        params, opt_state = sgd_step(self.optimizer, state.params, grad_sum, stats[2],
                                     state.opt_state, net.weight_mask())
        return ModelState(params, opt_state, stats, state.round + 1)


def evaluate_work(net, params, shard, s: int, r: int) -> tuple:
    """Forward pass only: the stats of ``params`` on a whole shard."""
    X, y = shard
    return (net.stats(params, X, y),)


def evaluate_apply(state, total: tuple) -> ModelState:
    return ModelState(state, None, total[0])


STRATEGIES = {"epoch": Sync, "block": Sync}


def make(name: str, **params):
    """A strategy by the name users type (``--strategy``)."""
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {sorted(STRATEGIES)}")
    if name == "epoch":
        params["block"] = None
    elif name == "block" and params.get("block") is None:
        raise ValueError("strategy 'block' needs a block size (--block N)")
    return STRATEGIES[name](**params)
