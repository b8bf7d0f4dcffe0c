"""One training round as a Dask task graph: map, tree reduce, update.

Like an OmpCluster ``target nowait depend(...)`` region (seed 002), the head describes a
round and hands the whole of it to the scheduler at once (one ``update_graph`` message,
about 0.1 ms of head time per task, against 0.3-0.45 ms per ``client.submit``):

* ``ppt-grad-g{gen}-r{round}``, one per worker, pinned to that worker by a resource label,
  takes the current weights and loops over the worker's resident shards, returning the
  values of the largest subtrees of the fixed shard tree inside its block of shards;
* ``ppt-reduce-g{gen}-r{round}``, one per remaining tree node (fan-in ``k``), on whichever
  worker holds its inputs, never on the head;
* ``ppt-update-g{gen}-r{round}`` combines the root's children and applies the strategy's
  step; its output (weights plus optimizer state) is the next round's input;
* ``ppt-weights-...`` and ``ppt-stats-...`` pick the weights (what the next round's map
  tasks receive) and the few scalars the head reads.

Task functions are module level, so the dashboard's task stream names them by prefix.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

from ppt_dask.core import keys, tree
from ppt_dask.engine.rounds.steps import slot_work
from ppt_dask.engine.rounds.taskspec import DataNode, Task, TaskRef, parse_input

# ---- task functions (worker side) ------------------------------------------------------


def pick(value, node):
    """A child's value: a node out of a worker's dict, or a reduce task's output."""
    return value if node is None else value[node]


def reduce_task(*children) -> tuple:
    """``children`` alternates (value, node-or-None); combined left to right."""
    return tree.combine([pick(v, n) for v, n in zip(children[::2], children[1::2])])


def update_task(apply: Callable, state, *children):
    return apply(state, reduce_task(*children))


def weights_of(state) -> np.ndarray:
    return state.params


def stats_of(state) -> np.ndarray:
    return state.stats


# ---- the plan (head side, computed once per placement) --------------------------------


@dataclass(frozen=True)
class Plan:
    """Which worker evaluates which tree nodes, and which nodes need a reduce task.

    The tree's leaves are the shards, or with ``whole`` (``reproducible="same-p"``) the worker
    slots: each slot then sends one partial, its rows' sums from one pass, and the slots' partials
    are added along the tree over the slots (``n_shards`` counts the tree's leaves)."""

    fan_in: int
    n_shards: int
    blocks: tuple  # per worker slot: (label, shard_start, shard_stop, nodes)
    reduces: tuple  # tree nodes needing a reduce task, children before parents
    root: tuple
    whole: bool = False

    def owner(self, node) -> int | None:
        for slot, (_, _, _, nodes) in enumerate(self.blocks):
            if node in nodes:
                return slot
        return None


def make_plan(worker_blocks: list[tuple[str, int, int]], n_shards: int, fan_in: int, whole: bool = False) -> Plan:
    """``worker_blocks``: per worker ``(resource label, first shard, stop shard)``; with ``whole``
    the tree is over the slots (slot ``k``'s one leaf ``(0, k)``), else over the ``n_shards`` shards."""
    if whole:
        n_shards = len(worker_blocks)
        blocks = tuple((label, a, b, ((0, k),)) for k, (label, a, b) in enumerate(worker_blocks))
    else:
        blocks = tuple(
            (label, a, b, tuple(tree.decompose(a, b, fan_in, n_shards))) for label, a, b in worker_blocks
        )
    owned = {n for *_, nodes in blocks for n in nodes}
    reduces: list = []

    def visit(node):
        if node in owned:
            return
        for child in tree.children(node, fan_in, n_shards):
            visit(child)
        reduces.append(node)

    root = tree.root(n_shards, fan_in)
    visit(root)
    return Plan(fan_in, n_shards, blocks, tuple(reduces), root, whole)


# ---- building and sending graphs ----------------------------------------------------------


def pinned_layer(key, task: Task, label: str, priority: int = 0) -> MaterializedLayer:
    """One task as a layer, pinned to the worker that holds the slot's ``label`` (a resource);
    ``priority``: Dask runs a worker's ready tasks highest priority first."""
    annotations: dict = {"resources": {label: 1}}
    if priority:
        annotations["priority"] = priority
    return MaterializedLayer({key: task}, annotations=annotations)


