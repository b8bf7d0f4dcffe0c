"""scikit-learn's estimator contract: its own base classes, errors and warnings, and the
input checks for what scikit-learn's ``validate_data`` does not take (dask arrays, which must
stay on the workers), raising with the wording scikit-learn's common checks look for.

scikit-learn is the ``[sklearn]`` extra (``pip install 'ppt_dask[sklearn]'``): this module,
and the estimators with it, raise an ImportError that says so without it; the rest of
ppt_dask never imports it.
"""

from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from ppt_dask.core import applicability, validation

INSTALL_HINT = "PPTClassifier and PPTRegressor need scikit-learn: pip install 'ppt_dask[sklearn]'"
try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.exceptions import ConvergenceWarning, DataConversionWarning, NotFittedError
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # the extra is not installed
    raise ImportError(f"{INSTALL_HINT} ({exc})") from None

__all__ = ["BaseEstimator", "ClassifierMixin", "RegressorMixin", "ConvergenceWarning",
           "DataConversionWarning", "NotFittedError", "check_is_fitted", "validate_data"]


def is_dask(a) -> bool:
    return hasattr(a, "dask") and hasattr(a, "map_blocks") and hasattr(a, "chunks")


def is_dask_frame(a) -> bool:
    """A dask DataFrame or Series (its rows are on the workers, their count unknown)."""
    return hasattr(a, "dask") and hasattr(a, "map_partitions") and not hasattr(a, "chunks")


def columns_of(X):
    """What scikit-learn reads feature names from: a dask DataFrame's columns as an empty
    pandas DataFrame (scikit-learn recognises pandas, not dask, frames), anything else as is."""
    if is_dask_frame(X) and hasattr(X, "columns"):
        import pandas as pd
        return pd.DataFrame(columns=X.columns)
    return X


def compute(collection, timeout: float, what: str):
    """A dask collection's value here: on the current client's cluster (inside a Dask task
    through ``worker_client``, which secedes from the worker's thread pool while it waits),
    else with dask's local scheduler. A wait longer than ``timeout`` seconds raises a
    TimeoutError naming ``what`` it waited for."""
    try:
        from distributed import get_client, worker_client
        from distributed.worker import get_worker
    except ImportError:  # dask without distributed
        return collection.compute()
    try:
        get_worker()
        in_task = True
    except ValueError:
        in_task = False
    try:
        if in_task:
            with worker_client() as client:
                return client.compute(collection).result(timeout)
        try:
            client = get_client()
        except ValueError:
            return collection.compute(scheduler="threads")
        return client.compute(collection).result(timeout)
    except TimeoutError:
        raise TimeoutError(f"waited {timeout:g} s for {what} from the Dask cluster; is it busy or "
                           "are its workers gone?") from None


def frame_as_array(a, timeout: float, name: str):
    """A dask DataFrame or Series as a dask array with known chunk sizes: the partitions'
    row counts are computed where they are (:func:`compute`; only the counts come back); a
    non-numeric feature column is refused by name."""
    if name == "X":
        text = [c for c, t in a.dtypes.items() if getattr(t, "kind", "O") not in "biuf"]
        if text:
            raise ValueError(f"X's column {text[0]!r} is not numeric ({a.dtypes[text[0]]}); encode it as numbers")
    lengths = [int(n) for n in compute(a.map_partitions(len), timeout, f"the row counts of {name}'s partitions")]
    return a.to_dask_array(lengths=lengths)


def as_numpy(a, timeout: float, name: str):
    """``a`` as numpy: a dask array's blocks computed (:func:`compute`), anything else as is."""
    return compute(a, timeout, f"the rows of {name}") if is_dask(a) else a


def check_X(X, name: str = "X", rows: bool = False):
    """Features as a finite numeric 2-D ndarray, or a dask array checked by its metadata.

    Parameters
    ----------
    X : array-like or dask array, shape (n_samples, n_features)
        Object arrays are converted to float64 (a TypeError names a non-number);
        sparse, complex, 1-D, empty and non-finite input is refused with a ValueError.
    rows : bool
        Accept rows of any shape, ``(n_samples, *row_shape)`` (an estimator given a module).

    Returns
    -------
    ndarray or dask array, shape (n_samples, n_features)
    """
    if X is None:
        raise ValueError(f"{name} is None; expected an array of shape (n_samples, n_features)")
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise ValueError(f"sparse input is not supported: {name} is a {type(X).__name__} of shape "
                         f"{X.shape}; convert it with {name}.toarray()")
    if not is_dask(X):
        X = np.asarray(X)
        X = X.astype(np.float64) if X.dtype == object else X
    if X.ndim != 2 and not (rows and X.ndim > 2):
        raise ValueError(f"Expected a 2D array, got {name} of shape {tuple(X.shape)}. Reshape your data "
                         f"with {name}.reshape(-1, 1) for a single feature or {name}.reshape(1, -1) "
                         "for a single sample.")
    if any(isinstance(d, float) and math.isnan(d) for d in X.shape):
        raise ValueError(f"{name} has unknown chunk sizes {X.shape}; call {name}.compute_chunk_sizes() first")
    if np.dtype(X.dtype).kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
    for axis, what in ((0, "sample"), (1, "feature")):
        if X.shape[axis] == 0:
            raise ValueError(f"Found array with 0 {what}(s) (shape={tuple(X.shape)}) while a "
                             "minimum of 1 is required.")
    return validation.check_X_meta(X, name, rows=rows) if is_dask(X) else validation.check_X(X, name, rows=rows)


