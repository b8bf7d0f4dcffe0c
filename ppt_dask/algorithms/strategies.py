"""Training strategies: what each shard's task computes and how the total is applied.

A strategy is a frozen dataclass (picklable, validated in ``__post_init__``) with

* ``work(net, broadcast, shard, s, r) -> partial``: the worker-side pure function for
  shard ``s`` in round ``r``; a tuple of arrays that add up, the last one the stats vector
  ``[loss_sum, n_wrong, n]``;
* ``slot_sums(net, broadcast, shards, shard_ids, r, nodes, fan_in, n_shards, whole)``: what a
  worker slot sends for round ``r``, its shards' partials added along the fixed tree (tree node
  -> partial), each bitwise what ``work`` gives shard by shard; the strategies whose work is a
  gradient sum over rows (:class:`Sync`, :class:`PPT`) compute all the slot's shards in one
  batched pass (:func:`ppt_dask.core.model.shard_sums`), and with ``whole`` (the run's
  ``reproducible="same-p"``) the slot's rows in one pass, one partial for the slot;
* ``apply(net, state, total) -> ModelState``: the update task's step;
* ``broadcast(state)``: what the map tasks receive (the weights);
* ``check(shard_rows, seed, replicated)``: validation against the data, before any cluster
  work, returning a copy that knows the shard sizes and the seed;
* ``rounds_per_epoch(n_rows)``.

``net`` is any network of the model protocol (:mod:`ppt_dask.core.model`). All run on the
same placed shards, the same round graph and the same tree reduce. Random
draws come from a stream per (seed, round, shard), so results do not depend on which
worker runs a shard. Pure numpy: no dask import.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ppt_dask.core import model, tree
from ppt_dask.core.optimizers import SGD, init_state, sgd_step
from ppt_dask.core.validation import check_int_at_least


@dataclass
class ModelState:
    """What lives on the cluster between rounds (the output of an update task)."""

    params: np.ndarray
    opt_state: Any
    stats: np.ndarray = field(default_factory=lambda: np.zeros(3))  # [loss_sum, n_wrong, n]
    round: int = -1


def block_rows(n_rows: int, block: int | None, step: int) -> np.ndarray | slice:
    """Rows of a shard for its ``step``-th block of ``block`` rows, walking in order.

    The shard wraps around, so ``n_rows / block`` steps make one pass (one epoch).
    ``block=None`` means the whole shard (learning by epoch).
    """
    if block is None or block >= n_rows:
        return slice(0, n_rows)
    start = (step * block) % n_rows
    if start + block <= n_rows:
        return slice(start, start + block)  # a view: no copy in the hot loop
    return np.r_[start:n_rows, 0:start + block - n_rows]


def shard_share(total: int, n_shards: int, s: int) -> int:
    """Shard ``s``'s part of ``total`` patterns (parts differ by at most one)."""
    return (s + 1) * total // n_shards - s * total // n_shards


def stream(seed: int, r: int, s: int, *more: int) -> np.random.Generator:
    """The random stream of shard ``s`` in round ``r``: the same on any worker."""
    return np.random.default_rng([seed, r, s, *more])


def _count(name: str, value, allow_none: bool = False) -> None:
    if not (value is None and allow_none):
        check_int_at_least(name, value, 1)


@dataclass(frozen=True)
class _Base:
    """Learning rate, momentum and L2, and the data layout (filled by :meth:`check`)."""

    lr: float = 0.1
    momentum: float = 0.0
    l2: float = 0.0
    shard_rows: tuple = ()  # filled by check()
    seed: int = 0
    replicated: bool = False

    def __post_init__(self):
        SGD(self.lr, self.momentum, self.l2)  # validates

    @functools.cached_property
    def optimizer(self) -> SGD:  # made once: every round's update asks for it
        return SGD(self.lr, self.momentum, self.l2)

    @property
    def n_shards(self) -> int:
        return len(self.shard_rows)

    @property
    def exact_stats(self) -> bool:
        """Whether a round's stats cover the whole training set."""
        return False

    def check(self, shard_rows, seed: int = 0, replicated: bool = False):
        return replace(self, shard_rows=tuple(int(n) for n in shard_rows), seed=int(seed),
                       replicated=bool(replicated))

    def init(self, params: np.ndarray) -> ModelState:
        return ModelState(params, init_state(self.optimizer, params))

    def broadcast(self, state: ModelState):
        return state.params

    def apply(self, net, state: ModelState, total: tuple) -> ModelState:
        """One SGD step on the summed gradient (Dahl et al. (2008): sum, then apply once)."""
        grad_sum, stats = total
        params, opt_state = sgd_step(self.optimizer, state.params, grad_sum, stats[2],
                                     state.opt_state, model.weight_mask(net))
        return ModelState(params, opt_state, stats, state.round + 1)


