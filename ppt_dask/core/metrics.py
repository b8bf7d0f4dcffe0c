"""Scores of predictions, as scikit-learn computes them (without importing it)."""

from __future__ import annotations

import numpy as np


def r2_score(y, pred, sample_weight=None) -> float:
    """The coefficient of determination averaged over the targets, as sklearn's r2_score.

    ``y`` and ``pred`` of shape (n,) or (n, n_outputs); a constant target scores 1.0 when
    predicted exactly, else 0.0.
    """
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    pred = np.asarray(pred, dtype=np.float64).reshape(len(y), -1)
    w = (np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64))[:, None]
    ss_res = (w * (y - pred) ** 2).sum(axis=0)
    ss_tot = (w * (y - np.average(y, axis=0, weights=w[:, 0])) ** 2).sum(axis=0)
    safe = np.where(ss_tot > 0, ss_tot, 1.0)
    return float(np.where(ss_tot > 0, 1 - ss_res / safe, np.where(ss_res > 0, 0.0, 1.0)).mean())
