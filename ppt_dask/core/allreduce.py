"""The allreduce of the streamed rounds, as pure functions: which algorithm, and its pieces.

Every loop of a synchronous round holds the values of its block's subtrees of the fixed
shard tree (:mod:`ppt_dask.core.tree`) and needs the root's value, added in the tree's order,
as an ``MPI_Allreduce`` gives every rank the sum. Two algorithms, as MPI's own (Thakur,
Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH",
IJHPCA 19(1), 2005, section 4.4; Patarasuk and Yuan, JPDC 69(2), 2009, for the bandwidth bound):

* ``"direct"``: every loop sends its subtree values whole to every other loop and adds them
  all. One message latency a round, but ``(p - 1) w`` values sent by each loop: the bytes
  grow with the workers.
* ``"halving"``: the same two halves by recursive halving, then recursive doubling
  (Rabenseifner's algorithm, MPICH's for long vectors): ``log2 p`` steps each way, each a
  message to one partner (slots ``s`` and ``s ^ d`` for ``d = 1, 2, 4, ...``): loop ``s``
  keeps one half of what it holds, sends the other half to its partner and adds the
  partner's half of its own; then the halves travel back, doubling. ``2 log2 p`` messages a
  loop where the reduce-scatter sends ``2 (p - 1)``, the same bytes. It adds as the fixed
  shard tree does only where that tree's top is the perfect binary tree over the loops:
  ``p`` a power of two, fan-in 2, and loop ``s`` holding the one subtree ``(level, s)``
  (:func:`can_halve`: ``n_shards = p 2^level`` shards in equal blocks).
* ``"shared"``: loops of one host write their subtree values into shared memory and
  reduce-scatter there: loop ``j < k`` adds part ``j`` of every loop's values along the tree
  and writes it beside its own, and every loop copies the ``k`` parts out (:func:`adders`:
  one adder for a small network, every loop for a large one;
  :mod:`ppt_dask.engine.rounds.sharedreduce`); tokens only over the links.
* ``"scatter"``: a reduce-scatter, then an all-gather. The vector is cut into ``p`` parts
  (:func:`bounds`); loop ``j`` owns part ``j``. Each loop sends part ``j`` of its subtree
  values to loop ``j`` (:func:`scatter_parts`), each owner adds the ``p`` loops' parts of
  its own part along the tree (:func:`ppt_dask.core.tree.evaluate_owned` on the slices) and
  sends the reduced part to every other loop, and every loop joins the ``p`` reduced parts
  (:func:`gather`). Two message latencies a round, ``2 (p - 1) / p · w`` values sent by each
  loop (times the subtrees a loop holds: one where its block of shards is a subtree, as
  with power-of-two worker and shard counts), at most twice the weights whatever ``p`` is.

Addition is elementwise: each element of the total is the same additions in the same order
whichever loop adds it and however the vector is cut, so both algorithms give bitwise the
same total as :func:`ppt_dask.core.tree.reduce_serial`, on any number of workers.

>>> import numpy as np
>>> bounds(10, 3)
[(0, 3), (3, 6), (6, 10)]
>>> parts = [{(0, s): (np.arange(4.0) + s,)} for s in range(2)]  # two loops, one shard each
>>> own = [tree_sum([scatter_parts(p, 2)[j] for p in parts], 2, 2) for j in range(2)]
>>> gather(own, layout_of(parts[0]))[0]
array([1., 3., 5., 7.])
"""

from __future__ import annotations

import math

import numpy as np

from ppt_dask.core import tree

ALGORITHMS = ("auto", "direct", "halving", "scatter", "shared")
# "auto" sends whole partial sums while what a loop would send to all the others stays under
# this many bytes: there the further message latencies of the others cost more than the bytes
# they save (graphs/allreduce_floor.py).
DIRECT_BYTES = 256 * 2**10
# "shared": an adding loop maps and adds at most about this many bytes of the others' sums a
# round; the adders are as many as that takes (1 for a small network, every loop for a large
# one). More adders cost tokens: each loop tells every adder its sums are in place, each adder
# tells every loop its part is. MNIST's 784-64-64-10 in float32 at 8 loops (1.5 MB of the
# others' sums: one adder) took 9.2 ms a round with one adder, 10.6 ms with eight (medians of 3,
# 2 cores, 2026-11-29); 784-2048-2048-10 (163 MB: eight adders) 263 ms either way, where one
# adder's worker peaked at 0.9 GB beside the others' 0.48 (graphs/shared_spread.py).
SPREAD_BYTES = 4 * 2**20


