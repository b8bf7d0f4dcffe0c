"""Stochastic gradient descent with momentum and L2, as pure functions of state.

The optimizer's settings are a frozen dataclass and its state a plain dict, so an
update is a pure function ``(params, grad_sum, count, state) -> (params, state)``
that can run as a Dask task whose output feeds the next round. Inputs are never
modified: they may be read-only buffers shared between tasks.

Convention (scikit-learn's ``MLPClassifier`` ``alpha``; the ``lambda`` of Alowaisheq and Dhami,
Andrew Ng's ex4): the gradient of the *mean* loss plus ``l2 / (2 count)`` times the
sum of squared weights (biases not regularised) is::

    g = (grad_sum + l2 * weight_mask * params) / count

and classical momentum (Rumelhart, Hinton & Williams 1986; Sutskever et al. 2013,
eq. 1-2) updates::

    v      = momentum * v - lr * g
    params = params + v

Examples
--------
>>> import numpy as np
>>> opt = SGD(lr=0.5)
>>> params = np.array([1.0, 2.0])
>>> state = init_state(opt, params)
>>> new, state = sgd_step(opt, params, np.array([4.0, -2.0]), 2, state, np.ones(2))
>>> new, state["step"]
(array([0. , 2.5]), 1)
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = ["SGD", "adam_step", "init_state", "sgd_step"]


def _finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SGD:
    """Settings of gradient descent.

    Parameters
    ----------
    lr : float
        Learning rate, > 0.
    momentum : float
        Momentum coefficient, 0 <= momentum < 1 (0: plain gradient descent).
    l2 : float
        L2 regularisation strength on the weights (not the biases), >= 0.

    Examples
    --------
    The optimizer of every strategy; the strategies take the same three settings:

    >>> import ppt_dask as ppt
    >>> ppt.SGD(lr=0.1, momentum=0.9)
    SGD(lr=0.1, momentum=0.9, l2=0.0)
    >>> ppt.SGD(lr=0.1, momentum=1.0)
    Traceback (most recent call last):
    ...
    ValueError: momentum must be in [0, 1), got 1.0
    """

    lr: float = 0.1
    momentum: float = 0.0
    l2: float = 0.0

    def __post_init__(self):
        lr = _finite("lr", self.lr)
        momentum = _finite("momentum", self.momentum)
        l2 = _finite("l2", self.l2)
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if l2 < 0:
            raise ValueError(f"l2 must be >= 0, got {self.l2!r}")
        object.__setattr__(self, "lr", lr)
        object.__setattr__(self, "momentum", momentum)
        object.__setattr__(self, "l2", l2)


def init_state(opt: SGD, params: np.ndarray) -> dict:
    """Initial optimizer state for ``params`` (shape (n_params,)).

    Returns
    -------
    dict
        ``{"velocity": zeros of params' shape and dtype, "step": 0}``.
    """
    return {"velocity": np.zeros_like(params), "step": 0}


def exact_scalar(value, dtype):
    """``value`` as a scalar of ``dtype`` when that holds it exactly, else unchanged.

    Dividing a float32 array by a float64 scalar makes numpy compute in float64 and cast
    back, about twice the time of the float32 loop; the bits are the same (the quotient
    rounded to float64 and then to float32 equals the float32 quotient, as 53 >= 2 * 24 + 2),
    but only when the divisor itself is exact in float32, hence the check."""
    scalar = np.dtype(dtype).type(value)
    return scalar if scalar == value else value


def sgd_step(opt: SGD, params: np.ndarray, grad_sum: np.ndarray, count,
             state: dict, weight_mask: np.ndarray | None) -> tuple[np.ndarray, dict]:
    """One update from a summed gradient.

    Parameters
    ----------
    opt : SGD
    params : ndarray, shape (n_params,)
    grad_sum : ndarray, shape (n_params,)
        Gradient of the loss *summed* over ``count`` patterns (e.g. the tree-reduced
        sum of the shards' ``grad_sum``).
    count : number > 0
        Number of patterns behind ``grad_sum``.
    state : dict
        From :func:`init_state` or the previous step.
    weight_mask : ndarray, shape (n_params,), or None
        1 on weights, 0 on biases (``MLP.weight_mask()``); may be None only when
        ``opt.l2 == 0``.

    Returns
    -------
    new_params : ndarray, shape (n_params,), dtype of ``params``
    new_state : dict
        New velocity and ``step + 1``; ``params``, ``grad_sum`` and ``state`` are
        left untouched.
    """
    params = np.asarray(params)
    if not (isinstance(count, numbers.Real) and math.isfinite(count) and float(count) > 0):
        raise ValueError(f"count must be a finite number > 0, got {count!r}")
    velocity = state["velocity"]
    for name, array in (("grad_sum", grad_sum), ("velocity", velocity), ("weight_mask", weight_mask)):
        if array is not None and np.shape(array) != params.shape:
            raise ValueError(f"{name} has shape {np.shape(array)}, params has {params.shape}")

    g = np.array(grad_sum, dtype=params.dtype)        # a copy: grad_sum stays untouched
    if opt.l2:
        if weight_mask is None:
            raise ValueError("weight_mask is needed when l2 > 0 (biases are not regularised)")
        g += opt.l2 * (weight_mask * params)
    g /= exact_scalar(count, g.dtype)

    new_velocity = np.multiply(velocity, opt.momentum, dtype=params.dtype)
    new_velocity -= opt.lr * g
    new_params = params + new_velocity
    return new_params, {"velocity": new_velocity, "step": state["step"] + 1}


ADAM_BETA2, ADAM_EPS = 0.999, 1e-8  # Kingma & Ba's defaults, and scikit-learn's


def adam_step(params, first, second, step: int, grad_sum, count, lr: float, beta1: float, l2: float,
              mask) -> None:
    """One Adam step in place (Kingma & Ba, "Adam: A method for stochastic optimization",
    ICLR 2015, Algorithm 1, with the bias corrections folded into the step size as its
    section 2 and scikit-learn's ``AdamOptimizer`` do)::

        g      = (grad_sum + l2 * mask * params) / count
        first  = beta1 * first + (1 - beta1) * g
        second = beta2 * second + (1 - beta2) * g**2
        params = params - lr * sqrt(1 - beta2**step) / (1 - beta1**step) * first / (sqrt(second) + eps)

    ``step`` counts from 1; ``first``, ``second`` and ``params`` are updated, ``grad_sum``
    is used up. All arrays have shape (n_params,) and the dtype of ``params``.
    """
    if l2:
        grad_sum += l2 * (mask * params)
    grad_sum /= exact_scalar(count, grad_sum.dtype)
    first *= beta1
    first += (1 - beta1) * grad_sum
    second *= ADAM_BETA2
    grad_sum *= grad_sum
    second += (1 - ADAM_BETA2) * grad_sum
    size = lr * math.sqrt(1 - ADAM_BETA2 ** step) / (1 - beta1 ** step)
    denominator = np.sqrt(second)
    denominator += ADAM_EPS
    params -= size * (first / denominator)
