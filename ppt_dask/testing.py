"""Test doubles: strategies made slow on purpose, a worker that starts its loop late.

A slowed strategy proves that a slow worker does not stall the asynchronous strategy, that
the time breakdown puts an artificial cost under compute, and that a run survives a worker
lost in the middle of a round. A late loop (:class:`LateLoop`) holds the other loops' links
open for as long as a test needs to knock on them. Nothing in a real run uses them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin


@dataclass(frozen=True)
class Slowed:
    """A test hook: ``inner`` with ``seconds`` of sleep added to the work of some shards.

    Used to prove that a slow worker does not stall the asynchronous strategy, and that
    the time breakdown attributes an artificial cost to compute. ``shards=None`` slows
    every shard. Everything else is delegated to ``inner``.
    """

    inner: Any
    seconds: float
    shards: tuple | None = None

    def __getattr__(self, name):
        if name.startswith("__") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> Slowed:
        return replace(self, inner=self.inner.check(shard_rows, seed, replicated))

    def work(self, net, broadcast, shard, s, r: int) -> tuple:
        """``s``: a shard, or the shards whose rows make one asynchronous step (each slowed
        one adds ``seconds``)."""
        slowed = sum(1 for i in (s if isinstance(s, tuple) else (s,)) if self.shards is None or i in self.shards)
        time.sleep(self.seconds * slowed)
        return self.inner.work(net, broadcast, shard, s, r)

    def slot_sums(self, net, broadcast, shards: list, shard_ids, r: int, nodes, fan_in: int, n_shards: int,
                  whole: bool = False) -> dict:
        """A worker slot's round (the strategies' ``slot_sums``), slowed by ``seconds`` for each
        of its shards that is slowed."""
        time.sleep(self.seconds * sum(1 for s in shard_ids if self.shards is None or s in self.shards))
        return self.inner.slot_sums(net, broadcast, shards, shard_ids, r, nodes, fan_in, n_shards, whole)

    def apply(self, net, state, total):
        return self.inner.apply(net, state, total)

    def broadcast(self, state):
        return self.inner.broadcast(state)

    def local_round(self, net, model, average, shard, s: int, r: int) -> tuple:
        """The local strategy's round (:mod:`ppt_dask.algorithms.localsgd`), slowed the same way."""
        if self.shards is None or s in self.shards:
            time.sleep(self.seconds)
        return self.inner.local_round(net, model, average, shard, s, r)


def slow_gradients(strategy, shards, seconds: float, slots=None):
    """Test hook: ``strategy`` with each gradient task made ``seconds`` longer.

    The sleep is added to the work of the first shard of each worker's block, so every
    ``ppt-grad`` task (one per worker per round) takes ``seconds`` more, however many
    shards it loops over; ``slots`` (worker slots, the second element of a gradient key)
    limits it to some workers, to make a straggler. Nothing changes when the hook is not
    used: it is a different strategy object (:class:`Slowed`).

    Parameters
    ----------
    strategy : a strategy
    shards : ShardSet
        The shard set the run will use (gives each slot's first shard).
    seconds : float
    slots : iterable of int, optional
    """
    slots = None if slots is None else set(slots)
    first = tuple(a for slot, (_label, a, _b) in enumerate(shards.worker_blocks())
                  if slots is None or slot in slots)
    return Slowed(strategy, float(seconds), first)


class LateLoop(WorkerPlugin):
    """A test hook (a worker plugin): the worker of ``slot`` holds back that slot's loop of the
    streamed rounds when it is about to run, until the file ``until`` exists (at most
    ``seconds``), once. Meanwhile the other slots' loops wait for it with their links'
    listeners open, as they would for a worker slow to start: the window a test opens on
    purpose to knock on them.

    It holds the worker's threads, not its event loop: as many waits as the worker has
    threads go into its executor ahead of the loop's task, so the task starts when they end.
    The event loop stays free to serve what the other slots' loops fetch from this worker
    (the run's start state may live there alone); a held event loop would hold them too."""

    name = "ppt-late-loop"

    def __init__(self, slot: int, until: str, seconds: float = 60.0):
        self.slot, self.until, self.seconds = slot, until, seconds
        self.held = False
        self.worker: Any = None

    def setup(self, worker) -> None:
        self.worker = worker

    def _wait(self) -> None:
        deadline = time.monotonic() + self.seconds
        while not os.path.exists(self.until) and time.monotonic() < deadline:
            time.sleep(0.02)

    def transition(self, key, start, finish, **kwargs) -> None:
        if self.held or finish != "executing" or not isinstance(key, tuple) or len(key) != 2:
            return
        if key[1] != self.slot or not str(key[0]).startswith("ppt-loop-"):
            return
        self.held = True
        # the task's own submission comes after this transition: it queues behind the waits
        for _ in range(max(1, int(self.worker.state.nthreads))):
            self.worker.executors["default"].submit(self._wait)
