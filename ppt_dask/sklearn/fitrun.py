"""One fit's run: epochs trained through :func:`ppt_dask.train` into a :class:`FitRun`, with
scikit-learn's ``tol`` rule, verbose lines and warnings (:mod:`ppt_dask.sklearn.epochs` keeps
the per-epoch bookkeeping)."""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.core.outcome import Outcome
from ppt_dask.core.stopping import Stop
from ppt_dask.progress import Training
from ppt_dask.sklearn.contract import ConvergenceWarning
from ppt_dask.sklearn.epochs import EpochCurve, ToleranceRule
from ppt_dask.sklearn.inprocess import train_here


@dataclass
class FitRun:
    """What a fit accumulates; set on the estimator only once the fit has succeeded."""

    params: np.ndarray | None
    losses: list = field(default_factory=list)
    epochs: int = 0
    patterns: int = 0
    history: list = field(default_factory=list)
    best: float = math.inf
    no_improvement: int = 0
    state: object = None  # weights and optimizer state of the last chunk, within one fit
    scores: list = field(default_factory=list)  # validation scores (early stopping)


@dataclass
class Job:
    """One fit's settings for :func:`train_epochs`: its run, the estimator's settings, the
    batch, the epochs, whether the ``tol`` rule stops it, and its validation set (X, target,
    weights or None)."""

    run: FitRun
    settings: dict
    batch: int
    epochs: int
    tol_rule: bool
    validation: tuple | None = None
    start_epoch: float = 0.0  # the epochs of the state the rounds go on from (partial_fit in this process)


def _trainer(estimator, job: Job, net, shards, strategy, here, shown):
    """A function ``(epochs, on_round, state) -> result`` that trains on the cluster of
    ``shards`` (:func:`ppt_dask.train`) or, with ``here=(X, y, n_shards)``, in this process."""
    run, seed = job.run, job.settings["seed"]

    def train_for(epochs: int, on_round, state):
        params = run.params if state is None else None
        if here is not None:
            X, y, n_shards = here
            return train_here(net, X, y, strategy, epochs, n_shards=n_shards, seed=seed, params=params,
                              fan_in=estimator.fan_in, on_round=_shown(shown, on_round), state=state)
        from ppt_dask.api import train  # the engine (dask, distributed) only for a fit on a cluster

        return train(net, shards, strategy, Stop(max_epochs=epochs), seed=seed, params=params,
                     fan_in=estimator.fan_in, progress=shown, on_round=on_round, initial_state=state)
    return train_for


def _page_url(client) -> str | None:
    from ppt_dask.engine.placement import cluster

    return cluster.page_url(client)


def train_epochs(estimator, job: Job, net, shards, strategy, *, here: tuple | None = None):
    """Train ``estimator`` up to ``job.epochs`` epochs into ``job.run``: on the cluster of
    ``shards`` in one :func:`ppt_dask.train` call, or with ``here=(X, y, n_shards)`` in this
    process (:func:`ppt_dask.sklearn.inprocess.train_here`, the same rounds; ``shards`` None).

    The rule is MLPClassifier's (``early_stopping=False``, :class:`ppt_dask.sklearn.epochs.ToleranceRule`):
    an epoch whose mean loss is not below the best loss so far minus ``tol`` counts as no
    improvement, and training stops once more than ``n_iter_no_change`` epochs in a row
    count. The trainer calls back after every round (``on_round``); the round that
    completes the rule's epoch stops the run there. Without ``job.tol_rule``
    (``partial_fit``) the rule's bookkeeping (``best_loss_``) goes on, as scikit-learn's,
    but does not stop the run. With ``job.validation`` the run stops at the end of every
    epoch (the trainer's state kept: the next epoch goes on from it, the same rounds) for
    MLPClassifier's early stopping (:func:`_validated`).
    """
    run, epochs = job.run, job.epochs
    rule = ToleranceRule(estimator.tol, estimator.n_iter_no_change, run.best, run.no_improvement)
    # verbose: scikit-learn's line per epoch, and the progress display (a widget in Jupyter)
    link = None if shards is None else functools.partial(_page_url, shards.client)
    shown = Training(epochs, link=link) if estimator.verbose else None
    curve = EpochCurve(None if job.validation else rule, start_epoch=job.start_epoch,
                       on_epoch=epoch_printer(0, shown) if estimator.verbose else None)
    train_for = _trainer(estimator, job, net, shards, strategy, here, shown)
    result = None
    try:
        if job.validation is not None:
            result = _validated(estimator, job, net, curve, train_for)
        else:
            on_round = curve.add if job.tol_rule else lambda record: curve.add(record) and False
            result = train_for(epochs, on_round, run.state)
            _take(run, result, job.start_epoch)
    finally:
        if shown is not None:
            shown.close(result)
    if result.outcome is Outcome.DIVERGED:
        curve.close_partial()
    run.losses += curve.losses
    run.epochs += len(curve.losses)  # n_iter_: the epochs of this call, as MLPClassifier counts
    if job.validation is None:
        run.best, run.no_improvement = rule.best, rule.no_improvement
    _say_how_it_ended(estimator, job, result, curve)


