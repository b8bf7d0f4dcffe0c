"""Tests of the SGD update: one step worked by hand, purity, validation."""

import numpy as np
import pytest

from ppt_dask.core.network import MLP
from ppt_dask.core.optimizers import SGD, exact_scalar, init_state, sgd_step


def test_hand_worked_step():
    # A 2-1 network with a linear output and mse; flat params (W00, W10, b).
    net = MLP((2, 1), output="linear")
    params = np.array([0.5, -0.25, 0.1])
    X = np.array([[1.0, 2.0], [0.0, 1.0]])
    Y = np.array([1.0, 0.0])
    # out_1 = 0.5*1 - 0.25*2 + 0.1 = 0.1      residual r_1 = 0.1 - 1 = -0.9
    # out_2 = 0.5*0 - 0.25*1 + 0.1 = -0.15    residual r_2 = -0.15
    # loss = 0.5 * (0.81 + 0.0225) = 0.41625
    # dW00 = 1*(-0.9) + 0*(-0.15) = -0.9
    # dW10 = 2*(-0.9) + 1*(-0.15) = -1.95
    # db   = -0.9 - 0.15          = -1.05
    np.testing.assert_allclose(net.forward(params, X), [[0.1], [-0.15]], rtol=1e-15)
    loss, grad, n = net.loss_and_grad(params, X, Y)
    assert loss == pytest.approx(0.41625, rel=1e-15) and n == 2
    np.testing.assert_allclose(grad, [-0.9, -1.95, -1.05], rtol=1e-15)

    # One step with lr 0.1, momentum 0.9, l2 0.5 from velocity (0.01, 0.02, 0.03):
    # g   = (grad + 0.5 * mask * params) / 2
    #     = ((-0.9 + 0.25) / 2, (-1.95 - 0.125) / 2, -1.05 / 2) = (-0.325, -1.0375, -0.525)
    # v   = 0.9 * v0 - 0.1 * g = (0.009 + 0.0325, 0.018 + 0.10375, 0.027 + 0.0525)
    #     = (0.0415, 0.12175, 0.0795)
    # new = params + v = (0.5415, -0.12825, 0.1795)
    opt = SGD(lr=0.1, momentum=0.9, l2=0.5)
    state = {"velocity": np.array([0.01, 0.02, 0.03]), "step": 4}
    new_params, new_state = sgd_step(opt, params, grad, n, state, net.weight_mask())
    np.testing.assert_allclose(new_params, [0.5415, -0.12825, 0.1795], rtol=1e-14)
    np.testing.assert_allclose(new_state["velocity"], [0.0415, 0.12175, 0.0795], rtol=1e-14)
    assert new_state["step"] == 5


def test_plain_gradient_descent_from_init_state():
    opt = SGD(lr=0.5)
    params = np.array([1.0, 2.0, 3.0])
    state = init_state(opt, params)
    assert state["step"] == 0 and not state["velocity"].any()
    new, state = sgd_step(opt, params, np.array([2.0, -4.0, 0.0]), 2, state, None)
    np.testing.assert_array_equal(new, [0.5, 3.0, 3.0])     # params - lr * grad_sum / count


def test_inputs_are_never_modified():
    opt = SGD(lr=0.1, momentum=0.5, l2=0.1)
    arrays = [np.array([1.0, -2.0]), np.array([0.3, 0.4]), np.array([1.0, 0.0]), np.array([0.1, 0.2])]
    copies = [a.copy() for a in arrays]
    for a in arrays:
        a.flags.writeable = False                             # like shared read-only buffers
    params, grad, mask, velocity = arrays
    state = {"velocity": velocity, "step": 0}
    new, new_state = sgd_step(opt, params, grad, 3, state, mask)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)
    assert state == {"velocity": velocity, "step": 0}
    assert not np.shares_memory(new, params) and not np.shares_memory(new_state["velocity"], velocity)


def test_dtype_is_kept():
    params = np.ones(4, dtype=np.float32)
    opt = SGD(lr=0.1, momentum=0.9, l2=0.01)
    state = init_state(opt, params)
    new, state = sgd_step(opt, params, np.ones(4, dtype=np.float64), 2.0, state, np.ones(4))
    assert new.dtype == np.float32 and state["velocity"].dtype == np.float32


def test_l2_only_on_weights():
    net = MLP((2, 1), output="linear")
    params = np.array([1.0, 1.0, 1.0])
    new, _ = sgd_step(SGD(lr=1.0, l2=1.0), params, np.zeros(3), 1, init_state(None, params), net.weight_mask())
    np.testing.assert_array_equal(new, [0.0, 0.0, 1.0])


@pytest.mark.parametrize("kwargs, match", [
    (dict(lr=-0.1), "lr must be > 0, got -0.1"),
    (dict(lr=0), "lr must be > 0, got 0"),
    (dict(lr=float("nan")), "lr must be a finite number, got nan"),
    (dict(lr=float("inf")), "lr must be a finite number, got inf"),
    (dict(momentum=1.0), r"momentum must be in \[0, 1\), got 1.0"),
    (dict(momentum=-0.5), "momentum must be in"),
    (dict(l2=-1e-3), "l2 must be >= 0, got -0.001"),
    (dict(l2=float("inf")), "l2 must be a finite number"),
    (dict(lr="0.1"), "lr must be a finite number"),
])
def test_invalid_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SGD(**kwargs)


def test_invalid_step_arguments():
    opt, params = SGD(l2=0.1), np.zeros(3)
    state = init_state(opt, params)
    for count in (0, -2, float("nan")):
        with pytest.raises(ValueError, match="count must be a finite number > 0"):
            sgd_step(opt, params, np.zeros(3), count, state, np.ones(3))
    with pytest.raises(ValueError, match=r"grad_sum has shape \(2,\), params has \(3,\)"):
        sgd_step(opt, params, np.zeros(2), 1, state, np.ones(3))
    with pytest.raises(ValueError, match="weight_mask is needed"):
        sgd_step(opt, params, np.zeros(3), 1, state, None)


def test_settings_are_hashable_values():
    assert SGD(lr=1, momentum=0, l2=0) == SGD(lr=1.0)
    assert hash(SGD(lr=1)) == hash(SGD(lr=1.0)) and isinstance(SGD(lr=1).lr, float)


def test_a_float32_step_divides_in_float32_with_the_float64_bits():
    """exact_scalar: a pattern count that float32 holds exactly becomes a float32 scalar (the
    fast loop) and the quotient has the bits of the float64 division rounded to float32; a
    count float32 cannot hold stays as it is."""
    rng = np.random.default_rng(0)
    g = (rng.standard_normal(200_000) * rng.choice([1e-30, 1e-3, 1.0, 1e3, 1e30], 200_000)).astype(np.float32)
    for count in (np.float64(100.0), 3, np.float64(60000.0), np.float64(7.0)):
        scalar = exact_scalar(count, np.float32)
        assert scalar.dtype == np.float32
        assert (g / scalar).tobytes() == (g / np.float64(count)).astype(np.float32).tobytes()
    assert exact_scalar(np.float64(2**24 + 1), np.float32) == 2**24 + 1
    assert isinstance(exact_scalar(np.float64(2**24 + 1), np.float32), np.float64)
    assert exact_scalar(np.float64(0.1), np.float32) == np.float64(0.1)  # 0.1 is not exact in float32
    assert exact_scalar(5, np.float64).dtype == np.float64
