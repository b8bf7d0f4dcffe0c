"""The allreduce of loops on one host: partial sums through shared memory, a few bytes through the links.

On one host the socket algorithms (:mod:`ppt_dask.core.allreduce`) copy every partial sum
through the kernel and wake each loop once a message: at 8 loops on 2 cores the reduce-scatter
and all-gather took 14 messages a loop a round, and waiting for them was most of an 11 ms
round of MNIST block 1000. Here (as MPICH's shared-memory channel between ranks of a node) each
loop writes its round's partial sums into a segment of its own
(:class:`ppt_dask.engine.wire.sharedmem.Segment`) and the adds are a reduce-scatter
inside shared memory: the vector of each run of arrays is cut into ``k`` parts
(:func:`ppt_dask.core.allreduce.bounds`), loop ``j < k`` adds part ``j`` of every loop's sums
along the fixed shard tree (:func:`ppt_dask.core.allreduce.tree_sum`: elementwise, so bitwise
the serial tree's whoever adds which part) and writes its part of the total into its own
segment, and each loop copies the ``k`` parts of the total out. ``k``
(:func:`ppt_dask.core.allreduce.adders`) keeps what an adder maps and adds of the others' sums
under about :data:`ppt_dask.core.allreduce.SPREAD_BYTES`: one adder for a small network (the
fewest tokens: loop 0 adds, as MPICH's shared-memory reduce does), every loop for a large one,
so that no loop maps or adds more than about twice the weights (or ``SPREAD_BYTES``, whichever
is more) beyond its own, whatever ``p``
(a single adder's worker grows with ``p``: 4.8 GB at 8 loops of a 50M-parameter float32
network), and the adds take ``1 / p`` of the time on each loop. The links carry tokens only: a
loop's sums are in place (``("shm", r)``, to each adder), an adder's part of the total is
(``("part", r)``, to each loop), whatever the size of the network.

A generation's first round opens the segments: each loop sweeps the stale segments of dead
processes (:func:`ppt_dask.engine.wire.sharedmem.sweep`), makes its own (hidden: no name
in ``/dev/shm`` past its making, held open by its writer), sends its handle
(:attr:`ppt_dask.engine.wire.sharedmem.Segment.handle`) and its tree nodes to every other
loop, and maps theirs through it (validated; one that cannot be mapped
or is short is a lost link, :class:`LinkLost`: the head rolls the run back as for a lost
worker; a ``/dev/shm`` with no room, :class:`SharedFull`, told to every loop, is one too, and
the head goes on with the socket algorithms). A loop sends its first ``("shm", r)`` token only
once it has mapped every segment, and an adder sends its first ``("part", r)`` token only once
it has every loop's, so a loop closes its own segment's descriptor (``unlink``) as soon as it
has its first round's tokens. Nothing of the generation is named in ``/dev/shm`` at any time,
whatever is killed; a name left by a kill in the two system calls between a segment's making
and its unlink, :func:`ppt_dask.engine.wire.sharedmem.sweep` removes.

A segment holds ``RING`` rounds one after the other, so a local-SGD loop, which takes a
round's total two rounds after it sent its sums, never overwrites what another loop has not
read. A loop writes round ``r``'s sums (place ``r % RING``) in ``start(r)``, after its
``finish(r - 2)``, which returned only once every adder had sent its ``("part", r - 2)``
token, sent once that adder had read round ``r - 2``'s sums. An adder writes its part of round
``r``'s total in ``finish(r)`` once every loop sent its ``("shm", r)`` token, which each sends
in ``start(r)``, after its ``finish(r - 2)`` had copied round ``r - 2``'s total out. Two places
are enough (synchronous rounds, one round in flight, need one).
"""

from __future__ import annotations

import math
import os
import platform
import time

import numpy as np

from ppt_dask.core import allreduce
from ppt_dask.engine.wire.inboxes import LinkLost
from ppt_dask.engine.wire.sharedmem import ALIGN, SHM_DIR, Segment, SharedMemoryFull, aligned, sweep

