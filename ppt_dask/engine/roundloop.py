"""The head's round loop of one try: submit rounds ahead, read scalars, check, keep a copy.

The weights never come back to the head inside the loop: round ``r + 1`` is submitted
against round ``r``'s weights future before round ``r``'s loss is read (``pipeline`` rounds
ahead), so the scheduler always has the next round queued and the workers do not wait for
the head. The head pulls a three-number stats vector per round and, at the end, the final
weights. A lost worker starts a new generation from the newest state the head can reach
(:func:`one_try`); :func:`ppt_dask.engine.trainer.train` runs the tries. What the head does
after each round it reads (record, check, keep a copy) is :mod:`ppt_dask.engine.checks`.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections import deque
from concurrent.futures import CancelledError

from distributed import KilledWorker

try:  # distributed's error of a task no worker may run (past no-workers-timeout): not in its public API
    from distributed.scheduler import NoValidWorkerError
except ImportError:  # pragma: no cover - a distributed to come moved it
    warnings.warn("ppt_dask cannot import distributed.scheduler.NoValidWorkerError with this version of "
                  "distributed: a task pinned to a slot that no worker took is then an error, not a lost worker",
                  RuntimeWarning, stacklevel=1)

    class NoValidWorkerError(Exception):  # type: ignore[no-redef]
        """Never raised: stands for distributed's where it cannot be imported."""

from ppt_dask.core import keys
from ppt_dask.core.stopping import ErrorEstimate, RoundRule
from ppt_dask.engine import loopenv, waits
from ppt_dask.engine.checks import KEEP_ROUNDS as KEEP_ROUNDS
from ppt_dask.engine.checks import KEEP_SHARE as KEEP_SHARE
from ppt_dask.engine.checks import End, Grow, Kept, Run, check_round, keep_and_grow, keep_due, record_round, verify
from ppt_dask.engine.placement.cluster import worker_addresses
from ppt_dask.engine.result import Outcome
from ppt_dask.engine.rounds import choose, graph, watched
from ppt_dask.engine.rounds.sharedreduce import SharedFull
from ppt_dask.engine.wire.schemes import check_scheme

MAX_RECOVERIES = 20  # lost workers a run recovers from before it gives up


def one_try(run: Run, attempt: int, kept: Kept) -> End:
    """One try from ``kept``: generations of rounds until it ends; a lost worker or a joined
    one starts a new generation from the head's last copy."""
    while True:
        engine = None
        try:
            engine = _engine(run, kept, attempt)
            if hasattr(engine, "hang_seconds"):  # streamed loops: a hung one is named and restarted
                engine.hang_seconds = run.hang_seconds
            end = (_watch(run, attempt, engine) if isinstance(engine, watched.WatchedRounds)
                   else _rounds(run, attempt, engine, kept))
            if isinstance(end, End):
                end.state = waits.round_result(end.state, run.shards)  # before the round futures are cancelled
                return end
            # new workers: the rounds after the kept state are resubmitted over the larger
            # cluster; the fixed shard tree makes the result the same
            kept = end.kept
            for event in run.shards.rebalance():
                run.events.append({**event, "round": kept.round + 1,
                                   "elapsed_seconds": time.perf_counter() - run.t_start})
        except (CancelledError, KilledWorker, waits.WorkerLost, NoValidWorkerError) as exc:  # Unanswered too
            # a worker died: put its shards back, go back to the newest state a surviving worker
            # still holds (streamed rounds) or to the head's copy, and replay from there. A task
            # that waited distributed's no-workers-timeout for its slot's worker (a worker killed
            # as a generation started, whose restart was slow under load) is one too, as long as
            # a lost worker's slot is there to repair
            run.recoveries += 1
            if run.recoveries > MAX_RECOVERIES:
                raise
            run.shared_off = run.shared_off or isinstance(exc.__cause__, SharedFull)
            if engine is None:  # lost while the generation was planned: no rounds ran
                _until_unlisted(run.shards.client, getattr(exc, "addresses", []))
            else:
                kept = _salvage(run, attempt, engine) or run.last_kept
                engine.cancel()
            moved = run.shards.repair()
            if isinstance(exc, NoValidWorkerError) and not moved:
                raise  # every slot has its worker: the task's restriction itself cannot be met
            run.last_kept = kept
            if engine is not None and hasattr(engine, "take_events"):  # what the loops noted before the loss
                run.events += [{**event, "round": kept.round + 1, "elapsed_seconds": time.perf_counter() - run.t_start}
                               for event in engine.take_events()]
            run.events.append({"event": "recovered", "round": kept.round + 1 if engine is None else engine.submitted,
                               "rolled_back_to": kept.round,
                               "elapsed_seconds": time.perf_counter() - run.t_start,
                               "error": repr(exc)[:200], "moved": moved})
        finally:
            if engine is not None:
                engine.cancel()
        run.gen += 1


