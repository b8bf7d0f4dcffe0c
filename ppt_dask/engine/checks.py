"""What the head does after each round it reads, and the run it does it for.

:class:`Run` is what a run accumulates over its tries; after a round :func:`record_round`
makes its record and :func:`check_round` decides whether the try ends there (:class:`End`:
diverged, the target error verified by :func:`verify`, stopped by the user) or goes on over
new workers (:class:`Grow`), keeping a copy of the state (:class:`Kept`, :func:`keep`) when
:func:`keep_due` says. The loops of :mod:`ppt_dask.engine.roundloop` call them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from distributed import Future

from ppt_dask.algorithms import strategies
from ppt_dask.core.model import Network
from ppt_dask.core.stopping import Stop
from ppt_dask.engine import waits
from ppt_dask.engine.history import History
from ppt_dask.engine.placement.shards import ShardSet
from ppt_dask.engine.result import Outcome, evaluate, test_error
from ppt_dask.engine.rounds import graph, liveness

# The head's copies of the state with checkpoint_every=None: after at least KEEP_ROUNDS rounds,
# and not before the rounds since the last copy took 1 / KEEP_SHARE times what that copy took.
# A copy of local SGD's state pulls every shard's model from every worker: at p = 8, MNIST's
# rounds of one 25-row step (6-8 ms on 2 cores), one every 25 rounds took 28% of the run's time.
KEEP_ROUNDS = 25
KEEP_SHARE = 0.05
# Loops that read by time (ppt_dask.engine.rounds.watched) hand the head a copy with a read at
# most this often: a lost worker is recovered from a surviving loop's state, the copy is for a
# lost head (the checkpoint) and the loss of every loop.
KEEP_EVERY_SECONDS = 1.0


@dataclass
class Kept:
    """The head's copy of the state after ``round`` (-1: before the first), to go back to."""

    round: int
    state: strategies.ModelState
    n_history: int


@dataclass
class End:
    """How a try ended: the state to keep (a future or a value), after which round, why."""

    state: object
    round: int
    outcome: Outcome
    where: str | None = None  # the round a divergence happened in

    @property
    def learned(self) -> bool:
        return self.outcome is Outcome.TARGET_ERROR


@dataclass
class Grow:
    """New workers joined: spread the shards over them and go on from ``kept``."""

    kept: Kept


@dataclass
class Run:
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
    checkpoint_every: int | None  # None: by KEEP_ROUNDS and KEEP_SHARE
    meta: dict
    progress: Callable | None
    on_round: Callable | None
    on_keep: Callable | None  # (state, round, try, history): the checkpoint writer
    diag: object
    run_id: str
    t_start: float
    reproducible: str | None = None  # "any-p", "same-p" (a pass a worker slot), None (asynchronous)
    hang_seconds: float = liveness.HANG_SECONDS  # a loop without progress this long is hung (watched rounds)
    history: History = field(default_factory=History)  # Result.history: a record a round, as columns
    snapshots: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    head_seconds: float = 0.0
    recoveries: int = 0
    gen: int = 0
    used_exchange: str = ""
    used_allreduce: str | None = None  # the streamed exchange's algorithm (None: not streamed, or async)
    shared_off: bool = False  # shared memory no longer possible (/dev/shm filled): the socket algorithms from then on
    last_kept: Kept | None = None
    kept_at: float = 0.0  # when the head's last copy was made (or its generation began)
    keep_seconds: float = 0.0  # what that copy took the head
    worker_settings: dict = field(default_factory=dict)  # per worker, its loop's report (loopenv)
    said: set = field(default_factory=set)  # what the log said of them already


def record_round(run: Run, attempt: int, r: int, stats, estimate, wall: float, head: float) -> dict:
    loss_sum, n_wrong, n = (float(v) for v in stats)
    estimate.add(n_wrong, n)
    return {"try": attempt, "gen": run.gen, "round": r, "epoch": (r + 1) / run.rounds_per_epoch,
            "loss": loss_sum / n, "error_rate": n_wrong / n, "error_estimate": estimate.rate,
            "patterns": n, "wall_seconds": wall, "head_seconds": head,
            "elapsed_seconds": time.perf_counter() - run.t_start}


