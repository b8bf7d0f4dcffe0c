"""Input checks that run on the head before any cluster work.

Every check raises ``ValueError`` whose message names the offending value and, for
arrays, the position of the first bad entry, so that a user sees what to fix instead of
a hang or a NaN loss three rounds into a distributed run.  Good input is returned
unchanged (the same object) wherever no conversion is needed.

Pure numpy and the standard library: importing this module does not import dask, so
the checks can also run inside worker tasks.

>>> import numpy as np
>>> check_X(np.array([[0.0, np.nan]]))
Traceback (most recent call last):
...
ValueError: X has 1 non-finite entry (NaN or inf); the first is X[0, 1] = nan
>>> check_n_shards(5, n_rows=3)
Traceback (most recent call last):
...
ValueError: more shards (5) than rows (3): every shard needs at least one row
"""

from __future__ import annotations

import numbers

import numpy as np

TASKS = ("classification", "binary", "regression", "multilabel")

# dtype kinds accepted as numeric input: signed/unsigned integers and reals.
# Booleans are accepted and cast to float64; complex, object, strings, dates are refused.
_NUMERIC_KINDS = "iuf"


# --------------------------------------------------------------------------- scalars


def error_line(exc) -> str:
    """An exception's first line (its type's name when it says nothing): what a one-line error
    quotes of a library's longer message."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _is_real(value) -> bool:
    """True for int/float (Python or numpy) but not for bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _show(value) -> str:
    """repr without numpy's type wrapper: np.float64(0.5) shows as 0.5."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _check_finite_number(name: str, value, requirement: str):
    if not _is_real(value):
        raise ValueError(
            f"{name} must be {requirement}, got {_show(value)} ({type(value).__name__})"
        )
    if not np.isfinite(value):
        raise ValueError(f"{name} must be {requirement}, got {_show(value)}")


def check_positive(name: str, value):
    """Return `value` if it is a finite real number > 0, else raise ValueError.

    >>> check_positive("learning_rate", 0.1)
    0.1
    >>> check_positive("learning_rate", 0)
    Traceback (most recent call last):
    ...
    ValueError: learning_rate must be a positive number, got 0
    """
    _check_finite_number(name, value, "a positive number")
    if not value > 0:
        raise ValueError(f"{name} must be a positive number, got {_show(value)}")
    return value


def check_nonneg(name: str, value):
    """Return `value` if it is a finite real number >= 0, else raise ValueError."""
    _check_finite_number(name, value, "a non-negative number")
    if not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {_show(value)}")
    return value


def check_int_at_least(name: str, value, minimum: int) -> int:
    """Return `value` as an int if it is an integer >= `minimum`, else raise ValueError.

    Floats are refused even when integral (``3.0``): a float where a count is expected
    is usually a mistake upstream.  Booleans are refused too.

    >>> check_int_at_least("n_workers", 2, 1)
    2
    >>> check_int_at_least("n_workers", 2.5, 1)
    Traceback (most recent call last):
    ...
    ValueError: n_workers must be an integer >= 1, got 2.5 (float)
    """
    requirement = f"an integer >= {minimum}"
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise ValueError(
            f"{name} must be {requirement}, got {_show(value)} ({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be {requirement}, got {_show(value)}")
    return int(value)


def check_int_array_at_least(name: str, value, minimum: int) -> np.ndarray:
    """``value`` (a number or an array of them) as int64 if every entry is an integer >=
    ``minimum`` (integral floats pass: a grid of block sizes from numpy); else a ValueError
    naming ``name`` and the first bad entry."""
    arr = np.asarray(value)
    shown = value
    if arr.size > 0 and arr.dtype.kind in "iuf":
        flat = arr.ravel().astype(float)
        bad = ~np.isfinite(flat) | (flat != np.floor(flat)) | (flat < minimum)
        if not bad.any():
            return arr.astype(np.int64)
        shown = arr.ravel()[bad][0].item()
    raise ValueError(f"{name} must be an integer >= {minimum}, got {shown!r}")


DTYPES = ("float32", "float64")  # what the network, the shards and the estimators compute in


def check_dtype(name: str, value, allow_none: bool = False):
    """``value`` if it is one of :data:`ppt_dask.core.validation.DTYPES` (or None when ``allow_none``), else a
    ValueError naming ``name`` and the choices."""
    if (value is None and allow_none) or (isinstance(value, str) and value in DTYPES):
        return value
    choices = ["None", *map(repr, DTYPES)] if allow_none else list(map(repr, DTYPES))
    raise ValueError(f"{name} must be {', '.join(choices[:-1])} or {choices[-1]}, got {value!r}")


def check_n_shards(n_shards, n_rows: int) -> int:
    """Return `n_shards` as an int if 1 <= n_shards <= n_rows, else raise ValueError."""
    n_shards = check_int_at_least("n_shards", n_shards, 1)
    if n_shards > n_rows:
        raise ValueError(
            f"more shards ({n_shards}) than rows ({n_rows}): "
            "every shard needs at least one row"
        )
    return n_shards


# --------------------------------------------------------------------------- arrays


def _as_numeric_array(a, name: str) -> np.ndarray:
    """np.asarray with a readable error; bool is cast to float64, non-numbers refused."""
    try:
        arr = np.asarray(a)
    except (ValueError, TypeError) as err:  # ragged nested lists, for example
        raise ValueError(f"{name} could not be converted to an array: {err}") from None
    if arr.dtype.kind == "b":
        return arr.astype(np.float64)
    if arr.dtype.kind not in _NUMERIC_KINDS:
        raise ValueError(
            f"{name} must hold integer or real numbers; got dtype {arr.dtype} "
            f"(convert it first, e.g. {name}.astype(float))"
        )
    return arr


def _position(flat_index: int, shape: tuple) -> str:
    return ", ".join(str(int(i)) for i in np.unravel_index(flat_index, shape))


def check_finite(a: np.ndarray, name: str = "X") -> np.ndarray:
    """Raise ValueError if the numeric array `a` holds NaN or inf; else return it.

    The message gives the number of bad entries and the first one, e.g.
    ``X has 3 non-finite entries (NaN or inf); the first is X[2, 1] = inf``.
    Integer arrays are always finite and pass without a scan.
    """
    if a.dtype.kind != "f":
        return a
    bad = ~np.isfinite(a)
    if bad.any():
        count = int(bad.sum())
        first = int(np.flatnonzero(bad)[0])
        entry = "entry" if count == 1 else "entries"
        raise ValueError(
            f"{name} has {count} non-finite {entry} (NaN or inf); the first is "
            f"{name}[{_position(first, a.shape)}] = {_show(a.flat[first])}"
        )
    return a


def check_X_meta(X, name: str = "X", allow_empty: bool = False, rows: bool = False):
    """Check only shape and dtype of `X`, without reading its values.

    For lazy arrays (dask) whose values must not be pulled to the head: anything with
    ``ndim``, ``shape`` and ``dtype`` attributes.  Unknown chunk sizes (NaN in the
    shape) are not treated as empty.  With ``rows``, X may hold rows of any shape,
    ``(n_samples, *row_shape)`` (images as ``(n, 1, 28, 28)``); else it must be 2-D.
    Returns `X` unchanged.
    """
    if rows and X.ndim < 2:
        raise ValueError(f"{name} must have a row per sample, shape (n_samples, *row_shape) with at least "
                         f"2 dimensions; got shape {tuple(X.shape)} (use {name}.reshape(-1, 1) for a "
                         "single feature)")
    if not rows and X.ndim != 2:
        hint = f" (use {name}.reshape(-1, 1) for a single feature)" if X.ndim == 1 else ""
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_features); got shape {tuple(X.shape)}{hint}"
        )
    kind = np.dtype(X.dtype).kind
    if kind not in _NUMERIC_KINDS + "b":
        raise ValueError(f"{name} must hold integer or real numbers; got dtype {X.dtype}")
    if not allow_empty and any(d == 0 for d in X.shape):
        raise ValueError(f"{name} is empty: shape {tuple(X.shape)}")
    return X


def check_X(X, name: str = "X", allow_empty: bool = False, rows: bool = False) -> np.ndarray:
    """Check a feature matrix: numeric, 2-D (or rows of any shape), non-empty, finite.

    Parameters
    ----------
    X : array-like, shape (n_samples, n_features)
        Integers and reals are accepted as they are; booleans are cast to float64;
        object, string, complex and date dtypes are refused.
    name : str
        Name used in error messages.
    allow_empty : bool
        Accept zero rows or zero columns.
    rows : bool
        Accept rows of any shape, ``(n_samples, *row_shape)``, not only 2-D X.

    Returns
    -------
    X : np.ndarray, shape (n_samples, n_features)
        The input itself when it is already a numeric ndarray.
    """
    arr = _as_numeric_array(X, name)
    check_X_meta(arr, name, allow_empty, rows)
    return check_finite(arr, name)


def _labels_1d(y: np.ndarray, name: str, task: str) -> np.ndarray:
    if y.ndim == 2 and y.shape[1] == 1:  # a column vector is accepted for labels
        return y.ravel()
    if y.ndim != 1:
        raise ValueError(
            f"{name} must be 1-D labels for task {task!r}; got shape {tuple(y.shape)}"
        )
    return y


def _first_bad(y: np.ndarray, bad: np.ndarray, name: str, what: str) -> None:
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{name}[{i}] = {_show(y[i])} is not {what} ({int(bad.sum())} bad labels in all)"
        )


def check_y(y, n_rows: int, task: str, n_outputs: int | None = None,
            name: str = "y") -> np.ndarray:
    """Check targets against the task and the number of rows of X.

    Parameters
    ----------
    y : array-like
        "classification": labels, shape (n_rows,), integer-valued in [0, n_outputs).
        "binary": labels, shape (n_rows,), in {0, 1}.
        "regression": targets, shape (n_rows, n_outputs); a 1-D y becomes (n_rows, 1).
        "multilabel": targets, shape (n_rows, n_outputs), in [0, 1].
        For the label tasks a column vector (n_rows, 1) is accepted and flattened.
    n_rows : int
        Number of rows of X.
    task : str
        One of "classification", "binary", "regression", "multilabel".
    n_outputs : int, optional
        Number of classes (classification) or target columns (regression, multilabel).

    Returns
    -------
    y : np.ndarray
        int64 labels, shape (n_rows,), for classification and binary; float targets,
        shape (n_rows, n_outputs), otherwise.  The input itself when nothing needs
        converting.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; valid tasks: {', '.join(TASKS)}")
    arr = _as_numeric_array(y, name)
    if arr.ndim == 0:
        raise ValueError(f"{name} must be an array with one entry per row; got a scalar")
    if arr.shape[0] != n_rows:
        raise ValueError(f"{name} has {arr.shape[0]} rows but X has {n_rows}")
    check_finite(arr, name)

    if task in ("classification", "binary"):
        arr = _labels_1d(arr, name, task)
        _first_bad(arr, arr != np.round(arr), name, "an integer label")
        if task == "binary":
            _first_bad(arr, (arr != 0) & (arr != 1), name, "0 or 1 (task 'binary')")
        elif n_outputs is not None:
            _first_bad(arr, (arr < 0) | (arr >= n_outputs), name,
                       f"a class label in [0, {n_outputs})")
        else:
            _first_bad(arr, arr < 0, name, "a class label >= 0")
        return arr if arr.dtype == np.int64 else arr.astype(np.int64)

    if arr.ndim == 1 and task == "regression":
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D (n_samples, n_outputs) for task {task!r}; "
            f"got shape {tuple(arr.shape)}"
        )
    if n_outputs is not None and arr.shape[1] != n_outputs:
        raise ValueError(
            f"{name} has {arr.shape[1]} columns but the network has {n_outputs} outputs"
        )
    if task == "multilabel":
        bad = (arr < 0) | (arr > 1)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{name}[{_position(first, arr.shape)}] = {_show(arr.flat[first])} is not a "
                f"target in [0, 1] (task 'multilabel')"
            )
    return arr if arr.dtype.kind == "f" else arr.astype(np.float64)


