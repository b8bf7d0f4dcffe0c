"""Streamed rounds: one long task per worker for a generation of the run, no scheduler hop a round.

A round graph (:mod:`ppt_dask.engine.rounds.onehop`, :mod:`ppt_dask.engine.rounds.overlap`) sends one task per
worker per round, and each waits for the scheduler to hand it over and for the fetch of the
other workers' results: a scheduler hop on every round's critical path. Here each worker slot
runs one task for a whole generation of the run, a loop over the rounds of its shards, and the
loops send their partial sums straight to each other over links of their own
(:mod:`ppt_dask.engine.wire.links`: sockets, thread to thread). Two kinds of loop:

* ``"sync"`` (:class:`~ppt_dask.Sync` by epoch or block, :class:`~ppt_dask.PPT`,
  :class:`~ppt_dask.Average`): round ``r`` computes its shards' partial sums at the state after
  round ``r - 1``, sends them to every other loop, takes theirs for the same round, adds them
  all along the fixed shard tree and applies the strategy's step. Every loop adds in the same
  order, so every loop holds bitwise the same state, as the one-hop graph's tasks do and as the
  serial path (:func:`ppt_dask.algorithms.serial.train_serial`): the replicated reduce of an
  ``MPI_Allreduce``.
* ``"local"`` (:class:`~ppt_dask.LocalSGD`): at the start of round ``r`` a loop takes round
  ``r - 2``'s sums (sent a whole round earlier: it waits only when another loop lags a round
  behind), adds them along the fixed tree and pulls its shards toward that average, as the
  per-round graph does: the same bits on any number of workers and as
  :func:`ppt_dask.algorithms.localsgd.train_serial`.

The head does not wait on tasks. Each loop leaves its rounds in its *mailbox*, an actor
(``distributed.Actor``, a public interface of Dask) on its worker: the round's stats and its
own timing of the round, which the head reads every batch of rounds (an actor call that
answers once the rounds are there), and what the head needs to build the state after a
round (the state; for local SGD every shard's model), which it asks for when it keeps a copy,
checks the target or ends. A loop runs at most ``AHEAD`` rounds past the rounds the head has
read (fewer for a large model: what it keeps stays under ``KEEP_BYTES``). When the run ends
or a worker is lost, the head stops every mailbox, which ends the loops; a loop that loses a
link says so, and the head goes on from the newest state a surviving loop holds (or its last
copy) and replays from there.

Each loop times its rounds (no scheduler sees inside a task that runs many rounds): per
round, the seconds it computed (``gradient``), sent its sums (``transfer``), waited for the
others' (``idle``), added them (``reduce``), applied the step (``update``) and waited for the
head to read (``head``), with the round's start as seconds since the loop began and the
bytes it sent. Those timings ride with the stats (:meth:`StreamRounds.loop_phases`), so the
time breakdown has a row per round while the run goes, as for a round graph.

This module is the head's side (:class:`StreamRounds`, and what the asynchronous loops'
head shares with it); the loops are :mod:`ppt_dask.engine.rounds.streamloops`.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError
from typing import Any, NoReturn

from distributed import wait

from ppt_dask.algorithms.localsgd import round_stats
from ppt_dask.core import keys
from ppt_dask.engine.rounds.liveness import Liveness
from ppt_dask.engine.rounds.steps import local_state
from ppt_dask.engine.rounds.streamloops import StreamStep, stream_task
from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import LinkLost
from ppt_dask.engine.wire.mailbox import AHEAD, WAIT_SECONDS, Mailbox, Stopped, bound

KEEP_BYTES = 256 * 2**20  # what a loop may keep for the head (a state a round) bounds that for large models
STOP_SECONDS = 5.0  # the longest the head waits for a loop to end after stopping it


class LaterState:
    """The state after a round, built on the head from the loops' mailboxes when first asked
    for (``result`` as a future's, so the trainer's waits treat it like one):
    ``build(r, timeout)`` builds it."""

    def __init__(self, build, r: int):
        self._build, self._r, self._value = build, r, None

    def result(self, timeout: float | None = None):
        if self._value is None:
            self._value = self._build(self._r, WAIT_SECONDS if timeout is None else timeout)
        return self._value


ASK_ERRORS = (OSError, RuntimeError, Stopped, LinkLost)  # what a mailbox's answer may raise


def notes_left(boxes: list, timeout: float = 5.0) -> list:
    """What the loops noted for the run's log and no reply carried yet (the connections their
    links refused when the link-up failed), from every mailbox that still answers."""
    notes: list = []
    for f, actor in boxes:
        if f.status != "finished":
            continue
        try:
            notes += actor.take_notes().result(timeout=timeout)
        except Exception:  # noqa: BLE001 - its worker is gone: its notes with it
            continue
    return notes


def raise_loop_error(exc: BaseException, boxes: list, loops: list) -> NoReturn:
    """Raise what a failed ask of the mailboxes (``boxes``: (actor future, actor) per slot)
    means: a lost worker as a lost task (the trainer rolls back and replays), a failed loop
    (of ``loops``) as its own error, else ``exc`` itself."""
    if isinstance(exc, (OSError, LinkLost)) or any(f.status != "finished" for f, _actor in boxes):
        raise CancelledError(f"a loop of the run was lost: {exc!r}") from exc
    failed = [f for f in loops if f.status == "error"]
    if failed:
        failed[0].result()  # the loop's own error
    raise exc


class LoopsHead:
    """What the head's side of streamed loops (synchronous, local or asynchronous) shares: the
    loops start (``_start``) at the first ``submit``, and the states after their rounds are
    the start state's future before the generation's first round, else a :class:`LaterState`
    built by ``_build(r, timeout)`` from the loops' mailboxes when first asked for (kept in
    ``states`` until released)."""

    first: int
    submitted: int
    loops: list
    start_state: Any
    states: dict
    # per worker, what its loop found and set in its process (ppt_dask.engine.loopenv), as heard
    worker_settings: dict

    def note_settings(self, reply: dict) -> None:
        """Keep the loop's report of its process's settings, which a mailbox's reply carries once."""
        if "settings" in reply:
            self.worker_settings[reply["worker"]] = reply["settings"]
    events: list

    def _start(self) -> None:
        raise NotImplementedError

    def _build(self, r: int, timeout: float):
        raise NotImplementedError

    def submit(self, first: int, last: int) -> float:
        """Rounds ``first..last`` (the loops, started by the first call, run them all)."""
        t0 = time.perf_counter()
        assert first == self.submitted + 1 and last >= first, "rounds are submitted in order"
        if not self.loops:
            self._start()
        self.submitted = last
        return time.perf_counter() - t0

    def state_after(self, r: int):
        """The state after round ``r`` (``first - 1``: the start state's future)."""
        if r == self.first - 1:
            return self.start_state
        if r not in self.states:
            self.states[r] = LaterState(self._build, r)
        return self.states[r]

    def state_before(self, r: int):
        return self.state_after(r - 1)

    def take_events(self) -> list:
        """What the loops noted for the run's log since the last take (connections their
        links refused)."""
        events, self.events = self.events, []
        return events


