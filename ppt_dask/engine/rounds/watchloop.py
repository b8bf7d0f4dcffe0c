"""The loops of synchronous streamed rounds that stop themselves: a compact record a round.

The worker side of :mod:`ppt_dask.engine.rounds.watched` (the module notes say why and how):
each loop runs its rounds, applies the stopping rule on the reduced stats every loop holds
alike, counts its part of a verification when one is due (the counts ride with the next
round's sums), and leaves a row of floats a round in its mailbox, which the head reads by time.
"""

from __future__ import annotations

import time

import numpy as np

from ppt_dask.core import keys
from ppt_dask.engine.rounds.allreduce import Allreduce
from ppt_dask.engine.rounds.steps import sync_partial, sync_update
from ppt_dask.engine.wire.mailbox import Mailbox

# the columns of a loop's record of a round
LOSS, WRONG, N, CHECK_WRONG, CHECK_N, AT, BYTES = range(7)
PHASE0 = 7  # then the seconds of each phase, in keys.LOOP_PHASES order
WIDTH = PHASE0 + len(keys.LOOP_PHASES)
_PHASE = {name: PHASE0 + i for i, name in enumerate(keys.LOOP_PHASES)}
NO_COUNTS = np.zeros(2)


def watched_loop(step, first: int, last: int, start, shards: list, links, box: Mailbox, seconds: dict,
                 verify) -> None:
    """Synchronous rounds that apply ``step.rule`` (a :class:`ppt_dask.core.stopping.RoundRule`)
    and end themselves, leaving a compact record a round in ``box`` (see the module notes).
    ``verify``: the key of this slot's part of the verification set (sent by the head while the
    rounds begin: :func:`verification_part` takes it when the first verification is due), or
    None (its shards).

    A round whose weights are being verified is recorded one round late, with the counts."""
    rule = step.rule
    parts = None if verify is not None else list(shards)
    exchange = Allreduce(links, step.slot, step.n_loops, step.fan_in, step.n_shards, step.allreduce, step.wait,
                         box.stopped, step.subtrees)
    row = np.zeros(WIDTH)
    with exchange:
        state, counts, held = start, NO_COUNTS, None  # held: (its row, its round, the state it began from)
        began = t0 = time.perf_counter()
        for r in range(first, last + 1):
            box.where = (r, "gradient", t0)  # what the head asks when the rounds stop coming
            partial = _with_counts(sync_partial(step, state, shards, r), counts)
            t1 = time.perf_counter()
            box.where = (r, "exchange", t1)
            sent = exchange.start(r, partial)
            t2 = time.perf_counter()
            phases = {"idle": 0.0, "reduce": 0.0, "transfer": t2 - t1}
            total, more = exchange.finish(r, phases)
            t3 = time.perf_counter()
            box.where = (r, "evaluate", t3)
            stats, checked = total[-1][:3], total[-1][3:]
            _timing(row, t0 - began, sent + more, gradient=t1 - t0, transfer=phases["transfer"],
                    idle=phases["idle"], reduce=(t3 - t1) - phases["idle"] - phases["transfer"])
            row[LOSS:N + 1] = stats
            if held is not None:  # the counts of the verification the last round began
                held_row, c, before = held
                held_row[CHECK_WRONG:CHECK_N + 1] = checked
                box.record(c, held_row)
                held = None
                if rule.learned(*checked):
                    return box.end(_end("target_error", c - 1, c, before))
            verdict, counts = rule.after(r, *stats), NO_COUNTS
            if verdict == "diverged":  # this round is not kept: the weights it began from are
                return box.end(_end("diverged", r - 1, r - 1, state, f"round {r}"))
            if verdict == "check" and not rule.verify_apart and rule.exact_stats:  # its stats cover every row
                row[CHECK_WRONG:CHECK_N + 1] = stats[1:3]
                if rule.learned(stats[1], stats[2]):
                    box.record(r, row)
                    return box.end(_end("target_error", r - 1, r, state))
            elif verdict == "check":  # this slot's counts ride with the next round's sums
                parts = parts or [verification_part(verify, step.wait)]
                counts = _count(step.net, state.params, parts)
            t4 = time.perf_counter()
            box.where = (r, "update", t4)
            before, state = state, total_update(step, state, total, stats)
            t5 = time.perf_counter()
            box.wait_room(r, step.wait)
            t6 = time.perf_counter()
            _timing(row, evaluate=t4 - t3, update=t5 - t4, head=t6 - t5)
            if counts is NO_COUNTS:
                box.record(r, row)
            else:
                held = (row.copy(), r, before)
            box.latest = (r, state)
            _add_seconds(seconds, row)
            t0 = t6
        end = _end("max_epochs", last, last, state)
        if held is not None:  # the last round's verification: the head makes it (no round carries it)
            box.record(held[1], held[0])
            end["check"] = (held[1], held[2])
        box.end(end)


def verification_part(key: str, timeout: float) -> tuple:
    """This slot's part of the verification set, ``(X, y)``, from its worker's store (the head
    sent it there under ``key``: :class:`ppt_dask.engine.rounds.watched.Verification`), waiting
    at most ``timeout`` seconds for it to arrive. ``Worker.data`` is the worker's store, the
    mapping Dask documents for custom stores."""
    from distributed import get_worker

    store = get_worker().data
    deadline = time.monotonic() + timeout
    while key not in store:
        if time.monotonic() > deadline:
            raise TimeoutError(f"this loop's part of the verification set ({key}) did not arrive within {timeout} s")
        time.sleep(0.01)
    return store[key]


def _end(outcome: str, round_: int, last: int, state, where: str | None = None) -> dict:
    """How a loop ended its rounds: ``outcome``, the ``state`` after ``round_``, the last round
    it recorded that the run keeps (``last``)."""
    return {"outcome": outcome, "round": round_, "last": last, "state": state, "where": where}


def _timing(row: np.ndarray, at: float | None = None, sent: int | None = None, **phases: float) -> None:
    """Write a round's start, bytes sent and phases' seconds into its record (a new round
    when ``at`` is given: the record is cleared first)."""
    if at is not None:
        row[:] = 0.0
        row[CHECK_WRONG:CHECK_N + 1] = np.nan
        row[AT], row[BYTES] = at, sent
    for name, value in phases.items():
        row[_PHASE[name]] = value


def _add_seconds(seconds: dict, row: np.ndarray) -> None:
    """The round's phases (its record) added to the loop's totals."""
    for name, i in _PHASE.items():
        seconds[name] += row[i]


def _count(net, params, parts: list) -> np.ndarray:
    """``[n_wrong, n]`` of ``params`` on this slot's part of the verification set."""
    counts = np.zeros(2)
    for X, y in parts:
        if len(X):
            counts += net.stats(params, X, y)[1:3]
    return counts


def _with_counts(partial: dict, counts: np.ndarray) -> dict:
    """The partial sums with the verification's counts after the stats (the last array of each
    subtree's sums): this slot's counts on its first subtree, zeros on the others, so the tree
    adds every slot's counts once."""
    out = {}
    for i, (node, value) in enumerate(partial.items()):
        out[node] = (*value[:-1], np.concatenate((value[-1], counts if i == 0 else NO_COUNTS)))
    return out


def total_update(step, state, total: tuple, stats: np.ndarray):
    """The state after the round: the strategy's step with the stats of the round alone."""
    return sync_update(step, state, (*total[:-1], stats))
