"""The head's round loop: submit rounds ahead, read scalars, stop.

One flat function, read top to bottom (STYLE.md). The weights never come back to the
head inside the loop: round ``r + 1`` is submitted against round ``r``'s weights future
before round ``r``'s loss is read (``pipeline`` rounds ahead), so the scheduler always has
the next round queued and the workers do not wait for the head. The head pulls a
three-number stats vector per round and, at the end, the final weights.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from collections import deque
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from distributed import KilledWorker

from . import checkpoint, diagnostics, graph, strategies
from .stopping import ErrorEstimate, Stop
from .validation import check_int_at_least
from .network import MLP
from .shards import ShardSet

ROUND_TIMEOUT = 600.0  # seconds a single round may take before the run is abandoned
POLL_SECONDS = 2.0  # while waiting on a round, how often to check that no worker was lost
MAX_RECOVERIES = 20


class WorkerLost(RuntimeError):
    """A worker holding shards left the cluster while a round was waiting on it."""


class WorkersJoined(Exception):
    """New workers joined the cluster: spread the shards over them."""


def _cancel(client, inflight: deque) -> None:
    """Drop the rounds submitted ahead (on a stop, a rollback or a rebalance)."""
    for rd in inflight:
        client.cancel([rd.update, rd.weights, rd.stats])
    inflight.clear()


def _result(future, shards: ShardSet, timeout: float = ROUND_TIMEOUT):
    """``future.result()``, checking every few seconds that the shards' workers are alive.

    Shards with a recipe are rebuilt by Dask on the slot's resource label; while that
    label has no worker a pinned task would wait, so the head looks for lost workers
    itself instead of waiting for ``no-workers-timeout``.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            return future.result(timeout=min(POLL_SECONDS, max(0.01, deadline - time.monotonic())))
        except TimeoutError:
            lost = shards.lost_workers()
            if lost:
                raise WorkerLost(f"worker(s) {lost} left the cluster") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"a round did not finish within {timeout} s") from None


@dataclass
class Result:
    """A finished run: final weights, per-round history and totals."""

    net: MLP
    params: np.ndarray
    history: list[dict]
    strategy: object
    learned: bool
    stopped_because: str
    epochs: float
    wall_seconds: float
    head_seconds: float
    train_loss: float
    train_error_rate: float
    test_accuracy: float | None
    settings: dict = field(default_factory=dict)
    snapshots: dict = field(default_factory=dict)  # epoch -> weights pulled then
    diagnostics: object = field(default=None, repr=False)  # diagnostics: RunRecords or None
    state: object = field(default=None, repr=False)  # final ModelState (weights + optimizer state)

    @property
    def rounds(self) -> int:
        return len(self.history)

    def predict(self, X):
        return self.net.predict(self.params, X)

    def summary(self) -> dict:
        """The JSON summary of the CLI (``--json``)."""
        return {**self.settings, "strategy": getattr(self.strategy, "name", str(self.strategy)),
                "epochs": self.epochs, "rounds": self.rounds, "train_loss": self.train_loss,
                "train_error_rate": self.train_error_rate, "test_accuracy": self.test_accuracy,
                "wall_seconds": self.wall_seconds, "head_seconds": self.head_seconds,
                "learned": self.learned, "stopped_because": self.stopped_because}

    # diagnostics: where the time went (ppt_dask.breakdown, ppt_dask.dashboard)
    def breakdown(self) -> list[dict]:
        """Per-round time breakdown rows (see :mod:`ppt_dask.breakdown`); [] without records."""
        return self.diagnostics.rows() if self.diagnostics is not None else []

    def report(self, path) -> None:
        """Write a standalone HTML report of the run (opens without a server or network)."""
        from .dashboard import write_report
        write_report(self, path)

    def trace(self, path) -> None:
        """Write the run as a Chrome trace (one track per worker plus the head)."""
        diagnostics.write_trace(self, path)


@dataclass
class _Round:
    index: int
    state_in: object  # the state future the round started from
    update: object
    weights: object
    stats: object
    head_seconds: float
    submitted: float


