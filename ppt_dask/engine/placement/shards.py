"""Logical shards resident on workers, pinned: what the head knows of them (:class:`ShardSet`),
and how it moves them when a worker is lost or joins.

The rows are split into ``n_shards`` logical shards, a number fixed at entry
(:mod:`ppt_dask.engine.placement.enter`) and independent of the number of workers. The
workers are given contiguous blocks of shards, so each worker's share is a run of leaves of
the fixed reduction tree (see :mod:`ppt_dask.core.tree`). Pinning uses worker *resources*
rather than addresses (:mod:`ppt_dask.engine.placement.labels`): a label can be given to a
worker that replaces a lost one, where an address stops matching.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from distributed import Client, Future

from ppt_dask.core import keys
from ppt_dask.core.tree import split_shards
from ppt_dask.engine import waits
from ppt_dask.engine.placement import labels
from ppt_dask.engine.placement.cluster import worker_addresses
from ppt_dask.engine.wire import sharedmem

REPLACEMENT_GRACE = 5.0  # seconds to wait for a restarted worker before doubling up a survivor


@dataclass(frozen=True)
class ShardInfo:
    """What the head knows of one shard without holding it."""

    index: int
    start: int  # rows [start, stop) of the training set
    stop: int
    row_shape: tuple  # X.shape[1:]: (n_features,) for a table, (1, 28, 28) for an image
    dtype: str
    y_shape: tuple  # shape[1:] of y: () for labels, (k,) for targets
    y_min: float
    y_max: float
    y_integral: bool


@dataclass
class ShardSet:
    """Logical shards resident on workers: what :func:`ppt_dask.enter_data` returns.

    Made by :func:`ppt_dask.enter_data` and :func:`ppt_dask.enter_source`, never by hand;
    given to :func:`ppt_dask.train` and released by :func:`ppt_dask.exit_data`. A lost
    worker's shards are placed again on another worker during a run.

    Attributes
    ----------
    client : distributed.Client
        The client the shards were placed with.
    n_shards : int
        The number of logical shards, fixed at entry.
    n_rows : int
        The training rows in all.
    row_shape : tuple of int
        The shape of one row of X: the shards hold X of shape ``(rows, *row_shape)``.
    n_features : int
        Numbers per row (the product of ``row_shape``).
    dtype : str
        The features' dtype on the workers, "float64" or "float32".
    workers : list of str
        The addresses of the workers holding shards, by slot.
    source : {"numpy", "dask", "loader"}
        Where the rows came from: arrays on the head, a dask array, a loader.
    replicated : bool
        Whether every worker holds the whole set (``enter_data(..., replicate=True)``).

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=8)
    >>> shards.n_shards, shards.n_rows, shards.n_features, shards.dtype
    (8, 256, 8, 'float64')
    >>> len(shards.workers), shards.source
    (2, 'numpy')
    >>> ppt.exit_data(shards)
    >>> client.close()
    """

    client: Client
    futures: list[Future]
    info: list[ShardInfo]
    workers: list[str]  # addresses, by slot
    blocks: list[tuple[int, int]]  # per slot: shards [first, stop)
    name: str  # the label prefix, unique per shard set
    source: str  # "numpy", "dask" or "loader"
    head_copy: tuple | None = field(default=None, repr=False)
    replicated: bool = False  # every worker holds the whole set; shards are random streams
    chosen: bool = False  # the workers were named at entry: the set never spreads to others
    rebuild: Callable | None = field(default=None, repr=False)  # (shard, label, key) -> Future
    renamed: dict = field(default_factory=dict)  # slot -> the label it took when repaired

    @property
    def n_shards(self) -> int:
        return len(self.futures)

    @property
    def n_rows(self) -> int:
        return self.info[0].stop if self.replicated else self.info[-1].stop

    @property
    def row_shape(self) -> tuple:
        """The shape of one row of X: the shards hold X of shape ``(rows, *row_shape)``."""
        return self.info[0].row_shape

    @property
    def n_features(self) -> int:
        """Numbers per row (the product of ``row_shape``)."""
        return int(np.prod(self.row_shape))

    @property
    def dtype(self) -> str:
        return self.info[0].dtype

    def label(self, slot: int) -> str:
        return self.renamed.get(slot, f"{self.name}-w{slot}")

    def worker_blocks(self) -> list[tuple[str, int, int]]:
        """Per worker holding shards: (resource label, first shard, stop shard)."""
        return [(self.label(w), a, b) for w, (a, b) in enumerate(self.blocks) if b > a]

    def slot_workers(self) -> list[str]:
        """The address of each worker of :meth:`worker_blocks`, in the same order."""
        return [self.workers[w] for w, (a, b) in enumerate(self.blocks) if b > a]

    def colocated(self, need: int = 0) -> bool:
        """Whether the workers of :meth:`worker_blocks` share one host's memory with ``need``
        bytes free (:func:`ppt_dask.engine.wire.sharedmem.colocated`)."""
        return sharedmem.colocated(self.client, [self.workers[w] for w, (a, b) in enumerate(self.blocks) if b > a],
                                   need)

    def lost_workers(self) -> list[str]:
        """Addresses of this set's workers that the scheduler no longer knows."""
        alive = worker_addresses(self.client)
        return [w for w in self.workers if w not in alive]

    def repair(self, timeout: float = 60.0) -> list[dict]:
        """Give each lost worker's slot to another worker and put its shards back.

        A replacement is a worker that holds no slot (a restarted or a new one), waited for
        a few seconds, else the surviving worker with the fewest slots. The slot takes a new
        resource label, given to the replacement, and its shards are placed there anew under
        new keys (built again from the loader or the dask array, or re-sent from the head's
        copy); the lost ones are released, as they would wait for a label no worker carries.

        Returns one event per moved slot. Raises ``RuntimeError`` when scattered shards
        were lost and the head kept no copy, ``TimeoutError`` when no worker is left.
        """
        lost = set(self.lost_workers())
        if not lost:
            return []
        if self.source == "numpy" and self.head_copy is None:
            raise RuntimeError(
                f"shards scattered from memory were lost with worker(s) {sorted(lost)} and the head "
                "kept no copy; use enter_data(..., keep_copy=True) or build the shards on the "
                "workers (enter_source, or a dask array) so they can be rebuilt")
        deadline = time.monotonic() + timeout
        events: list[dict] = []
        while lost:  # again while a replacement leaves before its shards are placed
            events += self._replace(lost, deadline, timeout)
            lost = set(self.lost_workers())
        return events

    def _replace(self, lost: set, deadline: float, timeout: float) -> list[dict]:
        """One pass of :meth:`repair` over the ``lost`` slots' workers; it stops early, leaving
        the rest lost, when a replacement is no longer listed by the time its shards go."""
        grace = time.monotonic() + REPLACEMENT_GRACE
        while True:
            alive = worker_addresses(self.client)
            fresh = [w for w in alive if w not in self.workers]
            if (len(fresh) >= len(lost) or time.monotonic() > grace) and alive:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no worker left to take the shards of {sorted(lost)} after {timeout} s")
            time.sleep(0.2)
        events = []
        for slot, address in enumerate(self.workers):
            if address not in lost:
                continue
            if fresh:
                replacement = fresh.pop(0)
            else:
                survivors = [w for w in self.workers if w not in lost]
                replacement = min(survivors, key=self.workers.count)
            self.renamed[slot] = label = f"{self.name}-w{slot}-r{len(self.renamed)}"
            self.workers[slot] = replacement
            try:
                self.client.run(labels.label_worker, {label: 1e9}, workers=[replacement])
                self._place_again(slot, replacement)
            except (KeyError, OSError):  # it left: the scheduler's KeyError of its address, a closed comm
                # a worker killed a moment ago is listed until the scheduler sees its comm close
                who, _ = waits.who_is_gone(self.client, [replacement], worker_addresses,
                                           wait_seconds=max(0.0, deadline - time.monotonic()))
                if who != waits.WORKERS:
                    raise
                return events  # the slot is lost again: repair goes round once more
            a, b = self.blocks[slot]
            events.append({"event": "worker_lost", "lost": address, "slot": slot,
                           "replacement": replacement, "shards": list(range(a, b)),
                           "resent": self.source == "numpy"})
        return events

    @property
    def can_grow(self) -> bool:
        """Whether shards can be moved to new workers: not when the workers were named at
        entry (``workers=``), not for dask-array sources, nor for scattered shards without
        a head copy."""
        if self.chosen:
            return False
        return self.source == "loader" or (self.source == "numpy" and self.head_copy is not None)

    def joined_workers(self) -> list[str]:
        """Workers of the cluster that hold no slot of this set."""
        alive = worker_addresses(self.client)
        return [w for w in alive if w not in self.workers]

    def rebalance(self) -> list[dict]:
        """Spread the shards over the current workers when new ones have joined.

        New workers get new slots; the blocks of shards are cut again for the larger
        number of slots and every shard whose worker changes is placed anew (re-sent from
        the head's copy, or reloaded on the new worker for a loader). Shards from a dask
        array stay where they are. Returns one event, or none when nothing changed.
        """
        joined = self.joined_workers() if self.can_grow else []
        if not joined:
            return []
        old_owner = {s: self.workers[slot] for slot, (a, b) in enumerate(self.blocks) for s in range(a, b)}
        for address in joined:
            self.workers.append(address)
            self.client.run(labels.label_worker, {self.label(len(self.workers) - 1): 1e9}, workers=[address])
        self.blocks = split_shards(self.n_shards, len(self.workers))
        moved = []
        for slot, (a, b) in enumerate(self.blocks):
            for s in range(a, b):
                if old_owner[s] != self.workers[slot]:
                    self._place(s, slot)
                    moved.append(s)
        return [{"event": "workers_joined", "joined": joined, "moved_shards": moved,
                 "workers": len(self.workers)}]

    def _place(self, s: int, slot: int) -> None:
        """Place shard ``s`` anew on the worker of ``slot``."""
        info, label = self.info[s], self.label(slot)
        if self.source == "numpy":
            X, y = self.head_copy
            lo, hi = (0, len(X)) if self.replicated else (info.start, info.stop)
            shard = make_shard(X[lo:hi], y[lo:hi], self.dtype)
            self.futures[s] = labels.scatter_pinned(self.client, shard, self.workers[slot], label)
        else:  # the old copy lives on: the new one is made from it on the new worker
            self.futures[s] = self.client.submit(labels.settle, self.futures[s], resources={label: 1},
                                                 key=keys.name(keys.SHARD, f"{label}-s{s}-moved"), pure=False)

    def _place_again(self, slot: int, address: str) -> None:
        """The slot's shards under new keys with the slot's label: scattered again from the
        head's copy, or built again on ``address`` (one copy per slot when replicated)."""
        a, b = self.blocks[slot]
        label = self.label(slot)
        for lost in self.futures[a:b]:  # released, not cancelled: a cancel would reach their dependents
            lost.release()
        copy = None
        for s in range(a, b):
            info = self.info[s]
            if copy is None or not self.replicated:
                if self.source == "numpy":
                    X, y = self.head_copy
                    shard = make_shard(X[info.start:info.stop], y[info.start:info.stop], self.dtype)
                    copy = labels.scatter_pinned(self.client, shard, address, label)
                else:
                    copy = self.rebuild(s, label, keys.name(keys.SHARD, f"{label}-s{s}"))
            self.futures[s] = copy

    def who_has(self) -> dict[int, tuple[str, ...]]:
        """The scheduler's own view: shard index -> addresses holding it."""
        held = self.client.who_has(self.futures)
        return {i.index: tuple(held[f.key]) for i, f in zip(self.info, self.futures)}



def make_shard(X, y, dtype: str):
    """A shard as the workers hold it: contiguous rows in the run's dtype."""
    return np.ascontiguousarray(X, dtype=dtype), np.ascontiguousarray(y)


