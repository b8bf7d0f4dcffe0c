"""What a pass of :class:`ppt_dask.core.network.MLP` takes: its rows and targets, checked and stacked.

Every pass over one block or several (``loss_grad_stats``, the batched per-shard pass, ``passes``)
checks its rows and targets here once for all its blocks: the rows in the network's dtype,
aligned and in C order (every block's products are then the same BLAS calls, stacked or not);
the targets as integer labels or one row of ``n_outputs`` values; for a ``weighted`` network the
rows' weights split off the targets' last column. Functions of the network's fields, numpy only.
"""

from __future__ import annotations

import numpy as np


def check_rows(net, X) -> np.ndarray:
    """``X`` as ``net``'s rows (n, n_inputs) of its dtype; no copy when dtype, alignment and C
    order fit (C order: every block's products are then the same BLAS calls, whether it is
    stacked with others or not)."""
    X = np.require(X, dtype=net.dtype, requirements=("A", "C"))
    if X.ndim != 2 or X.shape[1] != net.n_inputs:
        raise ValueError(f"X must have shape (n, {net.n_inputs}), got {X.shape}")
    return X


def stack_rows(net, blocks) -> np.ndarray:
    """The blocks' rows checked and stacked: shape (S, n, n_inputs) (a view for one block)."""
    Xs = [check_rows(net, X) for X, _ in blocks]
    if not Xs:
        raise ValueError("blocks must hold at least one (X, Y) pair")
    if any(len(X) != len(Xs[0]) for X in Xs):
        raise ValueError(f"every block must have the same number of rows, got {[len(X) for X in Xs]}")
    return Xs[0][None] if len(Xs) == 1 else np.stack(Xs)


def targets_and_weights(net, Ys: list, n: int) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`check_targets` of the blocks' targets and, for a ``weighted`` network, the rows'
    weights split off their last column: (S, n) of ``net.dtype`` (None unweighted)."""
    if not net.weighted:
        return check_targets(net, Ys, n), None
    Ys = [np.asarray(Y) for Y in Ys]
    for Y in Ys:
        if Y.ndim != 2 or Y.shape[1] < 2:
            raise ValueError(f"a weighted network's Y has the targets and then the rows' weights as its "
                             f"last column; got shape {Y.shape}")
    labels = net.output == "softmax" and Ys[0].shape[1] == 2
    target = check_targets(net, [Y[:, 0] if labels else Y[:, :-1] for Y in Ys], n)
    return target, np.stack([Y[:, -1] for Y in Ys]).astype(net.dtype)


def check_targets(net, Ys: list, n: int) -> np.ndarray:
    """Every block's targets (n rows each), stacked: (S, n) integer labels (softmax) or
    (S, n, n_outputs) of ``net.dtype``; checked once for all blocks."""
    Ys = [np.asarray(Y) for Y in Ys]
    for Y in Ys:
        if Y.ndim not in (1, 2) or (Y.ndim == 1 and net.output != "softmax" and net.n_outputs != 1) or (
                Y.ndim == 2 and Y.shape[1] != net.n_outputs):
            one_d = " or (n,)" if net.output == "softmax" or net.n_outputs == 1 else ""
            raise ValueError(f"Y must have shape (n, {net.n_outputs}){one_d}, got {Y.shape}")
        if len(Y) != n:
            raise ValueError(f"Y has {len(Y)} rows but X has {n}")
    Y = Ys[0][None] if len(Ys) == 1 else np.stack(Ys)
    if Y.ndim == 2 and net.output == "softmax":
        return check_labels(net, Y)
    if Y.ndim == 2:
        return Y.astype(net.dtype, copy=False)[..., None]
    return Y.astype(net.dtype, copy=False)


def check_labels(net, y: np.ndarray) -> np.ndarray:
    """Class labels as integers in ``0..net.n_outputs - 1`` (bool and whole floats taken)."""
    if y.dtype.kind not in "iu":
        # bool labels must become 0/1 (a bool array would index as a mask)
        labels = y.astype(np.intp) if y.dtype.kind in "bf" else None
        if labels is None or not np.array_equal(labels, y):
            raise ValueError(f"1-D Y must hold integer class labels, got dtype {y.dtype}")
        y = labels
    if y.size and (y.min() < 0 or y.max() >= net.n_outputs):
        raise ValueError(f"class labels must lie in 0..{net.n_outputs - 1}, "
                         f"got values in {y.min()}..{y.max()}")
    return y