class StreamRounds(LoopsHead, Liveness):
    """The head's side of the streamed rounds for one generation of a run.

    Same interface as the round graphs (:mod:`ppt_dask.engine.rounds.choose`); the loops start at the
    first ``submit`` and run to ``last_round`` unless stopped. ``kind`` is "sync" or "local"."""

    lag = 0

    def __init__(self, client, plan, shard_futures, strategy, net, tag: str, start_state, first: int,
                 start_value, last_round: int, kind: str = "sync", allreduce: str = "auto"):
        assert kind in ("sync", "local"), kind
        self.client, self.plan, self.tag, self.first, self.kind = client, plan, tag, first, kind
        self.allreduce = allreduce  # the exchange's algorithm (ppt_dask.core.allreduce.choose)
        self.strategy, self.net = strategy, net
        self.shard_futures = list(shard_futures)
        self.start_state, self.start_value, self.last_round = start_state, start_value, last_round
        self.boxes: list = []  # per slot: (actor future, actor)
        self.loops: list = []
        self.states: dict = {}
        self.submitted = first - 1
        self.pending_release: int | None = None  # sent to the mailboxes with the next read
        self.timings: dict = {}  # round -> every loop's timing of it, until the trainer takes it
        self.worker_settings: dict = {}
        self.events: list = []  # what the loops noted for the run's log, until the trainer takes it
        self.ahead = rounds_ahead(start_value, kind, max(b - a for _label, a, b, _nodes in plan.blocks))
        self.round_seconds: list = []  # the rounds' wall times seen (Liveness.bound)
        self.workers: list = [None] * len(plan.blocks)  # each slot's worker, as its mailbox says
        self.homes: list = [None] * len(plan.blocks)
        self.max_batch = self.ahead // 2  # a batch the head waits for fits in what a loop may keep

    def _start(self) -> None:
        self.boxes, self.loops = start_loops(self, Mailbox, [self.first] * len(self.plan.blocks), self.kind)

    def _ask(self, method: str, *args, wait, boxes=None) -> list:
        boxes = self.boxes if boxes is None else boxes
        try:
            calls = [getattr(actor, method)(*args) for _f, actor in boxes]
            return [wait(call) for call in calls]
        except ASK_ERRORS as exc:
            self.events += notes_left(self.boxes)  # the refusals of a link-up that failed, say
            raise_loop_error(exc, self.boxes, self.loops)

    def read_stats(self, first: int, last: int, wait) -> list:
        # the release the head asked for since its last read rides on this call
        release, self.pending_release = self.pending_release, None
        replies = self._ask("stats", first, last, release, wait=lambda call: self._alive(call, wait))
        for j, reply in enumerate(replies):
            self.note_settings(reply)
            self.events += reply.get("notes", [])
            self.workers[j] = reply["worker"]
        self.round_seconds += [sum(timing[1].values()) for _log, timing in replies[0]["rounds"]]
        del self.round_seconds[:-1000]
        for i, r in enumerate(range(first, last + 1)):
            self.timings[r] = [loop_timing(reply["worker"], *reply["rounds"][i][1]) for reply in replies]
        if self.kind == "sync":  # every loop holds the same total: slot 0's
            return [log for log, _timing in replies[0]["rounds"]]
        logs = [[log for log, _timing in reply["rounds"]] for reply in replies]
        return round_stats(logs, self.plan.fan_in, self.plan.n_shards)

    def loop_phases(self, r: int) -> list | None:
        """Every loop's timing of round ``r`` (read with its stats; given once)."""
        return self.timings.pop(r, None)

    def _build(self, r: int, timeout: float):
        wait = lambda call: call.result(timeout=timeout)  # noqa: E731
        if self.kind == "sync":  # every loop holds the same state: slot 0's
            return self._ask("kept", r, wait=wait, boxes=self.boxes[:1])[0][0]
        parts = [(models, partial, None if before is None else before[1], mean)
                 for (models, partial, mean), before in self._ask("kept", r, wait=wait)]
        pending = self.start_value.opt_state["averages"].get(r - 1)
        return local_state(self.strategy, r, parts, pending, self.plan.fan_in, self.plan.n_shards)

    def salvage(self, r: int, timeout: float = STOP_SECONDS):
        """The state after round ``r`` from any loop whose worker survived, or None (local SGD:
        the shards' models are spread over the workers; a round no loop keeps any more)."""
        if self.kind != "sync":
            return None
        for f, actor in self.boxes:
            if f.status != "finished":
                continue
            try:
                return actor.kept(r, timeout).result(timeout=timeout)[0]
            except Exception:  # gone too, or failed: try the next
                continue
        return None

    def release(self, last: int) -> None:
        """The head needs no round before ``last - 1`` any more. The mailboxes hear it with
        the next read of stats (a loop may run ``AHEAD`` rounds past the last release, far
        more than one read lags)."""
        self.pending_release = last - 1
        for r in [r for r in self.states if r < last - 1]:
            del self.states[r]

    def cancel(self) -> None:
        stop_loops(self.boxes, self.loops)
        self.loops.clear()
        self.boxes.clear()
        self.states.clear()
        self.timings.clear()