def check_y_labels(y, n_rows: int, estimator: str):
    """Class labels, shape (n_rows,); a column vector is flattened with a warning, as sklearn does."""
    if y is None:
        raise ValueError(f"{estimator} requires y to be passed, but the target y is None.")
    if not is_dask(y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change "
                          "the shape of y to (n_samples, ), for example using ravel().",
                          DataConversionWarning, stacklevel=5)
            y = y.ravel()
        if y.ndim == 2 and y.shape[0] == n_rows and y.shape[1] > 1:  # multilabel: checked by the classifier
            return y
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(f"y should be a 1d array with one label per row of X ({n_rows}), "
                         f"got an array of shape {y.shape} instead.")
    return y


def distinct_labels(labels: np.ndarray) -> np.ndarray:
    """The sorted distinct labels; continuous, complex or unsortable ones are refused."""
    if labels.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: y has dtype {labels.dtype}")
    if labels.dtype.kind == "f":
        validation.check_finite(labels, "y")
        fractional = labels[labels != np.round(labels)]
        if fractional.size:
            raise ValueError(f"Unknown label type: continuous (y holds values such as {fractional[0]!r}); "
                             "use a regressor for such targets")
    try:
        return np.unique(labels)
    except TypeError as exc:
        raise ValueError(f"Unknown label type: labels that cannot be sorted ({exc})") from None


def check_y_targets(y, n_rows: int, estimator: str):
    """Regression targets, shape (n_rows, n_outputs): numpy checked, dask by its shape."""
    if y is None:
        raise ValueError(f"{estimator} requires y to be passed, but the target y is None.")
    if is_dask(y):
        if y.ndim not in (1, 2) or y.shape[0] != n_rows:
            raise ValueError(f"y must be 1-D or 2-D with one row per row of X ({n_rows}); got shape {y.shape}")
        return y.reshape(-1, 1) if y.ndim == 1 else y
    y = np.asarray(y)
    if y.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: y has dtype {y.dtype}")
    return validation.check_y(y.astype(np.float64) if y.dtype == object else y, n_rows, "regression")


def n_features_message(n: int, estimator, expected: int) -> str:
    return (f"X has {n} features, but {type(estimator).__name__} is expecting {expected} "
            "features as input.")


def seed_of(random_state) -> int:
    """An integer seed from None, an int, a RandomState or a Generator (sklearn's meaning)."""
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    raise ValueError(f"random_state must be None, an int, a RandomState or a Generator, got {random_state!r}")


def rows_message(estimator, shape: tuple, fitted: tuple) -> str:
    """X's rows are not those the estimator was fitted on: scikit-learn's words for tables."""
    if len(shape) == len(fitted) == 1:
        return n_features_message(shape[0], estimator, fitted[0])
    return f"X has rows of shape {shape}; {type(estimator).__name__} was fitted on rows of shape {fitted}"


def refuse_inapplicable(strategy: str, batch_size, extra: dict, size: str) -> None:
    """What does not apply to ``strategy`` among ``strategy_params`` (``extra``) and
    ``batch_size`` is refused by name (:mod:`ppt_dask.core.applicability`); ``size`` names the
    strategy's parameter that ``batch_size`` sets."""
    if strategy not in applicability.STRATEGIES:
        return  # choose.make names the choices
    for key in extra:
        if key == "solver":
            raise ValueError("strategy_params['solver'] is the estimator's solver parameter: give solver=...")
        if key not in applicability.STRATEGY_OWN:
            raise ValueError(f"strategy_params[{key!r}] is not a parameter of a strategy; "
                             f"they are {', '.join(applicability.STRATEGY_OWN)}")
        if key == size and batch_size != "auto":
            raise ValueError(f"strategy_params[{key!r}] and batch_size={batch_size!r} both set "
                             "the size of a block: give one")
    applicability.refuse(strategy, {k: v for k, v in extra.items() if k != size},
                         spell=lambda k: f"strategy_params[{k!r}]")
    if strategy == "epoch" and batch_size != "auto":
        raise ValueError(f"batch_size={batch_size!r} applies to strategy block, ppt, average, "
                         "local, async, not to strategy epoch (each update sees the whole set)")
