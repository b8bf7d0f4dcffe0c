"""Rounds of the local strategy: the shards run on while the last average travels.

A task graph of :class:`ppt_dask.algorithms.localsgd.LocalSGD` (``exchange="all"``; the default is one
long task per worker, :mod:`ppt_dask.engine.rounds.stream`). Each worker's task of round ``r``
takes its own task of round ``r - 1`` (its shards' models) and the other workers' tasks of
round ``r - 2``: it combines round ``r - 2``'s partial sums along the fixed shard tree
(every worker adds in the same order, so all get bitwise the same average), pulls its
shards toward that average, and runs round ``r``'s local steps. A task depends on another
worker's result one round after that result was made, so the exchange overlaps the ``k``
local steps in between: a worker waits only for the scheduler to hand it its own next task.

A task's output is a :class:`LocalCarry`. The head reads, per batch of rounds, one small
task that adds the workers' logged stats in tree order (so a round's stats are known as
soon as its tasks end), and gathers the whole state (every shard's model and the averages
still to apply) only when it keeps a copy, checks the target or ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ppt_dask.algorithms.localsgd import round_stats
from ppt_dask.core import keys, tree
from ppt_dask.engine.rounds import taskmeta
from ppt_dask.engine.rounds.graph import GenerationGraphs, Plan
from ppt_dask.engine.rounds.onehop import LOG_ROUNDS, PICK_PRIORITY
from ppt_dask.engine.rounds.steps import (
    SlotStep,
    local_log,
    local_round,
    local_start,
    local_state,
    slot_steps,
    start_average,
)
from ppt_dask.engine.rounds.taskspec import DataNode, Task, TaskRef, parse_input


@dataclass
class LocalCarry:
    """What a worker's task of round ``r`` leaves: its shards' models after ``r``, its partial
    sums of ``r`` and ``r - 1`` (tree node -> partial), ``m^(r-1)`` when a generation's
    start state supplied it, the stats of its subtrees for the last rounds, and the running
    mean ``a^(r-2)`` (:meth:`ppt_dask.algorithms.localsgd.LocalSGD.mean_with`)."""

    models: dict
    partial: dict
    previous: dict
    pending: Any = None
    log: tuple = ()
    mean: Any = None


def local_step_task(step: SlotStep, r: int, combine: bool, own, shards: list, *others) -> LocalCarry:
    """One worker's round ``r``: the average of round ``r - 2``, then its shards' local steps.

    ``own`` is this worker's carry of round ``r - 1``, or the state a generation starts
    from. With ``combine``, ``others`` are the other workers' carries of round ``r - 2``;
    without, the average comes from the start state (or there is none yet)."""
    t0 = time.perf_counter()
    if isinstance(own, LocalCarry):
        models, pending_next, previous, mean = own.models, None, own.partial, own.mean
        if combine:
            values = tree.merged([own.previous, *(c.partial for c in others)])
            average = step.strategy.average_of(tree.evaluate_owned(values, step.fan_in, step.n_shards))
        else:
            average = own.pending
    else:  # the start state: the shards' models and the last two averages
        (models, mean), average = local_start(step, own), start_average(own, r)
        pending_next, previous = start_average(own, r + 1), {}
    t1 = time.perf_counter()
    done, partial, mean = local_round(step, models, average, mean, shards, r)
    t2 = time.perf_counter()
    log = ((own.log[-(LOG_ROUNDS - 1):] if isinstance(own, LocalCarry) else ()) + ((r, local_log(partial)),))
    taskmeta.record({"reduce": t1 - t0, "gradient": t2 - t1})
    return LocalCarry(done, partial, previous, pending_next, log, mean)


def local_stats_task(first: int, last: int, fan_in: int, n_shards: int, *carries) -> list:
    """The stats ``[loss_sum, n_wrong, n]`` of rounds ``first..last``, added in tree order
    from every worker's log (``carries``: all workers' carries of round ``last``)."""
    logs = [dict(c.log) for c in carries]
    return round_stats([[log[r] for r in range(first, last + 1)] for log in logs], fan_in, n_shards)


def local_state_task(strategy, r: int, fan_in: int, n_shards: int, *carries):
    """The whole state after round ``r`` from every worker's carry of round ``r``."""
    parts = [(c.models, c.partial, c.previous, c.mean) for c in carries]
    return local_state(strategy, r, parts, carries[0].pending, fan_in, n_shards)