def check_round(run: Run, attempt: int, engine, r: int, record: dict, estimate,
           checks: dict) -> End | Grow | None:
    """After round ``r``'s record: an End when the run stops there, a Grow when new workers
    joined, else None (keeping a copy of the state every ``checkpoint_every`` rounds)."""
    shards, stop, strategy = run.shards, run.stop, run.strategy
    if not math.isfinite(record["loss"]):  # keep the weights this round started from
        run.history.pop()
        return End(engine.state_before(r), r - 1, Outcome.DIVERGED, f"round {r}")
    if r in run.snapshot_rounds:
        run.snapshots[run.snapshot_rounds[r]] = waits.round_result(engine.state_after(r), shards).params
    if keep_due(run, r) and r + 1 < run.max_rounds:
        grow = keep_and_grow(run, attempt, r, lambda: waits.round_result(engine.state_after(r), shards))
        if grow is not None:
            return grow
    screened = (estimate.full or strategy.exact_stats) and estimate.rate <= (stop.target_error or 0)
    due = record["epoch"] >= checks["next_check"] - 1e-9 or (stop.screen and strategy.exact_stats)
    if stop.target_error is not None and (screened or not stop.screen) and due:
        checks["next_check"] = record["epoch"] + stop.check_every  # verify every check_every epochs
        record["verified_error_rate"] = verify(run, engine.state_before(r), record)
        run.history[-1] = record  # the history keeps columns, not the dict: write the check in
        if record["verified_error_rate"] <= stop.target_error:
            return End(engine.state_before(r), r - 1, Outcome.TARGET_ERROR)
    if run.on_round is not None and run.on_round(record):
        return End(engine.state_after(r), r, Outcome.STOPPED)
    return None


def keep_due(run: Run, r: int | None) -> bool:
    """Whether the head keeps a copy of the state after round ``r``: every
    ``checkpoint_every`` rounds, or (None) by :data:`KEEP_ROUNDS` and :data:`KEEP_SHARE`."""
    if run.checkpoint_every is not None:
        return (r + 1) % run.checkpoint_every == 0
    if r is None:  # loops read by time: a copy with the next read, by the time since the last
        return time.perf_counter() - run.kept_at >= max(KEEP_EVERY_SECONDS, run.keep_seconds / KEEP_SHARE)
    return (r - run.last_kept.round >= KEEP_ROUNDS
            and time.perf_counter() - run.kept_at >= run.keep_seconds / KEEP_SHARE)


def keep(run: Run, attempt: int, r: int, state, n_history: int | None = None) -> Kept:
    """The head's copy to roll back to (and to the run's ``on_keep``: the checkpoint file), the
    state after round ``r``; ``n_history``: the history's records up to that round (default:
    all of it)."""
    n = len(run.history) if n_history is None else n_history
    kept = Kept(r, state, n)
    run.last_kept = kept
    if run.on_keep is not None:
        run.on_keep(state, r, attempt, run.history if n_history is None else run.history[:n])
    return kept


def keep_and_grow(run: Run, attempt: int, r: int, fetch, n_history: int | None = None) -> Grow | None:
    """:func:`keep` the state ``fetch()`` gives (the wait for it timed with the copy, what
    :func:`keep_due` paces the copies by), then a Grow where new workers joined, else None."""
    t0 = time.perf_counter()
    kept = keep(run, attempt, r, fetch(), n_history)
    run.kept_at = time.perf_counter()
    run.keep_seconds = run.kept_at - t0
    if run.shards.can_grow and run.shards.joined_workers():  # use new workers from here on
        if run.shards.lost_workers():  # a lost worker's restarted process, not a new worker:
            raise waits.WorkerLost("a worker left and another joined")  # the lost slot takes it
        return Grow(kept)
    return None


def verify(run: Run, state_future, record: dict) -> float:
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
