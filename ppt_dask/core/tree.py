"""The fixed reduction tree over logical shard indices (pure Python and numpy).

Seed 001 reduces with recursive doubling (``MPI_Allreduce``, depth ``ceil(log2 p)``);
OmpCluster (seed 002) combines per-task results in reduce tasks. Here the tree is fixed
by the *shard* indices, not by the workers: node ``(level, j)`` covers shards
``[j * k**level, (j + 1) * k**level)`` (clipped to ``n_shards``), leaves are the shards
(level 0), and a node's value is its children's values summed left to right by
:func:`combine`. A worker holding a contiguous range of shards evaluates the largest
subtrees inside its range (:func:`decompose`); reduce tasks evaluate the rest. Because
every addition happens in the same order wherever it runs, the result is bitwise the
same on 1, 2 or 8 workers and equals :func:`reduce_serial`.

A *partial* is a tuple of numpy arrays (for example ``(grad_sum, stats)``) that adds up
elementwise.

>>> import numpy as np
>>> parts = [(np.array([float(i)]),) for i in range(5)]
>>> reduce_serial(parts, fan_in=2)[0]
array([10.])
>>> decompose(1, 5, fan_in=2, n_shards=5)
[(0, 1), (1, 1), (0, 4)]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ppt_dask.core.validation import check_n_shards

Node = tuple[int, int]  # (level, index at that level)


def height(n_shards: int, fan_in: int) -> int:
    """Levels above the leaves: ``ceil(log_k n_shards)`` (0 for one shard)."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be >= 1, got {n_shards}")
    if fan_in < 2:
        raise ValueError(f"fan_in must be >= 2, got {fan_in}")
    h, span = 0, 1
    while span < n_shards:
        span *= fan_in
        h += 1
    return h


def root(n_shards: int, fan_in: int) -> Node:
    return (height(n_shards, fan_in), 0)


def node_range(node: Node, fan_in: int, n_shards: int) -> tuple[int, int]:
    """Shard indices ``[start, stop)`` under ``node``."""
    level, j = node
    span = fan_in**level
    return j * span, min((j + 1) * span, n_shards)


def children(node: Node, fan_in: int, n_shards: int) -> list[Node]:
    """The node's children that hold at least one shard, left to right."""
    level, j = node
    if level == 0:
        return []
    span = fan_in ** (level - 1)
    return [(level - 1, c) for c in range(j * fan_in, (j + 1) * fan_in) if c * span < n_shards]


def decompose(start: int, stop: int, fan_in: int, n_shards: int) -> list[Node]:
    """The maximal subtrees lying wholly inside shards ``[start, stop)``, left to right."""
    if not 0 <= start < stop <= n_shards:
        raise ValueError(f"bad shard range [{start}, {stop}) for {n_shards} shards")
    out: list[Node] = []

    def visit(node: Node) -> None:
        a, b = node_range(node, fan_in, n_shards)
        if b <= start or a >= stop:
            return
        if start <= a and b <= stop:
            out.append(node)
            return
        for child in children(node, fan_in, n_shards):
            visit(child)

    visit(root(n_shards, fan_in))
    return out


def merged(parts) -> dict:
    """One dict of subtree values from several (each maps tree nodes to partials)."""
    values: dict = {}
    for part in parts:
        values.update(part)
    return values


def combine(parts: Sequence[tuple]) -> tuple:
    """Sum partials left to right: ``((p0 + p1) + p2) + ...``, into fresh arrays."""
    if len(parts) == 1:
        return parts[0]
    acc = [a + b for a, b in zip(parts[0], parts[1])]
    for part in parts[2:]:
        for acc_i, part_i in zip(acc, part):
            acc_i += part_i
    return tuple(acc)


def evaluate(node: Node, leaf: Callable[[int], tuple], fan_in: int, n_shards: int) -> tuple:
    """The value of ``node``, with ``leaf(s)`` giving shard ``s``'s partial."""
    if node[0] == 0:
        return leaf(node[1])
    return combine([evaluate(c, leaf, fan_in, n_shards) for c in children(node, fan_in, n_shards)])


def evaluate_owned(values: dict, fan_in: int, n_shards: int, node: Node | None = None) -> tuple:
    """The value of ``node`` (default: the root) from the values of some subtrees.

    ``values`` maps tree nodes (for example the maximal subtrees of every worker's block,
    :func:`decompose`) to their partials; a node found there is used as it is, any other
    is combined from its children. Every worker that calls this with the same ``values``
    adds in the same order, so every worker gets bitwise the same total.
    """
    node = root(n_shards, fan_in) if node is None else node
    if node in values:
        return values[node]
    if node[0] == 0:
        raise KeyError(f"no value for shard {node[1]} or any subtree holding it")
    return combine([evaluate_owned(values, fan_in, n_shards, c) for c in children(node, fan_in, n_shards)])


def reduce_serial(parts: Sequence[tuple], fan_in: int = 2) -> tuple:
    """The reference: the whole tree evaluated in one process."""
    n = len(parts)
    return evaluate(root(n, fan_in), parts.__getitem__, fan_in, n)


def split_rows(n_rows: int, n_shards: int) -> list[tuple[int, int]]:
    """Rows ``[start, stop)`` of each shard; sizes differ by at most one."""
    check_n_shards(n_shards, n_rows)
    edges = [(s * n_rows) // n_shards for s in range(n_shards + 1)]
    return list(zip(edges[:-1], edges[1:]))


def split_shards(n_shards: int, n_workers: int) -> list[tuple[int, int]]:
    """Contiguous blocks of shards per worker (empty blocks when workers > shards)."""
    edges = [(w * n_shards) // n_workers for w in range(n_workers + 1)]
    return list(zip(edges[:-1], edges[1:]))
