"""scikit-learn's estimator contract, without importing scikit-learn (a test extra only).

:class:`ContractMixin` gives ``get_params``/``set_params`` read from the ``__init__``
signature, as ``sklearn.base.BaseEstimator`` does, a repr showing the changed parameters,
``__sklearn_is_fitted__``, and scikit-learn ``Tags`` built only when scikit-learn asks for
them. The input checks raise with the wording that scikit-learn's common checks look for.
Errors and warnings are scikit-learn's own classes when scikit-learn is loaded, so code
that catches them works; else stand-ins with the same names and bases. Numpy only.
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
import warnings
from collections import defaultdict

import numpy as np

from ppt_dask.core import validation


class NotFittedError(ValueError, AttributeError):
    """predict, score ... called before fit."""


class DataConversionWarning(UserWarning):
    """The input was converted (a column vector y was flattened)."""


class ConvergenceWarning(UserWarning):
    """max_iter was reached before the tol rule stopped training, or training diverged."""


def sklearn_class(name: str, fallback: type) -> type:
    """scikit-learn's exception or warning class ``name`` if scikit-learn is loaded."""
    return getattr(sys.modules.get("sklearn.exceptions"), name, fallback)


def is_dask(a) -> bool:
    return hasattr(a, "dask") and hasattr(a, "map_blocks") and hasattr(a, "chunks")


def check_X(X, name: str = "X"):
    """Features as a finite numeric 2-D ndarray, or a dask array checked by its metadata.

    Parameters
    ----------
    X : array-like or dask array, shape (n_samples, n_features)
        Object arrays are converted to float64 (a TypeError names a non-number);
        sparse, complex, 1-D, empty and non-finite input is refused with a ValueError.

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
    if X.ndim != 2:
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
    return validation.check_X_meta(X, name) if is_dask(X) else validation.check_X(X, name)


def check_y_labels(y, n_rows: int, estimator: str):
    """Class labels, shape (n_rows,); a column vector is flattened with a warning, as sklearn does."""
    if y is None:
        raise ValueError(f"{estimator} requires y to be passed, but the target y is None.")
    if not is_dask(y):
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn("A column-vector y was passed when a 1d array was expected. Please change "
                          "the shape of y to (n_samples, ), for example using ravel().",
                          sklearn_class("DataConversionWarning", DataConversionWarning), stacklevel=5)
            y = y.ravel()
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


class ContractMixin:
    """Parameters from the ``__init__`` signature; the fitted state is ``params_``."""

    _estimator_kind = ""  # "classifier" or "regressor"
    _multi_output = False

    @classmethod
    def _get_param_names(cls) -> list[str]:
        params = inspect.signature(cls.__init__).parameters.values()
        return sorted(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict:
        """The constructor arguments (with ``deep``, also those of nested estimators)."""
        out = {}
        for key in self._get_param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params):
        """Set constructor arguments (``name=value`` or ``nested__name=value``); returns self."""
        valid, nested = self.get_params(deep=True), defaultdict(dict)
        for key, value in params.items():
            key, delim, sub_key = key.partition("__")
            if key not in valid:
                raise ValueError(f"Invalid parameter {key!r} for estimator {type(self).__name__}. "
                                 f"Valid parameters are: {self._get_param_names()!r}.")
            if delim:
                nested[key][sub_key] = value
            else:
                setattr(self, key, value)
                valid[key] = value
        for key, sub_params in nested.items():
            valid[key].set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={getattr(self, k)!r}" for k in self._get_param_names()
                   if repr(getattr(self, k)) != repr(defaults.get(k))]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "params_")

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "params_"):
            raise sklearn_class("NotFittedError", NotFittedError)(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator.")

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        kind = self._estimator_kind
        return Tags(estimator_type=kind, input_tags=InputTags(),
                    target_tags=TargetTags(required=True, multi_output=self._multi_output),
                    classifier_tags=ClassifierTags() if kind == "classifier" else None,
                    regressor_tags=RegressorTags() if kind == "regressor" else None)