def check_compatible(net: MLP, shards: ShardSet) -> None:
    """The network must fit the data: raised before any training work."""
    if net.n_inputs != shards.n_features:
        raise ValueError(f"the network takes {net.n_inputs} inputs but the data has {shards.n_features} features")
    if net.dtype != shards.dtype:
        raise ValueError(f"the network is {net.dtype} but the shards hold {shards.dtype} (enter_data(dtype=...))")
    y_shape = shards.info[0].y_shape
    lo = min(i.y_min for i in shards.info)
    hi = max(i.y_max for i in shards.info)
    if y_shape == () and net.output == "softmax":
        if not all(i.y_integral for i in shards.info) or lo < 0 or hi >= net.n_outputs:
            raise ValueError(f"labels must be integers in [0, {net.n_outputs}) for {net.n_outputs} "
                             f"softmax outputs; the data has labels in [{lo:g}, {hi:g}]")
    elif y_shape == () and net.n_outputs != 1:
        raise ValueError(f"1-D targets need a network with 1 output, not {net.n_outputs}")
    elif y_shape not in ((), (net.n_outputs,)):
        raise ValueError(f"targets have {y_shape[0]} columns; the network has {net.n_outputs} outputs")
    if net.output == "sigmoid" and net.loss == "cross_entropy" and (lo < 0 or hi > 1):
        raise ValueError(f"sigmoid/cross-entropy targets must lie in [0, 1]; the data has [{lo:g}, {hi:g}]")


def evaluate(net: MLP, shards: ShardSet, weights, fan_in: int = 2,
             timeout: float = ROUND_TIMEOUT) -> np.ndarray:
    """Stats ``[loss_sum, n_wrong, n]`` of ``weights`` (array or future) over all shards."""
    client = shards.client
    tag = f"eval-{uuid.uuid4().hex[:8]}"
    if isinstance(weights, np.ndarray):
        weights = client.scatter(weights)
    plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in)
    _, _, stats = graph.submit_round(
        client, plan, shards.futures, functools.partial(strategies.evaluate_work, net),
        strategies.evaluate_apply, weights, weights, 0, tag, prefix="ppt-eval")
    return stats.result(timeout=timeout)


