"""Loss functions and the output-layer delta, as a string-keyed registry.

Every loss returns the **sum** over patterns, never the mean, so the values
computed on disjoint shards of the data add up to the value on the whole set.

``target`` is either

* a 1-D integer array of class labels, shape (n,), for a softmax output (the
  one-hot matrix is never built: the label entries are reached by integer
  indexing, as scikit-learn does), or
* a 2-D float array with the shape of ``out``, (n, n_outputs).

The sums are taken per *shard* of rows (:meth:`Loss.shard_values`): ``out`` of shape
(S, n, n_outputs) gives S sums, each over its own n rows, so a worker that evaluates all its
shards' rows at once gets each shard's sum bit for bit as if it had evaluated that shard
alone (every sum is the same reduction over the same n rows; the other shards' rows never
enter it). :meth:`Loss.value` is the one-shard case.

The output-layer delta ``dL/dz`` (``z`` the output pre-activation) is given for
every valid (output activation, loss) pair; the pairs are the keys of
``Loss.deltas``:

=========  ===============  ================================================
output     loss             dL/dz per pattern, with r = out - t
=========  ===============  ================================================
linear     mse              r
sigmoid    mse              r * out * (1 - out)
softmax    mse              out * (r - <r, out>)   (Jacobian-vector product)
sigmoid    cross_entropy    r
softmax    cross_entropy    r
=========  ===============  ================================================

linear + cross_entropy is not a valid pair (a linear output is not a probability).

Examples
--------
>>> import numpy as np
>>> out = np.array([[0.7, 0.2, 0.1]])
>>> round(LOSSES["cross_entropy"].value(out, np.array([0]), "softmax"), 4)  # -log 0.7
0.3567
>>> output_delta("cross_entropy", "softmax", out, np.array([0]))
array([[-0.3,  0.2,  0.1]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["Loss", "LOSSES", "check_pair", "count_wrong", "output_delta", "residual", "wrong_rows"]


@dataclass(frozen=True, eq=False)
class Loss:
    """One loss function and its output-layer deltas.

    Attributes
    ----------
    name : str
        The registry key.
    shard_values : callable ``shard_values(out, target, output, weights=None) -> ndarray``
        Per shard, the sum over its n patterns of the per-pattern loss: ``out`` has shape
        (S, n, n_outputs), ``target`` (S, n) labels or (S, n, n_outputs), ``output`` names
        the output activation; float64 of shape (S,). ``weights``, shape (S * n,), multiplies
        each pattern's loss before the sum (a weight of 2 counts the pattern twice).
    deltas : mapping output name -> callable ``delta(out, target) -> ndarray``
        ``dL/dz`` of shape (n, n_outputs), a new array; the keys are the
        output activations this loss may be paired with. Row by row: a block of
        several shards' rows may be passed as one (n, n_outputs) array.
    """

    name: str
    shard_values: Callable[..., np.ndarray]
    deltas: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]]

    def value(self, out: np.ndarray, target: np.ndarray, output: str) -> float:
        """The sum over the n patterns of ``out`` (shape (n, n_outputs)) of the per-pattern loss."""
        return float(self.shard_values(out[None], target[None], output)[0])


def residual(out: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Return ``out - t`` as a new array of shape (n, n_outputs).

    With integer labels ``t`` is the one-hot matrix, applied by subtracting 1 at
    the label entries instead of being built.
    """
    if target.ndim == 1:
        r = out.copy()
        r[np.arange(len(target)), target] -= 1
        return r
    return out - target


def _clip(p: np.ndarray) -> np.ndarray:
    # Keep log() finite, as scikit-learn's log_loss / binary_log_loss do.
    # (np.minimum of np.maximum: np.clip's values, NaN kept, at half its call overhead)
    eps = np.finfo(p.dtype).eps
    return np.minimum(np.maximum(p, eps), 1 - eps)


# ------------------------------------------------------------------ mean squared error

def _per_shard(terms: np.ndarray, n_shards: int, weights: np.ndarray | None = None) -> np.ndarray:
    """Each shard's sum of its ``terms`` (its rows' entries, contiguous), as float64: the
    same pairwise reduction over the same entries whatever ``n_shards`` is. With ``weights``
    (one per row, shape (S * n,)) each row's terms are multiplied by its weight first."""
    if weights is not None:
        terms = terms * weights.astype(terms.dtype, copy=False).reshape(len(weights), *(1,) * (terms.ndim - 1))
    return terms.reshape(n_shards, -1).sum(axis=1).astype(np.float64)


