"""The estimators' epoch bookkeeping (ppt_dask.sklearn.epochs) against scikit-learn's own rule."""

import inspect

import numpy as np
import pytest
from sklearn.neural_network import MLPClassifier

from ppt_dask.sklearn.epochs import EpochCurve, ToleranceRule


def sklearn_stop_epoch(losses, tol, n_iter_no_change):
    """The epoch (1-based) where MLPClassifier's sgd loop stops on this loss sequence, or None.

    Runs scikit-learn's own ``_update_no_improvement_count`` (early_stopping=False) on an
    estimator whose ``loss_curve_`` grows one epoch at a time, as ``_fit_stochastic`` does."""
    mlp = MLPClassifier(tol=tol, n_iter_no_change=n_iter_no_change, early_stopping=False)
    mlp.loss_curve_, mlp.best_loss_, mlp._no_improvement_count = [], np.inf, 0
    # (early_stopping, X, y[, sample_weight]): the validation arguments are unused here
    n_args = len(inspect.signature(mlp._update_no_improvement_count).parameters)
    for epoch, loss in enumerate(losses, 1):
        mlp.loss_curve_.append(loss)
        mlp._update_no_improvement_count(False, *[None] * (n_args - 1))
        if mlp._no_improvement_count > n_iter_no_change:
            return epoch
    return None


def our_stop_epoch(losses, tol, n_iter_no_change):
    rule = ToleranceRule(tol, n_iter_no_change)
    for epoch, loss in enumerate(losses, 1):
        if rule.add(loss):
            return epoch
    return None


FIXED = [1.0, 0.8, 0.7, 0.69995, 0.6999, 0.71, 0.65, 0.64999, 0.6499, 0.6498, 0.6498, 0.7, 0.6497]


@pytest.mark.parametrize("tol,n", [(1e-4, 2), (1e-4, 3), (1e-3, 1), (0.0, 2), (0.05, 2), (1e-4, 10)])
def test_rule_fires_at_scikit_learns_epoch_on_a_fixed_sequence(tol, n):
    assert our_stop_epoch(FIXED, tol, n) == sklearn_stop_epoch(FIXED, tol, n)


def test_rule_matches_on_random_sequences_and_fires_on_some():
    rng = np.random.default_rng(0)
    fired = 0
    for _ in range(200):
        losses = list(np.cumsum(rng.normal(-0.002, 0.01, size=60)) + 1.0)
        tol, n = float(rng.choice([0.0, 1e-4, 1e-3, 1e-2])), int(rng.integers(1, 8))
        expected = sklearn_stop_epoch(losses, tol, n)
        assert our_stop_epoch(losses, tol, n) == expected
        fired += expected is not None
    assert 20 < fired < 200  # the sequences exercise both outcomes


def test_curve_has_one_mean_loss_per_epoch_weighted_by_patterns():
    """2.5 rounds an epoch: the round ending at epoch 1.2 belongs to epoch 2."""
    curve = EpochCurve()
    rounds = [(0.4, 1.0, 100), (0.8, 2.0, 100), (1.2, 3.0, 50), (1.6, 4.0, 100), (2.0, 5.0, 100)]
    for epoch, loss, n in rounds:
        assert curve.add({"epoch": epoch, "loss": loss, "patterns": n}) is False
    assert curve.losses == [pytest.approx((1 * 100 + 2 * 100 + 3 * 50) / 250),
                            pytest.approx((4 * 100 + 5 * 100) / 200)]


def test_curve_stops_at_the_round_that_completes_the_rules_epoch():
    curve = EpochCurve(ToleranceRule(tol=10.0, n_iter_no_change=1))
    for r in range(10):  # two rounds an epoch; train stops at the first True
        if curve.add({"epoch": (r + 1) / 2, "loss": 1.0, "patterns": 10}):
            break
    # epoch 1 sets the best, epochs 2 and 3 are no improvement: the count 2 > 1 at epoch 3
    assert r == 5 and len(curve.losses) == 3 and curve.stopped_by_rule


def test_a_round_spanning_epochs_completes_each():
    curve = EpochCurve()
    curve.add({"epoch": 2.0, "loss": 0.5, "patterns": 10})
    assert curve.losses == [0.5, 0.5]