RING = 2  # rounds a segment holds (see above)
# Each segment begins with a cache line of flags, [sums, part]: round r + 1 once the loop's sums
# (or, for an adder, its part of the total) of round r are in place. A loop waits for the flags
# it needs by looking at them: SPINS looks that give the core away between them (sched_yield:
# another process on the core runs) where the loops have a core each, then naps between looks,
# from NAP_SECONDS doubling up to MAX_NAP_SECONDS (more loops than cores: no spinning, the loop
# waited for needs the core), and every LOOK_SECONDS whether the run stopped or a link broke (a
# peer gone closes its socket). The tokens this replaces cost each loop a system call a round to
# send and a wake-up to receive: at 2 loops on 2 cores, a third of a worker's busy samples were
# the token's send. x86 keeps the order of a process's stores, so a flag seen means the bytes
# before it are there; other machines keep the tokens (FLAGS below).
HEADER = 64
SPINS = 200
NAP_SECONDS = 50e-6
MAX_NAP_SECONDS = 1e-3
LOOK_SECONDS = 0.01
FLAGS = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def segment_bytes(p: int, nbytes: int, subtrees: int = 1) -> int:
    """What the segments of ``p`` loops take in ``/dev/shm``: ``RING`` rounds of each loop's sums
    (``nbytes`` a subtree, at most ``subtrees`` a loop) and of the adders' parts of the totals,
    each run of arrays on whole cache lines (a few runs: a network's floats and its float64
    statistics).

    >>> segment_bytes(8, 220_212) // 2**20  # MNIST's 784-64-64-10 in float32, 8 loops: 3 MiB
    3
    """
    k = allreduce.adders(p, nbytes)
    return RING * (p * subtrees * (int(nbytes) + 4 * ALIGN) + int(nbytes) + k * 4 * ALIGN) + p * HEADER


class SharedLost(LinkLost):
    """Shared memory failed (a segment that cannot be made or mapped): a lost link, the head
    rolls back."""


class SharedFull(SharedLost):
    """``/dev/shm`` had no room for a segment: the head rolls back and goes on with the socket
    algorithms."""


