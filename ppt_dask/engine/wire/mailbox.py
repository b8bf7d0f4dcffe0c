"""A worker slot's mailbox: where a streamed loop leaves its rounds for the head.

One :class:`Mailbox` a worker slot and generation of a run, an actor (``distributed.Actor``, a
public interface of Dask) on the slot's worker. The slot's loop (:mod:`ppt_dask.engine.rounds.stream`,
:mod:`ppt_dask.engine.rounds.streamasync`) runs in a task on the same worker and reaches it through
:data:`BOXES` (the same process): it waits for room (``wait_room``: at most ``ahead`` rounds
past what the head has read), leaves each round (``keep``) and takes the small messages other
slots ``put`` (the links' addresses). The head reads the rounds' stats and timings (``stats``)
and what a round left (``kept``) through actor calls that answer once the rounds are there,
``release``s what it has read, and ``stop``s the mailbox at the end, which ends the loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings

import numpy as np
from distributed import get_worker

AHEAD = 32  # rounds a loop may run past the last round the head has read (at most)
# Rounds a loop that keeps compact records (:meth:`Mailbox.record`) may run past the head's
# last read: a row of a few floats a round, 64k rounds about 6 MB. The head reads by time
# (every ~0.2 s), so this bounds a head that stopped reading, not the usual case.
RECORDS_AHEAD = 1 << 16
WAIT_SECONDS = 600.0  # the longest a loop or the head waits for one round of another slot

BOXES: dict = {}  # the mailboxes living in this process, by name
BOXES_LOCK = threading.Lock()


class Stopped(Exception):
    """The head stopped the mailbox: the run ended or moved to a new generation."""


class Mailbox:
    """One worker slot's mailbox for one generation of a run (an actor on its worker).

    The slot's loop leaves its rounds here (``wait_room``, then ``keep``); the head reads the
    rounds' stats and timings (``stats``) and what a round left (``kept``), ``release``s what it
    has read and ``stop``s the mailbox at the end. Other slots ``put`` small messages the loop
    ``take``s (the links' addresses, when a generation starts)."""

    def __init__(self, name: str, first: int = 0, ahead: int = AHEAD):
        self.name = name
        self.ahead = ahead
        self.worker = worker_address()  # where the loop it serves runs (its timings' track)
        self._lock = threading.Condition()
        self._inbox: dict = {}  # (round, slot) -> message
        self._kept: dict = {}  # round -> (log, value, timing)
        self._released = first  # the head needs no round before this one
        self._failed: tuple | None = None  # (error class, message)
        self._stopped = False
        self._event = asyncio.Event()  # wakes the head's waits on the worker's event loop
        self._loop = None
        self._untils: list = []  # per head's wait, the round it needs before it can answer
        # what the loop found and set in its process (ppt_dask.engine.loopenv), given to the head once
        self.settings: dict | None = None
        self._settings_given = False
        self._notes: list = []  # what the loop noted for the run's log (refused connections), not yet read
        # compact records (a loop whose head reads by time): a row per round from _rows_first on
        self._rows = np.zeros((0, 0))
        self._rows_first = first
        self._rows_n = 0
        self.latest: tuple | None = None  # (round, state after it): the newest, for the head's copies
        self._end: dict | None = None  # how the loop ended its rounds itself (the stopping rule)
        # where the loop is: (round, phase, since): the head asks when the rounds stop coming (a hang)
        self.where: tuple = (first, "start", time.perf_counter())
        with BOXES_LOCK:
            BOXES[name] = self

    def _changed(self, r: int | None = None) -> None:
        """Wake the waiters (called with the lock held). A round ``r`` kept wakes the head's
        wait only once it is the round that wait needs: the worker's event loop is not woken
        (and does not take the GIL from the loop) for every round of a batch."""
        self._lock.notify_all()
        if (self._loop is not None and not self._loop.is_closed()  # a worker closing: nobody waits
                and (r is None or self._untils and r >= min(self._untils))):
            self._loop.call_soon_threadsafe(self._event.set)

    # -- from the other slots' loops --
    def put(self, r: int, slot: int, message) -> None:
        with self._lock:
            if not self._stopped:
                self._inbox[r, slot] = message
                self._changed()

    # -- from the head --
    def release(self, before: int) -> None:
        """The head needs no round before ``before``: drop them, let the loop run on."""
        with self._lock:
            self._released = max(self._released, before)
            for r in [r for r in self._kept if r < self._released]:
                del self._kept[r]
            self._changed()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._inbox.clear()
            self._kept.clear()
            self._changed()
        with BOXES_LOCK:
            BOXES.pop(self.name, None)

    async def _wait(self, ready, timeout: float, what: str, until: int = -1):
        self._loop = asyncio.get_running_loop()
        with self._lock:
            self._untils.append(until)
        try:
            return await self._waiting(ready, timeout, what)
        finally:
            with self._lock:
                self._untils.remove(until)

    async def _waiting(self, ready, timeout: float, what: str):
        deadline = self._loop.time() + timeout
        while True:
            self._event.clear()
            with self._lock:
                value = ready()  # what the loop left stays readable after it failed (salvage)
                if value is not None:
                    return value
                if self._failed is not None:
                    error, message = self._failed
                    raise error(message)
                if self._stopped:
                    raise Stopped(f"mailbox {self.name} was stopped")
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{what} did not arrive within {timeout} s")
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except TimeoutError:
                pass

    async def stats(self, first: int, last: int, release: int | None = None, timeout: float = WAIT_SECONDS) -> dict:
        """The logs and the loop's timings of rounds ``first..last``, once the loop has run them
        (``{"worker": address, "rounds": [(log, timing), ...]}``); with ``release``, first
        :meth:`release` the rounds before it (one message, not two)."""
        if release is not None:
            self.release(release)

        def ready():
            if all(r in self._kept for r in range(first, last + 1)):
                return {"worker": self.worker, **self.settings_once(), "notes": self.take_notes(),
                        "rounds": [(self._kept[r][0], self._kept[r][2]) for r in range(first, last + 1)]}
        return await self._wait(ready, timeout, f"{self.name}'s rounds {first}..{last}", until=last)

    def settings_once(self) -> dict:
        """``{"settings": report}`` the first time the loop's report is there, else {} (a reply
        carries it once; called with the lock held)."""
        if self.settings is None or self._settings_given:
            return {}
        self._settings_given = True
        return {"settings": self.settings}

    async def kept(self, r: int, timeout: float = WAIT_SECONDS) -> tuple:
        """What the loop left after round ``r`` and after round ``r - 1`` (None where it did
        not run it)."""
        def ready():
            if r in self._kept:
                before = self._kept.get(r - 1)
                return self._kept[r][1], None if before is None else before[1]
        return await self._wait(ready, timeout, f"{self.name}'s round {r}", until=r)

    async def watch(self, since: int, seconds: float, release: int | None = None, state: bool = False,
                    timeout: float = WAIT_SECONDS) -> dict:
        """The compact records of the rounds from ``since`` on that the loop has run, once there is
        one, waiting at most ``seconds`` more for others to gather (or for the loop's end), so the
        head reads by time, not by round. ``release``: the rounds before it are read (the loop may
        run on). ``state``: also the newest ``(round, state)`` the loop holds, for the head's copy.
        The reply: ``{"first": round, "rows": array, "end": dict or None, "latest": ...}``."""
        if release is not None:
            self.release(release)
        loop = asyncio.get_running_loop()
        soon = loop.time() + seconds

        def some():
            if self._end is not None or self._rows_first + self._rows_n > since:
                return True

        def ready():
            if self._end is not None or (self._rows_first + self._rows_n > since and loop.time() >= soon):
                return True

        await self._wait(some, timeout, f"{self.name}'s round {since}", until=since)
        if seconds > 0 and self._end is None:
            try:
                await self._wait(ready, seconds, f"{self.name}'s rounds", until=1 << 62)
            except TimeoutError:
                pass
        with self._lock:
            latest = self.latest if state else None
            at = max(since, self._rows_first) - self._rows_first
            rows = self._rows[at:self._rows_n].copy()
            return {"worker": self.worker, **self.settings_once(), "notes": self.take_notes(),
                    "first": self._rows_first + at, "rows": rows, "end": self._end, "latest": latest}

    def progress(self) -> dict:
        """Where the loop is (``round``, ``phase``: "gradient", "exchange" ...) and for how many
        ``seconds`` it has been there; ``ended`` once it ended its rounds."""
        r, phase, since = self.where
        return {"round": r, "phase": phase, "seconds": time.perf_counter() - since, "ended": self._end is not None,
                "worker": self.worker}

    # -- from the slot's own loop (the same process) --
    def take(self, r: int, slots, timeout: float) -> list:
        """The other ``slots``' messages of round ``r``, waiting for them."""
        waited = [(r, s) for s in slots]
        with self._lock:
            if not self._lock.wait_for(lambda: self._stopped or all(k in self._inbox for k in waited), timeout):
                raise TimeoutError(f"{self.name}: round {r} of slots {list(slots)} did not arrive "
                                   f"within {timeout} s")
            if self._stopped:
                raise Stopped(self.name)
            return [self._inbox.pop(k) for k in waited]

    def wait_room(self, r: int, timeout: float) -> None:
        """Wait while round ``r`` would be ``ahead`` rounds past what the head has read."""
        if not self._stopped and r - self._released < self.ahead:
            return  # the usual case, without the lock: both only move one way (a stop is seen by keep)
        with self._lock:
            if not self._lock.wait_for(lambda: self._stopped or r - self._released < self.ahead, timeout):
                raise TimeoutError(f"{self.name}: the head read no round for {timeout} s")
            if self._stopped:
                raise Stopped(self.name)

    def keep(self, r: int, log, value, timing=None) -> None:
        """Leave round ``r`` for the head (after :meth:`wait_room`): its ``log`` (what the head
        reads every round), the ``value`` it needs to build the state, the loop's ``timing``."""
        with self._lock:
            if self._stopped:
                raise Stopped(self.name)
            self._kept[r] = (log, value, timing)
            self._changed(r)

    def record(self, r: int, row) -> None:
        """Leave round ``r``'s compact record (a row of floats: its stats, its timing), after
        :meth:`wait_room`. Rows come in round order; the head reads them by time (:meth:`watch`)
        and the loop is not waited for: a row is written under the lock, nobody is woken."""
        with self._lock:
            if self._stopped:
                raise Stopped(self.name)
            if self._rows_n == len(self._rows) or self._rows.shape[1] != len(row):
                self._grow_rows(len(row))
            self._rows[self._rows_n] = row
            self._rows_n += 1
            if self._untils and r >= min(self._untils):  # the head waits for this round: wake it
                self._changed(r)

    def _grow_rows(self, width: int) -> None:
        """Room for more rows (called with the lock held); the rows the head has read go."""
        gone = max(0, min(self._released, self._rows_first + self._rows_n) - self._rows_first)
        kept = self._rows[gone:self._rows_n]
        grown = np.zeros((max(64, 2 * len(kept)), width))
        if len(kept):
            grown[:len(kept)] = kept
        self._rows, self._rows_first, self._rows_n = grown, self._rows_first + gone, len(kept)

    def end(self, how: dict) -> None:
        """The loop ended its rounds itself (``how``: the outcome, the round, the state): the
        head's :meth:`watch` answers at once with it."""
        with self._lock:
            self._end = how
            self._changed()

    def note(self, event: dict) -> None:
        """Leave ``event`` for the run's log (read with the next stats)."""
        with self._lock:
            self._notes.append(event)

    def take_notes(self) -> list:
        """The events noted since the last take (called with the lock held, or alone)."""
        notes, self._notes = self._notes, []
        return notes

    def is_stopped(self) -> bool:
        return self._stopped

    def stopped(self) -> None:
        """Raise :class:`Stopped` if the head stopped the mailbox (a waiting loop looks)."""
        if self._stopped:
            raise Stopped(self.name)

    def fail(self, message: str, error: type = RuntimeError) -> None:
        with self._lock:
            self._failed = (error, message)
            self._changed()


def worker_address() -> str | None:
    """The address of the worker this runs on (None outside a worker)."""
    try:
        return get_worker().address
    except ValueError:
        return None


def bound(actor, client, future):
    """The handle of a mailbox (a ``distributed.Actor``) bound to the ``client`` that made it.

    A handle calls through the client it finds when it is built, ``get_client()``: the default
    client of the process, which need not be the run's (a second cluster's client made later,
    say), and then every call went to a scheduler that does not know the actor and never
    answered. Its attributes ``_client`` and ``_future`` are distributed's, not public: this is
    the one place that sets them (tests/test_watched.py checks that they still exist), and a
    release without them gets the handle as it is, with a warning."""
    if hasattr(actor, "_client") and hasattr(actor, "_future"):
        actor._client, actor._future = client, future
    else:  # pragma: no cover - a distributed to come
        warnings.warn("ppt_dask cannot bind its mailboxes to the run's client with this version of distributed: "
                      "with several clients in one process, use the run's as the default", RuntimeWarning,
                      stacklevel=2)
    return actor

