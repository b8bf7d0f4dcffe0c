"""The streamed rounds' loops, worker side: one long task per worker slot for a generation.

A loop (:func:`stream_task`) links to the other slots' loops that its allreduce talks to
(:mod:`ppt_dask.engine.wire.links`; every connection proves the generation's secret,
which the head puts in the loop's arguments: :mod:`ppt_dask.engine.wire.handshake`),
then runs its rounds: the round kind's step (:mod:`ppt_dask.engine.rounds.steps`) with the
partial sums exchanged by the allreduce (:mod:`ppt_dask.engine.rounds.allreduce`), each round
left in the slot's mailbox for the head (:mod:`ppt_dask.engine.wire.mailbox`) with the
loop's own timing of it. The head's side is :mod:`ppt_dask.engine.rounds.stream`.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from distributed import get_worker, secede

from ppt_dask.core import allreduce, keys
from ppt_dask.engine import loopenv
from ppt_dask.engine.rounds import taskmeta, watchloop
from ppt_dask.engine.rounds.allreduce import Allreduce
from ppt_dask.engine.rounds.steps import (
    SlotStep,
    local_log,
    local_round,
    local_start,
    start_average,
    sync_partial,
    sync_update,
)
from ppt_dask.engine.wire.links import LinkLost, Links
from ppt_dask.engine.wire.mailbox import BOXES, BOXES_LOCK, WAIT_SECONDS, Mailbox, Stopped

STOPPED_LINGER = 1.0  # a stopped loop's wait for the others to close their links too (they stop as well)
ADDRESSES = -1  # the "round" under which the loops swap their links' addresses


@dataclass(frozen=True)
class StreamStep(SlotStep):
    """The fixed arguments of one worker slot's loop: its step's (:class:`SlotStep`) and the
    loop's own."""

    kind: str = "sync"  # "sync" or "local", or another module's kind with its ``loop``
    slot: int = 0
    box: str = ""  # the name of this slot's mailbox
    n_loops: int = 1  # the generation's loops (worker slots holding shards)
    allreduce: str = "auto"  # the exchange's algorithm (ppt_dask.core.allreduce.choose)
    wait: float = WAIT_SECONDS
    subtrees: int = 1  # the most subtrees a slot of the generation holds (what a peer's message may take)
    secret: bytes = field(default=b"", repr=False)  # the generation's, for its links' handshakes
    # the loop of a kind defined elsewhere (ppt_dask.engine.rounds.streamasync), called as the two
    # here are: loop(step, first, last, start, shards, links, box, seconds)
    loop: Any = None
    # the stopping rule the loops apply themselves (ppt_dask.core.stopping.RoundRule; the head
    # reads their compact records by time, ppt_dask.engine.rounds.watched), None: the head applies it
    rule: Any = None


def stream_task(step: StreamStep, first: int, last: int, start, shards: list, peers: dict, verify=None) -> dict:
    """Rounds ``first..last`` of one worker slot's shards, from the start state ``start``.

    ``peers`` maps every other slot to its mailbox (an actor); ``verify``: the slot's part of
    the verification set, ``(X, y)``, where the loops apply the stopping rule themselves
    (``step.rule``). Returns the seconds spent in each phase, also attached to the task's
    metadata."""
    with BOXES_LOCK:
        box = BOXES.get(step.box)
    if box is None:  # stopped before this task began
        return {}
    seconds = dict.fromkeys(keys.LOOP_PHASES, 0.0)
    links, linger = None, 0.0
    # A loop holds its worker for the whole run: leave the worker's thread pool (a long-running
    # task, Dask's documented secede), so the head's other tasks there (a verification pass
    # over the shards, say) run beside it instead of waiting for the loop to end.
    secede()
    try:
        # the worker's malloc thresholds and BLAS/OpenMP threads as a loop needs them, however
        # the worker was started (ppt_dask.engine.loopenv); the head hears what was set
        with loopenv.for_loop(worker_threads(), _torch_threads(step.net)) as settings:
            box.settings = settings
            links = _links(step, box, peers)
            loop = step.loop or (_sync_loop if step.kind == "sync" else _local_loop)
            if step.rule is not None:  # the loops stop themselves; the head reads by time
                loop = watchloop.watched_loop
            if step.rule is not None:
                loop(step, first, last, start, shards, links, box, seconds, verify)
            else:
                loop(step, first, last, start, shards, links, box, seconds)
        linger = step.wait  # the last round ran: the others read what this loop sent, then close
    except Stopped:
        linger = STOPPED_LINGER
    except LinkLost as exc:  # the head rolls the run back (a worker left, say; a full /dev/shm)
        if not box.is_stopped():  # else the head ended the generation: a peer that closed first is no loss
            box.fail(str(exc), type(exc))
    except BaseException as exc:
        box.fail(f"the loop of worker slot {step.slot} failed: {exc!r}")
        raise
    finally:
        if links is not None:
            links.close(linger)
        taskmeta.record(seconds)
    return seconds


def worker_threads() -> int:
    """The threads of the worker this runs on: ``Worker.state.nthreads`` (distributed's
    documented WorkerState); 1, with a warning, where a distributed to come has moved it."""
    count = getattr(getattr(get_worker(), "state", None), "nthreads", None)
    if isinstance(count, int) and count >= 1:
        return count
    warnings.warn("ppt_dask cannot read the worker's thread count (Worker.state.nthreads) with this version of "
                  "distributed: its round loops take one thread", RuntimeWarning, stacklevel=2)
    return 1