class _Rows:
    """What the strategies whose work is a gradient sum over some rows of each shard share:
    ``rows(n_rows, s, r)`` names shard ``s``'s rows of round ``r``; :meth:`work` is one pass over
    them, :meth:`slot_sums` one pass over all the slot's shards' rows (see the module notes)."""

    def rows(self, n_rows: int, s: int, r: int):
        raise NotImplementedError

    def work(self, net, params, shard, s: int, r: int) -> tuple:
        X, y = shard
        rows = self.rows(len(X), s, r)
        return net.loss_grad_stats(params, X[rows], y[rows])

    def slot_sums(self, net, params, shards: list, shard_ids, r: int, nodes, fan_in: int, n_shards: int,
                  whole: bool = False) -> dict:
        """Round ``r``'s partial sums of a worker slot, tree node -> partial: its shards' gradient
        sums from one batched pass, added along the fixed tree (each bitwise :meth:`work` of its
        shard), or with ``whole`` one pass over all their rows, the slot's one leaf ``nodes[0]``
        of the tree over the slots (:func:`ppt_dask.core.model.one_pass`)."""
        if type(self).work is not _Rows.work:  # a subclass's own work: shard by shard, as it says
            return shard_by_shard(self, net, params, shards, shard_ids, r, nodes, fan_in, n_shards, whole)
        blocks = []
        for (X, y), s in zip(shards, shard_ids):
            rows = self.rows(len(X), s, r)
            blocks.append((X[rows], y[rows]))
        if whole:
            (node,) = nodes
            return {node: model.one_pass(net, params, blocks)}
        leaves = dict(zip(shard_ids, model.shard_sums(net, params, blocks)))
        return {node: tree.evaluate(node, leaves.__getitem__, fan_in, n_shards) for node in nodes}


def shard_by_shard(strategy, net, broadcast, shards: list, shard_ids, r: int, nodes, fan_in: int, n_shards: int,
                   whole: bool = False) -> dict:
    """A slot's partial sums from ``strategy.work`` shard by shard, added along the fixed tree, or
    with ``whole`` (the slot's one leaf) left to right."""
    leaves = {s: strategy.work(net, broadcast, shard, s, r) for s, shard in zip(shard_ids, shards)}
    if whole:
        (node,) = nodes
        return {node: tree.combine([leaves[s] for s in shard_ids])}
    return {node: tree.evaluate(node, leaves.__getitem__, fan_in, n_shards) for node in nodes}


