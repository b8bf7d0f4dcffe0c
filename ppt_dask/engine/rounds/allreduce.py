"""The streamed rounds' allreduce over the loops' links: one interface, the algorithm by size.

A synchronous loop (:mod:`ppt_dask.engine.rounds.stream`) needs the sum of every loop's partial sums
along the fixed shard tree; a local-SGD loop needs it too, two rounds later. Both call
:meth:`Allreduce.start` with their round's partial sums (the sends) and
:meth:`Allreduce.finish` when they need the total (the waits, the adds, and for the
reduce-scatter its all-gather), as Horovod's collective ops are one call whatever runs below.
The algorithm (:mod:`ppt_dask.core.allreduce`: whole partial sums to every loop, or a
reduce-scatter then an all-gather whose bytes per loop stay under twice the weights, by
recursive halving and doubling or pairwise) is chosen by the head for the run's layout
(:func:`ppt_dask.engine.rounds.choose.choose_allreduce`); all give bitwise the same total as the
serial tree.

The messages are tagged with their phase and round (:meth:`ppt_dask.engine.wire.links.Links.receive`
with ``tag``), so a local-SGD loop may take round ``r - 2``'s reduce-scatter after it has sent
round ``r - 1``'s, and a loop that runs ahead never mixes rounds up.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ppt_dask.core import allreduce
from ppt_dask.engine.rounds.sharedreduce import SharedReduce

# A message's header and pickle around its arrays: at most this, and this much an array
SLACK_BYTES, ARRAY_SLACK = 64 * 2**10, 512


class Allreduce:
    """One loop's allreduce of a generation (``links`` None: a loop alone, no exchange).

    Parameters
    ----------
    links : ppt_dask.engine.wire.links.Links or None
        The loop's links to every other loop.
    slot, n_loops : int
        This loop's worker slot and the number of loops (slots ``0 .. n_loops - 1``).
    fan_in, n_shards : int
        The fixed shard tree.
    algorithm : {"auto", "shared", "direct", "halving", "scatter"}
        See :func:`ppt_dask.core.allreduce.choose` ("auto" here: as if the layout allowed
        "halving" and the loops were on several hosts; the head resolves it with the layout and
        the hosts, :func:`ppt_dask.engine.rounds.choose.choose_allreduce`).
    wait : float
        The longest it waits for the other loops' messages of one phase, in seconds.
    stopped : callable
        Raises when the head stopped the run (looked at while waiting).
    subtrees : int, optional
        The most subtrees a loop holds (a peer's largest message: that many partial sums);
        ``n_shards`` when not given.
    """

    def __init__(self, links, slot: int, n_loops: int, fan_in: int, n_shards: int, algorithm: str = "auto",
                 wait: float = 600.0, stopped=lambda: None, subtrees: int | None = None):
        self.links, self.slot, self.p = links, slot, n_loops
        self.fan_in, self.n_shards = fan_in, n_shards
        self.subtrees = n_shards if subtrees is None else subtrees
        self.requested, self.algorithm = algorithm, None
        self.wait, self.stopped = wait, stopped
        self._own: dict = {}  # round -> this loop's partial sums (direct) or its own part (scatter)
        self._layout: list | None = None
        self._shared: SharedReduce | None = None

    def start(self, r: int, partial: dict) -> int:
        """Send round ``r``'s partial sums (``{tree node: tuple of arrays}``): whole to every
        other loop, or each owner's part to it. The arrays must not change until
        :meth:`finish` of the round returned. Returns the bytes sent."""
        if self.algorithm is None:
            nbytes = sum(int(getattr(a, "nbytes", 8)) for value in partial.values() for a in value)
            self.algorithm = allreduce.choose(self.requested, self.p, nbytes, shared=self.requested == "shared")
            self._layout = allreduce.layout_of(partial)
            if hasattr(self.links, "expect"):  # a header past a peer's largest message: a lost link at once
                node = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in self._layout)
                self.links.expect(self.subtrees * (node + ARRAY_SLACK * len(self._layout)) + SLACK_BYTES)
            if self.algorithm == "shared" and self.links is not None:
                self._shared = SharedReduce(self.links, self.slot, self.p, self.fan_in, self.n_shards, self._layout,
                                            self._take, self.wait, self.stopped)
        if self._shared is not None:
            return self._shared.start(r, partial)
        if self.links is None:
            self._own[r] = partial
            return 0
        if self.algorithm == "direct":
            self._own[r] = partial
            return self.links.send((("whole", r), partial))
        if self.algorithm == "halving":
            (value,) = partial.values()  # one subtree a loop (allreduce.can_halve)
            flats = [np.asarray(a).reshape(-1) for a in value]
            held = (flats, [(0, f.size) for f in flats])
            self._own[r] = held
            return self._halve_send(r, 0, *held)
        parts = allreduce.scatter_parts(partial, self.p, self._layout)
        self._own[r] = parts[self.slot]
        return self.links.send_each({j: parts[j] for j in self.links.outgoing}, ("scatter", r))

    def finish(self, r: int, phases: dict) -> tuple[tuple, int]:
        """Round ``r``'s total, bitwise the serial tree's, and the bytes this sent meanwhile;
        the seconds it waited (``idle``), added (``reduce``) and sent (``transfer``) are added
        to ``phases``."""
        if self._shared is not None:
            return self._shared.finish(r, phases)
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
        if self.algorithm == "halving":
            return self._halving(r, *own, phases)
        parts = self._take(("scatter", r), phases)
        t0 = time.perf_counter()
        mine = allreduce.tree_sum([own, *parts], self.fan_in, self.n_shards)
        t1 = time.perf_counter()
        sent = self.links.send((("gather", r), mine))
        t2 = time.perf_counter()
        gathered = dict(zip(sorted(self.links.incoming), self._take(("gather", r), phases)))
        gathered[self.slot] = mine
        t3 = time.perf_counter()
        total = allreduce.gather([gathered[j] for j in range(self.p)], self._layout)
        t4 = time.perf_counter()
        _add(phases, "reduce", (t1 - t0) + (t4 - t3))
        _add(phases, "transfer", t2 - t1)
        return total, sent

    def close(self) -> None:
        """Let go of what the exchange holds beyond the links (shared memory)."""
        if self._shared is not None:
            self._shared.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _take(self, tag, phases: dict, slots=None) -> list:
        """Every other loop's payload tagged ``tag`` (or those of ``slots``), in slot order
        (the wait is ``idle``)."""
        t0 = time.perf_counter()
        payloads = self.links.receive(self.wait, self.stopped, tag=tag, slots=slots)
        _add(phases, "idle", time.perf_counter() - t0)
        return payloads

    def _halve_send(self, r: int, k: int, held: list, ranges: list) -> int:
        """Step ``k`` of the halving: the half this loop gives away of what it holds (``held``:
        arrays covering ``ranges`` of the whole vectors), to its partner."""
        partner, lower = allreduce.halving_steps(self.p, self.slot)[k]
        _keep, give = allreduce.halve(ranges, lower)
        part = tuple(a[g0 - r0:g1 - r0] for a, (r0, _), (g0, g1) in zip(held, ranges, give))
        return self.links.send_each({partner: part}, ("half", r, k))

    def _halving(self, r: int, held: list, ranges: list, phases: dict) -> tuple[tuple, int]:
        """Recursive halving (step 0 was sent by :meth:`start`), then recursive doubling: each
        step adds the partner's half as the tree adds two siblings (left + right)."""
        steps, sent, before = allreduce.halving_steps(self.p, self.slot), 0, []
        for k, (partner, lower) in enumerate(steps):
            t0 = time.perf_counter()
            if k:
                sent += self._halve_send(r, k, held, ranges)
            t1 = time.perf_counter()
            (theirs,) = self._take(("half", r, k), phases, [partner])
            t2 = time.perf_counter()
            keep, _give = allreduce.halve(ranges, lower)
            mine = [a[k0 - r0:k1 - r0] for a, (r0, _), (k0, k1) in zip(held, ranges, keep)]
            before.append(ranges)
            held, ranges = [m + t if lower else t + m for m, t in zip(mine, theirs)], keep
            _add(phases, "transfer", t1 - t0)
            _add(phases, "reduce", time.perf_counter() - t2)
        for k in reversed(range(len(steps))):
            partner, lower = steps[k]
            t0 = time.perf_counter()
            sent += self.links.send_each({partner: tuple(held)}, ("double", r, k))
            t1 = time.perf_counter()
            (theirs,) = self._take(("double", r, k), phases, [partner])
            t2 = time.perf_counter()
            held = [np.concatenate((m, t) if lower else (t, m)) for m, t in zip(held, theirs)]
            ranges = before[k]
            _add(phases, "transfer", t1 - t0)
            _add(phases, "reduce", time.perf_counter() - t2)
        return tuple(a.reshape(shape) for a, (shape, _dtype) in zip(held, self._layout)), sent


def _add(phases: dict, name: str, seconds: float) -> None:
    phases[name] = phases.get(name, 0.0) + seconds