def _torch_threads(net) -> int | None:
    """The torch threads a :class:`ppt_dask.TorchNet` computes with here (it sets them itself
    at each pass); None for a network without torch."""
    if not hasattr(net, "module_of") or "torch" not in sys.modules:
        return None
    from ppt_dask.nets.copies import threads_of

    threads = threads_of(net.threads)  # None: torch's own setting, left alone
    return sys.modules["torch"].get_num_threads() if threads is None else threads


def _links(step: StreamStep, box: Mailbox, peers: dict) -> Links | None:
    """Links to the other slots' loops the exchange talks to (None alone; recursive halving
    talks to ``log2 p`` partners only): addresses swapped through the mailboxes. The
    connections refused meanwhile are left in the mailbox for the run's log."""
    others = sorted(set(peers) & set(allreduce.partners(step.allreduce, step.n_loops, step.slot)))
    if not others:
        return None
    worker = get_worker()
    links = Links(step.slot, worker.address, getattr(worker, "security", None), secret=step.secret)
    try:
        for slot in others:
            peers[slot].put(ADDRESSES, step.slot, links.address, separate_thread=False)
        links.connect(dict(zip(others, box.take(ADDRESSES, others, step.wait))))
    except BaseException:
        links.close()
        raise
    finally:
        for peer, why in links.refused:
            box.note({"event": "refused", "slot": step.slot, "from": peer, "why": why})
    return links


def _exchange(step: StreamStep, links: Links | None, box: Mailbox) -> Allreduce:
    """The loop's allreduce over its links (:mod:`ppt_dask.engine.rounds.allreduce`)."""
    return Allreduce(links, step.slot, step.n_loops, step.fan_in, step.n_shards, step.allreduce, step.wait,
                     box.stopped, step.subtrees)


def _sync_loop(step: StreamStep, first: int, last: int, start, shards: list, links, box: Mailbox,
               seconds: dict) -> None:
    """Synchronous rounds: gradient, allreduce of the partial sums along the tree, update."""
    with _exchange(step, links, box) as exchange:
        state = start
        began = t0 = time.perf_counter()
        for r in range(first, last + 1):
            box.where = (r, "gradient", t0)  # what the head asks when the rounds stop coming (a hang)
            partial = sync_partial(step, state, shards, r)
            t1 = time.perf_counter()
            box.where = (r, "exchange", t1)
            sent = exchange.start(r, partial)
            t2 = time.perf_counter()
            phases = {"gradient": t1 - t0, "transfer": t2 - t1, "idle": 0.0, "reduce": 0.0}
            total, more = exchange.finish(r, phases)
            t4 = time.perf_counter()
            box.where = (r, "update", t4)
            # what the exchange's own timers left between them counts as adding: the phases tile the round
            phases["reduce"] += (t4 - t2) - (phases["idle"] + phases["reduce"] + phases["transfer"] - (t2 - t1))
            state = sync_update(step, state, total)
            t5 = time.perf_counter()
            box.wait_room(r, step.wait)
            t6 = time.perf_counter()
            phases.update(update=t5 - t4, head=t6 - t5)
            box.keep(r, state.stats.tolist(), state, (t0 - began, phases, sent + more))
            _add(seconds, phases)
            t0 = t6  # the next round starts where this one's timing ends: the rounds tile the loop


def _local_loop(step: StreamStep, first: int, last: int, start, shards: list, links, box: Mailbox,
                seconds: dict) -> None:
    """Local SGD rounds: take round r - 2's total, average, local steps, start round r's allreduce."""
    models, mean = local_start(step, start)  # the running mean a^(first-3), advanced each round
    with _exchange(step, links, box) as exchange:
        began = t0 = time.perf_counter()
        for r in range(first, last + 1):
            box.where = (r, "exchange", t0)  # taking round r - 2's total: waiting for the others
            phases = {"idle": 0.0, "reduce": 0.0, "transfer": 0.0}
            more = 0
            if r - 2 >= first:  # round r - 2's, started two rounds ago: a loop waits only for one that lags
                total, more = exchange.finish(r - 2, phases)
                average = step.strategy.average_of(total)
            else:  # the generation's first two rounds: the averages of the start state
                average = start_average(start, r)
            t2 = time.perf_counter()
            box.where = (r, "gradient", t2)
            models, partial, mean = local_round(step, models, average, mean, shards, r)
            t3 = time.perf_counter()
            box.where = (r, "exchange", t3)
            sent = exchange.start(r, partial)
            t4 = time.perf_counter()
            box.wait_room(r, step.wait)
            t5 = time.perf_counter()
            reduce = (t2 - t0) - phases["idle"] - phases["transfer"]  # the tree's adds, the average and the mean
            phases = {"idle": phases["idle"], "reduce": reduce, "gradient": t3 - t2,
                      "transfer": phases["transfer"] + t4 - t3, "head": t5 - t4}
            box.keep(r, local_log(partial), (models, partial, mean), (t0 - began, phases, sent + more))
            _add(seconds, phases)
            t0 = t5


def _add(seconds: dict, phases: dict) -> None:
    for name, value in phases.items():
        seconds[name] += value


