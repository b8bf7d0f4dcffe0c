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
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import graph, strategies
from .network import MLP
from .shards import ShardSet

ROUND_TIMEOUT = 600.0  # seconds a single round may take before the run is abandoned


@dataclass(frozen=True)
class Stop:
    """When to stop.

    Parameters
    ----------
    max_epochs : float
        Passes over the training set.
    target_error : float, optional
        Error rate (fraction of patterns wrong) to reach. A round's estimate at or below
        it is verified (on ``test`` when given, else on the whole training set) before
        the run stops as learned.
    test : (X_test, y_test), optional
        Held on the head; also gives ``test_accuracy`` at the end.
    """

    max_epochs: float = 100
    target_error: float | None = None
    test: tuple | None = field(default=None, repr=False)

    def __post_init__(self):
        if not (isinstance(self.max_epochs, (int, float)) and math.isfinite(self.max_epochs)
                and self.max_epochs > 0):
            raise ValueError(f"max_epochs must be a positive number, got {self.max_epochs!r}")
        if self.target_error is not None and not 0 <= self.target_error < 1:
            raise ValueError(f"target_error must be in [0, 1), got {self.target_error!r}")


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


@dataclass
class _Round:
    index: int
    weights_in: object  # the weights future the round started from
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
        strategies.evaluate_apply, weights, weights, 0, tag=tag, prefix="ppt-eval")
    return stats.result(timeout=timeout)


def train(net: MLP, shards: ShardSet, strategy, stop: Stop = Stop(), *, seed: int = 0,
          params: np.ndarray | None = None, fan_in: int = 2, pipeline: int = 1,
          progress: Callable[[dict], None] | None = None, generation: int = 0) -> Result:
    """Train ``net`` on the placed ``shards`` with ``strategy`` until ``stop``.

    Parameters
    ----------
    net : MLP
    shards : ShardSet
        From :func:`ppt_dask.enter_data`.
    strategy : a strategy from :mod:`ppt_dask.strategies`
    stop : Stop
    seed : int
        Seeds the initial weights (ignored when ``params`` is given).
    fan_in : int
        Children per reduce task (>= 2).
    pipeline : int
        Rounds submitted ahead of the one whose loss the head reads (>= 0).
    progress : callable, optional
        Called with each round's record.

    Returns
    -------
    Result
    """
    # -- check everything before any cluster work --
    if isinstance(fan_in, bool) or int(fan_in) != fan_in or fan_in < 2:
        raise ValueError(f"fan_in must be an integer >= 2, got {fan_in!r}")
    if isinstance(pipeline, bool) or int(pipeline) != pipeline or pipeline < 0:
        raise ValueError(f"pipeline must be an integer >= 0, got {pipeline!r}")
    check_compatible(net, shards)
    strategy = strategy.check(shards.n_rows, shards.n_shards)
    if params is None:
        params = net.init_params(seed)
    elif params.shape != (net.n_params,):
        raise ValueError(f"params has shape {params.shape}; the network needs ({net.n_params},)")
    max_rounds = strategy.rounds_for(stop.max_epochs, shards.n_rows)
    rounds_per_epoch = strategy.rounds_per_epoch(shards.n_rows)

    client = shards.client
    plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in)
    work = functools.partial(strategy.work, net)
    apply = functools.partial(strategy.apply, net)
    t_start = time.perf_counter()
    weights = client.scatter(params)
    state = client.scatter(strategy.init(params))

    history: list[dict] = []
    inflight: deque[_Round] = deque()
    next_round, head_total = 0, 0.0
    final_weights, stopped_because, learned = None, "max_epochs", False
    last_done = t_start
    try:
        while True:
            # keep `pipeline` rounds queued behind the one being read
            while next_round < max_rounds and len(inflight) <= pipeline:
                t0 = time.perf_counter()
                update, new_weights, stats = graph.submit_round(
                    client, plan, shards.futures, work, apply, weights, state,
                    next_round, generation=generation)
                head = time.perf_counter() - t0
                head_total += head
                inflight.append(_Round(next_round, weights, update, new_weights, stats, head, t0))
                weights, state = new_weights, update
                next_round += 1
            if not inflight:
                break
            rd = inflight.popleft()
            stats = rd.stats.result(timeout=ROUND_TIMEOUT)
            now = time.perf_counter()
            loss_sum, n_wrong, n = (float(v) for v in stats)
            record = {"round": rd.index, "epoch": (rd.index + 1) / rounds_per_epoch,
                      "loss": loss_sum / n, "error_rate": n_wrong / n, "patterns": n,
                      "wall_seconds": now - last_done, "head_seconds": rd.head_seconds,
                      "elapsed_seconds": now - t_start}
            last_done = now
            history.append(record)
            if progress is not None:
                progress(record)
            if not math.isfinite(record["loss"]):
                # keep the weights this round started from: the last good ones
                final_weights, stopped_because = rd.weights_in, f"diverged at round {rd.index}"
                history.pop()
                break
            if stop.target_error is not None and record["error_rate"] <= stop.target_error:
                # the stats describe the weights the round started from
                error = record["error_rate"]
                if stop.test is not None:
                    error = _test_error(net, rd.weights_in.result(timeout=ROUND_TIMEOUT), stop.test)
                elif not strategy.exact_stats:
                    s = evaluate(net, shards, rd.weights_in, fan_in)
                    error = s[1] / s[2]
                record["verified_error_rate"] = error
                if error <= stop.target_error:
                    final_weights, stopped_because, learned = rd.weights_in, "target_error", True
                    break
            if rd.index == max_rounds - 1:
                final_weights = rd.weights
    finally:
        for rd in inflight:
            client.cancel([rd.update, rd.weights, rd.stats])
        inflight.clear()
    params_out = final_weights.result(timeout=ROUND_TIMEOUT)
    del final_weights, weights, state
    wall = time.perf_counter() - t_start

    train_stats = evaluate(net, shards, params_out, fan_in)
    test_accuracy = None
    if stop.test is not None:
        test_accuracy = 1.0 - _test_error(net, params_out, stop.test)
    epochs = len(history) / rounds_per_epoch
    return Result(net, params_out, history, strategy, learned, stopped_because, epochs, wall,
                  head_total, float(train_stats[0] / train_stats[2]),
                  float(train_stats[1] / train_stats[2]), test_accuracy,
                  {"workers": len(shards.worker_blocks()), "shards": shards.n_shards,
                   "fan_in": fan_in, "pipeline": pipeline, "seed": seed,
                   "target_error": stop.target_error})


def _test_error(net: MLP, params: np.ndarray, test: tuple) -> float:
    X, y = test
    stats = net.stats(params, np.asarray(X, dtype=net.dtype), np.asarray(y))
    return float(stats[1] / stats[2])