def send(client, layers: dict, wanted: list) -> list:
    """Submit ``layers`` as one graph; futures of the ``wanted`` keys."""
    return list(client.get(HighLevelGraph(layers, {name: set() for name in layers}), wanted, sync=False))


class GenerationGraphs:
    """What the round objects build their graphs with: the keys of their generation (``tag``),
    layers pinned to a worker slot of ``plan``, and a send through ``client``."""

    client: object
    plan: Plan
    tag: str

    def _key(self, prefix: str, r: int) -> str:
        return keys.round_name(prefix, self.tag, r)

    def _round_keys(self, r: int) -> list:
        """The keys of round ``r``'s per-worker tasks, one per slot."""
        return [(self._key(keys.GRAD, r), slot) for slot in range(len(self.plan.blocks))]

    def _layer(self, key, task: Task, slot: int, priority: int = 0) -> MaterializedLayer:
        return pinned_layer(key, task, self.plan.blocks[slot][0], priority)

    def _send(self, layers: dict, wanted: list) -> list:
        return send(self.client, layers, wanted)

    def salvage(self, r: int) -> None:
        """None: after a lost worker a round graph's state is gone with it (the trainer goes
        back to its last copy)."""
        return None

    def loop_phases(self, r: int) -> None:
        """None: a round graph's tasks are timed by the scheduler, not by a loop of their own
        (:meth:`ppt_dask.engine.rounds.stream.StreamRounds.loop_phases`)."""
        return None


# ---- one round ------------------------------------------------------------------------


def round_graph(plan: Plan, shard_futures: list, work: Callable, apply: Callable,
                weights, state, round_index: int, tag: str, prefix: str = keys.GRAD,
                broadcast: Callable = weights_of):
    """The graph of one round and the keys the head keeps: (update, weights, stats).

    ``work(weights, shards, shard_ids, round_index, nodes, fan_in, n_shards)`` is a worker
    slot's map task: its subtrees' partial sums (tree node -> partial; a strategy's
    ``slot_sums``, or :func:`ppt_dask.engine.rounds.steps.partial_sums` of a per-shard function).

    ``tag`` names the run, the generation and the round (``"3f2a9c1b-g0-r12"``), so a
    resubmitted round never collides with an old one (the scheduler refuses a key it knows
    with another task: "Detected different run_spec") and the dashboard still groups keys by prefix (``ppt-grad``).
    ``broadcast(state)`` is what the next round's map tasks receive (the weights).
    """
    layers: dict[str, MaterializedLayer] = {}
    refs: dict = {}  # tree node -> (reference, node-or-None) to feed a parent

    for slot, (label, a, b, nodes) in enumerate(plan.blocks):
        key = (keys.name(prefix, tag), slot)
        task = Task(key, work, weights, parse_input(list(shard_futures[a:b])),
                    tuple(range(a, b)), round_index, DataNode(None, tuple(nodes)),
                    plan.fan_in, plan.n_shards)
        layers[f"{keys.name(prefix, tag)}-{slot}"] = pinned_layer(key, task, label)
        for node in nodes:
            refs[node] = (TaskRef(key), node)

    def child_args(node) -> list:
        args: list = []
        for child in tree.children(node, plan.fan_in, plan.n_shards):
            ref, sub = refs[child]
            args += [ref, DataNode(None, sub)]
        return args

    reduce_tasks = {}
    for node in plan.reduces:
        if node == plan.root:
            continue  # the root's combine happens inside the update task
        key = (keys.name(keys.REDUCE, tag), *node)
        reduce_tasks[key] = Task(key, reduce_task, *child_args(node))
        refs[node] = (TaskRef(key), None)
    if reduce_tasks:
        layers[keys.name(keys.REDUCE, tag)] = MaterializedLayer(reduce_tasks)

    if plan.root in plan.reduces:
        root_args = child_args(plan.root)
    else:
        ref, sub = refs[plan.root]
        root_args = [ref, DataNode(None, sub)]
    update_key, weights_key, stats_key = (keys.name(p, tag) for p in (keys.UPDATE, keys.WEIGHTS, keys.STATS))
    layers[update_key] = MaterializedLayer({
        update_key: Task(update_key, update_task, DataNode(None, apply), state, *root_args),
        weights_key: Task(weights_key, broadcast, TaskRef(update_key)),
        stats_key: Task(stats_key, stats_of, TaskRef(update_key)),
    })
    graph = HighLevelGraph(layers, {name: set() for name in layers})
    return graph, (update_key, weights_key, stats_key)


