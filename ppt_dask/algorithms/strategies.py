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


MOMENTUM_POLICIES = ("reset", "average")


@dataclass(frozen=True)
class Average(_Base):
    """Weight averaging (Mörchen, 2004, section VII); model averaging (Alowaisheq and Dhami).

    Each round every shard starts from the averaged weights, applies local SGD updates on
    its own data with mini-batches of ``block`` rows for ``interval`` patterns (or
    ``local_epochs`` passes over the shard), and returns its weights times the patterns it
    saw; the sums are added along the shard tree and divided by the total, so the new
    weights are the average weighted by patterns seen.

    Parameters
    ----------
    lr : float
        Learning rate of the local steps, > 0.
    momentum : float
        Momentum coefficient of the local steps, in [0, 1).
    l2 : float
        L2 penalty on the weights (not the biases), >= 0.
    block : int or None
        Local mini-batch (the local block *b* of Mörchen (2004)); None = the whole shard.
    interval : int, optional
        Patterns per shard between averages (Mörchen's *a*). Default: ``local_epochs``
        passes.
    local_epochs : float
        Passes over the shard between averages (Alowaisheq and Dhami average every 5).
    sample_fraction : float, optional
        The sampling of Alowaisheq and Dhami: each local step draws this fraction of the
        shard *with replacement* (they draw 90%); ``block`` is then ignored. Default: walk
        the shard in order in blocks of ``block`` rows.
    momentum_policy : {"reset", "average"}
        The optimizer state across averages: "reset" starts every round's local updates
        with zero velocity; "average" averages the velocities like the weights and sends
        both to the next round. Keeping momentum locally on each worker is not offered:
        it would be state held by a worker between rounds, lost with the worker and
        dependent on which worker runs a shard.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> strategy = ppt.Average(lr=0.1, momentum=0.9, block=10, local_epochs=5)
    >>> strategy.name, strategy.momentum_policy
    ('average', 'reset')
    """

    block: int | None = None
    interval: int | None = None
    local_epochs: float = 1.0
    sample_fraction: float | None = None
    momentum_policy: str = "reset"

    name = "average"

    def __post_init__(self):
        super().__post_init__()
        _count("block", self.block, allow_none=True)
        _count("interval", self.interval, allow_none=True)
        if not self.local_epochs > 0:
            raise ValueError(f"local_epochs must be > 0, got {self.local_epochs!r}")
        if self.sample_fraction is not None and not 0 < self.sample_fraction <= 1:
            raise ValueError(f"sample_fraction must be in (0, 1], got {self.sample_fraction!r}")
        if self.momentum_policy not in MOMENTUM_POLICIES:
            raise ValueError(f"momentum_policy must be one of {MOMENTUM_POLICIES}, got {self.momentum_policy!r}")

    def _batch(self, n_rows: int) -> int:
        if self.sample_fraction is not None:
            return max(1, round(self.sample_fraction * n_rows))
        return n_rows if self.block is None else min(self.block, n_rows)

    def _patterns(self, n_rows: int) -> int:
        return self.interval if self.interval is not None else max(1, round(self.local_epochs * n_rows))

    def steps(self, n_rows: int) -> int:
        """Local updates per round for a shard of ``n_rows`` rows.

        With ``sample_fraction`` (004) every local step is one sampled mini-batch, which
        004 counts as an epoch: ``local_epochs`` steps per round.
        """
        if self.sample_fraction is not None and self.interval is None:
            return max(1, round(self.local_epochs))
        return max(1, -(-self._patterns(n_rows) // self._batch(n_rows)))

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> Average:
        if self.block is not None and self.block > min(shard_rows):
            raise ValueError(f"block ({self.block}) is larger than the smallest shard ({min(shard_rows)} rows)")
        return super().check(shard_rows, seed, replicated)

    def rounds_per_epoch(self, n_rows: int) -> float:
        if self.sample_fraction is not None and self.interval is None:
            return 1.0 / self.steps(n_rows)  # 004: one sampled mini-batch is one epoch
        seen = sum(self.steps(n) * self._batch(n) for n in self.shard_rows)
        return n_rows / seen

    def init(self, params: np.ndarray) -> ModelState:
        velocity = np.zeros_like(params) if self.momentum_policy == "average" else None
        return ModelState(params, velocity)

    def broadcast(self, state: ModelState):
        return state.params if self.momentum_policy == "reset" else (state.params, state.opt_state)

    def work(self, net, broadcast, shard, s: int, r: int) -> tuple:
        X, y = shard
        params, velocity = (broadcast, None) if self.momentum_policy == "reset" else broadcast
        opt, mask = self.optimizer, model.weight_mask(net)
        state = init_state(opt, params)
        if velocity is not None:
            state["velocity"] = velocity
        batch, steps = self._batch(len(X)), self.steps(len(X))
        stats = np.zeros(3)
        rng = stream(self.seed, r, s) if self.sample_fraction is not None else None
        for i in range(steps):
            rows = (rng.integers(0, len(X), batch) if rng is not None
                    else block_rows(len(X), batch, r * steps + i))
            grad_sum, step_stats = net.loss_grad_stats(params, X[rows], y[rows])
            stats += step_stats
            params, state = sgd_step(opt, params, grad_sum, step_stats[2], state, mask)
        weight = stats[2]
        if self.momentum_policy == "reset":
            return params * weight, stats
        return params * weight, state["velocity"] * weight, stats

    def slot_sums(self, net, broadcast, shards: list, shard_ids, r: int, nodes, fan_in: int, n_shards: int,
                  whole: bool = False) -> dict:
        """Round ``r``'s partial sums of a worker slot (its ``shards``, the data of ``shard_ids``):
        tree node -> partial, for the subtrees ``nodes`` of its block, from :meth:`work` shard by
        shard (each shard's local steps move its own weights: nothing to batch). No one-pass
        rounds (``whole``): a model per shard gives the same bits on any number of workers."""
        if whole:
            raise ValueError("the average strategy has no one-pass rounds (reproducible='same-p')")
        return shard_by_shard(self, net, broadcast, shards, shard_ids, r, nodes, fan_in, n_shards)

    def apply(self, net, state: ModelState, total: tuple) -> ModelState:
        stats = total[-1]
        params = total[0] / stats[2]
        velocity = total[1] / stats[2] if self.momentum_policy == "average" else None
        return ModelState(params, velocity, stats, state.round + 1)


def evaluate_work(net, params, shard, s: int, r: int) -> tuple:
    """Forward pass only: the stats of ``params`` on a whole shard."""
    X, y = shard
    return (net.stats(params, X, y),)


def evaluate_apply(state, total: tuple) -> ModelState:
    return ModelState(state, None, total[0])
