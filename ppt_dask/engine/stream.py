"""Rounds of the local strategy as one long task per worker: no scheduler hop a round.

The per-round graph of :mod:`ppt_dask.engine.overlap` sends one task per worker per round; each
waits for the scheduler to hand it over and then fetches the other workers' results of
two rounds ago, so a round pays a scheduler hop and a fetch on its critical path. Here
each worker slot runs one task for a whole generation of the run. The task runs its
shards' rounds in a loop and, after each round, puts its partial sums (the weights times
the patterns, and the stats) into the *mailbox* of every other slot: an actor
(``distributed.Actor``, a public interface of Dask) on that slot's worker, so the
partial sums go straight from worker to worker. At the start of round ``r`` a slot takes
round ``r - 2``'s partial sums from its own mailbox (they left the other workers a whole
round earlier: a worker waits only when another lags a round behind), adds them along the
fixed shard tree and pulls its shards toward that average, as the per-round graph does:
the same bits on any number of workers, and as :func:`ppt_dask.algorithms.localsgd.train_serial`.

The head does not wait on tasks. Each loop logs its round's stats in its own mailbox, and
the head reads them there (an actor call that answers once the round is logged); when the
head keeps a copy, checks the target or ends, it asks every mailbox for its shards' models
after that round, which each loop leaves there until the head has read past it. A loop
runs at most ``AHEAD`` rounds past the rounds the head has read. When the run ends or a
worker is lost, the head stops every mailbox, which ends the loops.

Each loop also times its own rounds (no scheduler sees inside a task that runs many rounds):
per round, the seconds it waited for the other workers' sums (``idle``), added them
(``reduce``), ran its shards' steps (``gradient``), sent its sums (``transfer``) and waited
for the head to read (``head``, when ``AHEAD`` rounds ahead), with the round's start as
seconds since the loop began and the bytes it sent. Those timings ride with the stats the
head reads (:meth:`StreamRounds.loop_phases`), so the time breakdown has a row per round
while the run goes, as for a round graph.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any

from distributed import get_worker, wait

from ppt_dask.algorithms.localsgd import block_round, round_stats, state_after
from ppt_dask.core import keys, tree
from ppt_dask.engine import taskmeta

AHEAD = 32  # rounds a loop may run past the last round the head has read
WAIT_SECONDS = 600.0  # the longest a loop or the head waits for one round of another slot
STOP_SECONDS = 5.0  # the longest the head waits for a loop to end after stopping it

_BOXES: dict = {}  # the mailboxes living in this process, by name
_BOXES_LOCK = threading.Lock()


class Stopped(Exception):
    """The head stopped the mailbox: the run ended or moved to a new generation."""


class Mailbox:
    """One worker slot's mailbox for one generation of a run (an actor on its worker).

    Other slots ``put`` their partial sums; the slot's own loop takes them (``take``) and
    leaves its rounds there (``keep``); the head reads the rounds' stats (``stats``) and
    the shards' models after a round (``models``), ``release``s what it has read and
    ``stop``s the mailbox at the end."""

    def __init__(self, name: str, first: int = 0):
        self.name = name
        self.worker = _worker_address()  # where the loop it serves runs (its timings' track)
        self._lock = threading.Condition()
        self._inbox: dict = {}  # (round, slot) -> {tree node: partial}
        self._kept: dict = {}  # round -> (models, {tree node: partial}, running mean, timing)
        self._released = first  # the head needs no round before this one
        self._failed: str | None = None
        self._stopped = False
        self._event = asyncio.Event()  # wakes the head's waits on the worker's event loop
        self._loop = None
        with _BOXES_LOCK:
            _BOXES[name] = self

    def _changed(self) -> None:
        """Wake the waiters (called with the lock held)."""
        self._lock.notify_all()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._event.set)

    # -- from the other slots' loops --
    def put(self, r: int, slot: int, partial: dict) -> None:
        with self._lock:
            if not self._stopped:
                self._inbox[r, slot] = partial
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
        with _BOXES_LOCK:
            _BOXES.pop(self.name, None)

    async def _wait(self, ready, timeout: float, what: str):
        self._loop = asyncio.get_running_loop()
        deadline = self._loop.time() + timeout
        while True:
            self._event.clear()
            with self._lock:
                if self._failed is not None:
                    raise RuntimeError(self._failed)
                if self._stopped:
                    raise Stopped(f"mailbox {self.name} was stopped")
                value = ready()
                if value is not None:
                    return value
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{what} did not arrive within {timeout} s")
            try:
                await asyncio.wait_for(self._event.wait(), remaining)
            except TimeoutError:
                pass

    async def stats(self, first: int, last: int, release: int | None = None, timeout: float = WAIT_SECONDS) -> dict:
        """The logged stats of rounds ``first..last``, once the loop has run them, and the loop's
        timing of each (``{"worker": address, "rounds": [({tree node: (stats,)}, timing)]}``);
        with ``release``, first :meth:`release` the rounds before it (one message, not two)."""
        if release is not None:
            self.release(release)

        def ready():
            if all(r in self._kept for r in range(first, last + 1)):
                return {"worker": self.worker,
                        "rounds": [({node: (value[-1],) for node, value in self._kept[r][1].items()},
                                    self._kept[r][3]) for r in range(first, last + 1)]}
        return await self._wait(ready, timeout, f"{self.name}'s rounds {first}..{last}")

    async def models(self, r: int, timeout: float = WAIT_SECONDS) -> tuple:
        """The shards' models after round ``r``, the partial sums of rounds ``r`` and
        ``r - 1`` (None where the loop did not run it) and the running mean at round ``r``."""
        def ready():
            if r in self._kept:
                before = self._kept.get(r - 1)
                models, partial, mean, _timing = self._kept[r]
                return models, partial, None if before is None else before[1], mean
        return await self._wait(ready, timeout, f"{self.name}'s models after round {r}")

    # -- from the slot's own loop (the same process) --
    def take(self, r: int, slots, timeout: float) -> list:
        """The other ``slots``' partial sums of round ``r``, waiting for them."""
        waited = [(r, s) for s in slots]
        with self._lock:
            if not self._lock.wait_for(lambda: self._stopped or all(k in self._inbox for k in waited), timeout):
                raise TimeoutError(f"{self.name}: round {r} of slots {list(slots)} did not arrive "
                                   f"within {timeout} s")
            if self._stopped:
                raise Stopped(self.name)
            return [self._inbox.pop(k) for k in waited]

    def wait_room(self, r: int, timeout: float) -> None:
        """Wait while round ``r`` would be ``AHEAD`` rounds past what the head has read."""
        with self._lock:
            if not self._lock.wait_for(lambda: self._stopped or r - self._released < AHEAD, timeout):
                raise TimeoutError(f"{self.name}: the head read no round for {timeout} s")
            if self._stopped:
                raise Stopped(self.name)

    def keep(self, r: int, models: dict, partial: dict, mean=None, timing=None) -> None:
        """Leave round ``r`` for the head (after :meth:`wait_room`): the shards' models, the
        partial sums, the running mean and the loop's ``timing`` of the round."""
        with self._lock:
            if self._stopped:
                raise Stopped(self.name)
            self._kept[r] = (models, partial, mean, timing)
            self._changed()

    def fail(self, message: str) -> None:
        with self._lock:
            self._failed = message
            self._changed()