def submit_round(client, plan: Plan, shard_futures, work, apply, weights, state,
                 round_index: int, tag: str, prefix: str = keys.GRAD,
                 broadcast: Callable = weights_of):
    """Send one round to the scheduler; return futures (update, weights, stats)."""
    graph, wanted = round_graph(plan, shard_futures, work, apply, weights, state,
                              round_index, tag, prefix, broadcast)
    futures = client.get(graph, list(wanted), sync=False)
    return tuple(futures)


class TreeRounds(GenerationGraphs):
    """The head's side of explicit-graph rounds (map, reduce tasks, update) for one
    generation: the same interface as :class:`ppt_dask.engine.rounds.onehop.OneHopRounds`."""

    exchange = "tree"
    lag = 0  # round r's stats come from round r's own update task
    max_batch = 64

    def __init__(self, client, plan: Plan, shard_futures, strategy, net, tag: str, start_state,
                 first: int):
        import functools

        self.client, self.plan, self.tag, self.first = client, plan, tag, first
        self.shard_futures = list(shard_futures)
        self.work = slot_work(strategy, net, plan.whole)
        self.apply = functools.partial(strategy.apply, net)
        self.broadcast = strategy.broadcast
        self.start_state = start_state
        self.weights = client.submit(strategy.broadcast, start_state, key=keys.name(keys.WEIGHTS, f"{tag}-init"))
        self.rounds: dict[int, tuple] = {}  # round -> (update, weights, stats) futures
        self.submitted = first - 1

    def submit(self, first: int, last: int) -> float:
        """Send rounds ``first..last`` in one graph; the head's seconds."""
        t0 = time.perf_counter()
        assert first == self.submitted + 1 and last >= first, "rounds are submitted in order"
        layers, wanted = {}, []
        weights, state = TaskRef(self.weights.key), TaskRef(self.state_after(first - 1).key)
        for r in range(first, last + 1):
            g, round_keys = round_graph(self.plan, self.shard_futures, self.work, self.apply, weights,
                                        state, r, keys.round_tag(self.tag, r), broadcast=self.broadcast)
            layers.update(g.layers)
            wanted += round_keys
            state, weights = TaskRef(round_keys[0]), TaskRef(round_keys[1])
        futures = self._send(layers, wanted)
        for i, r in enumerate(range(first, last + 1)):
            self.rounds[r] = tuple(futures[3 * i:3 * i + 3])
        self.weights = self.rounds[last][1]
        self.submitted = last
        return time.perf_counter() - t0

    def read_stats(self, first: int, last: int, wait) -> list:
        """The stats of rounds ``first..last``: wait for the last, gather all at once."""
        wait(self.rounds[last][2])
        return self.client.gather([self.rounds[r][2] for r in range(first, last + 1)])

    def state_after(self, r: int):
        return self.start_state if r == self.first - 1 else self.rounds[r][0]

    def state_before(self, r: int):
        return self.state_after(r - 1)

    def release(self, last: int) -> None:
        """Drop what rounds before ``last`` left, and the start state (see
        :meth:`ppt_dask.engine.rounds.onehop.OneHopRounds.release`)."""
        if last >= self.first:
            self.start_state = None
        for r in [r for r in self.rounds if r < last - 1]:
            del self.rounds[r]

    def cancel(self) -> None:
        """Drop every round the head still holds (see :meth:`OneHopRounds.cancel`: a round's
        map and reduce tasks are wanted by no client, so ``Client.cancel`` cannot be used)."""
        self.start_state = self.weights = None
        self.rounds.clear()
