"""The allreduce of loops on one host: partial sums through shared memory, a few bytes through the links.

On one host the socket algorithms (:mod:`ppt_dask.core.allreduce`) copy every partial sum
through the kernel and wake each loop once a message: at 8 loops on 2 cores the reduce-scatter
and all-gather took 14 messages a loop a round, and waiting for them was most of an 11 ms
round of MNIST block 1000. Here (as MPICH's shared-memory channel between ranks of a node) each
loop writes its round's partial sums into a segment of its own
(:class:`ppt_dask.engine.placement.sharedmem.Segment`) and sends loop 0 a token, the segment's
name and the tree nodes it wrote; loop 0 adds its own and the others' sums along the fixed
shard tree (:func:`ppt_dask.core.allreduce.tree_sum`: bitwise the serial tree's), writes the
total into its segment and sends each loop a token back; each loop copies the total out. Two
small messages a loop a round, ``2 (p - 1)`` at loop 0, whatever the size of the network.

Loop 0 makes its segment of totals first and sends its name to every loop; each maps it before
it sends its first token, so loop 0 unlinks it once it has every loop's first token, and each
loop unlinks its own once it has its first total (loop 0 mapped it before it sent that). A
segment a loop cannot map (its maker is gone) is a lost link (:class:`LinkLost`): the head
rolls the run back as for a lost worker.

A segment holds ``RING`` rounds one after the other, so a loop may write round ``r + 1``'s sums
while loop 0 still reads round ``r``'s, and a local-SGD loop, which takes a round's total two
rounds after it sent its sums, never overwrites what another loop has not read: a loop writes
round ``r``'s sums only after it took round ``r - 2``'s total, which loop 0 sends after it read
every loop's sums of that round, and loop 0 writes round ``r``'s total only after every loop
sent its round ``r`` token, which each sends after it took its total of round ``r - 2``.
"""

from __future__ import annotations

import math

import numpy as np

from ppt_dask.core import allreduce
from ppt_dask.engine.placement.inboxes import LinkLost
from ppt_dask.engine.placement.sharedmem import ALIGN, Segment, aligned

RING = 3  # rounds a segment holds (two would do: see above)
LEADER = 0  # the slot that adds


def segment_bytes(p: int, nbytes: int, subtrees: int = 1) -> int:
    """What the segments of ``p`` loops take in ``/dev/shm``: ``RING`` rounds of each loop's sums
    (``nbytes`` a subtree, at most ``subtrees`` a loop) and of loop 0's totals, each run of
    arrays on whole cache lines (a few runs: a network's floats and its float64 statistics).

    >>> segment_bytes(8, 220_212) // 2**20  # MNIST's 784-64-64-10 in float32, 8 loops: 5 MiB
    5
    """
    return RING * ((p - 1) * subtrees + 1) * (int(nbytes) + 4 * ALIGN)