class OverlapRounds(GenerationGraphs):
    """The head's side of the local strategy's rounds for one generation of a run.

    Same interface as :class:`ppt_dask.engine.rounds.onehop.OneHopRounds` (``submit``, ``read_stats``,
    ``state_after``, ``state_before``, ``release``, ``cancel``)."""

    lag = 0  # a round's stats are read from its own tasks
    max_batch = LOG_ROUNDS

    def __init__(self, client, plan: Plan, shard_futures, strategy, net, tag: str, start_state, first: int):
        self.client, self.plan, self.tag, self.first = client, plan, tag, first
        self.strategy = strategy
        self.shard_futures = list(shard_futures)
        self.steps = slot_steps(strategy, net, plan)
        self.start_state = start_state
        self.tasks: dict[int, list] = {}  # round -> futures of every worker's task
        self.picks: dict = {}
        self.submitted = first - 1




    def submit(self, first: int, last: int) -> float:
        """Send rounds ``first..last`` and the task that adds their stats; the head's seconds."""
        t0 = time.perf_counter()
        assert first == self.submitted + 1 and last >= first, "rounds are submitted in order"
        layers: dict = {}
        for r in range(first, last + 1):
            combine = r - 2 >= self.first
            round_keys = self._round_keys(r)
            for slot, (_label, a, b, _nodes) in enumerate(self.plan.blocks):
                own = TaskRef(self.start_state.key) if r == self.first else TaskRef(self._round_keys(r - 1)[slot])
                others = [TaskRef(k) for w, k in enumerate(self._round_keys(r - 2)) if w != slot] if combine else []
                shards = parse_input([TaskRef(f.key) for f in self.shard_futures[a:b]])
                task = Task(round_keys[slot], local_step_task, DataNode(None, self.steps[slot]), r, combine, own,
                            shards, *others)
                layers[f"{round_keys[slot][0]}-{slot}"] = self._layer(round_keys[slot], task, slot)
        stats_key = self._key(keys.STATS, last)
        layers[stats_key] = self._layer(stats_key, Task(
            stats_key, local_stats_task, first, last, self.plan.fan_in, self.plan.n_shards,
            *(TaskRef(k) for k in self._round_keys(last))), 0, PICK_PRIORITY)
        wanted = [k for r in range(first, last + 1) for k in self._round_keys(r)] + [stats_key]
        futures = self._send(layers, wanted)
        p = len(self.plan.blocks)
        for i, r in enumerate(range(first, last + 1)):
            self.tasks[r] = futures[i * p:(i + 1) * p]
        self.picks[("stats", first, last)] = futures[-1]
        self.submitted = last
        return time.perf_counter() - t0

    def read_stats(self, first: int, last: int, wait) -> list:
        return list(wait(self.picks.pop(("stats", first, last))))

    def state_after(self, r: int):
        """Future of the whole state after round ``r`` (``first - 1``: the start state)."""
        if r == self.first - 1:
            return self.start_state
        if ("state", r) not in self.picks:
            key = self._key(keys.UPDATE, r)
            task = Task(key, local_state_task, DataNode(None, self.strategy), r, self.plan.fan_in,
                        self.plan.n_shards, *(TaskRef(f.key) for f in self.tasks[r]))
            self.picks[("state", r)] = self._send({key: self._layer(key, task, 0, PICK_PRIORITY)}, [key])[0]
        return self.picks[("state", r)]

    def state_before(self, r: int):
        return self.state_after(r - 1)

    def release(self, last: int) -> None:
        """The head no longer needs rounds before ``last - 1`` (see ``OneHopRounds.release``)."""
        if last >= self.first:
            self.start_state = None
        for key in [k for k in self.picks if k[0] == "state" and k[1] < last - 1]:
            del self.picks[key]
        for r in [r for r in self.tasks if r < last - 1]:
            del self.tasks[r]

    def cancel(self) -> None:
        self.start_state = None  # see OneHopRounds.cancel
        self.tasks.clear()
        self.picks.clear()
