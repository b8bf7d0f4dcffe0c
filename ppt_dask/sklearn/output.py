"""The estimators' outputs: predictions, probabilities or values of the fitted network, on
numpy rows here or on each row block of a dask array on the workers."""

from __future__ import annotations

import numpy as np

from ppt_dask.core import validation
from ppt_dask.sklearn.contract import (
    check_is_fitted,
    check_X,
    columns_of,
    is_dask,
    is_dask_frame,
    rows_message,
    validate_data,
)


def output_block(X, net, params, what: str, classes):
    """``what`` of the network on rows ``X``: "predict", "proba", "log_proba" or "values"."""
    validation.check_finite(X, "X")
    if what == "predict":
        if getattr(net, "output", None) == "sigmoid":  # multilabel: an indicator column per label
            return (net.predict_proba(params, X) > 0.5).astype(np.int64)
        return classes[net.predict(params, X)]
    if what == "values":
        return net.predict(params, X)
    out = net.predict_proba(params, X).astype(np.float64)  # scikit-learn's classifiers give float64
    return out if what == "proba" else np.log(out)


def _frame_block(frame, net, params, what: str, classes):
    """:func:`output_block` of one partition of a dask DataFrame: a pandas Series on the
    partition's index for one value a row, else an array."""
    import pandas as pd

    out = output_block(frame.to_numpy(), net, params, what, classes)
    return pd.Series(out, index=frame.index) if out.ndim == 1 else out


def frame_output(estimator, X, what: str, classes):
    """``what`` of a dask DataFrame, lazily, as dask-ml's ParallelPostFit: a dask Series on X's
    index for one value a row (labels, a single target), else a dask array of one row a row."""
    import pandas as pd

    text = [c for c, t in X.dtypes.items() if getattr(t, "kind", "O") not in "biuf"]
    if text:
        raise ValueError(f"X's column {text[0]!r} is not numeric ({X.dtypes[text[0]]}); encode it as numbers")
    net, params = estimator._net, estimator.params_
    sample = output_block(np.zeros((1, X.shape[1]), dtype=net.dtype), net, params, what, classes)
    if sample.ndim == 1:
        meta = pd.Series(sample[:0], index=X._meta.index[:0])
    else:
        meta = sample[:0]
    return X.map_partitions(_frame_block, net, params, what, classes, meta=meta)


def output_of(estimator, X, what: str, classes=None):
    """A fitted ``estimator``'s :func:`output_block` on numpy X here, or on each row block of a dask X."""
    check_is_fitted(estimator)
    if hasattr(X, "columns") or hasattr(estimator, "feature_names_in_"):  # the columns of fit, by name
        validate_data(estimator, columns_of(X), reset=False, skip_check_array=True)
    if is_dask_frame(X):  # a dask Series (X's index) or array, as dask-ml's wrappers give
        n_columns = len(X.columns) if hasattr(X, "columns") else 1
        if not hasattr(X, "columns") or n_columns != estimator.n_features_in_:
            raise ValueError(rows_message(estimator, (n_columns,), getattr(estimator, "row_shape_", ())))
        return frame_output(estimator, X, what, classes)
    X = check_X(X, rows=estimator.module is not None)
    row_shape = getattr(estimator, "row_shape_", (estimator.n_features_in_,))
    if tuple(X.shape[1:]) != row_shape:
        raise ValueError(rows_message(estimator, tuple(X.shape[1:]), row_shape))
    if not is_dask(X):
        return output_block(X, estimator._net, estimator.params_, what, classes)
    # whole rows in every block; the weights go into the graph once
    X = X.rechunk({axis: -1 for axis in range(1, X.ndim)})
    multilabel = getattr(estimator, "_multilabel", False)
    if (what == "predict" and not multilabel) or (what == "values" and estimator.n_outputs_ == 1):
        return X.map_blocks(output_block, estimator._net, estimator.params_, what, classes,
                            drop_axis=list(range(1, X.ndim)),
                            dtype=classes.dtype if what == "predict" else estimator._net.dtype)
    dtype = {"proba": np.float64, "log_proba": np.float64, "predict": np.int64}.get(what, estimator._net.dtype)
    return X.map_blocks(output_block, estimator._net, estimator.params_, what, classes, dtype=dtype,
                        drop_axis=list(range(2, X.ndim)), chunks=(X.chunks[0], (estimator.n_outputs_,)))