def start_loops(rounds, box_class, box_firsts: list, kind: str, loop=None, rule=None,
                verify=None) -> tuple[list, list]:
    """A mailbox (``box_class(name, first, rounds.ahead)``, the slot's first of ``box_firsts``)
    and a loop task on each block's worker of ``rounds`` (streamed rounds of any kind: their
    client, plan, tag, strategy, net, first and last round, start state and shards); the
    (actor future, actor) pairs and the loops' futures. ``rule``: the stopping rule the loops
    apply themselves, with ``verify`` each slot's part of the verification set (a future, or
    None: its shards) (:mod:`ppt_dask.engine.rounds.watched`)."""
    labels = [label for label, *_ in rounds.plan.blocks]
    futures = [rounds.client.submit(box_class, f"{rounds.tag}-s{slot}", box_firsts[slot], rounds.ahead, actor=True,
                                    key=f"mailbox-{rounds.tag}-s{slot}", resources={label: 1})
               for slot, label in enumerate(labels)]
    boxes = [(f, bound(f.result(timeout=WAIT_SECONDS), rounds.client, f)) for f in futures]
    loops = []
    # the generation's secret: in the loops' arguments, over the cluster's own comms (TLS where
    # it is TLS), never on the links; a loop of another generation cannot join this one's
    secret = new_secret()
    subtrees = max(len(nodes) for *_, nodes in rounds.plan.blocks)
    for slot, (label, a, b, nodes) in enumerate(rounds.plan.blocks):
        step = StreamStep(rounds.strategy, rounds.net, tuple(range(a, b)), tuple(nodes), rounds.plan.fan_in,
                          rounds.plan.n_shards, rounds.plan.whole, kind=kind, slot=slot,
                          box=f"{rounds.tag}-s{slot}",
                          n_loops=len(labels), allreduce=getattr(rounds, "allreduce", None) or "auto",
                          subtrees=subtrees, secret=secret, loop=loop, rule=rule)
        peers = {other: actor for other, (_f, actor) in enumerate(boxes) if other != slot}
        loops.append(rounds.client.submit(
            stream_task, step, rounds.first, rounds.last_round, rounds.start_state, rounds.shard_futures[a:b], peers,
            None if verify is None else verify[slot],
            key=(keys.round_name(keys.LOOP, rounds.tag, rounds.first), slot), resources={label: 1}, pure=False))
    return boxes, loops


