"""Asynchronous training on streamed loops: a replica per worker, no barrier, no task a step.

The asynchronous strategy (:class:`ppt_dask.algorithms.asynchronous.Async`) runs as a third
kind of streamed loop (:mod:`ppt_dask.engine.rounds.stream`): one long task per worker slot for a
generation of the run, whose steps go to the head through the slot's mailbox. Each loop
keeps its own replica (weights and momentum). A step: the gradient of its shards at its
replica; then, over its links (:mod:`ppt_dask.engine.wire.links`), whatever the other loops' have
sent meanwhile, each applied as one step; then its own gradient, applied and sent to the
others, unless all of them are already more than the bound past it (then it is dropped,
everywhere). It never waits for another loop (:class:`Exchange` only takes what has
arrived), so a straggler holds up no one (seed 003's "no global barrier", mission B6).

The head's rounds. A round is the next ``q`` steps the head reads, of any loops, in the
order it reads them (``q = Async.updates_per_round()``, about 1000 patterns): a loop that
steps more often makes more of a round, a straggler fewer, and no round waits for one slot.
The head asks every mailbox for its new steps and goes on with the first to answer (the
others' asks stay open for the next read). A round's stats are the sum of its steps'; its
state, what the trainer checks, keeps and reports, is the replica of the loop that made its
last step, after that step; its timing has one entry per loop that stepped in it. So the
trainer's round loop (:mod:`ppt_dask.engine.trainer`) runs an asynchronous run as any other:
stopping rule and test checks, checkpoints and ``--resume``, the breakdown, page, report and
trace, and a lost worker: the gradient it was computing is lost, the newest state of a
surviving loop is kept (:meth:`AsyncRounds.salvage`), its shards are placed again and the
loops start again from there, all from that replica. On one worker no gradient is ever
stale and a run is bitwise :func:`ppt_dask.algorithms.asynchronous.train_serial`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import CancelledError
from dataclasses import replace

import numpy as np

from ppt_dask.algorithms.asynchronous import Gradient, Replica, staleness, step_gradient
from ppt_dask.engine.rounds.stream import (
    ASK_ERRORS,
    STOP_SECONDS,
    LoopsHead,
    loop_timing,
    raise_loop_error,
    start_loops,
    stop_loops,
)
from ppt_dask.engine.rounds.streamloops import StreamStep
from ppt_dask.engine.wire.mailbox import WAIT_SECONDS, Mailbox, Stopped

# The states a loop keeps for the head: every step's until the head has read it, then those the
# head may still ask for (the last of each loop's steps in a round). A loop runs at most this
# many bytes of states past what the head has read: between MIN_AHEAD and MAX_AHEAD steps. On
# MNIST (784-64-64-10, float32: 0.44 MB a state) 72 steps.
STATE_BYTES = 32 * 2**20
MIN_AHEAD, MAX_AHEAD = 8, 256
SLACK_BYTES = 64 * 2**10  # a message's header and pickle around its arrays, at most
QUEUED = 32  # writes pending to one peer: a gradient more is not sent (the peer reads too slowly)


class AsyncBox(Mailbox):
    """A slot's mailbox for asynchronous steps: the head reads whichever steps are new, and
    keeps only the states it may still ask for."""

    def __init__(self, name: str, first: int = 0, ahead: int = MIN_AHEAD):
        super().__init__(name, first)
        self.ahead = ahead  # steps the loop may run past the first step the head has not read

    async def since(self, first: int, keep=(), timeout: float = WAIT_SECONDS) -> dict:
        """The steps from ``first`` on that the loop has left, once there is one:
        ``{"worker": address, "steps": [(step, log, timing), ...]}``. The head has read the
        steps before ``first``: of their states it keeps those in ``keep`` only, and the loop
        may run ``ahead`` steps past ``first``."""
        keep = set(keep)
        with self._lock:
            self._released = max(self._released, first)
            for t in [t for t in self._kept if t < first and t not in keep]:
                del self._kept[t]
            self._changed()

        def ready():
            steps = sorted(t for t in self._kept if t >= first)
            if steps:
                return {"worker": self.worker, **self.settings_once(), "notes": self.take_notes(),
                        "steps": [(t, self._kept[t][0], self._kept[t][2]) for t in steps]}
        return await self._wait(ready, timeout, f"{self.name}'s steps from {first}")

    async def state(self, t: int, timeout: float = WAIT_SECONDS):
        """The replica after step ``t``."""
        def ready():
            if t in self._kept:
                return self._kept[t][1]
        return await self._wait(ready, timeout, f"{self.name}'s step {t}")


class Exchange:
    """A loop's gradients to the other loops and theirs to it, never waiting for a peer.

    Uses the loop's links (:class:`ppt_dask.engine.wire.links.Links`) in the loop's thread, for a
    moment after each step: :meth:`send` queues the gradient for every peer and writes what the
    sockets take at once, :meth:`arrived` writes on and takes whatever the peers' writes have
    put in the sockets meanwhile. A thread of its own for the links, reading and writing all
    the time, was tried too (on links of Dask's comms): on MNIST at two workers the runs took
    7.5-9.7 epochs to 97% against 5.1-7.2 this way (seeds 0-1, 2026-11-26), the thread taking
    the interpreter's lock from the steps. A peer whose link breaks (its worker was lost) is
    left out from then on: the loop goes on with the rest."""

    def __init__(self, links):
        self.links = links
        self.skipped = 0  # gradients not sent to a peer whose link was backed up

    @property
    def lost(self) -> set:
        return set() if self.links is None else self.links.lost

    def send(self, message) -> int:
        """Queue ``message`` for every peer still linked; the bytes of its gradient sent. A peer
        that has ``QUEUED`` gradients still to be written skips it (it would arrive too stale)."""
        if self.links is None:
            return 0
        live = [slot for slot in self.links.outgoing if slot not in self.links.lost]
        slots = [slot for slot in live if self.links.backlog(slot) < QUEUED]
        self.skipped += len(live) - len(slots)
        if slots:  # a copy of the gradient: the replica goes on while the bytes are written
            wire = {"slot": message.slot, "clock": list(message.clock.items()), "count": message.count,
                    "grad": np.array(message.grad_sum)}
            self.links.send(wire, slots, lose=True)
        return message.grad_sum.nbytes * len(slots)

    def arrived(self) -> list:
        """The peers' gradients that have arrived, in slot order (none without peers); the
        writes queued by :meth:`send` go on meanwhile."""
        if self.links is None:
            return []
        return [Gradient(wire["slot"], dict(wire["clock"]), wire["grad"], wire["count"])
                for _slot, wire in self.links.poll()]

    def close(self) -> None:
        """Nothing to cancel: the links (closed by their owner) hold what is queued."""


def async_loop(step: StreamStep, first: int, last: int, start, shards: list, links, box: AsyncBox,
               seconds: dict) -> None:
    """Rounds ``first..last`` of the head are at most ``q`` steps each of this loop: a gradient
    at the replica, the others' that arrived meanwhile applied, then its own (or dropped, too
    stale for all) and sent; the step left for the head."""
    strategy, net = step.strategy, step.net
    n_slots = 1 + (len(links.outgoing) if links is not None else 0)
    q = strategy.updates_per_round()
    t_first = (first * q) // n_slots  # about this loop's steps so far (exactly, on one worker)
    replica = Replica(strategy, net, start, step.slot)
    if links is not None:  # a peer's message: a gradient (float64 at most) and a clock of n_slots entries
        links.expect(8 * np.asarray(start.params).size + SLACK_BYTES + 64 * n_slots)
    exchange = Exchange(links)
    began = t0 = time.perf_counter()
    try:
        for t in range(t_first, t_first + (last - first + 1) * q):
            computed_at = dict(replica.clock)
            grad_sum, stats = step_gradient(strategy, net, replica.state.params, shards, step.shard_ids, t)
            t1 = time.perf_counter()
            dropped = replica.dropped + exchange.skipped
            arrived = exchange.arrived()  # the others' gradients first: how stale is this one?
            t2 = time.perf_counter()
            applied = [replica.take(m) for m in arrived]
            message = replica.own(grad_sum, stats, computed_at)
            t3 = time.perf_counter()
            sent = exchange.send(message) if message is not None else 0
            t4 = time.perf_counter()
            box.wait_room(t, step.wait)
            t5 = time.perf_counter()
            # no "idle": a loop never waits for another
            phases = {"gradient": t1 - t0, "transfer": t2 - t1 + t4 - t3, "update": t3 - t2, "head": t5 - t4}
            stalest = max(applied, default=0)
            if message is not None:  # its own gradient, taken after the others that came meanwhile
                stalest = max(stalest, staleness(replica.clock, computed_at) - 1)
            log = (stats.tolist(), (len(applied), stalest, replica.dropped + exchange.skipped - dropped), time.time())
            box.keep(t, log, replica.state, (t0 - began, phases, sent))
            for name, value in phases.items():
                seconds[name] += value
            t0 = t5
    finally:
        exchange.close()


class _FirstAnswer:
    """The head's open asks to the mailboxes, as a future that is done when one has answered
    (so the trainer's waits, which watch for lost workers, can wait on it)."""

    def __init__(self, rounds: AsyncRounds):
        self._rounds = rounds

    def result(self, timeout: float | None = None):
        return self._rounds.client.sync(self._rounds._any_answer, callback_timeout=timeout)


class AsyncRounds(LoopsHead):
    """The head's side of the asynchronous loops for one generation of a run.

    Same interface as the round graphs (:mod:`ppt_dask.engine.rounds.choose`), plus
    :meth:`record_fields`: what a round's steps did (updates per slot, the gradients of the
    others applied and dropped, the largest staleness applied)."""

    lag = 0

    def __init__(self, client, plan, shard_futures, strategy, net, tag: str, start_state, first: int,
                 start_value, last_round: int):
        self.client, self.plan, self.tag, self.first = client, plan, tag, first
        self.strategy, self.net = strategy, net
        self.shard_futures = list(shard_futures)
        self.start_state, self.last_round = start_state, last_round
        self.n_slots = len(plan.blocks)
        self.q = strategy.updates_per_round()
        state_bytes = 2 * np.asarray(start_value.params).nbytes  # the weights and the velocity
        self.ahead = max(MIN_AHEAD, min(MAX_AHEAD, STATE_BYTES // max(1, state_bytes)))
        self.max_batch = max(1, self.ahead * self.n_slots // self.q)  # rounds read at once: about one window
        self.next_step = [(first * self.q) // self.n_slots] * self.n_slots  # per slot: the first not read
        self.boxes: list = []  # per slot: (actor future, actor)
        self.loops: list = []
        self.asks: dict = {}  # slot -> the open ask of its mailbox (an actor call)
        self.waiters: dict = {}  # slot -> the task awaiting it, on the client's event loop
        self.buffer: deque = deque()  # steps read, not yet in a round: (slot, step, log, timing, worker)
        self.steps: dict = {}  # round -> {slot: its last step in the round}, the round's own slot last
        self.fields: dict = {}
        self.timings: dict = {}
        self.states: dict = {}
        self.worker_settings: dict = {}
        self.events: list = []  # what the loops noted for the run's log, until the trainer takes it
        self.submitted = first - 1

    def _start(self) -> None:
        self.boxes, self.loops = start_loops(self, AsyncBox, list(self.next_step), "async", loop=async_loop)

    # -- reading the steps --
    def read_stats(self, first: int, last: int, wait) -> list:
        """The stats of rounds ``first..last``: the next ``q`` steps read each."""
        need = (last - first + 1) * self.q
        while len(self.buffer) < need:
            self._read(wait)
        return [self._round(r, [self.buffer.popleft() for _ in range(self.q)]) for r in range(first, last + 1)]

    def _read(self, wait) -> None:
        """Ask every mailbox that has no open ask for its new steps; take the answers of
        those that have answered, once one has (``wait``: the trainer's watched wait)."""
        self._check_boxes()
        for slot, (_f, actor) in enumerate(self.boxes):
            if slot not in self.asks:
                try:
                    self.asks[slot] = actor.since(self.next_step[slot], self._needed(slot))
                except RuntimeError:  # its worker was lost since the check
                    self._check_boxes()
                    raise
        wait(_FirstAnswer(self))
        self._check_boxes()
        new = []
        for slot in [s for s, ask in self.asks.items() if ask.done()]:
            reply = self._answer(self.asks.pop(slot))
            self.events += reply.get("notes", [])
            self.waiters.pop(slot, None)
            self.note_settings(reply)
            new += [(log[2], slot, t, log, timing, reply["worker"]) for t, log, timing in reply["steps"]]
            self.next_step[slot] = reply["steps"][-1][0] + 1
        self.buffer.extend(item[1:] for item in sorted(new, key=lambda item: item[:3]))  # the loops' clocks

    def _check_boxes(self) -> None:
        """A lost worker as a lost task (the trainer puts its shards back and goes on from a
        survivor's replica): the others' loops go on without it meanwhile, and its open ask
        may never answer (distributed refuses calls to an actor whose worker was lost)."""
        lost = [slot for slot, (f, _actor) in enumerate(self.boxes) if f.status != "finished"]
        if lost:
            raise CancelledError(f"the worker of slot(s) {lost} was lost")

    async def _any_answer(self) -> None:
        for slot, ask in self.asks.items():
            if slot not in self.waiters:
                self.waiters[slot] = asyncio.ensure_future(_settled(ask))
        await asyncio.wait(list(self.waiters.values()), return_when=asyncio.FIRST_COMPLETED)

    def _answer(self, ask):
        """An ask's answer; a lost worker as a lost task (the trainer recovers), a failed loop
        as its own error."""
        try:
            return ask.result(timeout=WAIT_SECONDS)
        except ASK_ERRORS as exc:
            raise_loop_error(exc, self.boxes, self.loops)

    def _round(self, r: int, group: list) -> list:
        """Round ``r`` of the steps in ``group``: its stats; its state's step, each loop's
        timing and what the steps did are kept for the trainer."""
        last: dict = {}
        timing: dict = {}
        updates, dropped_by = [0] * self.n_slots, [0] * self.n_slots
        applied = dropped = stalest = 0
        for slot, t, log, (at, phases, sent), worker in group:
            last.pop(slot, None)
            last[slot] = t  # the round's own slot ends up last
            updates[slot] += 1
            n, tau, lost = log[1]
            applied, dropped, stalest = applied + n, dropped + lost, max(stalest, tau)
            dropped_by[slot] += lost
            if slot not in timing:
                timing[slot] = loop_timing(worker, at, dict(phases), sent)
            else:
                mine = timing[slot]
                mine["bytes"] += sent
                for phase, value in phases.items():
                    mine["phases"][phase] = mine["phases"].get(phase, 0.0) + value
        self.steps[r] = last
        self.timings[r] = list(timing.values())
        self.fields[r] = {"worker": group[-1][0], "updates": updates, "applied": applied, "dropped": dropped,
                          "dropped_by": dropped_by, "staleness": stalest}
        return list(np.sum([item[2][0] for item in group], axis=0))

    def loop_phases(self, r: int) -> list | None:
        """Each loop's timing of round ``r`` (its steps in the round, added; given once)."""
        return self.timings.pop(r, None)

    def record_fields(self, r: int) -> dict:
        """What round ``r``'s steps did: ``worker`` (the slot whose replica is the round's
        state), ``updates`` (steps per slot), ``applied`` and ``dropped`` (the others'
        gradients taken, and the round's own gradients dropped as too stale or not sent to a
        peer that read too slowly), ``dropped_by`` (those per slot: whose gradients they
        were), ``staleness`` (the largest applied)."""
        return self.fields.pop(r, {})

    # -- states --
    def fetch(self, r: int, timeout: float, slot: int | None = None):
        """The state after round ``r``: the replica of its last step's loop (or of ``slot``'s
        last step in the round), numbered ``r``."""
        steps = self.steps[r]
        slot = next(reversed(steps)) if slot is None else slot
        try:
            value = self.boxes[slot][1].state(steps[slot], timeout).result(timeout=timeout)
        except (OSError, RuntimeError, Stopped) as exc:
            raise CancelledError(f"the loop of worker slot {slot} was lost: {exc!r}") from exc
        return replace(value, round=r)

    def _build(self, r: int, timeout: float):
        return self.fetch(r, timeout)

    def salvage(self, r: int, timeout: float = STOP_SECONDS):
        """After a lost worker: the newest state a surviving loop left in round ``r`` or
        before (among the rounds the head still keeps), numbered by its round; None if none."""
        for rr in sorted((rr for rr in self.steps if rr <= r), reverse=True):
            for slot in reversed(list(self.steps[rr])):  # the round's own state first
                if self.boxes[slot][0].status != "finished":
                    continue
                try:
                    return self.fetch(rr, timeout, slot)
                except Exception:  # gone too: try another
                    continue
        return None

    def _needed(self, slot: int) -> list:
        """The steps of ``slot`` read so far whose states the head may still ask for: its last
        step in each round kept (the round's state, or what :meth:`salvage` takes), and in
        each round the steps read but not yet in a round will make."""
        needed = {steps[slot] for steps in self.steps.values() if slot in steps}
        group: dict = {}
        for i, (s, t, *_rest) in enumerate(self.buffer):
            group[s] = t
            if i % self.q == self.q - 1 or i == len(self.buffer) - 1:
                needed.update(t for s, t in group.items() if s == slot)
                group = {}
        return sorted(needed)

    def release(self, last: int) -> None:
        """The head needs no round before ``last - 1`` any more: the mailboxes drop their
        states with the next ask."""
        for r in [r for r in self.steps if r < last - 1]:
            del self.steps[r]
        for r in [r for r in self.states if r < last - 1]:
            del self.states[r]

    def cancel(self) -> None:
        stop_loops(self.boxes, self.loops)
        for task in self.waiters.values():
            self.client.loop.add_callback(task.cancel)
        for collection in (self.loops, self.boxes, self.asks, self.waiters, self.buffer, self.steps, self.states,
                           self.timings, self.fields):
            collection.clear()


async def _settled(ask) -> None:
    """Wait for an actor call to end, leaving its result or error to whoever reads it."""
    try:
        await ask
    except BaseException:  # noqa: BLE001 - read by AsyncRounds._answer
        pass