def train(net: MLP, shards: ShardSet, strategy, stop: Stop = Stop(), *, seed: int = 0,
          params: np.ndarray | None = None, fan_in: int = 2, pipeline: int = 1,
          progress: Callable[[dict], None] | None = None, generation: int = 0,
          snapshot_epochs: tuple = (), checkpoint_dir=None, checkpoint_every: int = 25,
          resume: bool = False, initial_state=None) -> Result:
    """Train ``net`` on the placed ``shards`` with ``strategy`` until ``stop``.

    Parameters
    ----------
    net : MLP
    shards : ShardSet
        From :func:`ppt_dask.enter_data`.
    strategy : a strategy from :mod:`ppt_dask.strategies`
    stop : Stop
        Max epochs, target error (windowed estimate, then verified), restarts.
    seed : int
        Seeds the initial weights (try ``t`` of a restarted run uses ``seed + t``) and the
        strategies' random streams.
    params : ndarray, shape (net.n_params,), optional
        Initial weights (first try only).
    fan_in : int
        Children per reduce task (>= 2).
    pipeline : int
        Rounds submitted ahead of the one whose loss the head reads (>= 0).
    progress : callable, optional
        Called with each round's record.
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

    Returns
    -------
    Result
    """
    # -- check everything before any cluster work --
    fan_in = check_int_at_least("fan_in", fan_in, 2)
    pipeline = check_int_at_least("pipeline", pipeline, 0)
    checkpoint_every = check_int_at_least("checkpoint_every", checkpoint_every, 1)
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs checkpoint_dir")
    check_compatible(net, shards)
    strategy = strategy.check([i.stop - i.start for i in shards.info], seed, shards.replicated)
    if params is not None and np.shape(params) != (net.n_params,):
        raise ValueError(f"params has shape {np.shape(params)}; the network needs ({net.n_params},)")
    if getattr(strategy, "asynchronous", False):
        from .asynchronous import train_async
        return train_async(net, shards, strategy, stop, seed=seed, params=params, fan_in=fan_in,
                           progress=progress)
    rounds_per_epoch = strategy.rounds_per_epoch(shards.n_rows)
    max_rounds = max(1, math.ceil(stop.max_epochs * rounds_per_epoch - 1e-9))
    if initial_state is not None:
        max_rounds += initial_state.round + 1
    snapshot_rounds = {max(1, round(e * rounds_per_epoch)) - 1: e for e in snapshot_epochs}

    client = shards.client
    work = functools.partial(strategy.work, net)
    apply = functools.partial(strategy.apply, net)
    t_start = time.perf_counter()
    history: list[dict] = []
    snapshots: dict[float, np.ndarray] = {}
    head_total = 0.0
    run = uuid.uuid4().hex[:8]
    diag = diagnostics.Recorder(client, run, diagnostics.run_settings(  # diagnostics
        net, shards, strategy, fan_in=fan_in, pipeline=pipeline, seed=seed), generation)
    meta = {"network": list(net.sizes), "hidden": net.hidden, "output": net.output, "loss": net.loss,
            "dtype": net.dtype, "strategy": repr(strategy), "rows": shards.n_rows,
            "shards": shards.n_shards, "fan_in": fan_in, "seed": seed}
    saved = checkpoint.load(checkpoint_dir, meta) if (checkpoint_dir and resume) else None
    gen_no, recoveries, events = generation, 0, []
    for attempt in range(saved["try"] if saved else 0, stop.restarts + 1):
        if attempt:
            params = None
        if saved:  # resume: the state after round saved["round"], and the history up to it
            kept = (saved["round"], saved["state"], len(saved["history"]))
            history[:] = saved["history"]
            saved = None
        else:
            start = params if params is not None else net.init_params(seed + attempt)
            kept = (-1, strategy.init(np.asarray(start, dtype=net.dtype)), len(history))
            if initial_state is not None and attempt == 0:  # continue its round numbering
                kept = (initial_state.round, initial_state, len(history))
        next_round, final_state, final_round, stopped_because, learned = None, None, -1, "max_epochs", False
        while True:  # one pass per recovery: start from the kept state
            gen = f"{run}-g{gen_no}"
            round_in, state_in, n_history = kept
            del history[n_history:]
            estimate = ErrorEstimate(stop.window_epochs * shards.n_rows)
            for r in history:
                if r["try"] == attempt:
                    estimate.add(r["error_rate"] * r["patterns"], r["patterns"])
            plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in)
            state = client.scatter(state_in)
            weights = client.submit(strategy.broadcast, state, key=f"ppt-weights-{gen}-init")
            inflight: deque[_Round] = deque()
            next_round, last_done = round_in + 1, time.perf_counter()
            verified_epoch = -1
            try:
                while True:
                    # keep `pipeline` rounds queued behind the one being read
                    while next_round < max_rounds and len(inflight) <= pipeline:
                        t0 = time.perf_counter()
                        update, new_weights, stats = graph.submit_round(
                            client, plan, shards.futures, work, apply, weights, state,
                            next_round, f"{gen}-r{next_round}", broadcast=strategy.broadcast)
                        head = time.perf_counter() - t0
                        head_total += head
                        inflight.append(_Round(next_round, state, update, new_weights, stats, head, t0))
                        weights, state = new_weights, update
                        next_round += 1
                    if not inflight:
                        break
                    rd = inflight.popleft()
                    loss_sum, n_wrong, n = (float(v) for v in _result(rd.stats, shards))
                    now = time.perf_counter()
                    estimate.add(n_wrong, n)
                    record = {"try": attempt, "gen": gen_no, "round": rd.index,
                              "epoch": (rd.index + 1) / rounds_per_epoch, "loss": loss_sum / n,
                              "error_rate": n_wrong / n, "error_estimate": estimate.rate, "patterns": n,
                              "wall_seconds": now - last_done, "head_seconds": rd.head_seconds,
                              "elapsed_seconds": now - t_start}
                    last_done = now
                    history.append(record)
                    if progress is not None:
                        progress(record)
                    diag.round_done(record)  # diagnostics
                    if not math.isfinite(record["loss"]):
                        # keep the weights this round started from: the last good ones
                        final_state, stopped_because = rd.state_in, f"diverged at round {rd.index}"
                        final_round = rd.index - 1
                        history.pop()
                        break
                    if rd.index in snapshot_rounds:
                        snapshots[snapshot_rounds[rd.index]] = _result(rd.update, shards).params
                    if (rd.index + 1) % checkpoint_every == 0 and rd.index + 1 < max_rounds:
                        # the head's copy to roll back to (and, when asked, the checkpoint file)
                        kept = (rd.index, _result(rd.update, shards), len(history))
                        if checkpoint_dir:
                            checkpoint.save(checkpoint_dir, kept[1], round_index=rd.index,
                                            attempt=attempt, history=history, meta=meta)
                        if shards.can_grow and shards.joined_workers():  # use new workers from here on
                            raise WorkersJoined()
                    if (stop.target_error is not None and (estimate.full or strategy.exact_stats)
                            and estimate.rate <= stop.target_error
                            and (strategy.exact_stats or int(record["epoch"]) > verified_epoch)):
                        verified_epoch = int(record["epoch"])  # verify at most once an epoch
                        # the stats describe the weights the round started from
                        error = record["error_rate"]
                        if stop.test is not None:
                            error = _test_error(net, _result(rd.state_in, shards).params, stop.test)
                        elif not strategy.exact_stats:
                            s = evaluate(net, shards, client.submit(graph.weights_of, rd.state_in), fan_in)
                            error = s[1] / s[2]
                        record["verified_error_rate"] = error
                        if error <= stop.target_error:
                            final_state, stopped_because, learned = rd.state_in, "target_error", True
                            final_round = rd.index - 1
                            break
                    if rd.index == max_rounds - 1:
                        final_state, final_round = rd.update, rd.index
                break
            except WorkersJoined:
                # rounds after the kept state are resubmitted over the larger cluster; the
                # fixed shard tree makes the result the same
                _cancel(client, inflight)
                for event in shards.rebalance():
                    events.append({**event, "round": kept[0] + 1,
                                   "elapsed_seconds": time.perf_counter() - t_start})
                gen_no += 1
            except (CancelledError, KilledWorker, WorkerLost) as exc:
                # a worker died: put its shards back, roll back to the head's copy, replay
                recoveries += 1
                if recoveries > MAX_RECOVERIES:
                    raise
                _cancel(client, inflight)
                moved = shards.repair()
                events.append({"event": "recovered", "round": next_round, "rolled_back_to": kept[0],
                               "elapsed_seconds": time.perf_counter() - t_start, "error": repr(exc)[:200],
                               "moved": moved})
                gen_no += 1
            finally:
                _cancel(client, inflight)
        del weights, state
        if learned or stopped_because != "max_epochs" or stop.target_error is None:
            break
        gen_no += 1
    final = _result(final_state, shards)
    params_out = final.params
    if checkpoint_dir:
        checkpoint.save(checkpoint_dir, final, round_index=final_round,
                        attempt=attempt, history=history, meta=meta)
    del final_state
    wall = time.perf_counter() - t_start
    records = diag.finish()  # diagnostics

    train_stats = evaluate(net, shards, params_out, fan_in)
    test_accuracy = None
    if stop.test is not None:
        test_accuracy = 1.0 - _test_error(net, params_out, stop.test)
    epochs = sum(1 for r in history if r["try"] == attempt) / rounds_per_epoch
    return Result(net, params_out, history, strategy, learned, stopped_because, epochs, wall,
                  head_total, float(train_stats[0] / train_stats[2]),
                  float(train_stats[1] / train_stats[2]), test_accuracy,
                  {"workers": len(shards.worker_blocks()), "shards": shards.n_shards,
                   "fan_in": fan_in, "pipeline": pipeline, "seed": seed,
                   "target_error": stop.target_error, "tries": attempt + 1,
                   "recoveries": recoveries, "events": events},
                  snapshots, records, final)


def _test_error(net: MLP, params: np.ndarray, test: tuple) -> float:
    X, y = test
    stats = net.stats(params, np.asarray(X, dtype=net.dtype), np.asarray(y))
    return float(stats[1] / stats[2])