def stop_loops(boxes: list, loops: list) -> None:
    """Stop every loop through its mailbox (``boxes``: (actor future, actor) per slot), let the
    loops whose mailbox answered end (so the breakdown has their last rounds, and no loop still
    runs when the start state it reads is released: the worker then failed with "Cannot remove
    replica ... in state 'long-running'" and left the cluster for two minutes), and release the
    loops' futures; a mailbox whose worker is gone is passed over."""
    ending = []
    for slot, (f, actor) in enumerate(boxes):
        if f.status == "finished":
            try:
                actor.stop(separate_thread=False).result(timeout=STOP_SECONDS)
                ending += loops[slot:slot + 1]
            except Exception:  # its worker is gone: nothing to stop there
                pass
    if ending:
        try:
            wait(ending, timeout=STOP_SECONDS)
        except TimeoutError:
            pass
    for f in loops:
        f.release()


def rounds_ahead(start, kind: str, shards_per_worker: int) -> int:
    """How many rounds a loop may run past the head's reads: ``AHEAD``, fewer where what a loop
    keeps a round (the state; for local SGD its shards' models) would pass ``KEEP_BYTES``."""
    def nbytes(value) -> int:
        if isinstance(value, dict):
            return sum(nbytes(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(nbytes(v) for v in value)
        return int(getattr(value, "nbytes", 0))
    per_round = nbytes(start.params) + nbytes(start.opt_state)
    if kind == "local":  # every shard's weights and velocity, and the partial sums
        per_round = nbytes(start.params) * (2 * shards_per_worker + 1)
    return int(min(AHEAD, max(4, KEEP_BYTES // max(per_round, 1))))


def loop_timing(worker, at: float, phases: dict, sent: int) -> dict:
    """One loop's timing of one round, as the time breakdown reads it: the worker, the
    round's start in seconds since the loop began, the seconds per phase (in the order they
    ran) and the bytes sent to the other workers."""
    return {"worker": worker, "at": at, "phases": phases, "bytes": sent}
