"""Loops that stop making progress: the head asks where they are, names the hung one, restarts it.

A streamed loop that hangs (its process stopped, a read that never returns, a user's call that
never ends) keeps its sockets open and its worker listed: the others wait for it in the
exchange, and the head for their rounds. :class:`Liveness` (the head's side of streamed
rounds, :mod:`ppt_dask.engine.rounds.stream` and :mod:`ppt_dask.engine.rounds.watched`) waits
for a read at most :meth:`Liveness.bound`, then asks every loop's mailbox where its loop is
(``Mailbox.progress``: the round, the phase, since when): a mailbox that does not answer, or
a loop outside the exchange for longer than the bound, is hung. Its worker is restarted
through its nanny (distributed's ``Client.restart_workers``: a stopped process cannot come
back half-way through a round) and the run recovers as from a lost worker.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from ppt_dask.engine import waits

# A loop that makes no progress for this long (or HANG_ROUNDS of its run's median round, if
# longer) while the others wait is hung (a process stopped, a stuck read, user code that never
# returns): the head names it, restarts its worker and the run goes on as from a lost worker.
# A round of MNIST block 200 is about 1 ms, of block 1000 on 8 workers of 2 cores 15 ms, a
# CNN's round on 1 thread 50 ms: 30 s is far beyond a slow round and far below the ten minutes
# a silent worker stalled a run before the head looked.
HANG_SECONDS = 30.0
HANG_ROUNDS = 200
PROBE_SECONDS = 5.0  # how long the head waits for a loop's mailbox to say where the loop is


class Liveness:
    """What the head's side of streamed rounds needs to tell a hung loop (module notes): the
    run's ``hang_seconds``, the rounds' wall times seen (``round_seconds``), ``boxes``, each
    slot's worker (``workers``, else ``homes``) and the ``client``."""

    hang_seconds: float = HANG_SECONDS
    round_seconds: list
    boxes: list
    workers: list
    homes: list
    client: object

    def bound(self) -> float:
        """How long a loop may make no progress before it is taken for hung: the run's bound,
        or :data:`HANG_ROUNDS` of its median round if that is longer."""
        if not self.round_seconds:
            return self.hang_seconds
        return max(self.hang_seconds, HANG_ROUNDS * float(np.median(self.round_seconds[-1000:])))

    def _alive(self, call, wait):
        """``wait(call)``, asking the loops where they are whenever :meth:`bound` passes with no
        answer: a hung loop's worker is restarted and the run recovers as from a lost worker
        (:class:`ppt_dask.engine.waits.WorkerLost` naming it); loops that all still work or
        wait for each other are waited for again, at most :data:`ppt_dask.engine.waits.ROUND_TIMEOUT`
        seconds in all (then a ``TimeoutError`` says where the loops were)."""
        deadline = time.monotonic() + waits.ROUND_TIMEOUT
        while True:
            try:
                return wait(call, timeout=min(self.bound(), max(1.0, deadline - time.monotonic())))
            except TimeoutError:
                hung = self._hung()
                if hung:
                    raise restart(self.client, hung, self.bound()) from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no round of the loops came within {waits.ROUND_TIMEOUT:.0f} s, and none "
                                       f"of them is hung: {self._where()}") from None

    def _where(self) -> list:
        """What every mailbox says of its loop now (for an error)."""
        out = []
        for j, (f, actor) in enumerate(self.boxes):
            try:
                out.append(actor.progress().result(timeout=PROBE_SECONDS) if f.status == "finished" else f.status)
            except Exception as exc:  # noqa: BLE001 - said as it is
                out.append(f"slot {j}: {type(exc).__name__}")
        return out

    def _hung(self) -> list:
        """The slots whose loops make no progress while the others wait: a mailbox that does not
        answer (its worker's process stopped), or a loop in a phase other than the exchange for
        longer than :meth:`bound`; ``[(slot, worker, what)]``."""
        bound, hung, answers = self.bound(), [], []
        calls = [(j, actor.progress()) for j, (f, actor) in enumerate(self.boxes) if f.status == "finished"]
        for j, call in calls:
            try:
                answers.append((j, call.result(timeout=PROBE_SECONDS)))
            except Exception as exc:  # noqa: BLE001 - no answer in time: its process does not run
                hung.append((j, self.workers[j] or self.homes[j],
                             f"its worker did not answer in {PROBE_SECONDS:.0f} s ({type(exc).__name__})"))
        for j, where in answers:
            # a loop still linking up ("start") answers to the link-up's own deadlines, not to this bound
            if not where["ended"] and where["phase"] not in ("exchange", "start") and where["seconds"] > bound:
                hung.append((j, where["worker"], f"round {where['round']}, {where['phase']} for "
                                                 f"{where['seconds']:.0f} s"))
        return hung


def restart(client, hung: list, bound: float):
    """Restart the hung loops' workers (their nannies kill and start them again: a stopped
    process cannot rejoin half-way), warn naming them, and return the
    :class:`ppt_dask.engine.waits.WorkerLost` the run recovers from."""
    words = "; ".join(f"worker {worker} (slot {j}): {what}" for j, worker, what in hung)
    warnings.warn(f"a loop made no progress for over {bound:.0f} s while the others waited, {words}: its worker "
                  f"is restarted and the run goes on as from a lost worker", RuntimeWarning, stacklevel=3)
    addresses = [worker for _j, worker, _what in hung if worker]
    try:
        client.restart_workers(addresses, timeout=max(30.0, bound), raise_for_error=False)
    except Exception:  # noqa: BLE001 - a worker without a nanny: the scheduler drops it when its heartbeats stop
        pass
    return waits.Unanswered(addresses, [RuntimeError(f"hung: {words}")])
