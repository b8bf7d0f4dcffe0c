"""Synchronous streamed rounds whose loops stop themselves, and a head that reads them by time.

Every loop of a synchronous run holds the same reduced stats each round, as the ranks of an
MPI program do, so the loops can apply the stopping rule themselves
(:class:`ppt_dask.core.stopping.RoundRule`) and stop together at the same round: a loss that is
not finite ends the run with the weights the round began from; a verification of the weights
a round began from is counted by every loop on its part of the verification set (the test
set, else its shards), the counts ride with the next round's partial sums and every loop
reads the same verdict one round later. Nobody waits for the head.

The head watches (:class:`WatchedRounds`): about every :data:`READ_SECONDS` it takes each
loop's compact records since its last read in one actor call a loop (a row of floats a
round: the stats, the verification's counts, the loop's timing of the round), and, when it
wants a copy of the state for a recovery or a checkpoint, the newest state with them. Its
cost is a few calls a read, not a call a round. The per-round records the head builds from
the rows are those of the other streamed rounds (:mod:`ppt_dask.engine.rounds.stream`): the
history, the progress and the breakdown read the same.

Used for the synchronous strategies when the stopping rule is the run's only say in when it
ends (no ``on_round`` call-back, no snapshots, no fixed ``checkpoint_every``): there the head
applies the rule on the records of the other streamed rounds.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ppt_dask.core import keys
from ppt_dask.core.roundblock import Block
from ppt_dask.engine import waits
from ppt_dask.engine.rounds.stream import (
    ASK_ERRORS,
    StreamRounds,
    loop_timing,
    notes_left,
    raise_loop_error,
    start_loops,
)
from ppt_dask.engine.rounds.watchloop import _PHASE, AT, BYTES, CHECK_N, CHECK_WRONG, PHASE0  # noqa: F401 (roundloop)
from ppt_dask.engine.wire.mailbox import RECORDS_AHEAD, Mailbox

READ_SECONDS = 0.2  # how long the head lets a loop's records gather between two reads


class WatchedRounds(StreamRounds):
    """The head's side of synchronous streamed rounds that stop themselves (the module notes):
    the loops start at the first :meth:`watch`; each call returns the rounds they ran since."""

    def __init__(self, client, plan, shard_futures, strategy, net, tag: str, start_state, first: int,
                 start_value, last_round: int, rule, verify=None, allreduce: str = "auto", homes=None):
        super().__init__(client, plan, shard_futures, strategy, net, tag, start_state, first, start_value,
                         last_round, kind="sync", allreduce=allreduce)
        self.rule, self.verify = rule, verify  # verify: each slot's part of the verification set (Verification)
        self.homes = list(homes or [None] * len(plan.blocks))  # each slot's worker (Liveness)
        self.ahead = RECORDS_AHEAD
        self.since = [first] * len(plan.blocks)  # per slot: the first round not yet read
        self.rows: dict = {}  # round -> each slot's row, until every slot's is in
        self._copy: tuple | None = None  # slot 0's newest (round, state), until its round is complete
        self.workers: list = [None] * len(plan.blocks)

    def _start(self) -> None:
        self.boxes, self.loops = start_loops(self, Mailbox, [self.first] * len(self.plan.blocks), "sync",
                                             rule=self.rule, verify=None if self.verify is None else self.verify.keys)

    def watch(self, wait, state: bool = False) -> tuple[list, dict | None, tuple | None, float]:
        """The rounds every loop has recorded since the last call (at least one, or their end),
        as ``(rounds, end, latest, busy)``: per round ``(round, [each slot's row])``, slot 0's
        end, with ``state`` slot 0's newest ``(round, state)``, and the seconds the head spent on
        the read itself (the waits for the loops apart). Slot 0 is read by time; the other
        loops, which hold the same stats, for their timings, with what they have then."""
        t0 = time.perf_counter()
        if not self.loops:
            self._start()
        if self.verify is not None:
            self.verify.check()  # its sending failed: said here, not by a loop that waits for it
        release, self.pending_release = self.pending_release, None
        replies, waited = self._read([(0, READ_SECONDS, release, state)] +
                                     [(j, 0.0, release, False) for j in range(1, len(self.boxes))], wait)
        head = replies[0]
        end, latest = head["end"], head["latest"]
        while end is not None and any(self.since[j] <= end["last"] for j in range(1, len(self.boxes))):
            # the loops ended together: the others' last rows (their own end answers at once)
            more, extra = self._read([(j, 0.0, None, False) for j in range(1, len(self.boxes))
                                      if self.since[j] <= end["last"]], wait)
            waited += extra
        complete = min(self.since)  # rounds every loop has recorded
        rounds = [(r, self.rows.pop(r)) for r in sorted(r for r in self.rows if r < complete)]
        # a copy of the state goes with the rounds up to its own: held until they are all in
        self._copy = latest if latest is not None else self._copy
        latest = None
        if self._copy is not None and self._copy[0] < complete:
            latest, self._copy = self._copy, None
        self.round_seconds += [float(rows[0][PHASE0:].sum()) for _r, rows in rounds]
        del self.round_seconds[:-1000]
        return rounds, end, latest, time.perf_counter() - t0 - waited

    def _read(self, asks: list, wait) -> tuple[list, float]:
        """One actor call to each asked loop (``(slot, seconds, release, state)``), their rows
        kept by round; the replies and the seconds waited for them."""
        calls = [self.boxes[j][1].watch(self.since[j], seconds, release, state) for j, seconds, release, state in asks]
        t1 = time.perf_counter()
        try:
            replies = [self._alive(call, wait) for call in calls]
        except ASK_ERRORS as exc:
            self.events += notes_left(self.boxes)  # the refusals of a link-up that failed, say
            raise_loop_error(exc, self.boxes, self.loops)
        waited = time.perf_counter() - t1
        n = len(self.boxes)
        for (j, *_), reply in zip(asks, replies):
            self.note_settings(reply)
            self.events += reply.get("notes", [])
            self.workers[j] = reply["worker"]
            for i, row in enumerate(reply["rows"]):
                self.rows.setdefault(reply["first"] + i, [None] * n)[j] = row
            self.since[j] = max(self.since[j], reply["first"] + len(reply["rows"]))
        return replies, waited

    def cancel(self) -> None:
        super().cancel()
        if self.verify is not None:
            self.verify.release()

    def block(self, gen: int, records: list, rows: list):
        """The rounds of ``records`` (the head's records) with every loop's ``rows`` as one
        block for the run's recorder (:class:`ppt_dask.observe.roundlog.Block`)."""
        stacked = np.asarray(rows)  # (rounds, loops, columns)
        loops = np.concatenate((stacked[:, :, [AT, BYTES]], stacked[:, :, PHASE0:]), axis=2)
        nums = np.array([[record[name] for name in Block.NUMBERS] for record in records], dtype=float)
        return Block(gen, [record["round"] for record in records], nums, loops, self.workers, keys.LOOP_PHASES)

    def loop_timings(self, rows: list) -> list:
        """Each loop's timing of a round (``rows``: its row per slot, None where not read yet)."""
        out = []
        for worker, row in zip(self.workers, rows):
            if row is None:
                continue
            phases = {name: float(row[i]) for name, i in _PHASE.items()}
            out.append(loop_timing(worker, float(row[AT]), phases, int(row[BYTES])))
        return out

    def salvage(self, r: int, timeout: float = 5.0):
        """The newest state a surviving loop holds at or before round ``r`` (its rounds after
        the head's last read are not in the history: the run goes on from what it has read)."""
        for f, actor in self.boxes:
            if f.status != "finished":
                continue
            try:
                reply = actor.watch(0, 0.0, None, True).result(timeout=timeout)
            except Exception:  # gone too, or failed: try the next
                continue
            latest = reply.get("latest")
            if latest is not None and latest[0] == r:
                return latest[1]
        return None


class Verification:
    """Each slot's part of the verification set, sent to its worker in the background under
    keys the loops know (``keys``), while the rounds begin: a loop takes its part when its
    first verification is due (:func:`ppt_dask.engine.rounds.watchloop.verification_part`),
    epochs later. Sent at a generation's start it held the rounds back: MNIST's test set, 31
    MB, took about half a second over the default cluster's TLS."""

    def __init__(self, client, parts: list, homes: list, tag: str):
        self.keys = [f"ppt-verify-{tag}-s{slot}" for slot in range(len(parts))]
        self._futures: list = []
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ppt-verify")
        self._sent = self._pool.submit(self._send, client, parts, homes)

    def _send(self, client, parts: list, homes: list) -> None:
        for key, part, home in zip(self.keys, parts, homes):
            self._futures += client.scatter({key: part}, workers=None if home is None else [home],
                                            hash=False).values()

    def check(self) -> None:
        """Raise what sending the parts raised (a worker gone: the run recovers)."""
        if self._sent.done() and self._sent.exception() is not None:
            exc = self._sent.exception()
            raise waits.Unanswered([], [exc]) from exc

    def release(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        for f in self._futures:
            f.release()
        self._futures = []


def cut(verify: tuple, net, parts: int) -> list[tuple]:
    """The verification set ``(X, y)`` in ``parts`` consecutive slices of rows, one a slot."""
    X, y = np.asarray(verify[0], dtype=net.dtype), np.asarray(verify[1])
    cuts = np.linspace(0, len(X), parts + 1).astype(int)
    return [(X[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


class Done:
    """A value the head already holds, read as a round's future is (``result``)."""

    def __init__(self, value):
        self.value = value

    def result(self, timeout: float | None = None):
        return self.value
