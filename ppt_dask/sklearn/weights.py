"""``sample_weight``: checked as scikit-learn checks it, then carried with the rows.

MLPClassifier's meaning (scikit-learn >= 1.7, ``_multilayer_perceptron._backprop``): each
row's loss and output delta are multiplied by its weight and a step divides the summed
gradient by the sum of the weights instead of the number of rows, so a weight of 2 is the
row twice and a weight of 0 the row left out. Here the rows of weight 0 are left out before
anything else (the classes, the batch, the shards are those of the rows that remain), and the
weights of the others become one more column of the targets (:func:`with_weights`): they go
where the targets go, into the shards on the workers, every block a strategy cuts and every
batch of local steps, and the training network is the estimator's MLP with ``weighted=True``
(:class:`ppt_dask.MLP`), whose sums over rows are weighted sums, its row count in the stats
the sum of the weights. Those sums are what the rounds add along the fixed shard tree and
what the update divides by, on a cluster as in this process. Without ``sample_weight`` none
of this runs: the targets and the network are those of an unweighted fit.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np

from ppt_dask.core.validation import check_finite
from ppt_dask.sklearn.contract import is_dask, is_dask_frame


def check(sample_weight, n_rows: int, estimator) -> np.ndarray:
    """``sample_weight`` as float64 of shape (n_rows,): a number for every row, or one weight a
    row, finite, >= 0, not all zero (scikit-learn's ``_check_sample_weight``); a ValueError
    names the bad value. Raised before any cluster work."""
    if estimator.module is not None:
        raise ValueError("sample_weight weights the built-in MLP's sums; it does not apply with module= "
                         "(a TorchNet's loss is unweighted): leave one of them out")
    if is_dask(sample_weight) or is_dask_frame(sample_weight):
        raise ValueError("sample_weight must be a numpy array, a list or a pandas Series, not a dask collection")
    if isinstance(sample_weight, numbers.Real) and not isinstance(sample_weight, bool):
        sample_weight = np.full(n_rows, sample_weight, dtype=np.float64)
    w = np.asarray(sample_weight)
    if w.dtype.kind not in "biuf":
        raise ValueError(f"sample_weight must be numeric, got dtype {w.dtype}")
    if w.shape != (n_rows,):
        raise ValueError(f"sample_weight has shape {w.shape}; expected ({n_rows},), one weight per row of X")
    w = check_finite(w.astype(np.float64), "sample_weight")
    negative = np.flatnonzero(w < 0)
    if negative.size:
        i = int(negative[0])
        raise ValueError(f"sample_weight has {negative.size} negative weight(s); the first is "
                         f"sample_weight[{i}] = {float(w[i])!r}: weights must be >= 0")
    if not w.any():
        raise ValueError("sample_weight is zero for every row: at least one weight must be > 0 "
                         "(a row of weight zero is left out)")
    return w


def rows(estimator, X, y, sample_weight) -> tuple:
    """``(X, y, w)`` of a fit: ``w`` None without ``sample_weight``; else the weights checked
    (:func:`check`) and the rows of weight 0 left out (no copy when every weight is > 0).
    Weighted fits take numpy or pandas data: those rows are left out here."""
    if sample_weight is None:
        return X, y, None
    w = check(sample_weight, int(X.shape[0]), estimator)
    if is_dask(X) or is_dask(y):
        raise ValueError("sample_weight takes numpy or pandas X and y (the rows of weight 0 are left out "
                         "here); compute a dask collection first, or leave sample_weight out")
    keep = w > 0
    if keep.all():
        return X, y, w
    return X[keep], y[keep], w[keep]


def with_weights(target: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The targets of a weighted fit: ``target`` (labels (n,) or (n, k)) with ``w`` as one more
    column, float64 of shape (n, 2) or (n, k + 1), as :class:`ppt_dask.MLP` with
    ``weighted=True`` reads them."""
    columns = target.reshape(len(target), -1).astype(np.float64)
    return np.column_stack([columns, w])


def net_for(net, w):
    """The network a fit trains: ``net`` itself, or with weights its ``weighted=True`` copy."""
    return net if w is None else dataclasses.replace(net, weighted=True)


def split(estimator, X, target, w, seed: int) -> tuple:
    """MLPClassifier's validation split of ``validation_fraction`` of the rows, the weights
    split with them: ``(X, target, w, (X_val, target_val, w_val))`` (``w`` None: both None)."""
    from sklearn.model_selection import train_test_split

    stratify = target if estimator._estimator_kind == "classifier" and target.ndim == 1 else None
    arrays = (X, target) if w is None else (X, target, w)
    parts = train_test_split(*arrays, test_size=estimator.validation_fraction, random_state=seed,
                             stratify=stratify)
    X, X_val, target, target_val = parts[:4]
    w, w_val = parts[4:] if w is not None else (None, None)
    if len(X_val) < 2:
        raise ValueError(f"The validation set is too small ({len(X_val)} rows). Increase validation_fraction "
                         f"({estimator.validation_fraction!r}) or the size of your dataset.")
    return X, target, w, (X_val, target_val, w_val)
