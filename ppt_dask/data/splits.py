"""Seeded random train/test splits of rows (004 averages over ten random 70/30 splits).

Pure numpy: no dask import.

>>> import numpy as np
>>> X_train, X_test, y_train, y_test = train_test_split(np.arange(10).reshape(10, 1), np.arange(10), 0.3)
>>> len(X_train), len(X_test), sorted(np.concatenate([y_train, y_test]).tolist()) == list(range(10))
(7, 3, True)
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core.validation import check_int_at_least


def train_test_split(X, y, test_fraction: float = 0.3, seed: int = 0):
    """A seeded random split, not stratified (004 draws plain random 70/30 splits).

    Returns
    -------
    X_train, X_test, y_train, y_test : rows of X and y in a random order;
    round(test_fraction * n) rows go to the test part.
    """
    n = len(X)
    if len(y) != n:
        raise ValueError(f"y has {len(y)} rows but X has {n}")
    n_test = round(test_fraction * n) if 0 < test_fraction < 1 else 0
    if not 1 <= n_test <= n - 1:
        raise ValueError(f"test_fraction={test_fraction!r} leaves no rows for training or "
                         f"for testing out of {n}")
    order = np.random.default_rng(seed).permutation(n)
    test, train = order[:n_test], order[n_test:]
    return X[train], X[test], y[train], y[test]


def random_splits(X, y, n_splits: int = 10, test_fraction: float = 0.3, seed: int = 0):
    """Yield `n_splits` splits (X_train, X_test, y_train, y_test), split i seeded seed + i.

    004 reports the mean over ten random 70/30 splits and seeds each with its number.
    """
    n_splits = check_int_at_least("n_splits", n_splits, 1)
    for i in range(n_splits):
        yield train_test_split(X, y, test_fraction, seed + i)