UNLISTED_SECONDS = 30.0  # how long a worker that did not answer may stay listed before the run goes on


def _until_unlisted(client, addresses: list, timeout: float = UNLISTED_SECONDS) -> None:
    """Wait until the scheduler no longer lists ``addresses`` (workers that could not be asked
    while a generation was planned: gone, and soon dropped), so the repair that follows sees
    them lost; at most ``timeout`` seconds (one still listed then is asked again)."""
    deadline = time.monotonic() + timeout
    while set(addresses) & set(worker_addresses(client)) and time.monotonic() < deadline:
        time.sleep(0.1)


def _salvage(run: Run, attempt: int, engine) -> Kept | None:
    """After a lost worker: the state after the round before the last one read, if a surviving
    worker still holds it (a streamed synchronous loop holds the whole state, the same bits on
    every worker; an asynchronous one its replica, which may be a round older), so the run
    replays a round or two instead of going back to the last copy. The last round read is
    replayed: its checks may not have run."""
    mine = [h for h in run.history if h["try"] == attempt and h["gen"] == run.gen]
    if len(mine) < 2:
        return None
    state = engine.salvage(mine[-2]["round"])
    if state is None:
        return None
    # this generation's records end the history, one per round: keep them up to state.round
    return Kept(state.round, state, len(run.history) - len(mine) + state.round - mine[0]["round"] + 1)


def _engine(run: Run, kept: Kept, attempt: int = 0):
    """The round graph of a new generation, starting from the kept state."""
    plan = graph.make_plan(run.shards.worker_blocks(), run.shards.n_shards, run.fan_in,
                           whole=run.reproducible == "same-p")
    run.used_exchange = choose.choose_exchange(run.exchange, plan, run.strategy)
    if run.used_exchange == "stream":  # a scheme the loops' links cannot carry: refused before any round
        for address in dict.fromkeys(run.shards.workers):
            check_scheme(address)
    run.used_allreduce = _allreduce(run, plan)
    run.last_kept, run.kept_at = kept, time.perf_counter()
    del run.history[kept.n_history:]
    rule = _loop_rule(run, attempt)
    return choose.start(run.used_exchange, run.shards.client, plan, run.shards.futures, run.strategy, run.net,
                        keys.generation(run.run_id, run.gen), kept.state, kept.round + 1, run.max_rounds - 1,
                        run.used_allreduce, home=run.shards.workers[0], rule=rule,
                        verify=run.stop.test if rule is not None and rule.verify_apart else None,
                        homes=run.shards.slot_workers())


def _loop_rule(run: Run, attempt: int) -> RoundRule | None:
    """The stopping rule for loops that apply it themselves (:mod:`ppt_dask.engine.rounds.watched`),
    or None where the head applies it: not a synchronous streamed run, a call-back that may end
    the run at any round (``on_round``), snapshots or copies at fixed rounds, a verification
    set placed on the workers."""
    if (run.used_exchange != "stream" or getattr(run.strategy, "asynchronous", False)
            or getattr(run.strategy, "shard_models", False) or run.on_round is not None or run.snapshot_rounds
            or run.checkpoint_every is not None or not (run.stop.test is None or isinstance(run.stop.test, tuple))):
        return None
    stop, mine = run.stop, [h for h in run.history if h["try"] == attempt]
    next_check = (-math.inf if stop.screen else mine[-1]["epoch"] + stop.check_every if mine
                  else stop.check_every)
    return RoundRule(run.rounds_per_epoch, stop.target_error, stop.window_epochs * run.shards.n_rows,
                     stop.check_every, stop.screen, run.strategy.exact_stats, next_check,
                     verify_apart=stop.test is not None,
                     seen=tuple((h["error_rate"] * h["patterns"], h["patterns"]) for h in mine))