def check_network_fits(net, shards) -> None:
    """The network (of the model protocol, :mod:`ppt_dask.core.model`) must fit the data (a
    ShardSet's summary: ``row_shape``, ``dtype`` and the per-shard ``info``): raised before
    any training work."""
    mine, theirs = tuple(net.row_shape), tuple(shards.row_shape)
    if mine != theirs and len(mine) == len(theirs) == 1:
        raise ValueError(f"the network takes {mine[0]} inputs but the data has {theirs[0]} features")
    if mine != theirs:
        raise ValueError(f"the network takes rows of shape {mine} but the data has rows of shape {theirs}")
    if net.dtype != shards.dtype:
        raise ValueError(f"the network is {net.dtype} but the shards hold {shards.dtype} (enter_data(dtype=...))")
    y_shape = shards.info[0].y_shape
    if getattr(net, "weighted", False):  # the last column holds the weights: the network checks the rest
        columns = (2, net.n_outputs + 1) if net.task == "classification" else (net.n_outputs + 1,)
        if len(y_shape) != 1 or y_shape[0] not in columns:
            raise ValueError(f"a weighted network's targets have the rows' weights as one more column: "
                             f"{' or '.join(map(str, columns))} columns, got targets of shape {y_shape}")
        return
    lo = min(i.y_min for i in shards.info)
    hi = max(i.y_max for i in shards.info)
    k = net.n_outputs
    if y_shape == () and net.task == "classification":
        if not all(i.y_integral for i in shards.info) or lo < 0 or hi >= k:
            raise ValueError(f"labels must be integers in [0, {k}) for {k} "
                             f"classes; the data has labels in [{lo:g}, {hi:g}]")
    elif y_shape == () and k != 1:
        raise ValueError(f"1-D targets need a network with 1 output, not {k}")
    elif y_shape not in ((), (k,)):
        raise ValueError(f"targets have {y_shape[0] if y_shape else 1} columns; the network has {k} outputs")
    bounded = net.task in ("binary", "multilabel") and getattr(net, "loss", None) != "mse"
    if bounded and (lo < 0 or hi > 1):
        raise ValueError(f"{net.task} targets (cross-entropy) must lie in [0, 1]; the data has [{lo:g}, {hi:g}]")


def check_test_set(net, test) -> None:
    """A test set ``(X, y)`` (or test rows placed on the workers, a ``ShardSet``) must hold rows
    of the network's shape, one target each (raised before any training work, not at the
    first check)."""
    if test is None:
        return
    if not isinstance(test, (tuple, list)) and hasattr(test, "row_shape"):  # test rows placed on the workers
        if tuple(test.row_shape) != tuple(net.row_shape):
            raise ValueError(f"the test rows have shape {tuple(test.row_shape)}; the network takes "
                             f"{tuple(net.row_shape)}")
        return
    X, y = test
    shape = tuple(np.shape(X))
    if shape[1:] != tuple(net.row_shape):
        raise ValueError(f"the test set has rows of shape {shape[1:]}; the network takes {tuple(net.row_shape)}")
    if len(y) != shape[0]:
        raise ValueError(f"the test set has {shape[0]} rows but {len(y)} targets")