@dataclass(frozen=True)
class StreamStep:
    """The fixed arguments of one worker slot's loop."""

    strategy: Any
    net: Any
    slot: int
    shard_ids: tuple
    nodes: tuple
    fan_in: int
    n_shards: int
    box: str  # the name of this slot's mailbox
    wait: float = WAIT_SECONDS


def stream_task(step: StreamStep, first: int, last: int, start, shards: list, peers: dict) -> dict:
    """Rounds ``first..last`` of one worker slot's shards, from the start state ``start``.

    ``peers`` maps every other slot to its mailbox (an actor). Returns the seconds spent in
    each part, also attached to the task's metadata for the time breakdown."""
    with _BOXES_LOCK:
        box = _BOXES.get(step.box)
    if box is None:  # stopped before this task began
        return {}
    seconds = dict.fromkeys(keys.LOOP_PHASES, 0.0)
    try:
        _loop(step, first, last, start, shards, peers, box, seconds)
    except Stopped:
        pass
    except BaseException as exc:
        box.fail(f"the loop of worker slot {step.slot} failed: {exc!r}")
        raise
    finally:
        taskmeta.record(seconds)
    return seconds


def _loop(step: StreamStep, first: int, last: int, start, shards: list, peers: dict, box: Mailbox,
          seconds: dict) -> None:
    strategy = step.strategy
    models = {s: strategy.model_of(start, s) for s in step.shard_ids}
    mean = start.opt_state.get("mean")  # the running mean a^(first-3), advanced each round
    others = sorted(peers)
    own: dict = {}  # round -> this slot's partial sums
    began = t0 = time.perf_counter()
    for r in range(first, last + 1):
        if r - 2 >= first:
            parts = box.take(r - 2, others, step.wait)
            t1 = time.perf_counter()
            values = tree.merged([own.pop(r - 2), *parts])
            average = strategy.average_of(tree.evaluate_owned(values, step.fan_in, step.n_shards))
        else:  # the generation's first two rounds: the averages of the start state
            t1 = t0
            average = start.opt_state["averages"].get(r - 2)
        mean = strategy.mean_with(mean, average)
        t2 = time.perf_counter()
        models, partial = block_round(strategy, step.net, models, average, shards, step.shard_ids, step.nodes, r,
                                      step.fan_in, step.n_shards)
        t3 = time.perf_counter()
        own[r] = partial
        sent = 0
        for slot in others:
            try:
                peers[slot].put(r, step.slot, partial, separate_thread=False)
                sent += _nbytes(partial)
            except (OSError, RuntimeError):  # its worker is gone: the head sees the loss and stops us
                pass
        t4 = time.perf_counter()
        box.wait_room(r, step.wait)
        t5 = time.perf_counter()
        phases = {"idle": t1 - t0, "reduce": t2 - t1, "gradient": t3 - t2, "transfer": t4 - t3, "head": t5 - t4}
        box.keep(r, models, partial, mean, (t0 - began, phases, sent))
        for name, value in phases.items():
            seconds[name] += value
        t0 = t5  # the next round starts where this one's timing ends: the rounds tile the loop


