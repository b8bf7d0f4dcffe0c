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

import numpy as np
from distributed import wait

from ppt_dask.algorithms.asynchronous import Async
from ppt_dask.algorithms.strategies import shard_share
from ppt_dask.core.stopping import ErrorEstimate, Stop
from ppt_dask.engine import graph, waits
from ppt_dask.engine.result import Outcome, Result, evaluate, test_error
from ppt_dask.engine.waits import ROUND_TIMEOUT
from ppt_dask.observe import keys


def train_async(net, shards, strategy: Async, stop: Stop, *, seed: int = 0, params=None,
                fan_in: int = 2, progress=None):
    """The asynchronous head loop; returns a :class:`ppt_dask.engine.result.Result`."""

    client = shards.client
    blocks = shards.worker_blocks()
    plan = graph.make_plan(blocks, shards.n_shards, fan_in)
    work = functools.partial(strategy.work, net)
    apply = functools.partial(strategy.apply, net)
    budget = stop.max_epochs * shards.n_rows  # patterns to process in all
    run = uuid.uuid4().hex[:8]
    t_start = time.perf_counter()
    start = params if params is not None else net.init_params(seed)
    state = client.scatter(strategy.init(np.asarray(start, dtype=net.dtype)), hash=False)
    weights = client.submit(strategy.broadcast, state, key=keys.version_name(keys.WEIGHTS, run, 0))
    version, head_total, submitted_patterns, seen = 0, 0.0, 0.0, 0.0
    steps = [0] * len(blocks)
    meta: dict = {}
    history, dropped = [], [0] * len(blocks)
    previous_state = state
    estimate = ErrorEstimate(stop.window_epochs * shards.n_rows)
    # verify every check_every epochs, as the synchronous loop does (screened: from the first
    # round whose estimate passes; unscreened: from check_every epochs in)
    next_check = -math.inf if stop.screen else stop.check_every
    per_task = [sum(shard_share(strategy.block, shards.n_shards, s) if strategy.block else
                    shards.info[s].stop - shards.info[s].start for s in range(a, b)) for _, a, b in blocks]

    def submit(slot: int):
        nonlocal head_total, submitted_patterns
        t0 = time.perf_counter()
        label, a, b, nodes = plan.blocks[slot]
        key = (keys.step_name(keys.GRAD, run, slot, steps[slot]), slot)
        fut = client.submit(graph.local_task, work, weights, shards.futures[a:b], list(range(a, b)),
                            steps[slot], list(nodes), plan.fan_in, plan.n_shards, key=key,
                            resources={label: 1})
        meta[fut.key] = (slot, version, nodes)
        steps[slot] += 1
        submitted_patterns += per_task[slot]
        head_total += time.perf_counter() - t0
        return fut

    inflight = {w: submit(w) for w in range(len(blocks))}
    final, last, outcome, where = None, t_start, Outcome.MAX_EPOCHS, None
    stats_queue: list = []
    try:
        while inflight and final is None:
            done, _ = wait(list(inflight.values()), timeout=ROUND_TIMEOUT, return_when="FIRST_COMPLETED")
            if not done:
                raise TimeoutError(f"no gradient task finished within {ROUND_TIMEOUT} s")
            for fut in sorted(done, key=lambda f: meta[f.key][0]):
                slot, v0, nodes = meta.pop(fut.key)
                del inflight[slot]
                lag = version - v0
                t0 = time.perf_counter()
                if lag > strategy.staleness:
                    dropped[slot] += 1  # too stale: not applied
                else:
                    children = [x for node in nodes for x in (fut, node)]
                    version += 1
                    state = client.submit(graph.update_task, apply, state, *children,
                                          key=keys.version_name(keys.UPDATE, run, version))
                    weights = client.submit(strategy.broadcast, state,
                                            key=keys.version_name(keys.WEIGHTS, run, version))
                    stats_queue.append((version, slot, lag, state, client.submit(
                        graph.stats_of, state, key=keys.version_name(keys.STATS, run, version))))
                head_total += time.perf_counter() - t0
                if submitted_patterns < budget:
                    inflight[slot] = submit(slot)
            # read the stats that are ready, in order, without waiting on the workers
            while stats_queue and (stats_queue[0][4].done() or not inflight) and final is None:
                v, w, lag_v, state_v, stats_f = stats_queue.pop(0)
                stats = waits.result(stats_f, ROUND_TIMEOUT, "an asynchronous update's stats")
                loss_sum, n_wrong, n = (float(x) for x in stats)
                estimate.add(n_wrong, n)
                seen += n
                now = time.perf_counter()
                record = {"try": 0, "round": v - 1, "worker": w, "staleness": lag_v,
                          "epoch": seen / shards.n_rows, "loss": loss_sum / n, "error_rate": n_wrong / n,
                          "error_estimate": estimate.rate, "patterns": n, "wall_seconds": now - last,
                          "head_seconds": 0.0, "elapsed_seconds": now - t_start}
                last = now
                history.append(record)
                if progress is not None:
                    progress(record)
                if not math.isfinite(record["loss"]):
                    final, outcome, where = previous_state, Outcome.DIVERGED, f"update {v}"
                    history.pop()
                elif (stop.target_error is not None and record["epoch"] >= next_check - 1e-9
                      and (not stop.screen or (estimate.full and estimate.rate <= stop.target_error))):
                    next_check = record["epoch"] + stop.check_every
                    p = waits.result(state_v, ROUND_TIMEOUT, "the weights of an asynchronous update").params
                    error = (test_error(net, p, stop.test) if stop.test is not None else
                             float(np.divide(*evaluate(net, shards, p, fan_in)[1:])))
                    record["verified_error_rate"] = error
                    if error <= stop.target_error:
                        final, outcome = state_v, Outcome.TARGET_ERROR
                previous_state = state_v
    finally:
        client.cancel(list(inflight.values()))
        inflight.clear()
    final = final if final is not None else state
    params_out = waits.result(final, ROUND_TIMEOUT, "the final weights").params
    wall = time.perf_counter() - t_start
    train_stats = evaluate(net, shards, params_out, fan_in)
    test_accuracy = None if stop.test is None else 1.0 - test_error(net, params_out, stop.test)
    epochs = seen / shards.n_rows
    learned = outcome is Outcome.TARGET_ERROR
    return Result(net, params_out, history, strategy, learned, outcome.words(where), epochs, wall,
                  head_total, float(train_stats[0] / train_stats[2]), float(train_stats[1] / train_stats[2]),
                  test_accuracy,
                  {"workers": len(blocks), "shards": shards.n_shards, "fan_in": fan_in, "seed": seed,
                   "target_error": stop.target_error, "staleness_bound": strategy.staleness,
                   "max_staleness": max((r["staleness"] for r in history), default=0),
                   "dropped": dropped, "updates": version}, outcome=outcome)
