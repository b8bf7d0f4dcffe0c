"""The head's round loop: submit rounds ahead, read scalars, stop.

The weights never come back to the head inside the loop: round ``r + 1`` is submitted
against round ``r``'s weights future before round ``r``'s loss is read (``pipeline`` rounds
ahead), so the scheduler always has the next round queued and the workers do not wait for
the head. The head pulls a three-number stats vector per round and, at the end, the final
weights.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError
from dataclasses import dataclass, field

import numpy as np
from distributed import Future, KilledWorker

from ppt_dask.algorithms import strategies
from ppt_dask.core import applicability, keys, model, validation
from ppt_dask.core.model import Network
from ppt_dask.core.stopping import ErrorEstimate, Stop
from ppt_dask.core.validation import check_int_at_least
from ppt_dask.engine import headblas, waits, watch
from ppt_dask.engine.placement.shards import ShardSet
from ppt_dask.engine.result import Outcome, Result, evaluate, test_error
from ppt_dask.engine.rounds import choose, graph
from ppt_dask.engine.saving import checkpoint

MAX_RECOVERIES = 20  # lost workers a run recovers from before it gives up


@dataclass
class _Kept:
    """The head's copy of the state after ``round`` (-1: before the first), to go back to."""

    round: int
    state: strategies.ModelState
    n_history: int


@dataclass
class _End:
    """How a try ended: the state to keep (a future or a value), after which round, why."""

    state: object
    round: int
    outcome: Outcome
    where: str | None = None  # the round a divergence happened in

    @property
    def learned(self) -> bool:
        return self.outcome is Outcome.TARGET_ERROR


@dataclass
class _Grow:
    """New workers joined: spread the shards over them and go on from ``kept``."""

    kept: _Kept


@dataclass
class _Run:
    """What a run accumulates over its tries and generations."""

    net: Network
    shards: ShardSet
    strategy: object
    stop: Stop
    fan_in: int
    pipeline: int
    exchange: str
    allreduce: str
    rounds_per_epoch: float
    max_rounds: int
    snapshot_rounds: dict
    checkpoint_every: int
    meta: dict
    progress: Callable | None
    on_round: Callable | None
    on_keep: Callable | None  # (state, round, try, history): the checkpoint writer
    diag: object
    run_id: str
    t_start: float
    history: list = field(default_factory=list)
    snapshots: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    head_seconds: float = 0.0
    recoveries: int = 0
    gen: int = 0
    used_exchange: str = ""
    used_allreduce: str | None = None  # the streamed exchange's algorithm (None: not streamed, or async)
    last_kept: _Kept | None = None


