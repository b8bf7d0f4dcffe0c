"""The streamed rounds' allreduce over the loops' links: one interface, the algorithm by size.

A synchronous loop (:mod:`ppt_dask.engine.stream`) needs the sum of every loop's partial sums
along the fixed shard tree; a local-SGD loop needs it too, two rounds later. Both call
:meth:`Allreduce.start` with their round's partial sums (the sends) and
:meth:`Allreduce.finish` when they need the total (the waits, the adds, and for the
reduce-scatter its all-gather), as Horovod's collective ops are one call whatever runs below.
The algorithm (:mod:`ppt_dask.core.allreduce`: whole partial sums to every loop, or a
reduce-scatter then an all-gather whose bytes per loop stay under twice the weights) is
chosen once, on the first round's size; both give bitwise the same total as the serial tree.

The messages are tagged with their phase and round (:meth:`ppt_dask.engine.links.Links.receive`
with ``tag``), so a local-SGD loop may take round ``r - 2``'s reduce-scatter after it has sent
round ``r - 1``'s, and a loop that runs ahead never mixes rounds up.
"""

from __future__ import annotations

import time

from ppt_dask.core import allreduce


class Allreduce:
    """One loop's allreduce of a generation (``links`` None: a loop alone, no exchange).

    Parameters
    ----------
    links : ppt_dask.engine.links.Links or None
        The loop's links to every other loop.
    slot, n_loops : int
        This loop's worker slot and the number of loops (slots ``0 .. n_loops - 1``).
    fan_in, n_shards : int
        The fixed shard tree.
    algorithm : {"auto", "direct", "scatter"}
        See :func:`ppt_dask.core.allreduce.choose`.
    wait : float
        The longest it waits for the other loops' messages of one phase, in seconds.
    stopped : callable
        Raises when the head stopped the run (looked at while waiting).
    """

    def __init__(self, links, slot: int, n_loops: int, fan_in: int, n_shards: int, algorithm: str = "auto",
                 wait: float = 600.0, stopped=lambda: None):
        self.links, self.slot, self.p = links, slot, n_loops
        self.fan_in, self.n_shards = fan_in, n_shards
        self.requested, self.algorithm = algorithm, None
        self.wait, self.stopped = wait, stopped
        self._own: dict = {}  # round -> this loop's partial sums (direct) or its own part (scatter)
        self._shapes: list | None = None

    def start(self, r: int, partial: dict) -> int:
        """Send round ``r``'s partial sums (``{tree node: tuple of arrays}``): whole to every
        other loop, or each owner's part to it. The arrays must not change until
        :meth:`finish` of the round returned. Returns the bytes sent."""
        if self.algorithm is None:
            nbytes = sum(int(getattr(a, "nbytes", 8)) for value in partial.values() for a in value)
            self.algorithm = allreduce.choose(self.requested, self.p, nbytes)
            self._shapes = allreduce.shapes_of(partial)
        if self.links is None:
            self._own[r] = partial
            return 0
        if self.algorithm == "direct":
            self._own[r] = partial
            return self.links.send((("whole", r), partial))
        parts = allreduce.scatter_parts(partial, self.p)
        self._own[r] = parts[self.slot]
        return self.links.send_each({j: parts[j] for j in self.links.outgoing}, ("scatter", r))

    def finish(self, r: int, phases: dict) -> tuple[tuple, int]:
        """Round ``r``'s total, bitwise the serial tree's, and the bytes this sent meanwhile;
        the seconds it waited (``idle``), added (``reduce``) and sent (``transfer``) are added
        to ``phases``."""
        own = self._own.pop(r)
        if self.links is None:
            t0 = time.perf_counter()
            total = allreduce.tree_sum([own], self.fan_in, self.n_shards)
            _add(phases, "reduce", time.perf_counter() - t0)
            return total, 0
        if self.algorithm == "direct":
            parts = self._take(("whole", r), phases)
            t0 = time.perf_counter()
            total = allreduce.tree_sum([own, *parts], self.fan_in, self.n_shards)
            _add(phases, "reduce", time.perf_counter() - t0)
            return total, 0
        parts = self._take(("scatter", r), phases)
        t0 = time.perf_counter()
        mine = allreduce.tree_sum([own, *parts], self.fan_in, self.n_shards)
        t1 = time.perf_counter()
        sent = self.links.send((("gather", r), mine))
        t2 = time.perf_counter()
        gathered = dict(zip(sorted(self.links.incoming), self._take(("gather", r), phases)))
        gathered[self.slot] = mine
        t3 = time.perf_counter()
        total = allreduce.gather([gathered[j] for j in range(self.p)], self._shapes)
        t4 = time.perf_counter()
        _add(phases, "reduce", (t1 - t0) + (t4 - t3))
        _add(phases, "transfer", t2 - t1)
        return total, sent

    def _take(self, tag, phases: dict) -> list:
        """Every other loop's payload tagged ``tag``, in slot order (the wait is ``idle``)."""
        t0 = time.perf_counter()
        payloads = self.links.receive(self.wait, self.stopped, tag=tag)
        _add(phases, "idle", time.perf_counter() - t0)
        return payloads


def _add(phases: dict, name: str, seconds: float) -> None:
    phases[name] = phases.get(name, 0.0) + seconds