def _allreduce(run: Run, plan) -> str | None:
    """The streamed exchange's algorithm for a new generation. A run that used shared memory
    and can no more (``/dev/shm`` filled: a loop's segment found no room, or too little is free
    now; the workers no longer on one host) goes on with the socket algorithms for the rest of
    the run, with one warning."""
    before = run.used_allreduce
    colocated = (lambda need: False) if run.shared_off else run.shards.colocated  # noqa: E731
    try:
        used = choose.choose_allreduce(run.used_exchange, run.allreduce, plan, run.strategy, run.net, colocated)
    except ValueError:  # "shared" asked for, no longer possible
        if before != "shared":
            raise
        used = choose.choose_allreduce(run.used_exchange, "auto", plan, run.strategy, run.net, lambda need: False)
    if before == "shared" and used not in ("shared", None) and len(plan.blocks) > 1:
        run.shared_off = True
        warnings.warn(f"the shared-memory exchange is no longer possible (/dev/shm has no room, or the workers no "
                      f"longer share one host): the streamed rounds go on with {used!r} over the links",
                      RuntimeWarning, stacklevel=2)
    return used


# The head reads rounds in batches of about this long. Each batch costs a graph, a stats pick
# and a gather through the scheduler, which shares two cores with the workers here: at 0.05 s
# (one or two 25 ms rounds a batch) `ppt-dask train mnist --strategy block --workers 2` took
# 13.3-15.2 s, at 0.2 s 11.2-11.9 s (same 433 rounds). A stop is seen at most a batch late.
BATCH_SECONDS = 0.2


def _batch_size(size: int, seconds: float, limit: int) -> int:
    """Rounds to read at once next: about ``BATCH_SECONDS`` of rounds (the head's messages
    then cost a few percent of a round, however short the rounds are)."""
    per_round = seconds / size if size else 0.0
    want = BATCH_SECONDS / per_round if per_round > 0 else 2 * size
    return max(1, min(limit, 2 * size, int(want)))


def _rounds(run: Run, attempt: int, engine, kept: Kept) -> End | Grow:
    """Submit batches of rounds ahead, read each batch's stats, keep copies, check the target;
    how the generation ends (an :class:`End`, or a :class:`Grow` when workers joined)."""
    shards, stop = run.shards, run.stop
    wait = functools.partial(waits.round_result, shards=shards)
    estimate = ErrorEstimate(stop.window_epochs * shards.n_rows)
    for h in run.history:
        if h["try"] == attempt:
            estimate.add(h["error_rate"] * h["patterns"], h["patterns"])
    batches: deque = deque()  # (first, last, head seconds) submitted, not read
    size, next_first, last_done = 1, kept.round + 1, time.perf_counter()
    checks = {"next_check": -math.inf if stop.screen else run.history[-1]["epoch"] + stop.check_every
              if run.history and run.history[-1]["try"] == attempt else stop.check_every}
    while batches or next_first < run.max_rounds:
        # keep `pipeline` batches queued behind the one being read (one-hop rounds need the
        # next round to read a round's stats)
        while next_first < run.max_rounds and len(batches) <= run.pipeline + engine.lag:
            last = min(next_first + size, run.max_rounds) - 1
            seconds = engine.submit(next_first, last)
            run.head_seconds += seconds
            batches.append((next_first, last, seconds))
            next_first = last + 1
        first, last, seconds = batches.popleft()
        stats = engine.read_stats(first, last, wait)
        now = time.perf_counter()
        if getattr(engine, "worker_settings", None):  # streamed loops: what they set in their workers
            run.worker_settings.update(engine.worker_settings)
            engine.worker_settings.clear()
            loopenv.log_once(run.worker_settings, run.said)
        for event in engine.take_events() if hasattr(engine, "take_events") else ():  # refused connections
            run.events.append({**event, "round": first, "elapsed_seconds": now - run.t_start})
        n = last - first + 1
        for i, r in enumerate(range(first, last + 1)):
            record = record_round(run, attempt, r, stats[i], estimate, (now - last_done) / n, seconds / n)
            if hasattr(engine, "record_fields"):  # asynchronous steps: who made the round, staleness
                record.update(engine.record_fields(r))
            run.history.append(record)
            if run.progress is not None:
                run.progress(record)
            loops = engine.loop_phases(r)  # streamed rounds: each loop's own timing of the round
            run.diag.round_done(record if loops is None else {**record, "loops": loops})
            end = check_round(run, attempt, engine, r, record, estimate, checks)
            if end is not None:
                return end
        size = _batch_size(n, now - last_done, engine.max_batch)
        last_done = now
        engine.release(last)
    return End(engine.state_after(run.max_rounds - 1), run.max_rounds - 1, Outcome.MAX_EPOCHS)


