"""The estimators' outputs: predictions, probabilities or values of the fitted network, on
numpy rows here or on each row block of a dask array on the workers."""

from __future__ import annotations

import numpy as np

from ppt_dask.core import validation
from ppt_dask.sklearn.base import RESULT_TIMEOUT, rows_message
from ppt_dask.sklearn.contract import (
    check_is_fitted,
    check_X,
    columns_of,
    frame_as_array,
    is_dask,
    is_dask_frame,
    validate_data,
)


def output_block(X, net, params, what: str, classes):
    """``what`` of the network on rows ``X``: "predict", "proba", "log_proba" or "values"."""
    validation.check_finite(X, "X")
    if what == "predict":
        return classes[net.predict(params, X)]
    if what == "values":
        return net.predict(params, X)
    out = net.predict_proba(params, X)
    return out if what == "proba" else np.log(out)


def output_of(estimator, X, what: str, classes=None):
    """A fitted ``estimator``'s :func:`output_block` on numpy X here, or on each row block of a dask X."""
    check_is_fitted(estimator)
    if hasattr(X, "columns") or hasattr(estimator, "feature_names_in_"):  # the columns of fit, by name
        validate_data(estimator, columns_of(X), reset=False, skip_check_array=True)
    if is_dask_frame(X):  # the rows of each partition counted where they are
        from distributed import get_client
        X = frame_as_array(X, get_client(), RESULT_TIMEOUT, "X")
    X = check_X(X, rows=estimator.module is not None)
    row_shape = getattr(estimator, "row_shape_", (estimator.n_features_in_,))
    if tuple(X.shape[1:]) != row_shape:
        raise ValueError(rows_message(estimator, tuple(X.shape[1:]), row_shape))
    if not is_dask(X):
        return output_block(X, estimator._net, estimator.params_, what, classes)
    # whole rows in every block; the weights go into the graph once
    X = X.rechunk({axis: -1 for axis in range(1, X.ndim)})
    if what == "predict" or (what == "values" and estimator.n_outputs_ == 1):
        return X.map_blocks(output_block, estimator._net, estimator.params_, what, classes,
                            drop_axis=list(range(1, X.ndim)),
                            dtype=classes.dtype if what == "predict" else estimator._net.dtype)
    return X.map_blocks(output_block, estimator._net, estimator.params_, what, classes, dtype=estimator._net.dtype,
                        drop_axis=list(range(2, X.ndim)), chunks=(X.chunks[0], (estimator.n_outputs_,)))
