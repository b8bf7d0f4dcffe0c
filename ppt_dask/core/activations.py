"""Activation functions as string-keyed registries.

Modelled on scikit-learn's ``sklearn/neural_network/_base.py``: an activation is
looked up by the name a user types, its forward function overwrites the
pre-activation array in place (the pre-activation is never needed again), and the
derivative of a hidden activation is written through the activation's *output*
``a = f(z)`` (e.g. tanh: ``1 - a**2``), so backpropagation keeps only the outputs.

Output activations have no ``backward``: the derivative of the output layer is
combined with the loss in :mod:`ppt_dask.core.losses` (softmax + cross-entropy gives
``out - t``, without forming the softmax Jacobian).

This module imports numpy only.

Examples
--------
>>> import numpy as np
>>> HIDDEN["tanh"](np.array([[0.0, 1.0]])).round(4)
array([[0.    , 0.7616]])
>>> OUTPUT["softmax"](np.array([[1000.0, 1000.0]]))    # no overflow
array([[0.5, 0.5]])
>>> sorted(HIDDEN), sorted(OUTPUT)
(['relu', 'sigmoid', 'tanh'], ['linear', 'sigmoid', 'softmax'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["Activation", "HIDDEN", "OUTPUT"]


@dataclass(frozen=True)
class Activation:
    """One activation function and (for hidden layers) its derivative.

    Attributes
    ----------
    name : str
        The registry key.
    forward : callable ``forward(z) -> a``
        Overwrites ``z`` (shape (n, width)) with ``f(z)`` and returns it.
    backward : callable ``backward(a, delta) -> delta``, or None
        Multiplies ``delta`` (shape (n, width)) in place by ``f'(z)``, computed
        from the output ``a = f(z)``, and returns it. None for output activations.
    """

    name: str
    forward: Callable[[np.ndarray], np.ndarray]
    backward: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """Return ``f(z)`` as a new array, leaving ``z`` untouched."""
        return self.forward(np.array(z, dtype=np.result_type(z, np.float32)))


# ---------------------------------------------------------------- forward, in place

def _identity(z: np.ndarray) -> np.ndarray:
    return z


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-z)) = exp(-log(1 + exp(-z))); np.logaddexp(0, x) = log(1 + e^x)
    # is evaluated without overflow, so this is stable and keeps full relative
    # precision in both tails (unlike 1 / (1 + np.exp(-z)), which overflows for
    # z < -709, or 0.5 * (1 + tanh(z / 2)), which loses the small values).
    np.negative(z, out=z)
    np.logaddexp(0, z, out=z)
    np.negative(z, out=z)
    return np.exp(z, out=z)


def _tanh(z: np.ndarray) -> np.ndarray:
    return np.tanh(z, out=z)


def _relu(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0, out=z)


def _softmax(z: np.ndarray) -> np.ndarray:
    # Subtracting the row maximum leaves softmax unchanged and keeps exp() <= 1.
    z -= z.max(axis=1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=1, keepdims=True)
    return z


# ------------------------------------------------ derivative through a = f(z), in place

def _sigmoid_backward(a: np.ndarray, delta: np.ndarray) -> np.ndarray:
    # sigma'(z) = a * (1 - a)
    delta *= a
    delta *= 1 - a
    return delta


def _tanh_backward(a: np.ndarray, delta: np.ndarray) -> np.ndarray:
    # tanh'(z) = 1 - a**2; one temporary instead of sklearn's two
    factor = np.multiply(a, a)
    np.subtract(1, factor, out=factor)
    delta *= factor
    return delta


def _relu_backward(a: np.ndarray, delta: np.ndarray) -> np.ndarray:
    # relu'(z) = 1 where z > 0, else 0 (the subgradient 0 at z = 0, as sklearn)
    delta[a <= 0] = 0
    return delta


HIDDEN: dict[str, Activation] = {
    "sigmoid": Activation("sigmoid", _sigmoid, _sigmoid_backward),
    "tanh": Activation("tanh", _tanh, _tanh_backward),
    "relu": Activation("relu", _relu, _relu_backward),
}
"""Hidden-layer activations, keyed by name."""

OUTPUT: dict[str, Activation] = {
    "sigmoid": Activation("sigmoid", _sigmoid),
    "linear": Activation("linear", _identity),
    "softmax": Activation("softmax", _softmax),
}
"""Output-layer activations, keyed by name (derivatives live in ``losses``)."""