def train(net: Network, shards: ShardSet, strategy, stop: Stop = Stop(), *, seed: int = 0,
          params: np.ndarray | None = None, fan_in: int = 2, pipeline: int = 1,
          progress: Callable[[dict], None] | None = None,
          on_round: Callable[[dict], bool | None] | None = None, snapshot_epochs: tuple = (),
          checkpoint_dir=None, checkpoint_every: int = 25, resume: bool = False,
          initial_state=None, exchange: str = "auto", allreduce: str = "auto",
          recorder: Callable | None = None) -> Result:
    """Train ``net`` on the placed ``shards`` with ``strategy`` until ``stop``.

    Parameters
    ----------
    net : a network of the model protocol (:class:`ppt_dask.core.model.Network`)
        :class:`ppt_dask.MLP`, :class:`ppt_dask.TorchNet`, or a model of your own; one that
        takes rows of any shape is fixed to the shards' (``with_row_shape``).
    shards : ShardSet
        From :func:`ppt_dask.enter_data`.
    strategy : a strategy from :mod:`ppt_dask.algorithms.strategies`
    stop : Stop
        Max epochs, target error (windowed estimate, then verified), restarts.
    seed : int
        Seeds the initial weights (try ``t`` of a restarted run uses ``seed + t``) and the
        strategies' random streams.
    params : ndarray, shape (net.n_params,), optional
        Initial weights (first try only).
    fan_in : int
        Children per node of the reduction tree (>= 2).
    pipeline : int
        Rounds submitted ahead of the one whose loss the head reads (>= 0).
    progress : bool or callable, optional
        True: show the progress (:mod:`ppt_dask.progress`: a widget in Jupyter, a bar on a
        terminal) with epochs, loss, error, patterns per second, time left and the run's
        ``/ppt`` link. A callable is called with each round's record instead.
    on_round : callable, optional
        Called with each round's record after the round's checks; when it returns True the
        run stops there, keeping the state after that round (``stopped_because="stopped"``).
    snapshot_epochs : tuple of float
        Epochs after which the head pulls a copy of the weights (``Result.snapshots``).
    checkpoint_dir : path, optional
        Write a checkpoint there every ``checkpoint_every`` rounds and at the end.
    checkpoint_every : int
        Rounds between the head's copies of the state: what a run rolls back to when a
        worker is lost (and what is written to ``checkpoint_dir``).
    resume : bool
        Continue from the checkpoint in ``checkpoint_dir`` when there is one.
    initial_state : ModelState, optional
        Weights *and* optimizer state to start from (a previous ``Result.state``), so a
        run continues another one without resetting momentum.
    exchange : {"auto", "all", "doubling", "tree", "stream"}
        How a round's partial sums meet. "stream" (the "auto" choice at any number of workers)
        runs one long task per worker for the whole run, whose sums go straight to the other
        workers (:mod:`ppt_dask.engine.rounds.stream`, no scheduler hop a round). The per-round graphs stay
        selectable to see what the head-worker arrangement costs: "all" and "doubling" run the
        reduce and the update inside the next round's gradient tasks (one scheduler hop per
        round; "doubling" pairs workers over ``log2 p`` hops,
        see :mod:`ppt_dask.engine.rounds.onehop`); "tree" is the explicit graph of map, reduce and
        update tasks (:mod:`ppt_dask.engine.rounds.graph`, three hops). For the local strategy
        (:class:`ppt_dask.LocalSGD`), "all" is one task per worker per round whose exchange
        overlaps the next round's local steps (:mod:`ppt_dask.engine.rounds.overlap`). The
        asynchronous strategy runs on streamed loops only (:mod:`ppt_dask.engine.rounds.streamasync`).
    allreduce : {"auto", "direct", "halving", "scatter"}
        The streamed rounds' allreduce (:mod:`ppt_dask.core.allreduce`): "direct" sends each
        worker's partial sums whole to every other worker (one message latency, ``(p - 1) w``
        values sent by each); "halving" and "scatter" a reduce-scatter then an all-gather (at
        most ``2 w`` values each, whatever ``p``), by recursive halving and doubling
        (``2 log2 p`` messages; a power-of-two number of workers holding equal blocks of
        shards, fan-in 2) or pairwise (``2 (p - 1)`` in two phases); "auto" takes "direct" at
        2 workers and for small networks, "scatter" beyond. The same bits
        every way. Streamed synchronous and local strategies only (the asynchronous loops send
        each gradient to every replica).
    recorder : callable, optional
        ``recorder(client, run_id, settings)`` makes the run's watcher: its
        ``round_done(record)`` sees every round (on streamed rounds with each loop's timing of
        it under ``loops``), its ``finish()`` returns the run's records
        (``Result.diagnostics``: breakdown, report, trace). :func:`ppt_dask.train` passes the
        collector of :mod:`ppt_dask.observe`; None records nothing.

    Returns
    -------
    Result
    """
    if progress is not None and not callable(progress):  # True, False, or refused
        return _with_display(dict(locals()))  # the first statement: locals() are the parameters
    # -- check everything before any cluster work --
    name = applicability.strategy_name(strategy)
    applicability.refuse(name, {  # refused, never ignored
        "exchange": exchange, "pipeline": pipeline, "checkpoint": checkpoint_dir, "resume": resume,
        "restarts": stop.restarts, "on_round": on_round, "snapshot_epochs": tuple(snapshot_epochs),
        "initial_state": initial_state})
    fan_in = check_int_at_least("fan_in", fan_in, 2)
    pipeline = check_int_at_least("pipeline", pipeline, 0)
    checkpoint_every = check_int_at_least("checkpoint_every", checkpoint_every, 1)
    if exchange not in choose.EXCHANGES:
        raise ValueError(f"exchange must be one of {choose.EXCHANGES}, got {exchange!r}")
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs checkpoint_dir")
    if checkpoint_dir:
        checkpoint.check_folder(checkpoint_dir)
    applicability.refuse_pipeline(name, exchange, pipeline)
    applicability.refuse_allreduce(name, exchange, allreduce)
    net = model.check_network(model.for_rows(model.check_network(net), shards.row_shape))
    validation.check_network_fits(net, shards)
    validation.check_test_set(net, stop.test)
    strategy = strategy.check([i.stop - i.start for i in shards.info], seed, shards.replicated)
    if allreduce == "halving":  # refused here, not at the first round, where the layout does not allow it
        choose.choose_allreduce("stream", allreduce, graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in),
                                strategy, net)
    if params is not None and np.shape(params) != (net.n_params,):
        raise ValueError(f"params has shape {np.shape(params)}; the network needs ({net.n_params},)")
    _send_network(shards, net)
    rounds_per_epoch = strategy.rounds_per_epoch(shards.n_rows)
    max_rounds = max(1, math.ceil(stop.max_epochs * rounds_per_epoch - 1e-9))
    if initial_state is not None:
        max_rounds += initial_state.round + 1
    run_id = uuid.uuid4().hex[:8]
    meta = {**model.describe(net), "strategy": repr(strategy), "rows": shards.n_rows,
            "shards": shards.n_shards, "fan_in": fan_in, "seed": seed}
    saved = checkpoint.load(checkpoint_dir, meta) if (checkpoint_dir and resume) else None
    diag = watch.start(recorder, shards, run_id, watch.settings(net, shards, strategy, fan_in=fan_in,
                                                                pipeline=pipeline, seed=seed, exchange=exchange))
    run = _Run(net, shards, strategy, stop, fan_in, pipeline, exchange, allreduce, rounds_per_epoch, max_rounds,
               {max(1, round(e * rounds_per_epoch)) - 1: e for e in snapshot_epochs},
               checkpoint_every, meta, progress, on_round,
               checkpoint.Writer(checkpoint_dir, meta) if checkpoint_dir else None, diag, run_id,
               time.perf_counter())

    attempt, end = 0, None
    with headblas.beside(shards.workers):  # the head's checks leave the workers their cores
        for attempt in range(saved["try"] if saved else 0, stop.restarts + 1):
            if saved:  # resume: the state after round saved["round"], and the history up to it
                run.history[:] = saved["history"]
                kept = _Kept(saved["round"], saved["state"], len(run.history))
                saved = None
            elif initial_state is not None and attempt == 0:  # continue its round numbering
                kept = _Kept(initial_state.round, initial_state, len(run.history))
            else:
                start = params if (params is not None and attempt == 0) else net.init_params(seed + attempt)
                kept = _Kept(-1, strategy.init(np.asarray(start, dtype=net.dtype)), len(run.history))
            end = _one_try(run, attempt, kept)
            if end.outcome is not Outcome.MAX_EPOCHS or stop.target_error is None:
                break
            run.gen += 1
        return _finish(run, attempt, end)