@dataclass(frozen=True)
class Sync(_Rows, _Base):
    """Synchronous gradient descent: by epoch (``block=None``) or by block.

    Learning by block as Mörchen (2004) runs it with MPI's Allreduce: every round each
    shard takes its part of the block; the gradient summed over those rows is added in a
    fixed order and one SGD step (momentum, L2) is taken with the mean gradient. The run's
    ``reproducible`` (:func:`ppt_dask.train`) says how a worker computes its shards' parts:
    each shard's sum on its own, added along the fixed shard tree (the same weights, to the
    bit, on any number of workers), or all its rows in one pass (the same weights on the
    same number of workers; the default).

    Parameters
    ----------
    lr : float
        Learning rate, > 0.
    momentum : float
        Momentum coefficient, in [0, 1).
    l2 : float
        L2 penalty on the weights (not the biases), >= 0.
    block : int or None
        Patterns per update over all shards (split over them, at least one row each);
        None: the whole training set (full-batch gradient descent).

    See Also
    --------
    ppt_dask.train : runs a strategy on placed shards.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> ppt.Sync(lr=0.5, momentum=0.9, block=1000).name    # mini-batch SGD
    'block'
    >>> ppt.Sync(lr=0.5).name                               # the whole set a round
    'epoch'
    >>> ppt.Sync(lr=-1)
    Traceback (most recent call last):
    ...
    ValueError: lr must be > 0, got -1
    """

    block: int | None = None

    def __post_init__(self):
        super().__post_init__()
        _count("block", self.block, allow_none=True)

    @property
    def name(self) -> str:
        return "epoch" if self.block is None else "block"

    @property
    def exact_stats(self) -> bool:
        return self.block is None and not self.replicated

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> Sync:
        n_rows = shard_rows[0] if replicated else sum(shard_rows)
        if self.block is not None and self.block < len(shard_rows):
            raise ValueError(f"block ({self.block}) must be at least the number of shards ({len(shard_rows)})")
        if self.block is not None and self.block > n_rows:
            raise ValueError(f"block ({self.block}) is larger than the training set ({n_rows} rows)")
        return super().check(shard_rows, seed, replicated)

    def rounds_per_epoch(self, n_rows: int) -> float:
        return 1.0 if self.block is None else n_rows / self.block

    def rows(self, n_rows: int, s: int, r: int) -> np.ndarray | slice:
        """Shard ``s``'s rows of round ``r``: its share of the block, walking in order."""
        return block_rows(n_rows, None if self.block is None else shard_share(self.block, self.n_shards, s), r)


@dataclass(frozen=True)
class PPT(_Rows, _Base):
    """Pattern Parallel Training (Dahl et al., 2008): random local epochs, summed updates.

    Each round every shard draws ``local_epoch`` patterns at random (without replacement
    within the round) from its shard, or from the whole training set when the shards are
    replicated (the paper's setting: ``enter_data(..., replicate=True)``), and returns the
    gradient sum; the sums are added along the shard tree and one momentum step is
    applied, as the paper does with Allgather. The paper tunes ``local_epoch`` per node:
    with one shard per worker (the command line's default for this strategy) it has the
    paper's meaning.

    Parameters
    ----------
    lr : float
        Learning rate, > 0.
    momentum : float
        Momentum coefficient, in [0, 1) (the paper: 0.3 on 8-bit parity).
    l2 : float
        L2 penalty on the weights (not the biases), >= 0.
    local_epoch : int
        Patterns each shard draws a round, at most the rows of the smallest shard (of the
        whole set when replicated).

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> strategy = ppt.PPT(lr=0.1, momentum=0.3, local_epoch=64)
    >>> strategy.name, strategy.local_epoch
    ('ppt', 64)
    """

    local_epoch: int = 32

    def __post_init__(self):
        super().__post_init__()
        _count("local_epoch", self.local_epoch)

    name = "ppt"

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> PPT:
        smallest = min(shard_rows)
        if self.local_epoch > smallest:
            where = "the training set" if replicated else "the smallest shard"
            raise ValueError(f"local_epoch ({self.local_epoch}) is larger than {where} ({smallest} rows); "
                             "use fewer shards, a smaller local epoch, or replicate the data")
        return super().check(shard_rows, seed, replicated)

    def rounds_per_epoch(self, n_rows: int) -> float:
        return n_rows / (self.local_epoch * self.n_shards)

    def rows(self, n_rows: int, s: int, r: int) -> np.ndarray:
        """Shard ``s``'s draw of round ``r``: ``local_epoch`` rows, from its own stream."""
        return np.sort(stream(self.seed, r, s).choice(n_rows, self.local_epoch, replace=False))


def evaluate_work(net, params, shard, s: int, r: int) -> tuple:
    """Forward pass only: the stats of ``params`` on a whole shard."""
    X, y = shard
    return (net.stats(params, X, y),)


def evaluate_apply(state, total: tuple) -> ModelState:
    return ModelState(state, None, total[0])