def _watch(run: Run, attempt: int, engine) -> End | Grow:
    """The head's side of loops that stop themselves (:mod:`ppt_dask.engine.rounds.watched`): read
    their records by time, keep the history, the progress and the breakdown, keep a copy of the
    state now and then (it rides with a read), and end where the loops ended."""
    shards = run.shards
    wait = functools.partial(waits.round_result, shards=shards)
    estimate = ErrorEstimate(run.stop.window_epochs * shards.n_rows)
    for h in run.history:
        if h["try"] == attempt:
            estimate.add(h["error_rate"] * h["patterns"], h["patterns"])
    last_done, last_round = time.perf_counter(), engine.first - 1
    while True:
        rounds, end, latest, busy = engine.watch(wait, state=keep_due(run, None))
        now = time.perf_counter()
        _take_notes(run, engine, rounds[0][0] if rounds else None, now)
        if end is not None:
            rounds = [(r, rows) for r, rows in rounds if r <= end["last"]]
        if rounds:  # the head's time of the read, a share a round
            run.head_seconds += busy
        records = []
        for r, rows in rounds:
            row = rows[0]
            record = record_round(run, attempt, r, row[:3], estimate, (now - last_done) / len(rounds),
                                  busy / len(rounds))
            if row[watched.CHECK_N] > 0:  # this round's weights were verified (NaN: not)
                record["verified_error_rate"] = float(row[watched.CHECK_WRONG] / row[watched.CHECK_N])
            run.history.append(record)
            records.append(record)
            if run.progress is not None:
                run.progress(record)
        if records and hasattr(run.diag, "rounds_done"):  # the batch at once: a row a loop and round
            run.diag.rounds_done(engine.block(run.gen, records, [rows for _r, rows in rounds]))
        else:
            for record, (_r, rows) in zip(records, rounds):
                run.diag.round_done({**record, "loops": engine.loop_timings(rows)})
        last_done = now
        if rounds:
            engine.release(rounds[-1][0])
            last_round = rounds[-1][0]
        if end is not None:
            return _watched_end(run, end)
        if latest is not None and latest[0] + 1 < run.max_rounds:
            newest = rounds[-1][0] if rounds else last_round  # the history's last round
            grow = keep_and_grow(run, attempt, latest[0], lambda state=latest[1]: state,
                                 len(run.history) - (newest - latest[0]))
            if grow is not None:
                return grow


def _watched_end(run: Run, end: dict) -> End:
    """The End of loops that ended themselves; a verification of the last round, which no
    later round carried, made here."""
    if end.get("check") is not None:
        c, before = end["check"]
        record = run.history[-1]
        record["verified_error_rate"] = verify(run, watched.Done(before), record)
        run.history[-1] = record
        if record["verified_error_rate"] <= run.stop.target_error:
            return End(watched.Done(before), c - 1, Outcome.TARGET_ERROR)
    return End(watched.Done(end["state"]), end["round"], Outcome(end["outcome"]), end.get("where"))


def _take_notes(run: Run, engine, first, now: float) -> None:
    """What the loops set in their workers (said once) and the events they noted."""
    if engine.worker_settings:
        run.worker_settings.update(engine.worker_settings)
        engine.worker_settings.clear()
        loopenv.log_once(run.worker_settings, run.said)
    for event in engine.take_events():  # refused connections
        run.events.append({**event, "round": first, "elapsed_seconds": now - run.t_start})