def _with_display(call: dict) -> Result:
    """:func:`train` with ``progress=True``: the progress display made for the run (it draws
    from the first round on) and closed with it; ``progress=False``: none."""
    progress = call["progress"]
    if progress is False:
        return train(**{**call, "progress": None})
    if progress is not True:
        raise ValueError("progress must be True (show the progress), False or None (nothing), or a callable "
                         f"taking each round's record; got {progress!r}")
    from ppt_dask.engine.placement.cluster import page_url
    from ppt_dask.progress import Training

    client = call["shards"].client
    display = Training(call["stop"].max_epochs, link=lambda: page_url(client))
    result = None
    try:
        result = train(**{**call, "progress": display})
    finally:
        display.close(result)
    return result
def _network_size(net) -> int:
    return int(net.n_params)


def _send_network(shards: ShardSet, net) -> None:
    """Every worker of the shards unpickles the network once before the clock starts, as the
    data was placed before it: a TorchNet imports torch there and builds its module (seconds
    on a busy machine that the first rounds would otherwise wait for); the MLP costs nothing."""
    shards.client.run(_network_size, net, workers=list(dict.fromkeys(shards.workers)))


def _one_try(run: _Run, attempt: int, kept: _Kept) -> _End:
    """One try from ``kept``: generations of rounds until it ends; a lost worker or a joined
    one starts a new generation from the head's last copy."""
    while True:
        engine = _engine(run, kept)
        try:
            end = _rounds(run, attempt, engine, kept)
            if isinstance(end, _End):
                end.state = waits.round_result(end.state, run.shards)  # before the round futures are cancelled
                return end
            # new workers: the rounds after the kept state are resubmitted over the larger
            # cluster; the fixed shard tree makes the result the same
            kept = end.kept
            for event in run.shards.rebalance():
                run.events.append({**event, "round": kept.round + 1,
                                   "elapsed_seconds": time.perf_counter() - run.t_start})
        except (CancelledError, KilledWorker, waits.WorkerLost) as exc:
            # a worker died: put its shards back, go back to the newest state a surviving worker
            # still holds (streamed rounds) or to the head's copy, and replay from there
            run.recoveries += 1
            if run.recoveries > MAX_RECOVERIES:
                raise
            kept = _salvage(run, attempt, engine) or run.last_kept
            engine.cancel()
            moved = run.shards.repair()
            run.last_kept = kept
            run.events.append({"event": "recovered", "round": engine.submitted, "rolled_back_to": kept.round,
                               "elapsed_seconds": time.perf_counter() - run.t_start,
                               "error": repr(exc)[:200], "moved": moved})
        finally:
            engine.cancel()
        run.gen += 1


