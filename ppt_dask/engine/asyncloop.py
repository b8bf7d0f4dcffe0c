"""The head's loop of asynchronous training with bounded staleness (the strategy,
:class:`ppt_dask.algorithms.asynchronous.Async`, says what a task computes): no global
barrier, so a slow worker does not hold up the others.

The pieces are the synchronous engine's: the same placed shards, the same map task
(``graph.local_task``, one per worker over its block of shards, pre-combined along the
fixed shard tree), the same update task. What changes is the head's loop. Each worker
always has one gradient task in flight. When one finishes (``as_completed``), the head
chains an update task onto the newest weights *on the cluster* (the weights never come
to the head) and at once resubmits that worker's next task against the new weights.

Staleness of a gradient = the updates applied between the weights it was computed from
and the moment it arrives. A gradient staler than ``staleness`` is dropped (and counted)
instead of applied; the worker is resubmitted with the newest weights. The bound is thus
enforced without ever making a fast worker wait for a slow one.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import replace

import numpy as np
from distributed import KilledWorker

from ppt_dask.algorithms.asynchronous import Async
from ppt_dask.algorithms.strategies import shard_share
from ppt_dask.core import keys
from ppt_dask.core.stopping import ErrorEstimate, Stop
from ppt_dask.engine import graph, waits, watch
from ppt_dask.engine.result import Outcome, Result, evaluate, test_error
from ppt_dask.engine.waits import ROUND_TIMEOUT


def train_recorded(net, shards, strategy: Async, stop: Stop, seed: int, params, fan_in: int, progress, recorder):
    """:func:`train_async` with the run's watcher (:mod:`ppt_dask.engine.watch`) seeing each update.

    The watcher records under a name of its own, not the run id in the keys: an update is no
    round of a graph, so a per-round breakdown of its tasks would be all waiting and no
    gradient. The records hold the updates' history (report, trace); the breakdown is []."""
    run_id = uuid.uuid4().hex[:8]
    watcher = watch.start(recorder, shards, f"{run_id}-updates", watch.settings(net, shards, strategy, fan_in=fan_in))
    result = train_async(net, shards, strategy, stop, seed=seed, params=params, fan_in=fan_in,
                         progress=watch.both(watcher.round_done, progress), run_id=run_id)
    return replace(result, diagnostics=watcher.finish())


def train_async(net, shards, strategy: Async, stop: Stop, *, seed: int = 0, params=None,
                fan_in: int = 2, progress=None, run_id: str | None = None):
    """The asynchronous head loop; returns a :class:`ppt_dask.engine.result.Result`.

    ``progress(record)`` sees each update's record; ``run_id`` names the run in its keys."""
    head = _Head(net, shards, strategy, stop, seed, params, fan_in, progress, run_id)
    try:
        while head.inflight and head.final is None:
            for fut in sorted(waits.first_done(list(head.inflight.values()), shards), key=head.slot_of):
                head.arrived(fut)
            head.read_ready_stats()  # in order, without waiting on the workers
    except (CancelledError, KilledWorker, waits.WorkerLost) as exc:  # a lost worker, or what it took
        lost = shards.lost_workers()
        if lost:
            raise _no_recovery(lost) from exc
        raise
    finally:
        head.cancel()
    return head.result()


def _no_recovery(lost) -> waits.WorkerLost:
    return waits.WorkerLost(f"worker(s) {lost} left the cluster; the asynchronous strategy keeps no copy "
                            "of the state to go back to, so it does not recover (the other strategies "
                            "do): start the run again")