def _nbytes(partial: dict) -> int:
    """The bytes of a round's partial sums (the arrays sent to each other worker)."""
    return sum(getattr(v, "nbytes", 8) for value in partial.values() for v in value)


def _worker_address() -> str | None:
    """The address of the worker this runs on (None outside a worker)."""
    try:
        return get_worker().address
    except ValueError:
        return None


class _State:
    """The state after a round, built on the head from the mailboxes when first asked for
    (``result`` as a future's, so the head's waits treat it like one)."""

    def __init__(self, build, r: int):
        self._build, self._r, self._value = build, r, None

    def result(self, timeout: float | None = None):
        if self._value is None:
            self._value = self._build(self._r, WAIT_SECONDS if timeout is None else timeout)
        return self._value


class StreamRounds:
    """The head's side of the streamed rounds for one generation of a run.

    Same interface as :class:`ppt_dask.engine.overlap.OverlapRounds` (``submit``, ``read_stats``,
    ``state_after``, ``state_before``, ``release``, ``cancel``); the loops start at the
    first ``submit`` and run to ``last_round`` unless stopped."""

    lag = 0
    max_batch = AHEAD // 2

    def __init__(self, client, plan, shard_futures, strategy, net, tag: str, start_state, first: int,
                 start_value, last_round: int):
        self.client, self.plan, self.tag, self.first = client, plan, tag, first
        self.strategy, self.net = strategy, net
        self.shard_futures = list(shard_futures)
        self.start_state, self.start_value, self.last_round = start_state, start_value, last_round
        self.boxes: list = []  # per slot: (actor future, actor)
        self.loops: list = []
        self.states: dict = {}
        self.submitted = first - 1
        self.pending_release: int | None = None  # sent to the mailboxes with the next read
        self.timings: dict = {}  # round -> every loop's timing of it, until the trainer takes it

    def _start(self) -> None:
        labels = [label for label, *_ in self.plan.blocks]
        futures = [self.client.submit(Mailbox, f"{self.tag}-s{slot}", self.first, actor=True,
                                      key=f"mailbox-{self.tag}-s{slot}", resources={label: 1})
                   for slot, label in enumerate(labels)]
        self.boxes = [(f, f.result(timeout=WAIT_SECONDS)) for f in futures]
        for slot, (label, a, b, nodes) in enumerate(self.plan.blocks):
            step = StreamStep(self.strategy, self.net, slot, tuple(range(a, b)), tuple(nodes), self.plan.fan_in,
                              self.plan.n_shards, f"{self.tag}-s{slot}")
            peers = {other: actor for other, (_f, actor) in enumerate(self.boxes) if other != slot}
            self.loops.append(self.client.submit(
                stream_task, step, self.first, self.last_round, self.start_state, self.shard_futures[a:b], peers,
                key=(keys.round_name(keys.LOOP, self.tag, self.first), slot), resources={label: 1}, pure=False))

    def submit(self, first: int, last: int) -> float:
        """Rounds ``first..last`` (the loops, started by the first call, run them all)."""
        t0 = time.perf_counter()
        assert first == self.submitted + 1 and last >= first, "rounds are submitted in order"
        if not self.loops:
            self._start()
        self.submitted = last
        return time.perf_counter() - t0

    def _ask(self, method: str, *args, wait) -> list:
        try:
            calls = [getattr(actor, method)(*args) for _f, actor in self.boxes]
            return [wait(call) for call in calls]
        except (OSError, RuntimeError, Stopped) as exc:
            if isinstance(exc, OSError) or any(f.status != "finished" for f, _actor in self.boxes):
                # a worker was lost: the trainer rolls back and replays (as for a lost task)
                raise CancelledError(f"a mailbox of the run was lost: {exc!r}") from exc
            failed = [f for f in self.loops if f.status == "error"]
            if failed:
                failed[0].result()  # the loop's own error
            raise

    def read_stats(self, first: int, last: int, wait) -> list:
        # the release the head asked for since its last read rides on this call
        release, self.pending_release = self.pending_release, None
        replies = self._ask("stats", first, last, release, wait=wait)
        for i, r in enumerate(range(first, last + 1)):
            self.timings[r] = [loop_timing(reply["worker"], *reply["rounds"][i][1]) for reply in replies]
        logs = [[nodes for nodes, _timing in reply["rounds"]] for reply in replies]
        return round_stats(logs, self.plan.fan_in, self.plan.n_shards)

    def loop_phases(self, r: int) -> list | None:
        """Every loop's timing of round ``r`` (read with its stats; given once)."""
        return self.timings.pop(r, None)

    def _build(self, r: int, timeout: float):
        outs = self._ask("models", r, wait=lambda call: call.result(timeout=timeout))
        previous = tree.merged(out[2] for out in outs) if all(out[2] is not None for out in outs) else None
        models, partial = tree.merged(out[0] for out in outs), tree.merged(out[1] for out in outs)
        pending = self.start_value.opt_state["averages"].get(r - 1)
        return state_after(self.strategy, r, models, partial, previous, pending,
                           self.plan.fan_in, self.plan.n_shards, outs[0][3])

    def state_after(self, r: int):
        """The state after round ``r`` (``first - 1``: the start state's future)."""
        if r == self.first - 1:
            return self.start_state
        if r not in self.states:
            self.states[r] = _State(self._build, r)
        return self.states[r]

    def state_before(self, r: int):
        return self.state_after(r - 1)

    def release(self, last: int) -> None:
        """The head needs no round before ``last - 1`` any more. The mailboxes hear it with
        the next read of stats (a loop may run ``AHEAD`` rounds past the last release, far
        more than one read lags)."""
        self.pending_release = last - 1
        for r in [r for r in self.states if r < last - 1]:
            del self.states[r]

    def cancel(self) -> None:
        stopped = 0
        for f, actor in self.boxes:
            if f.status == "finished":
                try:
                    actor.stop(separate_thread=False).result(timeout=STOP_SECONDS)
                    stopped += 1
                except Exception:  # its worker is gone: nothing to stop there
                    pass
        if self.loops and stopped == len(self.boxes):  # let them end, so the breakdown has them
            try:
                wait(self.loops, timeout=STOP_SECONDS)
            except TimeoutError:
                pass
        for f in self.loops:
            f.release()
        self.loops.clear()
        self.boxes.clear()
        self.states.clear()
        self.timings.clear()


def loop_timing(worker, at: float, phases: dict, sent: int) -> dict:
    """One loop's timing of one round, as the time breakdown reads it: the worker, the
    round's start in seconds since the loop began, the seconds per phase (in the order they
    ran) and the bytes sent to the other workers."""
    return {"worker": worker, "at": at, "phases": phases, "bytes": sent}