def _salvage(run: _Run, attempt: int, engine) -> _Kept | None:
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
    return _Kept(state.round, state, len(run.history) - len(mine) + state.round - mine[0]["round"] + 1)


def _engine(run: _Run, kept: _Kept):
    """The round graph of a new generation, starting from the kept state."""
    plan = graph.make_plan(run.shards.worker_blocks(), run.shards.n_shards, run.fan_in)
    run.used_exchange = choose.choose_exchange(run.exchange, plan, run.strategy)
    run.used_allreduce = choose.choose_allreduce(run.used_exchange, run.allreduce, plan, run.strategy, run.net)
    run.last_kept = kept
    del run.history[kept.n_history:]
    return choose.start(run.used_exchange, run.shards.client, plan, run.shards.futures, run.strategy, run.net,
                        keys.generation(run.run_id, run.gen), kept.state, kept.round + 1, run.max_rounds - 1,
                        run.used_allreduce)


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


def _rounds(run: _Run, attempt: int, engine, kept: _Kept) -> _End | _Grow:
    """Submit batches of rounds ahead, read each batch's stats, keep copies, check the target;
    how the generation ends (an :class:`_End`, or a :class:`_Grow` when workers joined)."""
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
        n = last - first + 1
        for i, r in enumerate(range(first, last + 1)):
            record = _record(run, attempt, r, stats[i], estimate, (now - last_done) / n, seconds / n)
            if hasattr(engine, "record_fields"):  # asynchronous steps: who made the round, staleness
                record.update(engine.record_fields(r))
            run.history.append(record)
            if run.progress is not None:
                run.progress(record)
            loops = engine.loop_phases(r)  # streamed rounds: each loop's own timing of the round
            run.diag.round_done(record if loops is None else {**record, "loops": loops})
            end = _check(run, attempt, engine, r, record, estimate, checks)
            if end is not None:
                return end
        size = _batch_size(n, now - last_done, engine.max_batch)
        last_done = now
        engine.release(last)
    return _End(engine.state_after(run.max_rounds - 1), run.max_rounds - 1, Outcome.MAX_EPOCHS)


def _record(run: _Run, attempt: int, r: int, stats, estimate, wall: float, head: float) -> dict:
    loss_sum, n_wrong, n = (float(v) for v in stats)
    estimate.add(n_wrong, n)
    return {"try": attempt, "gen": run.gen, "round": r, "epoch": (r + 1) / run.rounds_per_epoch,
            "loss": loss_sum / n, "error_rate": n_wrong / n, "error_estimate": estimate.rate,
            "patterns": n, "wall_seconds": wall, "head_seconds": head,
            "elapsed_seconds": time.perf_counter() - run.t_start}


