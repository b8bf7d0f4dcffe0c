"""The model protocol: what the engine needs from a network, written down once.

ppt_dask trains any object that follows :class:`Network`. :class:`ppt_dask.MLP` is one
(numpy, this package's own); :class:`ppt_dask.TorchNet` turns a PyTorch module into one
(:mod:`ppt_dask.nets.torchnet`); a model of your own is a third. The engine, the strategies,
the stopping rule, the breakdown, checkpoints, model files and the run-time model use only
what is listed here, through the helpers below where a member is optional.

A network holds no weights: they are one flat vector ``params`` of ``n_params`` entries of
``dtype``, and every method is a pure function of ``(params, rows)``. Gradients and losses
are **sums** over rows, never means, so the sums of the shards, added along the fixed tree,
are the sums over the whole block, whatever the number of workers; the optimizer divides by
the number of rows once (:func:`ppt_dask.core.optimizers.sgd_step`).

Pure numpy: no dask import.

Examples
--------
A logistic regression in a few lines is a network::

    class LogReg:
        dtype, task, n_outputs = "float64", "binary", 1

        def __init__(self, n_features):
            self.row_shape, self.n_params = (n_features,), n_features + 1

        def init_params(self, seed):
            return np.random.default_rng(seed).normal(0, 0.01, self.n_params)

        def _p(self, params, X):
            return 1 / (1 + np.exp(-(X @ params[:-1] + params[-1])))

        def stats(self, params, X, y):
            p = np.clip(self._p(params, X), 1e-12, 1 - 1e-12)
            loss = -np.sum(y * np.log(p) + (1 - y) * np.log(1 - p))
            return np.array([loss, np.count_nonzero((p > 0.5) != (y > 0.5)), len(X)], float)

        def loss_grad_stats(self, params, X, y):
            r = self._p(params, X) - y
            return np.append(X.T @ r, r.sum()), self.stats(params, X, y)

        def predict(self, params, X):
            return (self._p(params, X) > 0.5).astype(np.int64)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from ppt_dask.core import tree
from ppt_dask.core.validation import TASKS

__all__ = ["Network", "REQUIRED", "STACK_ROWS", "check_network", "describe", "label", "for_rows", "one_pass", "passes",
           "shard_sums", "weight_mask"]

# Blocks of at most this many rows are stacked into one pass (shard_sums, one_pass); larger ones
# run a pass each, whose products are large enough already. MNIST 784-64-64-10 float32, 8 blocks,
# one thread, the workers' malloc settings (2026-11-29, CPU time, medians of 7): a pass per block
# against stacked / concatenated, 25 rows 1.47 / 0.89 / 0.72 ms, 100 rows 3.65 / 3.17 / 2.90 ms,
# 200 rows 6.46 / 6.21 / 6.23 ms, 400 rows 12.7 / 12.7 / 12.7 ms, 800 rows 23.8 / 25.1 / 24.8 ms
# (the copies of the stacking start to cost more than the small products did).
STACK_ROWS = 256


@runtime_checkable
class Network(Protocol):
    """What ppt_dask needs from a network (implement these; no base class to inherit).

    Attributes
    ----------
    dtype : {"float32", "float64"}
        The dtype of ``params``, of gradients and of the rows the shards hold
        (``enter_data(..., dtype=net.dtype)``).
    n_params : int
        The length of the flat parameter vector.
    row_shape : tuple of int
        The shape of one input row: ``(n_features,)`` for a table, ``(1, 28, 28)`` for an
        MNIST image; the shards hold ``X`` of shape ``(n, *row_shape)``. ``None`` for a
        network that takes rows of any shape: it then needs ``with_row_shape`` (below).
    n_outputs : int
        Outputs per row: classes for "classification", columns of the targets otherwise.
    task : {"classification", "binary", "multilabel", "regression"}
        What the targets are: integer labels in ``[0, n_outputs)`` (or one-hot rows),
        0/1 labels of one output, 0/1 rows, or real values.

    Methods
    -------
    init_params(seed) -> ndarray, shape (n_params,)
        Initial weights; the same seed gives the same bits (a restarted try uses
        ``seed + try``).
    loss_grad_stats(params, X, Y) -> (grad_sum, stats)
        For rows ``X`` of shape ``(n, *row_shape)`` and their targets ``Y``:
        ``grad_sum``, shape (n_params,), the gradient of the loss summed over the n rows
        (a new array, or one the caller may overwrite), and ``stats``, float64 of shape
        (3,): ``[loss_sum, n_wrong, n]``, the summed loss, the rows counted wrong and n.
        The training hot path; it may run in a worker thread, many at once.
    stats(params, X, Y) -> ndarray, shape (3,)
        ``[loss_sum, n_wrong, n]`` without gradients (the training-set and test-set checks).
    predict(params, X) -> ndarray
        Class indices 0..n_outputs-1 (classification), 0/1 (binary, multilabel: shape
        (n,) for one output, else (n, n_outputs)) or values (regression, the same shapes).

    Optional members (the helpers of this module stand in where they are missing):
    ``loss_grad_stats_shards(params, blocks)`` (several blocks of rows with the same number of
    rows each, in one pass: ``(grad_sums, stats)`` of shapes (S, n_params) and (S, 3), row
    ``i`` bitwise ``loss_grad_stats(params, *blocks[i])``; default: one call per block, see
    :func:`shard_sums`), ``predict_proba(params, X)`` (shape (n, n_outputs)), ``weight_mask()`` (1 where L2 applies,
    0 elsewhere; default: every parameter), ``passes(params, X, Y)`` (a function
    ``rows -> (grad_sum, stats)`` for many small steps on the same rows; default: slices
    and :meth:`loss_grad_stats`), ``forward(params, X)`` (the raw outputs, timed by the
    run-time model), ``describe()`` (a dict of JSON values that identifies the network in
    a run's settings, its checkpoints and model files), ``with_row_shape(shape)`` (for
    ``row_shape=None``: the network fixed to rows of ``shape``; the trainer calls it with
    the shards' row shape).

    A network is sent to the workers by pickling (it travels in every task, so keep it
    small: weights belong in ``params``), and must compute the same bits wherever it runs
    for a seeded run to repeat its weights (``train``'s ``reproducible``).

    Examples
    --------
    A linear regression in numpy, half the squared error summed over the rows, is a
    network ``ppt.train`` takes:

    >>> import numpy as np
    >>> import ppt_dask as ppt
    >>> class Linear:
    ...     dtype, task, n_outputs = "float64", "regression", 1
    ...
    ...     def __init__(self, n_features):
    ...         self.row_shape, self.n_params = (n_features,), n_features + 1
    ...
    ...     def init_params(self, seed):
    ...         return np.random.default_rng(seed).normal(0.0, 0.1, self.n_params)
    ...
    ...     def predict(self, params, X):
    ...         return X @ params[:-1] + params[-1]
    ...
    ...     def stats(self, params, X, Y):
    ...         err = self.predict(params, X) - Y
    ...         return np.array([0.5 * err @ err, np.sum(np.abs(err) > 0.1), len(X)])
    ...
    ...     def loss_grad_stats(self, params, X, Y):
    ...         err = self.predict(params, X) - Y
    ...         return np.append(X.T @ err, err.sum()), self.stats(params, X, Y)
    >>> isinstance(Linear(3), ppt.Network)
    True
    """

    dtype: str
    n_params: int
    row_shape: tuple
    n_outputs: int
    task: str

    def init_params(self, seed) -> np.ndarray: ...

    def loss_grad_stats(self, params: np.ndarray, X: np.ndarray, Y) -> tuple[np.ndarray, np.ndarray]: ...

    def stats(self, params: np.ndarray, X: np.ndarray, Y) -> np.ndarray: ...

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray: ...


REQUIRED = ("dtype", "n_params", "row_shape", "n_outputs", "task",
            "init_params", "loss_grad_stats", "stats", "predict")


def check_network(net, name: str = "net"):
    """``net`` when it follows :class:`Network`, else a ValueError naming what it lacks."""
    missing = [m for m in REQUIRED if not hasattr(net, m)]
    if missing:
        raise ValueError(f"{name} must be a network (ppt.MLP, ppt.TorchNet or an object with "
                         f"{', '.join(REQUIRED)}); a {type(net).__name__} has no {', '.join(missing)}")
    if net.dtype not in ("float32", "float64"):
        raise ValueError(f"{name}.dtype must be 'float32' or 'float64', got {net.dtype!r}")
    if net.task not in TASKS:
        raise ValueError(f"{name}.task must be one of {TASKS}, got {net.task!r}")
    return net


def for_rows(net, row_shape: tuple):
    """The network for rows of ``row_shape``: ``net`` itself, or, when it takes rows of any
    shape (``row_shape`` None), ``net.with_row_shape(row_shape)``."""
    if getattr(net, "row_shape", ()) is None:
        return net.with_row_shape(tuple(row_shape))
    return net


def describe(net) -> dict:
    """What identifies ``net`` in a run's settings and checkpoints: ``net.describe()``, or
    its class, sizes and dtype. JSON values; ``"network"`` is the short name reports show."""
    own = getattr(net, "describe", None)
    if own is not None:
        return dict(own())
    return {"network": type(net).__name__, "n_params": int(net.n_params),
            "row_shape": list(net.row_shape), "n_outputs": int(net.n_outputs), "task": net.task,
            "dtype": str(net.dtype)}


def label(net) -> str:
    """A short name of ``net`` for reports: ``"784-64-64-10"`` for an MLP, a class name else."""
    shown = describe(net)["network"]
    return "-".join(map(str, shown)) if isinstance(shown, (list, tuple)) else str(shown)


def weight_mask(net) -> np.ndarray:
    """``net.weight_mask()``: 1 where L2 applies (weights), 0 elsewhere (biases); every
    parameter when the network does not say."""
    own = getattr(net, "weight_mask", None)
    return own() if own is not None else np.ones(net.n_params, dtype=net.dtype)


def passes(net, params: np.ndarray, X, Y) -> Callable:
    """``net.passes(params, X, Y)``, or a function ``rows -> loss_grad_stats(params, X[rows],
    Y[rows])`` that reads ``params`` at each call (a loop may update it in place)."""
    own = getattr(net, "passes", None)
    if own is not None:
        return own(params, X, Y)

    def one(rows) -> tuple[np.ndarray, np.ndarray]:
        return net.loss_grad_stats(params, X[rows], Y[rows])
    return one


def shard_sums(net, params: np.ndarray, blocks) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[net.loss_grad_stats(params, X, Y) for X, Y in blocks]``, bit for bit, in as few passes
    as ``net`` allows.

    Blocks of the same number of rows (at most :data:`STACK_ROWS`) go through
    ``net.loss_grad_stats_shards`` together where the network has it (the shards of a worker,
    whose shares of a round differ by at most one row: two passes at most).

    Parameters
    ----------
    net : a network of the model protocol (:class:`Network`)
    params : ndarray, shape (n_params,)
    blocks : sequence of (X, Y)
        Rows of shape (n_i, *row_shape) and their targets.

    Returns
    -------
    list of (ndarray, ndarray)
        Per block, its gradient sum (shape (n_params,)) and stats ``[loss_sum, n_wrong, n]``.
    """
    own = getattr(net, "loss_grad_stats_shards", None)
    if own is None or len(blocks) < 2 or max(len(X) for X, _ in blocks) > STACK_ROWS:
        return [net.loss_grad_stats(params, X, Y) for X, Y in blocks]
    out: list = [None] * len(blocks)
    for n in sorted({len(X) for X, _ in blocks}):
        group = [i for i, (X, _) in enumerate(blocks) if len(X) == n]
        if len(group) == 1:
            out[group[0]] = net.loss_grad_stats(params, *blocks[group[0]])
            continue
        grads, stats = own(params, [blocks[i] for i in group])
        for j, i in enumerate(group):
            out[i] = (grads[j], stats[j])
    return out


def one_pass(net, params: np.ndarray, blocks) -> tuple[np.ndarray, np.ndarray]:
    """The gradient sum and stats over all the rows of ``blocks`` (a worker's shards' rows of a
    round), in one pass where they are small.

    One ``loss_grad_stats`` over the rows concatenated while each block has at most
    :data:`STACK_ROWS` rows, else a pass per block, added left to right. The same blocks give
    the same bits; other groupings of the same rows give other roundings of the same sums.

    Parameters
    ----------
    net : a network of the model protocol (:class:`Network`)
    params : ndarray, shape (n_params,)
    blocks : sequence of (X, Y)
        Rows of shape (n_i, *row_shape) and their targets.

    Returns
    -------
    grad_sum : ndarray, shape (n_params,)
    stats : ndarray, shape (3,)
        ``[loss_sum, n_wrong, n]`` over all the rows.
    """
    if len(blocks) == 1:
        return net.loss_grad_stats(params, *blocks[0])
    if max(len(X) for X, _ in blocks) <= STACK_ROWS:
        return net.loss_grad_stats(params, np.concatenate([X for X, _ in blocks]),
                                   np.concatenate([np.asarray(Y) for _, Y in blocks]))
    return tree.combine([net.loss_grad_stats(params, X, Y) for X, Y in blocks])