class SharedReduce:
    """One loop's side of the shared-memory allreduce (``links``: its links to the other loops,
    all on its host; ``layout``: :func:`ppt_dask.core.allreduce.layout_of` the partial sums;
    ``take(tag, phases, slots)``: the other loops' payloads tagged ``tag``, the wait timed).

    A node's sums lie in a segment as one flat vector per run of arrays of one dtype
    (:func:`ppt_dask.core.allreduce.runs_of`), so a loop adds a vector a run, not an array at
    a time (elementwise: the same bits). A segment's place of a round holds the loop's nodes,
    then its part of the total (each run's part on whole cache lines)."""

    def __init__(self, links, slot: int, n_loops: int, fan_in: int, n_shards: int, layout: list, take,
                 wait: float = 600.0, stopped=lambda: None):
        self.links, self.slot, self.p = links, slot, n_loops
        self.wait, self.stopped = wait, stopped
        self.fan_in, self.n_shards, self.layout = fan_in, n_shards, layout
        self._take = take
        self.runs = allreduce.runs_of(layout)
        self._runs: list = []  # per run: (offset in a node's place, values, dtype)
        at = 0
        for run in self.runs:
            dtype = np.dtype(layout[run[0]][1])
            n = sum(math.prod(layout[i][0]) for i in run)
            self._runs.append((at, n, dtype))
            at += aligned(n * dtype.itemsize)
        self.node_bytes = at
        self.k = allreduce.adders(n_loops, at)  # loops 0 .. k - 1 add a part each
        self.cuts = [allreduce.bounds(n, self.k) for _off, n, _dtype in self._runs]  # per run: k parts
        self._part_at: list = []  # per slot: (offset of each run's part in its totals, the totals' bytes)
        for j in range(n_loops):
            offsets, at = [], 0
            for (_off, _n, dtype), cut in zip(self._runs, self.cuts):
                offsets.append(at)
                at += aligned((cut[j][1] - cut[j][0]) * dtype.itemsize) if j < self.k else 0
            self._part_at.append((offsets, at))
        self._adders = [j for j in range(self.k) if j != slot]  # the other loops that add
        self._mine: Segment | None = None
        self._segments: dict = {}  # slot -> (its segment, its nodes): every loop's, this one's too
        self._cache: dict = {}  # (slot, ring place, what) -> views
        self._flags: dict = {}  # slot -> its segment's flags [sums, part] (FLAGS)
        self._unlinked = False
        self.flags = FLAGS
        self.spins = SPINS if n_loops <= len(os.sched_getaffinity(0)) else 0  # a core each, else no spinning

    # -- the segments --
    def _place_bytes(self, slot: int, n_nodes: int) -> int:
        return n_nodes * self.node_bytes + self._part_at[slot][1]

    def _open(self, nodes: tuple, phases: dict) -> None:
        """Make this loop's segment, send its name and nodes to every other loop, map theirs."""
        sweep()  # the stale segments of processes that died (a loop killed in a generation's first round)
        try:
            self._mine = Segment(nbytes=HEADER + RING * self._place_bytes(self.slot, len(nodes)), hidden=True)
        except SharedMemoryFull as exc:  # the others hear it (no name): every loop's error says so
            self.links.send((("segment", 0), (None, nodes)))
            raise SharedFull(f"worker slot {self.slot}: {exc.strerror}") from exc
        except OSError as exc:
            raise SharedLost(f"worker slot {self.slot} could not make its shared memory: {exc!r}") from exc
        self._segments[self.slot] = (self._mine, nodes)
        self.links.send((("segment", 0), (self._mine.handle, nodes)))
        others = sorted(self.links.incoming)
        for j, (name, their_nodes) in zip(others, self._take(("segment", 0), phases, others)):
            if name is None:
                raise SharedFull(f"worker slot {j}: {SHM_DIR} had no room for its segment")
            their_nodes = tuple(tuple(int(x) for x in node) for node in their_nodes)
            try:
                segment = Segment(str(name), nbytes=HEADER + RING * self._place_bytes(j, len(their_nodes)))
            except (OSError, ValueError) as exc:  # BadSegment among them
                raise SharedLost(f"worker slot {self.slot} could not map slot {j}'s shared memory {name!r}: "
                                 f"{exc!r} (its loop ended or was lost)") from exc
            self._segments[j] = (segment, their_nodes)
        self._flags = {j: segment.array(0, (2,), np.int64) for j, (segment, _n) in self._segments.items()}

    def _sums(self, j: int, r: int, index: int) -> tuple:
        """The run vectors of node ``index`` of slot ``j``'s sums of round ``r``."""
        key = (j, r % RING, index)
        views = self._cache.get(key)
        if views is None:
            segment, nodes = self._segments[j]
            base = HEADER + (r % RING) * self._place_bytes(j, len(nodes)) + index * self.node_bytes
            views = self._cache[key] = tuple(segment.array(base + off, (n,), dtype) for off, n, dtype in self._runs)
        return views

    def _part(self, j: int, r: int) -> tuple:
        """Slot ``j``'s part of round ``r``'s total: a vector a run."""
        key = (j, r % RING, "part")
        views = self._cache.get(key)
        if views is None:
            segment, nodes = self._segments[j]
            base = HEADER + (r % RING) * self._place_bytes(j, len(nodes)) + len(nodes) * self.node_bytes
            offsets = self._part_at[j][0]
            views = self._cache[key] = tuple(
                segment.array(base + at, (cut[j][1] - cut[j][0],), dtype)
                for at, (_off, _n, dtype), cut in zip(offsets, self._runs, self.cuts))
        return views

    # -- a round --
    def start(self, r: int, partial: dict) -> int:
        """Put round ``r``'s partial sums in place and tell every other loop; the bytes
        written and sent."""
        if self._mine is None:
            self._open(tuple(partial), {})
        for index, value in enumerate(partial.values()):
            for flat, run in zip(self._sums(self.slot, r, index), self.runs):
                at = 0
                for i in run:
                    a = np.asarray(value[i]).reshape(-1)
                    flat[at:at + a.size] = a
                    at += a.size
        if self.flags:
            self._flags[self.slot][0] = r + 1  # after the sums: seen, they are there
            return len(partial) * self.node_bytes
        sent = self.links.send((("shm", r), None), self._adders) if self._adders else 0
        return sent + len(partial) * self.node_bytes

    def finish(self, r: int, phases: dict) -> tuple[tuple, int]:
        """Round ``r``'s total and the bytes this loop wrote and sent meanwhile; the seconds
        it waited (``idle``) and added and copied (``reduce``) go into ``phases``."""
        me, sent, added = self.slot, 0, 0.0
        if me < self.k:  # an adder: its part of every loop's sums, along the tree
            self._wait(("shm", r), phases, [j for j in self._segments if j != me], 0, r + 1)
            t0 = time.perf_counter()
            parts = [{node: tuple(v[c[me][0]:c[me][1]] for v, c in zip(self._sums(j, r, index), self.cuts))
                      for index, node in enumerate(nodes)} for j, (_segment, nodes) in sorted(self._segments.items())]
            for view, a in zip(self._part(me, r), allreduce.tree_sum(parts, self.fan_in, self.n_shards)):
                view[:] = a
            added = time.perf_counter() - t0
            if self.flags:
                self._flags[me][1] = r + 1
                sent = self._part_at[me][1]
            else:
                sent = self.links.send((("part", r), None)) + self._part_at[me][1]
        if self._adders:
            self._wait(("part", r), phases, self._adders, 1, r + 1)
        if not self._unlinked:  # every loop mapped it: each had sent its first token before
            self._mine.unlink()
            self._unlinked = True
        t1 = time.perf_counter()
        flats = [np.concatenate(run_parts) for run_parts in zip(*(self._part(j, r) for j in range(self.k)))]
        _add(phases, "reduce", added + time.perf_counter() - t1)
        return allreduce.split(flats, self.layout), sent

    def _wait(self, tag, phases: dict, slots: list, flag: int, value: int) -> None:
        """Wait until every loop of ``slots`` has raised its ``flag`` to ``value`` (FLAGS), or
        has sent its token ``tag``; the wait is ``idle``."""
        if not self.flags:
            self._take(tag, phases, slots)
            return
        t0 = time.perf_counter()
        flags = [self._flags[j] for j in slots]
        looks, deadline, next_look, nap = 0, None, 0.0, NAP_SECONDS
        while not all(f[flag] >= value for f in flags):
            looks += 1
            if looks < self.spins:
                os.sched_yield()
                continue
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.wait
            if now >= next_look:  # the run stopped, or a peer's link broke (its process gone)
                self.stopped()
                self.links.poll()
                if self.links.lost & set(slots):
                    raise LinkLost(f"worker slot {self.slot} lost its link to slot(s) "
                                   f"{sorted(self.links.lost & set(slots))} while it waited for round {value - 1}")
                if now >= deadline:
                    raise LinkLost(f"worker slot {self.slot}: round {value - 1} of slot(s) {slots} did not come "
                                   f"within {self.wait} s")
                next_look = now + LOOK_SECONDS
            time.sleep(nap)
            nap = min(2 * nap, MAX_NAP_SECONDS)
        _add(phases, "idle", time.perf_counter() - t0)

    def close(self) -> None:
        """Unlink this loop's segment (if not yet) and unmap every segment."""
        self._cache.clear()  # the views go before the mappings
        self._flags = {}
        for segment, _nodes in self._segments.values():  # this loop's own among them: unlinked
            segment.close()
        self._mine, self._segments = None, {}


def _add(phases: dict, name: str, seconds: float) -> None:
    phases[name] = phases.get(name, 0.0) + seconds
