"""One fit's run: epochs trained through :func:`ppt_dask.train` into a :class:`FitRun`, with
scikit-learn's ``tol`` rule, verbose lines and warnings (:mod:`ppt_dask.sklearn.epochs` keeps
the per-epoch bookkeeping)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.api import train
from ppt_dask.core.stopping import Stop
from ppt_dask.engine.placement import cluster
from ppt_dask.engine.result import Outcome
from ppt_dask.progress import Training
from ppt_dask.sklearn.contract import ConvergenceWarning
from ppt_dask.sklearn.epochs import EpochCurve, ToleranceRule


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


def train_epochs(estimator, run: FitRun, net, shards, strategy, epochs: int, seed: int, *, tol_rule: bool):
    """Train ``estimator`` up to ``epochs`` epochs into ``run`` in one :func:`ppt_dask.train` call.

    The rule is MLPClassifier's (``early_stopping=False``, :class:`ppt_dask.sklearn.epochs.ToleranceRule`):
    an epoch whose mean loss is not below the best loss so far minus ``tol`` counts as no
    improvement, and training stops once more than ``n_iter_no_change`` epochs in a row
    count. The trainer calls back after every round (``on_round``); the round that
    completes the rule's epoch stops the run there. Without
    ``tol_rule`` (``partial_fit``) the rule's bookkeeping (``best_loss_``) goes on, as
    scikit-learn's, but does not stop the run.
    """
    rule = ToleranceRule(estimator.tol, estimator.n_iter_no_change, run.best, run.no_improvement)
    # verbose: scikit-learn's line per epoch, and the progress display (a widget in Jupyter)
    shown = Training(epochs, link=lambda: cluster.page_url(shards.client)) if estimator.verbose else None
    curve = EpochCurve(rule, on_epoch=epoch_printer(run.epochs, shown) if estimator.verbose else None)
    result = None
    try:
        result = train(net, shards, strategy, Stop(max_epochs=epochs), seed=seed, params=run.params,
                       fan_in=estimator.fan_in, progress=shown,
                       on_round=curve.add if tol_rule else lambda record: curve.add(record) and False)
    finally:
        if shown is not None:
            shown.close(result)
    diverged = result.outcome is Outcome.DIVERGED
    if diverged:
        curve.close_partial()
    run.params, run.state = result.params, result.state
    run.history += [{**r, "epoch": r.get("epoch", 0) + run.epochs} for r in result.history]
    run.patterns += int(sum(r.get("patterns", 0) for r in result.history))
    run.losses += curve.losses
    run.epochs += len(curve.losses)
    run.best, run.no_improvement = rule.best, rule.no_improvement
    if diverged:
        warnings.warn(f"training {result.stopped_because} (loss not finite); kept the last good "
                      "weights; scale the inputs and targets or lower learning_rate_init",
                      ConvergenceWarning, stacklevel=4)
        return
    if tol_rule and curve.stopped_by_rule:
        if estimator.verbose:
            print(f"Training loss did not improve more than tol={estimator.tol} for "
                  f"{estimator.n_iter_no_change} consecutive epochs. Stopping.", flush=True)
        return
    if tol_rule and len(curve.losses) >= epochs and not curve.stopped_by_rule:
        warnings.warn(f"Maximum iterations ({epochs}) reached and the optimization hasn't converged yet.",
                      ConvergenceWarning, stacklevel=4)

def epoch_printer(before: int, shown=None):
    """scikit-learn's verbose line for each epoch, above the progress display's bar."""
    def show(epoch: int, loss: float) -> None:
        line = f"Iteration {before + epoch}, loss = {loss:.8f}"
        if shown is not None:
            shown.write(line)
        else:
            print(line)
    return show