def _check(run: _Run, attempt: int, engine, r: int, record: dict, estimate,
           checks: dict) -> _End | _Grow | None:
    """After round ``r``'s record: an _End when the run stops there, a _Grow when new workers
    joined, else None (keeping a copy of the state every ``checkpoint_every`` rounds)."""
    shards, stop, strategy = run.shards, run.stop, run.strategy
    if not math.isfinite(record["loss"]):  # keep the weights this round started from
        run.history.pop()
        return _End(engine.state_before(r), r - 1, Outcome.DIVERGED, f"round {r}")
    if r in run.snapshot_rounds:
        run.snapshots[run.snapshot_rounds[r]] = waits.round_result(engine.state_after(r), shards).params
    if (r + 1) % run.checkpoint_every == 0 and r + 1 < run.max_rounds:
        kept = _keep(run, attempt, r, waits.round_result(engine.state_after(r), shards))
        if shards.can_grow and shards.joined_workers():  # use new workers from here on
            if shards.lost_workers():  # a lost worker's restarted process, not a new worker:
                raise waits.WorkerLost("a worker left and another joined")  # the lost slot takes it
            return _Grow(kept)
    screened = (estimate.full or strategy.exact_stats) and estimate.rate <= (stop.target_error or 0)
    due = record["epoch"] >= checks["next_check"] - 1e-9 or (stop.screen and strategy.exact_stats)
    if stop.target_error is not None and (screened or not stop.screen) and due:
        checks["next_check"] = record["epoch"] + stop.check_every  # verify every check_every epochs
        record["verified_error_rate"] = _verify(run, engine.state_before(r), record)
        if record["verified_error_rate"] <= stop.target_error:
            return _End(engine.state_before(r), r - 1, Outcome.TARGET_ERROR)
    if run.on_round is not None and run.on_round(record):
        return _End(engine.state_after(r), r, Outcome.STOPPED)
    return None


def _keep(run: _Run, attempt: int, r: int, state) -> _Kept:
    """The head's copy to roll back to (and to the run's ``on_keep``: the checkpoint file)."""
    kept = _Kept(r, state, len(run.history))
    run.last_kept = kept
    if run.on_keep is not None:
        run.on_keep(state, r, attempt, run.history)
    return kept


def _verify(run: _Run, state_future, record: dict) -> float:
    """The error of the state a round started from: on the test set, else the whole training
    set (the round's own stats when they already cover it)."""
    if run.stop.test is not None:
        return test_error(run.net, waits.round_result(state_future, run.shards).params, run.stop.test)
    if run.strategy.exact_stats:
        return record["error_rate"]
    client = run.shards.client
    if not isinstance(state_future, Future):  # a state the head builds (streamed rounds)
        s = evaluate(run.net, run.shards, waits.round_result(state_future, run.shards).params, run.fan_in)
        return float(s[1] / s[2])
    s = evaluate(run.net, run.shards, client.submit(graph.weights_of, state_future), run.fan_in)
    return float(s[1] / s[2])


def _finish(run: _Run, attempt: int, end: _End) -> Result:
    shards, net, stop = run.shards, run.net, run.stop
    final = end.state
    if run.on_keep is not None:
        run.on_keep(final, end.round, attempt, run.history)
    wall = time.perf_counter() - run.t_start
    records = run.diag.finish()
    train_stats = evaluate(net, shards, final.params, run.fan_in)
    test_accuracy = None if stop.test is None else 1.0 - test_error(net, final.params, stop.test)
    epochs = sum(1 for r in run.history if r["try"] == attempt) / run.rounds_per_epoch
    return Result(net, final.params, run.history, run.strategy, end.learned, end.outcome.words(end.where),
                  epochs, wall, run.head_seconds, float(train_stats[0] / train_stats[2]),
                  float(train_stats[1] / train_stats[2]), test_accuracy,
                  {"workers": len(shards.worker_blocks()), "shards": shards.n_shards,
                   "fan_in": run.fan_in, "pipeline": run.pipeline, "exchange": run.used_exchange,
                   "allreduce": run.used_allreduce,
                   "seed": run.meta["seed"], "target_error": stop.target_error, "tries": attempt + 1,
                   "recoveries": run.recoveries, "events": run.events},
                  run.snapshots, records, final, end.outcome)
