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

from distributed import get_worker

AHEAD = 32  # rounds a loop may run past the last round the head has read (at most)
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
        with BOXES_LOCK:
            BOXES[name] = self

    def _changed(self, r: int | None = None) -> None:
        """Wake the waiters (called with the lock held). A round ``r`` kept wakes the head's
        wait only once it is the round that wait needs: the worker's event loop is not woken
        (and does not take the GIL from the loop) for every round of a batch."""
        self._lock.notify_all()
        if self._loop is not None and (r is None or self._untils and r >= min(self._untils)):
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