def adders(p: int, nbytes: int) -> int:
    """How many loops add in the "shared" algorithm (loops ``0 .. k - 1``, a ``1 / k`` part of
    the vector each) for ``p`` loops whose sums take ``nbytes`` a subtree: enough that each
    adds at most about :data:`SPREAD_BYTES` of the others' sums, at most ``p``.

    >>> adders(8, 220_212), adders(8, 23_298_088), adders(4, 3 * 2**20)
    (1, 8, 3)
    """
    return max(1, min(p, -(-(p - 1) * int(nbytes) // SPREAD_BYTES)))


def choose(algorithm: str, p: int, nbytes: int, halves: bool = True, shared: bool = False) -> str:
    """The algorithm of a round of ``p`` loops whose partial sums take ``nbytes`` bytes;
    ``halves``: whether the layout allows "halving" (:func:`can_halve`); ``shared``: whether
    every loop runs on one host and they share its memory
    (:func:`ppt_dask.engine.wire.sharedmem.identity`).

    Loops of one host take "shared" (the sums through shared memory, a token a loop through
    the links, :mod:`ppt_dask.engine.rounds.sharedreduce`): MNIST block 1000 at 8 loops on
    this project's 2 cores took 6.6 ms a round where the pairwise exchange took 11.3
    (2026-11-28; graphs/README, "Scaling"). Across hosts, at ``p <= 2`` every algorithm sends
    the same bytes and "direct" the fewest messages; beyond, "direct" while ``(p - 1) * nbytes``
    stays under :data:`DIRECT_BYTES`, then "scatter": two phases a round, where "halving" has
    ``2 log2 p`` one after the other. With more loops than cores (8 loops on this project's 2
    cores, graphs/allreduce_floor.py) each phase waits for the other loops to be given a core,
    and the pairwise exchange's two phases took 17-36 ms a round of MNIST block 1000 against
    21-69 for the halving's six and 32-61 for whole sums (2026-11-28, interleaved, a loaded
    machine); "halving" is there to ask for (fewer messages where every loop has a core of its
    own)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if algorithm == "halving" and not halves:
        raise ValueError("allreduce 'halving' needs a power-of-two number of workers, fan_in 2 and "
                         "equal blocks of shards (n_shards = workers x a power of two)")
    if algorithm == "shared" and not shared and p > 1:
        raise ValueError("allreduce 'shared' needs every worker holding shards on one host, sharing its "
                         "/dev/shm (the same address host, boot, /dev/shm and user) with room for the sums")
    if algorithm != "auto":
        return algorithm
    if shared and p > 1:
        return "shared"
    return "direct" if p <= 2 or (p - 1) * nbytes <= DIRECT_BYTES else "scatter"


def can_halve(p: int, blocks: list, fan_in: int) -> bool:
    """Whether recursive halving adds as the fixed shard tree: ``blocks`` gives each loop's
    subtrees in slot order; ``p`` a power of two, fan-in 2, loop ``s`` holding ``(level, s)``."""
    if fan_in != 2 or p < 2 or p & (p - 1) or any(len(nodes) != 1 for nodes in blocks):
        return False
    level = blocks[0][0][0]
    return all(tuple(nodes[0]) == (level, s) for s, nodes in enumerate(blocks))


def halving_steps(p: int, slot: int) -> list[tuple[int, bool]]:
    """Loop ``slot``'s steps of recursive halving: ``(partner, keeps the lower half)`` at
    distances 1, 2, 4, ...: after step ``k`` it holds node ``(level + k + 1, slot >> k + 1)``
    of the tree on its part of the vector (the doubling runs them backwards)."""
    steps, d = [], 1
    while d < p:
        steps.append((slot ^ d, not slot & d))
        d *= 2
    return steps


def partners(algorithm: str, p: int, slot: int) -> list[int]:
    """The loops ``slot`` exchanges with: its ``log2 p`` partners for "halving"
    (:func:`halving_steps`), every other loop else (the links a loop opens)."""
    if algorithm == "halving":
        return sorted(partner for partner, _lower in halving_steps(p, slot))
    return [j for j in range(p) if j != slot]


def halve(ranges: list[tuple[int, int]], lower: bool) -> tuple[list, list]:
    """Each array's range ``[lo, hi)`` cut in two: (the half kept, the half sent)."""
    keep, send = [], []
    for lo, hi in ranges:
        mid = lo + (hi - lo) // 2
        keep.append((lo, mid) if lower else (mid, hi))
        send.append((mid, hi) if lower else (lo, mid))
    return keep, send


def messages(algorithm: str, p: int, nbytes: int = 0) -> int:
    """Messages one loop sends a round: ``p - 1`` direct, ``2 (p - 1)`` by reduce-scatter and
    all-gather, ``2 log2 p`` by recursive halving and doubling; "shared" (sums of ``nbytes`` a
    subtree, :func:`adders` ``k``), what an adding loop sends, tokens: its sums in place to the
    ``k - 1`` other adders, its part of the total in place to the ``p - 1`` other loops."""
    if p <= 1:
        return 0
    if algorithm == "shared":
        return adders(p, nbytes) - 1 + p - 1
    if algorithm == "halving":
        return 2 * (p - 1).bit_length()
    return (p - 1) * (1 if algorithm == "direct" else 2)


def sent_values(algorithm: str, p: int, n_values: int, subtrees: int = 1, itemsize: int = 8) -> float:
    """Values one loop sends a round: ``(p - 1) w`` direct, ``2 (p - 1) / p · w`` per subtree
    it holds by reduce-scatter and all-gather (``w = n_values``); "shared": what an adding loop
    writes into shared memory, its sums (``w`` per subtree) and its part of the total (``w / k``,
    :func:`adders` of ``w`` values of ``itemsize`` bytes)."""
    if p <= 1:
        return 0.0
    if algorithm == "shared":
        return float(n_values * subtrees + n_values / adders(p, n_values * itemsize))
    if algorithm == "direct":
        return float((p - 1) * n_values * subtrees)
    return (p - 1) / p * n_values * (subtrees + 1)


def bounds(n: int, p: int) -> list[tuple[int, int]]:
    """The ``p`` parts ``[start, stop)`` of ``n`` elements; sizes differ by at most one."""
    edges = [(j * n) // p for j in range(p + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _flat(a) -> np.ndarray:
    a = np.asarray(a)
    return a.reshape(-1)  # a view for the contiguous arrays of a partial


def runs_of(layout: list[tuple]) -> list[list[int]]:
    """The arrays of a partial (``layout``: their shapes and dtypes) in runs of one dtype:
    each run travels as one flat vector, one buffer a message where a network's arrays
    would be one each (a float32 network's gradients are one run, its float64 stats another)."""
    runs: list[list[int]] = []
    for i, (_shape, dtype) in enumerate(layout):
        if runs and layout[runs[-1][0]][1] == dtype:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def joined(value: tuple, runs: list[list[int]]) -> list[np.ndarray]:
    return [_flat(value[run[0]]) if len(run) == 1 else np.concatenate([_flat(value[i]) for i in run])
            for run in runs]


def scatter_parts(partial: dict, p: int, layout: list[tuple] | None = None) -> list[dict]:
    """A loop's subtree values cut for the ``p`` owners: element ``j`` maps each subtree to
    the tuple of part ``j`` of each run of its arrays (:func:`runs_of`; one copy a subtree joins
    a run's arrays, the parts are views of it). ``layout``: :func:`layout_of` the partial,
    when the caller holds it (a loop's every round has the same)."""
    runs = runs_of(layout_of(partial) if layout is None else layout)
    out: list[dict] = [{} for _ in range(p)]
    for node, value in partial.items():
        flats = joined(value, runs)
        cuts = [bounds(f.size, p) for f in flats]
        for j in range(p):
            out[j][node] = tuple(f[c[j][0]:c[j][1]] for f, c in zip(flats, cuts))
    return out


def tree_sum(parts: list[dict], fan_in: int, n_shards: int) -> tuple:
    """The root's value from every loop's subtree values (whole, or one owner's parts of
    them), added along the fixed shard tree."""
    return tree.evaluate_owned(tree.merged(parts), fan_in, n_shards)


def layout_of(partial: dict) -> list[tuple]:
    """The shapes and dtypes of the arrays of a partial (every subtree's are the same)."""
    return [(np.shape(a), np.asarray(a).dtype) for a in next(iter(partial.values()))]


def gather(owned: list[tuple], layout: list[tuple]) -> tuple:
    """The total from the ``p`` owners' reduced parts (in owner order), arrays of the shapes
    and dtypes of ``layout`` (:func:`layout_of`): views of one joined vector a run."""
    return split([np.concatenate([part[k] for part in owned]) for k in range(len(runs_of(layout)))], layout)


def split(flats: list, layout: list[tuple]) -> tuple:
    """The arrays of ``layout`` as views of ``flats``, one joined vector a run (:func:`runs_of`)."""
    out = []
    for flat, run in zip(flats, runs_of(layout)):
        at = 0
        for i in run:
            shape = layout[i][0]
            n = math.prod(shape)
            out.append(flat[at:at + n].reshape(shape))
            at += n
    return tuple(out)