def _take(run: FitRun, result, start_epoch: float = 0.0) -> None:
    """A trainer's result into ``run``: weights, state, history (its epochs after the
    ``run.losses`` of earlier calls; ``start_epoch``: those its records count already), patterns."""
    start = len(run.losses) - start_epoch
    run.params, run.state = result.params, result.state
    run.history += [{**r, "epoch": r.get("epoch", 0) + start} for r in result.history]
    run.patterns += int(sum(r.get("patterns", 0) for r in result.history))


def _validated(estimator, job: Job, net, curve: EpochCurve, train_for):
    """MLPClassifier's early stopping: after every epoch the score on the validation set;
    an epoch whose score is below the best so far plus ``tol`` counts as no improvement,
    more than ``n_iter_no_change`` in a row stop; the weights of the best score are kept."""
    run, (X_val, target_val, w_val) = job.run, job.validation
    best, count, best_params, result, state = -math.inf, 0, None, None, run.state
    for epoch in range(job.epochs):
        def one_epoch(record: dict, done: int = epoch) -> bool:
            return curve.add(record) or len(curve.losses) > done
        result = train_for(job.epochs - epoch, one_epoch, state)
        _take(run, result)
        if result.outcome is Outcome.DIVERGED or len(curve.losses) <= epoch:
            break
        state = result.state
        score = estimator._validation_score(net, result.params, X_val, target_val, w_val)
        run.scores.append(score)
        if estimator.verbose:
            print(f"Validation score: {score:f}", flush=True)
        count = count + 1 if score < best + estimator.tol else 0
        if score > best:
            best, best_params = score, np.array(result.params, copy=True)
        if count > estimator.n_iter_no_change:
            curve.stopped_by_rule = True
            break
    if best_params is not None:
        run.params = best_params
    return result


def _say_how_it_ended(estimator, job: Job, result, curve: EpochCurve) -> None:
    """A diverged run's warning, the verbose line of the rule, or max_iter's ConvergenceWarning."""
    what = "Validation score" if job.validation is not None else "Training loss"
    if result.outcome is Outcome.DIVERGED:
        warnings.warn(f"training {result.stopped_because} (loss not finite); kept the last good "
                      "weights; scale the inputs and targets or lower learning_rate_init",
                      ConvergenceWarning, stacklevel=5)
        return
    if job.tol_rule and curve.stopped_by_rule:
        if estimator.verbose:
            print(f"{what} did not improve more than tol={estimator.tol} for "
                  f"{estimator.n_iter_no_change} consecutive epochs. Stopping.", flush=True)
        return
    if job.tol_rule and len(curve.losses) >= job.epochs:
        warnings.warn(f"Maximum iterations ({job.epochs}) reached and the optimization hasn't converged yet.",
                      ConvergenceWarning, stacklevel=5)


def _both(*calls):
    """One ``on_epoch`` call-back of the given ones (None: none); a true answer of any stops."""
    calls = [c for c in calls if c is not None]
    if not calls:
        return None

    def call(epoch: int, loss: float):
        return any([bool(c(epoch, loss)) for c in calls])
    return call


def _shown(shown, on_round):
    """``on_round`` that also feeds the progress display (the trainer does that on a cluster)."""
    if shown is None:
        return on_round

    def call(record: dict):
        shown(record)
        return on_round(record)
    return call


def epoch_printer(before: int, shown=None):
    """scikit-learn's verbose line for each epoch, above the progress display's bar."""
    def show(epoch: int, loss: float) -> None:
        line = f"Iteration {before + epoch}, loss = {loss:.8f}"
        if shown is not None:
            shown.write(line)
        else:
            print(line)
    return show
