"""The worker-side step of each round kind, once: what a worker slot computes in a round.

Every transport calls these, and they differ only in how the partial sums travel: the
streamed loops (:mod:`ppt_dask.engine.rounds.stream`) send them worker to worker through their
allreduce, the per-round graphs (:mod:`ppt_dask.engine.rounds.onehop`,
:mod:`ppt_dask.engine.rounds.graph`, :mod:`ppt_dask.engine.rounds.overlap`) hand them to the
scheduler as task results. Whatever carried them, the total is added along the fixed tree
(over the shards, or with ``reproducible="same-p"`` over the worker slots), so every transport
gives bitwise the same rounds.

* synchronous (:class:`~ppt_dask.Sync`, :class:`~ppt_dask.PPT`, :class:`~ppt_dask.Average`):
  :func:`sync_partial` (the slot's partial sums at a state), then, once the total is there,
  :func:`sync_update` (the strategy's step);
* local SGD (:class:`~ppt_dask.LocalSGD`): :func:`local_start` (the slot's shard models from a
  state), :func:`local_round` (the average of round ``r - 2`` taken into the running mean,
  the shards' local steps, their partial sums) and :func:`local_state` (the whole state
  after a round from every slot's part);
* asynchronous (:class:`~ppt_dask.Async`): one transport only, the streamed loops of
  :mod:`ppt_dask.engine.rounds.streamasync`, whose step is
  :func:`ppt_dask.algorithms.asynchronous.step_gradient`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ppt_dask.algorithms.localsgd import block_round, state_after
from ppt_dask.algorithms.strategies import shard_by_shard
from ppt_dask.core import tree


@dataclass(frozen=True)
class SlotStep:
    """The fixed arguments of one worker slot's step: what it trains, its block of shards
    (``shard_ids``) and the subtrees of the fixed tree they make (``nodes``, over ``n_shards``
    leaves). With ``whole`` (``reproducible="same-p"``) the tree's leaves are the worker slots
    and the slot computes its one leaf in one pass over its shards' rows."""

    strategy: Any
    net: Any
    shard_ids: tuple
    nodes: tuple
    fan_in: int
    n_shards: int
    whole: bool = False


def slot_steps(strategy, net, plan) -> list[SlotStep]:
    """One :class:`SlotStep` per worker slot of ``plan`` (:class:`ppt_dask.engine.rounds.graph.Plan`)."""
    return [SlotStep(strategy, net, tuple(range(a, b)), tuple(nodes), plan.fan_in, plan.n_shards, plan.whole)
            for _label, a, b, nodes in plan.blocks]


def partial_sums(work: Callable, params, shards: list, shard_ids: list[int], round_index: int,
                 nodes: list, fan_in: int, n_shards: int) -> dict:
    """Run ``work`` on each resident shard, pre-combined into this worker's subtrees (a pass a
    shard: the checks of the training set, :func:`ppt_dask.engine.result.evaluate`; the rounds
    go through their strategy's ``slot_sums``, :func:`sync_partial`)."""
    position = {s: i for i, s in enumerate(shard_ids)}
    cache: dict[int, tuple] = {}

    def leaf(s: int) -> tuple:
        if s not in cache:
            cache[s] = work(params, shards[position[s]], s, round_index)
        return cache[s]

    return {node: tree.evaluate(node, leaf, fan_in, n_shards) for node in nodes}


# ---- synchronous rounds ---------------------------------------------------------------


def slot_work(strategy, net, whole: bool = False) -> Callable:
    """A worker slot's map of a round, ``(broadcast, shards, shard_ids, r, nodes, fan_in, n_shards)
    -> {tree node: partial}``: the strategy's ``slot_sums`` (all the slot's shards at once), or for
    a strategy that has only ``work`` (a probe of :mod:`ppt_dask.perf.probes`, one of a user's)
    its ``work`` shard by shard."""
    own = getattr(strategy, "slot_sums", None)
    if own is not None:
        return functools.partial(own, net, whole=whole)
    return functools.partial(shard_by_shard, strategy, net, whole=whole)


def sync_partial(step: SlotStep, state, shards: list, r: int) -> dict:
    """Round ``r``'s partial sums of the slot's subtrees (tree node -> partial) at ``state``,
    the state after round ``r - 1`` (:func:`slot_work`)."""
    return slot_work(step.strategy, step.net, step.whole)(step.strategy.broadcast(state), shards, step.shard_ids, r,
                                                          step.nodes, step.fan_in, step.n_shards)


def sync_update(step: SlotStep, state, total: tuple):
    """The state after a round: the strategy's step from ``state`` with the round's ``total``
    (every slot's partial sums added along the fixed tree)."""
    return step.strategy.apply(step.net, state, total)


# ---- local SGD rounds -------------------------------------------------------------------


def local_start(step: SlotStep, state) -> tuple[dict, Any]:
    """The slot's shards' models and the running mean ``a^(first-3)`` a generation starts from."""
    return {s: step.strategy.model_of(state, s) for s in step.shard_ids}, state.opt_state.get("mean")


def start_average(state, r: int):
    """The average ``m^(r-2)`` a generation's first two rounds take from its start state
    (None before the run's first average)."""
    return state.opt_state["averages"].get(r - 2)


def local_round(step: SlotStep, models: dict, average, mean, shards: list, r: int) -> tuple[dict, dict, Any]:
    """Round ``r`` of the slot's shards: ``average`` (``m^(r-2)``) taken into the running
    ``mean``, the shards pulled toward it and their local steps. Returns the shards' new
    models, their partial sums (tree node -> partial) and the new mean ``a^(r-2)``."""
    mean = step.strategy.mean_with(mean, average)
    models, partial = block_round(step.strategy, step.net, models, average, shards, step.shard_ids, step.nodes, r,
                                  step.fan_in, step.n_shards)
    return models, partial, mean


def local_log(partial: dict) -> dict:
    """What the head reads of a round's partial sums: each subtree's stats (tree node -> (stats,)),
    as plain floats (an array is frames of its own in every message that carries it: the head
    read 16 rounds of 8 loops' logs in about 35 frames a round)."""
    return {node: (value[-1].tolist(),) for node, value in partial.items()}


def local_state(strategy, r: int, parts: list, pending, fan_in: int, n_shards: int):
    """The whole state after round ``r`` from every slot's part ``(models, partial, previous,
    mean)``: its shards' models after ``r``, its partial sums of ``r`` and ``r - 1``
    (``previous`` None where a generation's start supplied ``m^(r-1)`` as ``pending``) and the
    running mean the slots hold (all the same)."""
    previous = [part[2] for part in parts]
    merged_previous = tree.merged(previous) if all(p for p in previous) else None
    return state_after(strategy, r, tree.merged(part[0] for part in parts), tree.merged(part[1] for part in parts),
                       merged_previous, pending, fan_in, n_shards, parts[0][3])