class SharedReduce:
    """One loop's side of the shared-memory allreduce (``links``: its links to the other loops,
    all on its host; ``layout``: :func:`ppt_dask.core.allreduce.layout_of` the partial sums).

    A node's sums lie in a segment as one flat vector per run of arrays of one dtype
    (:func:`ppt_dask.core.allreduce.runs_of`), so loop 0 adds a vector a run, not an array at a
    time (elementwise: the same bits)."""

    def __init__(self, links, slot: int, fan_in: int, n_shards: int, layout: list, take):
        self.links, self.slot, self.fan_in, self.n_shards = links, slot, fan_in, n_shards
        self.layout = layout
        self._take = take  # (tag, phases, slots) -> the payloads, the wait timed as idle
        self.runs = allreduce.runs_of(layout)
        self._runs: list = []  # per run: (offset in a node's place, values, dtype)
        at = 0
        for run in self.runs:
            dtype = np.dtype(layout[run[0]][1])
            n = sum(math.prod(layout[i][0]) for i in run)
            self._runs.append((at, n, dtype))
            at += aligned(n * dtype.itemsize)
        self.node_bytes = at
        self._mine: Segment | None = None  # this loop's sums (loop 0: the totals)
        self._theirs: dict = {}  # name -> another loop's segment, mapped
        self._totals: Segment | None = None  # loop 0's segment of totals, mapped (the other loops)
        self._own: dict = {}  # round -> loop 0's own partial sums, joined by run
        self._rounds = 0  # rounds finished (segments are unlinked once every reader mapped them)
        self._cache: dict = {}  # (segment name, ring place, node index, nodes) -> views
        self._opened = False  # loop 0's segment of totals made (loop 0) or mapped (the others)

    def _open(self, wait: dict) -> None:
        """Loop 0: make the segment of totals and send its name to every loop; the others: map
        it (the wait for the name counts in ``wait``)."""
        self._opened = True
        if self.slot == LEADER:
            self._mine = Segment(nbytes=RING * self.node_bytes)
            self.links.send((("totals", 0), self._mine.name))
        else:
            (name,) = self._take(("totals", 0), wait, [LEADER])
            self._totals = self._map(name)

    def _views(self, segment: Segment, r: int, index: int, n_nodes: int) -> tuple:
        """The flat vectors (a run each) of node ``index`` (of ``n_nodes``) of round ``r``'s
        place in ``segment`` (made once: a segment's places are the same every ``RING`` rounds)."""
        key = (segment.name, r % RING, index, n_nodes)
        views = self._cache.get(key)
        if views is None:
            base = ((r % RING) * n_nodes + index) * self.node_bytes
            views = self._cache[key] = tuple(segment.array(base + off, (n,), dtype) for off, n, dtype in self._runs)
        return views

    def _segment(self, n_nodes: int) -> Segment:
        if self._mine is None:
            self._mine = Segment(nbytes=RING * n_nodes * self.node_bytes)
        return self._mine

    def _map(self, name: str) -> Segment:
        segment = self._theirs.get(name)
        if segment is None:
            try:
                segment = self._theirs[name] = Segment(name)
            except FileNotFoundError:
                raise LinkLost(f"worker slot {self.slot}: another loop's shared memory {name} is gone "
                               "(its loop ended or was lost)") from None
        return segment

    def _write(self, views: tuple, value: tuple) -> None:
        """A node's arrays (``value``, in layout order) into its run vectors."""
        for flat, run in zip(views, self.runs):
            at = 0
            for i in run:
                a = np.asarray(value[i]).reshape(-1)
                flat[at:at + a.size] = a
                at += a.size

    def start(self, r: int, partial: dict) -> int:
        """Put round ``r``'s partial sums in place (loop 0 keeps its own, joined by run); the
        bytes written and sent (loop 0: the round's total, which it writes once it has them all)."""
        if not self._opened:
            self._open({})
        if self.slot == LEADER:
            self._own[r] = {node: tuple(allreduce.joined(value, self.runs)) for node, value in partial.items()}
            return self.node_bytes
        segment = self._segment(len(partial))
        for index, value in enumerate(partial.values()):
            self._write(self._views(segment, r, index, len(partial)), value)
        sent = self.links.send_each({LEADER: (segment.name, tuple(partial))}, ("shm", r))
        return sent + len(partial) * self.node_bytes

    def finish(self, r: int, phases: dict) -> tuple[tuple, int]:
        """Round ``r``'s total and the bytes this loop sent meanwhile (loop 0: its tokens); the
        seconds it waited (``idle``) go into ``phases``."""
        self._rounds += 1
        if self.slot != LEADER:
            self._take(("total", r), phases, [LEADER])
            total = allreduce.split([v.copy() for v in self._views(self._totals, r, 0, 1)], self.layout)
            if self._rounds == 1 and self._mine is not None:
                self._mine.unlink()  # loop 0 mapped it before it sent this total
            return total, 0
        tokens = self._take(("shm", r), phases)
        parts = [self._own.pop(r)]
        for name, nodes in tokens:
            segment = self._map(name)
            parts.append({node: self._views(segment, r, i, len(nodes)) for i, node in enumerate(nodes)})
        flat = allreduce.tree_sum(parts, self.fan_in, self.n_shards)
        for view, a in zip(self._views(self._mine, r, 0, 1), flat):
            view[:] = a
        sent = self.links.send((("total", r), None))
        if self._rounds == 1:
            self._mine.unlink()  # every loop mapped it before it sent its first token
        return allreduce.split(flat, self.layout), sent  # the adds' own arrays: no copy

    def close(self) -> None:
        """Unlink this loop's segment (if not yet) and unmap every segment."""
        self._cache.clear()  # the views go before the mappings
        for segment in [self._mine, *self._theirs.values()]:
            if segment is not None:
                segment.close()
        self._mine, self._theirs, self._totals = None, {}, None