def _rows(out: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``out`` (S, n, k) and ``target`` as row blocks: (S * n, k), and (S * n,) labels or
    (S * n, k) (views where they are contiguous)."""
    rows = out.reshape(-1, out.shape[-1])
    return rows, (target.reshape(-1) if target.ndim == out.ndim - 1 else target.reshape(rows.shape))


def _mse_values(out: np.ndarray, target: np.ndarray, output: str, weights=None) -> np.ndarray:
    # 0.5 * sum over patterns and outputs of (out - t)**2
    r = residual(*_rows(out, target))
    r *= r
    return 0.5 * _per_shard(r, len(out), weights)


def _mse_delta_linear(out: np.ndarray, target: np.ndarray) -> np.ndarray:
    return residual(out, target)


def _mse_delta_sigmoid(out: np.ndarray, target: np.ndarray) -> np.ndarray:
    delta = residual(out, target)
    delta *= out
    delta *= 1 - out
    return delta


def _mse_delta_softmax(out: np.ndarray, target: np.ndarray) -> np.ndarray:
    # The softmax Jacobian is J = diag(p) - p p^T (symmetric), so the chain rule
    # dL/dz = J r = p * r - p <p, r> = p * (r - <p, r>), row by row.
    delta = residual(out, target)
    delta -= np.einsum("ij,ij->i", delta, out)[:, None]
    delta *= out
    return delta


# ------------------------------------------------------------------ cross-entropy

def _cross_entropy_values(out: np.ndarray, target: np.ndarray, output: str, weights=None) -> np.ndarray:
    rows, t = _rows(out, target)
    if output == "softmax":
        # categorical: -sum_i log p[i, label_i], or -sum t * log p for 2-D targets
        if t.ndim == 1:
            terms = np.log(_clip(rows[np.arange(len(t)), t]))
        else:
            terms = np.log(_clip(rows))
            terms *= t
        return -_per_shard(terms, len(out), weights)
    if output == "sigmoid":
        # binary, summed over the outputs: -sum t log p + (1 - t) log(1 - p)
        p = _clip(rows)
        terms = np.log(p)
        terms *= t
        terms += (1 - t) * np.log1p(-p)
        return -_per_shard(terms, len(out), weights)
    raise ValueError(_pair_message(output, "cross_entropy"))


def _cross_entropy_delta(out: np.ndarray, target: np.ndarray) -> np.ndarray:
    # Softmax + categorical and sigmoid + binary cross-entropy both give out - t:
    # the activation's derivative cancels against the loss's (Bishop 1995,
    # "Neural Networks for Pattern Recognition", ch. 6).
    return residual(out, target)


LOSSES: dict[str, Loss] = {
    "mse": Loss(
        "mse",
        _mse_values,
        {"linear": _mse_delta_linear, "sigmoid": _mse_delta_sigmoid,
         "softmax": _mse_delta_softmax},
    ),
    "cross_entropy": Loss(
        "cross_entropy",
        _cross_entropy_values,
        {"sigmoid": _cross_entropy_delta, "softmax": _cross_entropy_delta},
    ),
}
"""Losses, keyed by name."""


def _pair_message(output: str, loss: str) -> str:
    """The error message for an invalid (output activation, loss) pair."""
    valid = sorted(LOSSES[loss].deltas) if loss in LOSSES else []
    return (f"output activation {output!r} cannot be paired with loss {loss!r}; "
            f"{loss!r} accepts outputs {valid}")


def check_pair(output: str, loss: str) -> None:
    """Raise ValueError unless ``loss`` is known and may follow ``output``."""
    if loss not in LOSSES:
        raise ValueError(f"unknown loss {loss!r}; valid losses are {sorted(LOSSES)}")
    if output not in LOSSES[loss].deltas:
        raise ValueError(_pair_message(output, loss))


def output_delta(loss: str, output: str, out: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Return ``dL/dz`` for the output layer.

    Parameters
    ----------
    loss : str
        Key of :data:`LOSSES`.
    output : str
        Name of the output activation (key of ``activations.OUTPUT``).
    out : ndarray, shape (n, n_outputs)
        The network's output ``f(z)``.
    target : ndarray, shape (n,) of int labels, or (n, n_outputs)

    Returns
    -------
    ndarray, shape (n, n_outputs)
        A new array; ``out`` is left untouched.
    """
    check_pair(output, loss)
    return LOSSES[loss].deltas[output](out, target)


def count_wrong(output: str, out: np.ndarray, target: np.ndarray, tolerance: float) -> int:
    """Patterns the network gets wrong: a softmax output whose largest unit is not the label,
    a sigmoid unit on the wrong side of 0.5, or a linear output farther than ``tolerance``
    from its target (``out``, ``target``: shape (n, n_outputs); softmax labels may be 1-D)."""
    return int(np.count_nonzero(wrong_rows(output, out, target, tolerance)))


def wrong_rows(output: str, out: np.ndarray, target: np.ndarray, tolerance: float) -> np.ndarray:
    """Per row of ``out`` (shape (n, n_outputs)), whether :func:`count_wrong` counts it: bool, shape (n,)."""
    if output == "softmax":
        labels = target if target.ndim == 1 else target.argmax(axis=1)
        return out.argmax(axis=1) != labels
    if output == "sigmoid":
        wrong = (out > 0.5) != (target > 0.5)
    else:
        wrong = np.abs(out - target) > tolerance
    return wrong.any(axis=1)
