"""Rounds with one scheduler hop: the reduce and the update run inside the next gradient task.

The explicit round graph (:mod:`ppt_dask.engine.rounds.graph`) puts three hops on a round's critical
path (gradient -> reduce/update -> weights -> next gradient), and on a task graph every hop
costs a message to the scheduler, a decision, a message to a worker and usually a fetch.
Here each worker's task of round ``r + 1`` takes the partial sums of round ``r`` from every
worker, combines them along the fixed shard tree (:func:`ppt_dask.core.tree.evaluate_owned`),
applies the strategy's step to its own copy of the state and computes its next partial
sums. Every worker adds in the same order, so every worker computes bitwise the same total
and the same update, and runs stay bitwise equal on any number of workers and to the serial
path: the replicated reduce of an ``MPI_Allreduce`` (seed 001 reduces by recursive doubling).

Two ways to bring the partial sums together:

* ``"all"``: each task takes the previous tasks of all workers (one hop, ``p - 1`` fetches
  per worker);
* ``"doubling"``: recursive doubling over aligned blocks of the same tree, ``log2 p`` hops
  per round, each a pairwise combine with the partner ``w xor 2**j`` (for many workers; it
  needs a power-of-two number of workers, each holding one aligned subtree, fan-in 2).

A task's output is a :class:`Carry`: its state, its partial sums, and the stats of the last
rounds. The head reads small picks of worker 0's carry: one pick every few rounds returns
the stats of all of them, so the head's messages do not grow with the number of rounds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ppt_dask.core import keys, tree
from ppt_dask.engine.rounds import taskmeta
from ppt_dask.engine.rounds.graph import GenerationGraphs, Plan
from ppt_dask.engine.rounds.steps import SlotStep, slot_steps, sync_partial, sync_update
from ppt_dask.engine.rounds.taskspec import DataNode, Task, TaskRef, parse_input

LOG_ROUNDS = 32  # rounds of stats a carry remembers: the most the head reads at once
PICK_PRIORITY = 10  # Dask runs a worker's ready tasks highest priority first


@dataclass
class Carry:
    """What a one-hop task leaves on its worker.

    ``state`` is the state its gradient was taken at (the state after the previous round),
    ``partial`` its partial sums (tree node -> partial) over the worker's shards, and
    ``log`` the stats ``(round, [loss_sum, n_wrong, n])`` of the last rounds it combined.
    """

    state: Any
    partial: dict
    log: tuple = ()


def _values(inputs) -> dict:
    """The partial sums of the inputs, merged by tree node (carries or hop results)."""
    values: dict = {}
    for item in inputs:
        values.update(item.partial if isinstance(item, Carry) else item)
    return values


def step_task(step: SlotStep, round_index: int, own, shards: list, *inputs) -> Carry:
    """One worker's task: combine the last round, update, compute this round's gradient.

    ``own`` is this worker's previous :class:`Carry`, or the state a generation starts
    from (then there is nothing to combine). ``inputs`` hold the other partial sums of the
    previous round (carries, or the results of the last doubling hop).
    """
    t0 = time.perf_counter()
    log: tuple = ()
    if isinstance(own, Carry):
        total = tree.evaluate_owned(_values((own, *inputs)), step.fan_in, step.n_shards)
        t1 = time.perf_counter()
        state = sync_update(step, own.state, total)
        # plain floats: a log of arrays would be one message frame per array to every reader
        log = (*own.log[-(LOG_ROUNDS - 1):], (round_index - 1, state.stats.tolist()))
    else:
        t1 = t0
        state = own
    t2 = time.perf_counter()
    partial = sync_partial(step, state, shards, round_index) if step.shard_ids else {}
    t3 = time.perf_counter()
    taskmeta.record({"reduce": t1 - t0, "update": t2 - t1, "gradient": t3 - t2})
    return Carry(state, partial, log)


def hop_task(fan_in: int, n_shards: int, left, right) -> dict:
    """One doubling hop: the parent of two sibling subtrees, ``{parent: left + right}``."""
    (lnode, lvalue), = _values((left,)).items()
    (rnode, rvalue), = _values((right,)).items()
    parent = (lnode[0] + 1, lnode[1] // fan_in)
    assert rnode == (lnode[0], lnode[1] + 1) and tree.children(parent, fan_in, n_shards) == [lnode, rnode]
    return {parent: tree.combine([lvalue, rvalue])}


def log_of_carry(carry: Carry) -> tuple:
    return carry.log


def state_of_carry(carry: Carry):
    return carry.state


def can_double(plan: Plan) -> str | None:
    """Why recursive doubling cannot combine this placement, or None when it can."""
    p = len(plan.blocks)
    if p & (p - 1):
        return f"{p} workers is not a power of two"
    if plan.fan_in != 2:
        return f"fan-in {plan.fan_in} (doubling pairs subtrees: fan-in 2)"
    levels = {nodes[0][0] for *_, nodes in plan.blocks if len(nodes) == 1}
    if any(len(nodes) != 1 for *_, nodes in plan.blocks) or len(levels) != 1:
        return "the workers' blocks of shards are not aligned subtrees of one size"
    return None


class OneHopRounds(GenerationGraphs):
    """The head's side of one-hop rounds for one generation of a run.

    Parameters
    ----------
    client, plan, shard_futures
        The cluster, the placement plan (:func:`ppt_dask.engine.rounds.graph.make_plan`), the shards.
    strategy, net
        What each task computes (``strategy.work``/``apply``/``broadcast`` with ``net``).
    tag : str
        ``"<run>-g<generation>"``: in every key, so a resubmitted round never collides.
    start_state : Future
        The state the generation starts from (round ``first``'s tasks take it).
    first : int
        The first round of this generation.
    exchange : {"all", "doubling"}
    """

    lag = 1  # round r's stats are known once round r + 1 has combined them
    max_batch = LOG_ROUNDS

    def __init__(self, client, plan: Plan, shard_futures, strategy, net, tag: str, start_state,
                 first: int, exchange: str = "all"):
        if exchange == "doubling" and can_double(plan):
            raise ValueError(f"exchange='doubling' cannot be used here: {can_double(plan)}")
        self.client, self.plan, self.tag, self.first = client, plan, tag, first
        self.exchange = exchange
        self.shard_futures = list(shard_futures)
        self.steps = slot_steps(strategy, net, plan)
        self.final = SlotStep(strategy, net, (), (), plan.fan_in, plan.n_shards)  # an update alone
        self.start_state = start_state
        self.tasks: dict[int, list] = {}  # round -> futures of the workers' step tasks
        self.picks: dict = {}  # (what, round) -> future
        self.finished: dict[int, Any] = {}  # round -> future of a final update after it
        self.submitted = first - 1

    # -- building graphs -------------------------------------------------------------



    def _inputs(self, r: int, layers: dict) -> list:
        """Per slot, what its task of round ``r`` combines besides its own carry.

        All-to-all: the previous tasks of the other workers. Doubling: ``log2 p - 1`` hops
        as tasks of their own (pairs ``w``, ``w xor 2**j``, each worker combining its own
        copy), then the two halves of the tree."""
        prev = [TaskRef(key) for key in self._round_keys(r - 1)]
        p = len(prev)
        if self.exchange == "all" or p <= 2:
            return [[ref for i, ref in enumerate(prev) if i != slot] for slot in range(p)]
        level, hops = prev, p.bit_length() - 1
        name = self._key(keys.REDUCE, r - 1)
        for j in range(hops - 1):
            for w in range(p):
                left, right = sorted((w, w ^ (1 << j)))
                key = (name, j, w)
                task = Task(key, hop_task, self.plan.fan_in, self.plan.n_shards, level[left], level[right])
                layers[f"{name}-{j}-{w}"] = self._layer(key, task, w)
            level = [TaskRef((name, j, w)) for w in range(p)]
        top = 1 << (hops - 1)
        return [[level[w], level[w ^ top]] for w in range(p)]

    def submit(self, first: int, last: int) -> float:
        """Send rounds ``first..last`` (the next ones) in one graph; the head's seconds.

        The graph also holds a pick of the stats log of the rounds before ``first`` (the
        head reads a batch of rounds at once, see :meth:`stats_range`)."""
        t0 = time.perf_counter()
        assert first == self.submitted + 1 and last >= first, "rounds are submitted in order"
        layers: dict = {}
        wanted: list = []
        for r in range(first, last + 1):
            inputs = None if r == self.first else self._inputs(r, layers)
            for slot, (_label, a, b, _nodes) in enumerate(self.plan.blocks):
                key = self._round_keys(r)[slot]
                if inputs is None:
                    own, more = TaskRef(self.start_state.key), []
                else:
                    own, more = TaskRef(self._round_keys(r - 1)[slot]), inputs[slot]
                shards = parse_input([TaskRef(f.key) for f in self.shard_futures[a:b]])
                task = Task(key, step_task, DataNode(None, self.steps[slot]), r, own, shards, *more)
                layers[f"{key[0]}-{slot}"] = self._layer(key, task, slot)
        # The head holds (wants) only worker 0's tasks, whose carries it picks the state from,
        # and the whole last round, which the next batch builds on; the other tasks are
        # internal to the graph, so the scheduler reports no more to the head per round.
        wanted = [self._round_keys(r)[0] for r in range(first, last)] + self._round_keys(last)
        if first > self.first:  # the stats of the rounds before, from worker 0's next task
            key = self._key(keys.STATS, first)
            task = Task(key, log_of_carry, TaskRef(self._round_keys(first)[0]))
            layers[key] = self._layer(key, task, 0, PICK_PRIORITY)
            wanted.append(key)
        futures = self._send(layers, wanted)
        for i, r in enumerate(range(first, last)):
            self.tasks[r] = [futures[i]]
        p = len(self.plan.blocks)
        self.tasks[last] = futures[last - first:last - first + p]
        if first > self.first:
            self.picks[(keys.LOG, first - 1)] = futures[-1]
        self.submitted = last
        return time.perf_counter() - t0


    def _pick(self, what: str, func, r: int):
        """A pick of worker 0's carry that holds the state after round ``r`` (made once)."""
        if (what, r) not in self.picks:
            key = self._key(what, r + 1)
            task = Task(key, func, TaskRef(self._after(r).key))
            self.picks[(what, r)] = self._send({key: self._layer(key, task, 0, PICK_PRIORITY)}, [key])[0]
        return self.picks[(what, r)]

    def _after(self, r: int):
        """The future of a carry whose state is the state after round ``r``."""
        if r + 1 in self.tasks:
            return self.tasks[r + 1][0]
        if r not in self.finished:  # no next round: one final update on worker 0
            key = self._key(keys.UPDATE, r + 1)
            own = TaskRef(self.tasks[r][0].key)
            inputs = [TaskRef(f.key) for f in self.tasks[r][1:]]
            task = Task(key, step_task, DataNode(None, self.final), r + 1, own, DataNode(None, []), *inputs)
            self.finished[r] = self._send({key: self._layer(key, task, 0)}, [key])[0]
        return self.finished[r]

    # -- what the head reads -----------------------------------------------------------

    def read_stats(self, first: int, last: int, wait) -> list:
        """The stats ``[loss_sum, n_wrong, n]`` of rounds ``first..last`` (one pick of worker
        0's stats log); ``wait(future)`` waits for a result (and watches for lost workers)."""
        return stats_from_log(wait(self._pick(keys.LOG, log_of_carry, last)), first, last)

    def state_after(self, r: int):
        """Future of the state after round ``r``'s update (``first - 1``: the start state)."""
        if r == self.first - 1:
            return self.start_state
        return self._pick(keys.STATE, state_of_carry, r)

    def state_before(self, r: int):
        return self.state_after(r - 1)

    def release(self, last: int) -> None:
        """The head no longer needs what rounds before ``last`` left (a batch is read).

        Dropping the start state matters: the scheduler keeps every released task whose
        dependents are alive, as lineage, and forgets a chain of rounds only from its root
        (a scattered state, once nobody holds it, is forgotten with its whole lineage)."""
        if last >= self.first:
            self.start_state = None
        for key in [k for k in self.picks if k[1] < last - 1]:
            del self.picks[key]
        for r in [r for r in self.finished if r < last - 1]:
            del self.finished[r]
        for r in [r for r in self.tasks if r < last - 1]:
            del self.tasks[r]

    def cancel(self) -> None:
        """Drop every round the head still holds: the scheduler forgets what nobody wants.

        Releasing rather than ``Client.cancel``: cancelling a key also cancels its dependents,
        and distributed asserts that each of them is wanted by a client, which the doubling
        hops (internal to a round's graph) are not. The start state goes too: while the root of
        the rounds is held the scheduler keeps them all as lineage, and a later cancel of the
        shards under them (``exit_data``) would reach those tasks."""
        self.start_state = None
        self.tasks.clear()
        self.picks.clear()
        self.finished.clear()


def stats_from_log(log, first: int, last: int) -> list:
    """The stats of rounds ``first..last`` out of a carry's log (all must be there)."""
    by_round = dict(log)
    missing = [r for r in range(first, last + 1) if r not in by_round]
    assert not missing, f"rounds {missing} are not in the stats log"
    return [by_round[r] for r in range(first, last + 1)]
