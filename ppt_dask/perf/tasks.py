"""The task graph of a round, counted: reduction-tree levels, tasks per round, and how the
shards and a block's patterns fall on the workers. Pure Python and numpy, for the model
(:mod:`ppt_dask.perf.model`), mirroring what :mod:`ppt_dask.engine.rounds.onehop` (the default round
graph) and :mod:`ppt_dask.engine.rounds.graph` (the explicit tree) build.
"""

from __future__ import annotations

import functools

import numpy as np

from ppt_dask.core.validation import check_int_array_at_least, check_int_at_least


def ceil_div(a, b):
    return -(-a // b)


def check_fan_in(fan_in) -> int:
    """``fan_in`` as an int if it is an integer >= 2 (a reduction tree's children per node)."""
    return check_int_at_least("fan_in", fan_in, 2)


def tree_levels(p, fan_in: int = 2):
    """``ceil(log_k p)``: levels of a reduction tree of fan-in k over p leaves (0 for p=1).

    Integer arithmetic, so ``tree_levels(8) == 3`` exactly. Shape of ``p``.
    """
    p, k = check_int_array_at_least("p", p, 1), check_fan_in(fan_in)
    levels, span = np.zeros_like(p), np.ones_like(p)
    while (short := span < p).any():
        levels += short
        span = np.where(short, span * k, span)
    return levels if levels.ndim else int(levels)


@functools.lru_cache(maxsize=4096)
def _round_tasks(p: int, k: int, s: int) -> int:
    """Tasks of :func:`ppt_dask.engine.rounds.graph.round_graph` for p workers over s shards, fan-in k.

    Mirrors ``tree.split_shards`` (contiguous blocks of shards per worker),
    ``tree.decompose`` (each worker evaluates the largest subtrees inside its block) and
    ``graph.make_plan`` (a reduce task per tree node above those, the root's combine
    fused into the update). Pure Python here so this module needs no dask.
    """
    def node_range(level, j):
        return j * k**level, min((j + 1) * k**level, s)

    def children(level, j):
        span = k ** (level - 1)
        return [(level - 1, c) for c in range(j * k, (j + 1) * k) if c * span < s]

    height = 0
    while k**height < s:
        height += 1
    owned: set = set()
    maps = 0
    for w in range(p):
        a, b = w * s // p, (w + 1) * s // p
        if b == a:
            continue  # a worker without shards gets no task (ShardSet.worker_blocks)
        maps += 1
        stack = [(height, 0)]
        while stack:
            node = stack.pop()
            lo, hi = node_range(*node)
            if hi <= a or lo >= b:
                continue
            if a <= lo and hi <= b:
                owned.add(node)
            else:
                stack.extend(children(*node))
    reduces, stack = 0, [(height, 0)]
    while stack:  # the tree nodes above the owned ones
        node = stack.pop()
        if node not in owned:
            reduces += 1
            stack.extend(children(*node))
    fused_root = 1 if (height, 0) not in owned else 0
    return maps + (reduces - fused_root) + 3  # + update, weights, stats


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


DOUBLING_FROM = 8  # as ppt_dask.engine.rounds.choose.DOUBLING_FROM (a test checks they agree)


def _doubles(workers: int, k: int, s: int) -> bool:
    """Whether ``choose_graph`` combines by recursive doubling: from ``DOUBLING_FROM``
    workers, a power of two of them, fan-in 2, and blocks that are aligned subtrees of one
    size (the same number of shards each, a power of two)."""
    aligned = k == 2 and _power_of_two(workers) and s % workers == 0 and _power_of_two(s // workers)
    return workers >= DOUBLING_FROM and aligned


def _one_hop_tasks(p: int, k: int, s: int, exchange: str) -> int:
    """Tasks of a round of :class:`ppt_dask.engine.rounds.onehop.OneHopRounds`: a step per worker
    holding shards, and with recursive doubling ``log2 p - 1`` hop tasks per worker. "auto"
    doubles as :func:`ppt_dask.engine.rounds.choose.choose_graph` does: from ``DOUBLING_FROM``
    workers, a power of two of them, fan-in 2, and blocks that are aligned subtrees of one
    size (the same number of shards each, a power of two)."""
    workers = min(p, s)
    doubling = exchange == "doubling" or (exchange == "auto" and _doubles(workers, k, s))
    hops = (workers.bit_length() - 2) * workers if doubling and workers > 2 else 0
    return workers + hops


EXCHANGES = ("auto", "all", "doubling", "tree")  # the per-round graphs ("auto": choose_graph's pick)
ROUND_EXCHANGES = ("auto", "stream", "all", "doubling", "tree")  # what ppt.train takes


def streamed(p, fan_in: int = 2, n_shards=None, exchange: str = "auto"):
    """Whether ``ppt.train(..., exchange=exchange)`` runs p workers' rounds streamed (one loop
    per worker, :mod:`ppt_dask.engine.rounds.stream`) rather than as a per-round graph, as
    :func:`ppt_dask.engine.rounds.choose.choose_exchange` decides for the synchronous strategies:
    "stream" and "auto" always, the graphs never. Shape of ``p`` (bools).

    >>> [bool(streamed(p, n_shards=max(p, 8))) for p in (1, 2, 4, 8, 16, 12)]
    [True, True, True, True, True, True]
    """
    p = check_int_array_at_least("p", p, 1)
    check_fan_in(fan_in)
    if exchange not in ROUND_EXCHANGES:
        raise ValueError(f"exchange must be one of {ROUND_EXCHANGES}, got {exchange!r}")
    out = np.full(p.shape, exchange in ("auto", "stream"))
    return out if out.ndim else bool(out)


def tasks_per_round(p, fan_in: int = 2, n_shards=None, exchange: str = "auto"):
    """Tasks of one round of the round graph ``exchange`` (as :func:`ppt_dask.train` takes it).

    "auto", "all" and "doubling" are the one-hop rounds of :mod:`ppt_dask.engine.rounds.onehop`
    (the default): a step per worker holding shards (its reduce, update and gradient), plus
    ``log2 p - 1`` hop tasks per worker where the workers combine by recursive doubling.
    "tree" is the explicit graph of :func:`ppt_dask.engine.rounds.graph.round_graph`: one ``ppt-grad`` task per
    worker holding shards, a ``ppt-reduce`` task per node of the fixed shard tree (fan-in
    k) above the subtrees the workers evaluate themselves, except the root, whose combine
    is fused into ``ppt-update``; then ``ppt-update``, ``ppt-weights`` and ``ppt-stats``.
    ``n_shards`` None means one shard per worker (the tree over p leaves, 001's picture).
    Fit :func:`ppt_dask.perf.fit.fit_head` with the same counting. Shape of ``p``.

    >>> [tasks_per_round(p) for p in (1, 2, 4, 8)]
    [1, 2, 4, 24]
    >>> [tasks_per_round(p, exchange="tree") for p in (1, 2, 4, 8)]
    [4, 5, 9, 17]
    >>> tasks_per_round(3, n_shards=8, exchange="tree")  # shards 0-1 | 2-4 | 5-7: three reduce tasks
    9
    """
    p, k = check_int_array_at_least("p", p, 1), check_fan_in(fan_in)
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
    s = None if n_shards is None else int(check_int_array_at_least("n_shards", n_shards, 1))
    count = _round_tasks if exchange == "tree" else functools.partial(_one_hop_tasks, exchange=exchange)
    flat = [count(int(q), k, int(q) if s is None else s) for q in p.ravel()]
    total = np.array(flat, dtype=np.int64).reshape(p.shape)
    return total if total.ndim else int(total)


def layout(p, n_shards):
    """Workers that hold shards, and the most shards one of them holds (calls per round)."""
    p = check_int_array_at_least("p", p, 1)
    if n_shards is None:
        return p, np.ones_like(p)
    s = int(check_int_array_at_least("n_shards", n_shards, 1))
    workers = np.minimum(p, s)
    return workers, ceil_div(s, workers)


def slowest_patterns(workers, b, n_shards):
    """Patterns of the busiest worker when a block of b is split over the shards.

    001 assumes p | b: ``b/p``. With ``n_shards`` given, Sync gives shard s the share
    ``floor((s+1) b/S) - floor(s b/S)`` and worker w the shards ``[w S/p, (w+1) S/p)``.
    """
    if n_shards is None:
        return ceil_div(b, workers)
    s = int(n_shards)
    workers, b = np.broadcast_arrays(workers, b)
    most = np.zeros(workers.shape, dtype=np.int64)
    for w in range(int(workers.max())):
        first, stop = w * s // workers, (w + 1) * s // workers
        share = stop * b // s - first * b // s
        most = np.where(w < workers, np.maximum(most, share), most)
    return most
