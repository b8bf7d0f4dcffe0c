"""Tests for ppt_dask.core.validation: each bad input raises ValueError naming the value (and
the position of the first bad entry); good input comes back unchanged."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ppt_dask as ppt
from ppt_dask.core.validation import (
    check_finite,
    check_int_at_least,
    check_n_shards,
    check_nonneg,
    check_positive,
    check_X,
    check_X_meta,
    check_y,
)

# ------------------------------------------------------------------ X


def test_check_X_good_input_unchanged():
    for X in (np.ones((3, 2)), np.arange(6, dtype=np.int32).reshape(3, 2),
              np.ones((2, 2), dtype=np.float32)):
        assert check_X(X) is X
    np.testing.assert_array_equal(check_X([[1, 2], [3, 4]]), [[1, 2], [3, 4]])
    out = check_X(np.array([[True, False]]))
    assert out.dtype == np.float64 and out.tolist() == [[1.0, 0.0]]
    assert check_X(np.zeros((0, 3)), allow_empty=True).shape == (0, 3)


@pytest.mark.parametrize("bad,pattern", [
    (np.array([[np.nan, 1.0], [2.0, np.inf]]),
     r"X has 2 non-finite entries \(NaN or inf\); the first is X\[0, 0\] = nan"),
    (np.array([[0.0, 1.0], [2.0, -np.inf]]), r"1 non-finite entry .* X\[1, 1\] = -inf"),
    (np.ones(4), r"2-D .* got shape \(4,\) \(use X.reshape\(-1, 1\)"),
    (np.ones((2, 2, 2)), r"2-D .* \(2, 2, 2\)"),
    (np.zeros((0, 3)), r"X is empty: shape \(0, 3\)"),
    (np.zeros((3, 0)), r"X is empty: shape \(3, 0\)"),
    (np.array([["a", "b"]]), r"dtype <U1"),
    (np.array([[1, None]], dtype=object), r"dtype object"),
    (np.ones((1, 2), dtype=complex), r"dtype complex128"),
])
def test_check_X_rejects(bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_X(bad)


def test_check_X_names_argument_and_ragged():
    with pytest.raises(ValueError, match=r"X_test\[2, 0\]"):
        check_X(np.array([[1.0], [2.0], [np.nan]]), name="X_test")
    with pytest.raises(ValueError, match="could not be converted"):
        check_X([[1.0, 2.0], [3.0]])


def test_check_X_meta_reads_no_values():
    class Lazy:  # shape and dtype only, like a dask array; values would be NaN
        ndim, shape, dtype = 2, (10, 3), np.dtype(float)
    lazy = Lazy()
    assert check_X_meta(lazy) is lazy
    Lazy.shape = (float("nan"), 3)  # unknown chunk sizes are not "empty"
    assert check_X_meta(lazy) is lazy
    Lazy.dtype = np.dtype("U3")
    with pytest.raises(ValueError, match="U3"):
        check_X_meta(lazy)


@settings(database=None)  # keep no example database between runs
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_check_finite_reports_first_bad_entry(rows, cols, data):
    a = np.zeros((rows, cols))
    i = data.draw(st.integers(0, rows - 1))
    j = data.draw(st.integers(0, cols - 1))
    a[i, j] = np.nan
    a[rows - 1, cols - 1] = np.inf if (i, j) != (rows - 1, cols - 1) else np.nan
    with pytest.raises(ValueError, match=re.escape(f"the first is X[{i}, {j}] = nan")):
        check_finite(a)


# ------------------------------------------------------------------ y


def test_check_y_good_input_unchanged():
    labels = np.array([0, 3, 9])
    assert check_y(labels, 3, "classification", 10) is labels
    binary = np.array([0, 1, 1])
    assert check_y(binary, 3, "binary") is binary
    targets = np.zeros((3, 2))
    assert check_y(targets, 3, "regression", 2) is targets
    assert check_y(np.eye(3), 3, "multilabel", 3).shape == (3, 3)
    as_float = check_y(np.array([1.0, 0.0]), 2, "classification", 2)
    assert as_float.dtype == np.int64 and as_float.tolist() == [1, 0]
    assert check_y(np.array([[1], [0]]), 2, "binary").tolist() == [1, 0]
    assert check_y(np.array([0.5, 1.5]), 2, "regression").shape == (2, 1)


@pytest.mark.parametrize("y,task,n_outputs,pattern", [
    (np.array([0, 1]), "classification", 10, r"y has 2 rows but X has 3"),
    (np.array([0, 12, 3]), "classification", 10,
     r"y\[1\] = 12 is not a class label in \[0, 10\)"),
    (np.array([0, 1, -1]), "classification", None, r"y\[2\] = -1 is not a class label"),
    (np.array([0.0, 1.5, 2.0]), "classification", 10, r"y\[1\] = 1.5 is not an integer"),
    (np.array([0, 1, 2]), "binary", None, r"y\[2\] = 2 is not 0 or 1"),
    (np.array([0.0, np.nan, 1.0]), "binary", None, r"y\[1\] = nan"),
    (np.array(["a", "b", "c"]), "classification", 3, r"dtype <U1"),
    (np.zeros((3, 2)), "classification", 3, r"1-D labels .* \(3, 2\)"),
    (np.zeros((3, 2)), "regression", 3, r"2 columns but the network has 3 outputs"),
    (np.zeros(3), "multilabel", 3, r"2-D .* got shape \(3,\)"),
    (np.array([[0, 1], [2, 0], [1, 1]]), "multilabel", 2, r"y\[1, 0\] = 2 is not a target"),
    (np.zeros(3), "ranking", None, r"unknown task 'ranking'"),
    (np.float64(1.0), "regression", None, r"scalar"),
])
def test_check_y_rejects(y, task, n_outputs, pattern):
    with pytest.raises(ValueError, match=pattern):
        check_y(y, 3, task, n_outputs)


# ------------------------------------------------------------------ scalars


def test_check_n_shards():
    assert check_n_shards(4, 10) == 4
    assert check_n_shards(np.int64(10), 10) == 10
    with pytest.raises(ValueError, match=r"more shards \(11\) than rows \(10\)"):
        check_n_shards(11, 10)
    for bad in (0, -1, 2.0, True, "4", None):
        with pytest.raises(ValueError, match=re.escape(f"got {bad!r}")):
            check_n_shards(bad, 10)


def test_scalar_helpers_accept():
    assert check_positive("lr", 0.1) == 0.1
    assert check_positive("lr", np.float32(2.0)) == 2.0
    assert check_nonneg("momentum", 0) == 0
    assert check_int_at_least("epochs", np.int32(3), 1) == 3


@pytest.mark.parametrize("check,value,shown", [
    (check_positive, 0, "0"), (check_positive, -1.5, "-1.5"),
    (check_positive, float("nan"), "nan"), (check_positive, float("inf"), "inf"),
    (check_positive, True, "True"), (check_positive, "0.1", "'0.1'"),
    (check_positive, None, "None"), (check_positive, np.float64("nan"), "nan"),
    (check_nonneg, -1e-9, "-1e-09"), (check_nonneg, float("-inf"), "-inf"),
    (check_nonneg, [1], "[1]"),
])
def test_scalar_helpers_reject(check, value, shown):
    with pytest.raises(ValueError, match=rf"^lr must be .*, got {re.escape(shown)}"):
        check("lr", value)


@pytest.mark.parametrize("value,shown", [(0, "0"), (2.0, "2.0"), (False, "False"),
                                          (float("nan"), "nan"), ("3", "'3'")])
def test_check_int_at_least_rejects(value, shown):
    with pytest.raises(ValueError,
                       match=rf"^epochs must be an integer >= 1, got {re.escape(shown)}"):
        check_int_at_least("epochs", value, 1)


@pytest.mark.parametrize("bad", ["float16", "int32", None, 3, np.float32])
def test_one_dtype_rule_for_network_shards_and_estimator(bad, threads_client):
    """The same choices, named the same way, wherever a dtype is taken."""
    from ppt_dask.core.validation import DTYPES

    with pytest.raises(ValueError, match="^dtype must be 'float32' or 'float64', got"):
        ppt.MLP((2, 3, 2), dtype=bad)
    with pytest.raises(ValueError, match="^dtype must be 'float32' or 'float64', got"):
        ppt.enter_data(threads_client, np.zeros((8, 2)), np.zeros(8), n_shards=2, dtype=bad)
    if bad is not None:  # None is the estimator's "the data's own"
        with pytest.raises(ValueError, match="^dtype must be None, 'float32' or 'float64', got"):
            ppt.PPTClassifier(dtype=bad, max_iter=1).fit(np.zeros((8, 2)), np.arange(8) % 2)
    for good in DTYPES:
        assert ppt.MLP((2, 3, 2), dtype=good).dtype == good