class _Head:
    """What the head knows of an asynchronous run: the tasks in flight, the newest weights on
    the cluster, the updates whose stats are not read yet, the history and the outcome."""

    def __init__(self, net, shards, strategy, stop, seed, params, fan_in, progress, run_id):
        self.net, self.shards, self.strategy, self.stop = net, shards, strategy, stop
        self.seed, self.fan_in, self.progress = seed, fan_in, progress
        self.client = client = shards.client
        self.blocks = shards.worker_blocks()
        self.plan = graph.make_plan(self.blocks, shards.n_shards, fan_in)
        self.work = functools.partial(strategy.work, net)
        self.apply = functools.partial(strategy.apply, net)
        self.budget = stop.max_epochs * shards.n_rows  # patterns to process in all
        self.run = run_id or uuid.uuid4().hex[:8]
        self.t_start = self.last = time.perf_counter()
        start = params if params is not None else net.init_params(seed)
        self.state = client.scatter(strategy.init(np.asarray(start, dtype=net.dtype)), hash=False)
        self.weights = client.submit(strategy.broadcast, self.state,
                                     key=keys.version_name(keys.WEIGHTS, self.run, 0))
        self.version, self.head_total, self.submitted_patterns, self.seen = 0, 0.0, 0.0, 0.0
        self.steps = [0] * len(self.blocks)
        self.dropped = [0] * len(self.blocks)
        self.meta: dict = {}
        self.history: list = []
        self.stats_queue: list = []
        self.previous_state = self.state
        self.estimate = ErrorEstimate(stop.window_epochs * shards.n_rows)
        # verify every check_every epochs, as the synchronous loop does (screened: from the first
        # round whose estimate passes; unscreened: from check_every epochs in)
        self.next_check = -math.inf if stop.screen else stop.check_every
        self.per_task = [sum(shard_share(strategy.block, shards.n_shards, s) if strategy.block else
                             shards.info[s].stop - shards.info[s].start for s in range(a, b))
                         for _, a, b in self.blocks]
        self.final, self.outcome, self.where = None, Outcome.MAX_EPOCHS, None
        self.inflight = {w: self.submit(w) for w in range(len(self.blocks))}

    def submit(self, slot: int):
        """The next gradient task of ``slot``, against the newest weights."""
        t0 = time.perf_counter()
        label, a, b, nodes = self.plan.blocks[slot]
        key = (keys.step_name(keys.GRAD, self.run, slot, self.steps[slot]), slot)
        fut = self.client.submit(graph.local_task, self.work, self.weights, self.shards.futures[a:b],
                                 list(range(a, b)), self.steps[slot], list(nodes), self.plan.fan_in,
                                 self.plan.n_shards, key=key, resources={label: 1})
        self.meta[fut.key] = (slot, self.version, nodes)
        self.steps[slot] += 1
        self.submitted_patterns += self.per_task[slot]
        self.head_total += time.perf_counter() - t0
        return fut

    def slot_of(self, fut) -> int:
        return self.meta[fut.key][0]

    def arrived(self, fut) -> None:
        """A gradient task ended: chain an update on the newest weights (or drop it, too stale),
        and give its worker the next task while the budget lasts."""
        slot, v0, nodes = self.meta.pop(fut.key)
        del self.inflight[slot]
        lag = self.version - v0
        t0 = time.perf_counter()
        if lag > self.strategy.staleness:
            self.dropped[slot] += 1  # too stale: not applied
        else:
            children = [x for node in nodes for x in (fut, node)]
            self.version += 1
            run, version, client = self.run, self.version, self.client
            self.state = client.submit(graph.update_task, self.apply, self.state, *children,
                                       key=keys.version_name(keys.UPDATE, run, version))
            self.weights = client.submit(self.strategy.broadcast, self.state,
                                         key=keys.version_name(keys.WEIGHTS, run, version))
            stats = client.submit(graph.stats_of, self.state, key=keys.version_name(keys.STATS, run, version))
            self.stats_queue.append((version, slot, lag, self.state, stats))
        self.head_total += time.perf_counter() - t0
        if self.submitted_patterns < self.budget:
            self.inflight[slot] = self.submit(slot)

    def read_ready_stats(self) -> None:
        """The updates' stats that are ready, oldest first (all of them once nothing is in flight)."""
        queue = self.stats_queue
        while queue and (queue[0][4].done() or not self.inflight) and self.final is None:
            version, slot, lag, state, stats_f = queue.pop(0)
            stats = waits.result(stats_f, ROUND_TIMEOUT, "an asynchronous update's stats")
            record = self._record(version, slot, lag, *(float(x) for x in stats))
            if not math.isfinite(record["loss"]):
                self.final, self.outcome = self.previous_state, Outcome.DIVERGED
                self.where = f"update {version}"
                self.history.pop()
            elif self._due_for_check(record):
                self.next_check = record["epoch"] + self.stop.check_every
                record["verified_error_rate"] = error = self._verified_error(state)
                if error <= self.stop.target_error:
                    self.final, self.outcome = state, Outcome.TARGET_ERROR
            self.previous_state = state

    def _record(self, version, slot, lag, loss_sum, n_wrong, n) -> dict:
        self.estimate.add(n_wrong, n)
        self.seen += n
        now = time.perf_counter()
        record = {"try": 0, "round": version - 1, "worker": slot, "staleness": lag,
                  "epoch": self.seen / self.shards.n_rows, "loss": loss_sum / n, "error_rate": n_wrong / n,
                  "error_estimate": self.estimate.rate, "patterns": n, "wall_seconds": now - self.last,
                  "head_seconds": 0.0, "elapsed_seconds": now - self.t_start}
        self.last = now
        self.history.append(record)
        if self.progress is not None:
            self.progress(record)
        return record

    def _due_for_check(self, record) -> bool:
        stop = self.stop
        return (stop.target_error is not None and record["epoch"] >= self.next_check - 1e-9
                and (not stop.screen or (self.estimate.full and self.estimate.rate <= stop.target_error)))

    def _verified_error(self, state) -> float:
        p = waits.result(state, ROUND_TIMEOUT, "the weights of an asynchronous update").params
        if self.stop.test is not None:
            return test_error(self.net, p, self.stop.test)
        return float(np.divide(*evaluate(self.net, self.shards, p, self.fan_in)[1:]))

    def cancel(self) -> None:
        self.client.cancel(list(self.inflight.values()))
        self.inflight.clear()

    def result(self) -> Result:
        final = self.final if self.final is not None else self.state
        params_out = waits.result(final, ROUND_TIMEOUT, "the final weights").params
        wall = time.perf_counter() - self.t_start
        net, shards, fan_in, stop = self.net, self.shards, self.fan_in, self.stop
        loss_sum, n_wrong, n = evaluate(net, shards, params_out, fan_in)
        test_accuracy = None if stop.test is None else 1.0 - test_error(net, params_out, stop.test)
        learned = self.outcome is Outcome.TARGET_ERROR
        settings = {"workers": len(self.blocks), "shards": shards.n_shards, "fan_in": fan_in,
                    "seed": self.seed, "target_error": stop.target_error, "staleness_bound": self.strategy.staleness,
                    "max_staleness": max((r["staleness"] for r in self.history), default=0),
                    "dropped": self.dropped, "updates": self.version}
        return Result(net, params_out, self.history, self.strategy, learned, self.outcome.words(self.where),
                      self.seen / shards.n_rows, wall, self.head_total, float(loss_sum / n),
                      float(n_wrong / n), test_accuracy, settings, outcome=self.outcome)
