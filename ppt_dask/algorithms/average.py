"""Weight averaging, the strategy of the paper's section VII (:class:`Average`): each shard
runs local SGD from the averaged weights and the head averages the results. Beside the
gradient strategies of :mod:`ppt_dask.algorithms.strategies`, whose base and helpers it uses.
Pure numpy: no dask import.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppt_dask.algorithms.strategies import ModelState, _Base, _count, block_rows, shard_by_shard, stream
from ppt_dask.core import model
from ppt_dask.core.optimizers import init_state, sgd_step

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
