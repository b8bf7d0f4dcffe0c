"""Tests of the pure math: activations, losses and the MLP's gradient.

The oracle is central finite differences on tiny float64 networks, plus one
gradient worked out by hand.
"""

import math
import pickle
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppt_dask.core.activations import HIDDEN, OUTPUT
from ppt_dask.core.losses import LOSSES, check_pair, output_delta
from ppt_dask.core.network import MLP

# (output, loss, n_outputs, kind of target) for every valid pair
CASES = [
    ("softmax", "cross_entropy", 3, "labels"),
    ("softmax", "cross_entropy", 3, "onehot"),
    ("softmax", "cross_entropy", 3, "proba"),
    ("softmax", "mse", 3, "labels"),
    ("softmax", "mse", 3, "onehot"),
    ("sigmoid", "cross_entropy", 1, "1d"),
    ("sigmoid", "cross_entropy", 1, "2d"),
    ("sigmoid", "cross_entropy", 2, "2d"),
    ("sigmoid", "mse", 1, "1d"),
    ("sigmoid", "mse", 2, "2d"),
    ("linear", "mse", 1, "1d"),
    ("linear", "mse", 2, "2d"),
]


def make_targets(kind, n, k, rng):
    labels = rng.integers(0, k, n)
    if kind == "labels":
        return labels
    if kind == "onehot":
        return np.eye(k)[labels]
    if kind == "proba":
        p = rng.random((n, k))
        return p / p.sum(axis=1, keepdims=True)
    if kind == "1d":
        return rng.integers(0, 2, n).astype(float) if k == 1 else None
    return rng.random((n, k))                      # "2d": soft targets in [0, 1)


def make_problem(hidden, output, loss, k, kind, depth="deep", n=7, seed=0):
    rng = np.random.default_rng(seed)
    sizes = (3, 4, 5, k) if depth == "deep" else (3, k)
    net = MLP(sizes, hidden=hidden, output=output, loss=loss)
    params = net.init_params(seed) * 2             # larger weights: a less linear regime
    X = rng.standard_normal((n, 3))
    Y = make_targets(kind, n, k, rng)
    if output == "linear":
        Y = Y * 3 - 1
    return net, params, X, Y


def finite_difference_grad(net, params, X, Y, h=1e-6):
    grad = np.empty_like(params)
    for i in range(len(params)):
        up, down = params.copy(), params.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (net.loss_and_grad(up, X, Y)[0] - net.loss_and_grad(down, X, Y)[0]) / (2 * h)
    return grad


@pytest.mark.parametrize("depth", ["deep", "none"])
@pytest.mark.parametrize("hidden", sorted(HIDDEN))
@pytest.mark.parametrize("output, loss, k, kind", CASES)
def test_gradient_matches_finite_differences(hidden, output, loss, k, kind, depth):
    net, params, X, Y = make_problem(hidden, output, loss, k, kind, depth)
    loss_sum, grad, n = net.loss_and_grad(params, X, Y)
    numeric = finite_difference_grad(net, params, X, Y)
    error = np.linalg.norm(grad - numeric) / max(np.linalg.norm(grad), np.linalg.norm(numeric))
    assert error < 1e-6
    assert n == len(X) and grad.dtype == np.float64 and grad.shape == (net.n_params,)

    # the loss and gradient are sums of the per-pattern values
    rows = [net.loss_and_grad(params, X[i:i + 1], Y[i:i + 1]) for i in range(len(X))]
    assert loss_sum == pytest.approx(sum(r[0] for r in rows), rel=1e-12)
    np.testing.assert_allclose(grad, sum(r[1] for r in rows), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("output, loss, k, kind", CASES)
def test_stats_agree_with_loss_and_predictions(output, loss, k, kind):
    net, params, X, Y = make_problem("tanh", output, loss, k, kind, n=40)
    grad, stats = net.loss_grad_stats(params, X, Y)
    loss_sum, grad2, n = net.loss_and_grad(params, X, Y)
    np.testing.assert_array_equal(grad, grad2)
    np.testing.assert_array_equal(stats, net.stats(params, X, Y))
    assert stats[0] == loss_sum and stats[2] == n == 40 and stats.dtype == np.float64

    out, pred = net.forward(params, X), net.predict(params, X)
    if output == "softmax":
        labels = Y if Y.ndim == 1 else Y.argmax(axis=1)
        expected_wrong = np.sum(pred != labels)
    elif output == "sigmoid":
        T = Y.reshape(len(X), -1)
        expected_wrong = np.sum(np.any((out > 0.5) != (T > 0.5), axis=1))
    else:
        expected_wrong = np.sum(np.any(np.abs(out - Y.reshape(len(X), -1)) > net.tolerance, axis=1))
    assert stats[1] == expected_wrong


def test_hand_worked_gradient():
    # 2-2-1 network, relu hidden, sigmoid output, cross-entropy; one pattern
    # x = (1, 2), t = 1.
    net = MLP((2, 2, 1), hidden="relu", output="sigmoid")
    W0, b0 = [[1.0, -1.0], [0.5, -0.5]], [0.0, 0.5]
    W1, b1 = [[0.25], [3.0]], [-0.5]
    params = np.concatenate([np.ravel(W0), b0, np.ravel(W1), b1])
    # z1 = x W0 + b0 = (1 + 1, -1 - 1 + 0.5) = (2, -1.5)  ->  a1 = relu(z1) = (2, 0)
    # z2 = a1 W1 + b1 = 0.5 + 0 - 0.5 = 0                  ->  out = sigmoid(0) = 0.5
    # loss = -log(0.5) = log 2
    # delta2 = out - t = -0.5
    # dW1 = a1^T delta2 = (-1, 0)^T,   db1 = -0.5
    # delta1 = delta2 W1^T * relu'(z1) = (-0.125, -1.5) * (1, 0) = (-0.125, 0)
    # dW0 = x^T delta1 = [[-0.125, 0], [-0.25, 0]],   db0 = (-0.125, 0)
    X, Y = np.array([[1.0, 2.0]]), np.array([1.0])
    loss, grad, n = net.loss_and_grad(params, X, Y)
    assert net.forward(params, X)[0, 0] == 0.5
    assert loss == pytest.approx(math.log(2), rel=1e-15)
    expected = [-0.125, 0, -0.25, 0, -0.125, 0, -1.0, 0, -0.5]
    np.testing.assert_allclose(grad, expected, rtol=1e-15, atol=0)
    assert n == 1
    np.testing.assert_array_equal(net.stats(params, X, Y), [math.log(2), 1, 1])  # 0.5 is not > 0.5


def test_shards_add_up():
    net, params, X, Y = make_problem("tanh", "softmax", "cross_entropy", 3, "labels", n=60)
    grad, stats = net.loss_grad_stats(params, X, Y)
    parts = [net.loss_grad_stats(params, X[a:b], Y[a:b]) for a, b in [(0, 13), (13, 14), (14, 14), (14, 60)]]
    np.testing.assert_allclose(sum(g for g, _ in parts), grad, rtol=1e-12, atol=1e-14)
    shard_stats = sum(s for _, s in parts)
    assert shard_stats[0] == pytest.approx(stats[0], rel=1e-12)
    assert shard_stats[1:].tolist() == stats[1:].tolist()


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 30), max_size=5), seed=st.integers(0, 2**16))
def test_any_row_partition_adds_up(cuts, seed):
    net, params, X, Y = make_problem("sigmoid", "sigmoid", "cross_entropy", 2, "2d", n=30, seed=seed)
    bounds = [0, *sorted(cuts), 30]
    grad, stats = net.loss_grad_stats(params, X, Y)
    parts = [net.loss_grad_stats(params, X[a:b], Y[a:b]) for a, b in zip(bounds, bounds[1:])]
    np.testing.assert_allclose(sum(g for g, _ in parts), grad, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(sum(s for _, s in parts), stats, rtol=1e-12)


def _blocks(kind, k, n, S, dtype, rng):
    blocks = []
    for _ in range(S):
        Y = make_targets(kind, n, k, rng)
        blocks.append((rng.standard_normal((n, 11)).astype(dtype), Y))
    return blocks


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("hidden", sorted(HIDDEN))
@pytest.mark.parametrize("output, loss, k, kind", CASES)
def test_a_pass_over_several_blocks_gives_each_blocks_own_bits(output, loss, k, kind, hidden, dtype):
    """loss_grad_stats_shards (a worker's shards in one batched pass) against loss_grad_stats of each
    block alone: every gradient and every stats row bit for bit, for blocks of 1 to 33 rows, 2 to 8
    of them (the stacked products are one BLAS call per block with the block's own shapes; the
    activations elementwise; every sum over rows taken per block)."""
    rng = np.random.default_rng(zlib.crc32(f"{output} {loss} {kind} {hidden} {dtype}".encode()))
    net = MLP((11, 9, 6, k), hidden=hidden, output=output, loss=loss, dtype=dtype)
    params = net.init_params(1) * 2
    for n, S in [(1, 3), (7, 2), (25, 8), (33, 5)]:
        blocks = _blocks(kind, k, n, S, dtype, rng)
        grads, stats = net.loss_grad_stats_shards(params, blocks)
        assert grads.shape == (S, net.n_params) and stats.shape == (S, 3)
        for i, (X, Y) in enumerate(blocks):
            grad, stat = net.loss_grad_stats(params, X, Y)
            assert grads[i].tobytes() == grad.tobytes() and stats[i].tobytes() == stat.tobytes(), (n, S, i)


def test_a_pass_makes_a_plain_two_dimensional_passs_products():
    """The stacked products are the 2-D ones: the gradient of an MNIST-sized block, bitwise the one
    a plain numpy forward and backward (2-D matmuls, as the mpi4py peer writes them) computes, for a
    block alone and stacked with others, views at any row offset of a shard."""
    def plain(layers, X, y):
        acts = [X]
        for i, (W, b) in enumerate(layers):
            z = acts[-1] @ W
            z += b
            if i < len(layers) - 1:
                np.tanh(z, out=z)
            acts.append(z)
        p = acts[-1]
        p -= p.max(axis=1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        delta = p
        delta[np.arange(len(y)), y] -= 1
        grads = []
        for i in range(len(layers) - 1, -1, -1):
            grads[:0] = [np.matmul(acts[i].T, delta).ravel(), np.sum(delta, axis=0)]
            if i:
                factor = acts[i] * acts[i]
                np.subtract(1, factor, out=factor)
                delta = (delta @ layers[i][0].T) * factor
        return np.concatenate(grads)

    rng = np.random.default_rng(0)
    net = MLP((784, 64, 64, 10), dtype="float32")
    params = net.init_params(0)
    shards = [(rng.random((300, 784), dtype=np.float32), rng.integers(0, 10, 300)) for _ in range(4)]
    blocks = [(X[37:62], y[37:62]) for X, y in shards]  # 25 rows, at an odd offset
    grads, _ = net.loss_grad_stats_shards(params, blocks)
    for i, (X, y) in enumerate(blocks):
        want = plain(net.unflatten(params), X, y)
        assert grads[i].tobytes() == want.tobytes() == net.loss_grad_stats(params, X, y)[0].tobytes()


def test_several_blocks_need_the_same_rows_and_good_targets():
    net = MLP((3, 4, 2), output="softmax")
    params, X = net.init_params(0), np.zeros((5, 3))
    with pytest.raises(ValueError, match=r"every block must have the same number of rows, got \[5, 4\]"):
        net.loss_grad_stats_shards(params, [(X, np.zeros(5, int)), (X[:4], np.zeros(4, int))])
    with pytest.raises(ValueError, match="blocks must hold at least one"):
        net.loss_grad_stats_shards(params, [])
    with pytest.raises(ValueError, match=r"class labels must lie in 0..1, got values in 0..2"):
        net.loss_grad_stats_shards(params, [(X, np.zeros(5, int)), (X, np.array([0, 1, 2, 0, 0]))])
    with pytest.raises(ValueError, match=r"Y has 4 rows but X has 5"):
        net.loss_grad_stats_shards(params, [(X, np.zeros(5, int)), (X, np.zeros(4, int))])


def test_empty_shard():
    net = MLP((4, 3, 2), output="softmax")
    params = net.init_params(0)
    grad, stats = net.loss_grad_stats(params, np.empty((0, 4)), np.empty(0, dtype=int))
    assert grad.shape == (net.n_params,) and not grad.any()
    assert stats.tolist() == [0.0, 0.0, 0.0]
    loss, grad, n = net.loss_and_grad(params, np.empty((0, 4)), np.empty((0, 2)))
    assert (loss, n, grad.any()) == (0.0, 0, False)
    assert net.stats(params, np.empty((0, 4)), np.empty(0, dtype=int)).tolist() == [0, 0, 0]


def test_float32_end_to_end():
    net64, params64, X, Y = make_problem("tanh", "softmax", "cross_entropy", 3, "labels", n=20)
    net32 = MLP(net64.sizes, "tanh", "softmax", dtype="float32")
    params32 = net32.init_params(0)
    assert params32.dtype == np.float32
    np.testing.assert_array_equal(params32, net64.init_params(0).astype(np.float32))
    grad, stats = net32.loss_grad_stats(params32, X.astype(np.float32), Y)
    assert grad.dtype == np.float32 and stats.dtype == np.float64
    assert net32.forward(params32, X).dtype == np.float32          # float64 X is cast
    grad64, stats64 = net64.loss_grad_stats(params32.astype(np.float64), X, Y)
    np.testing.assert_allclose(grad, grad64, rtol=1e-4, atol=1e-5)
    assert stats[0] == pytest.approx(stats64[0], rel=1e-5)


def test_float64_is_deterministic():
    net, params, X, Y = make_problem("relu", "softmax", "mse", 3, "onehot", n=50)
    (g1, s1), (g2, s2) = net.loss_grad_stats(params, X, Y), net.loss_grad_stats(params, X, Y)
    assert g1.tobytes() == g2.tobytes() and s1.tobytes() == s2.tobytes()
    assert net.init_params(7).tobytes() == net.init_params(7).tobytes()
    assert net.init_params(7).tobytes() != net.init_params(8).tobytes()


def test_init_params_as_scikit_learn():
    for hidden, factor in [("tanh", 6.0), ("relu", 6.0), ("sigmoid", 2.0)]:
        net = MLP((5, 4, 3), hidden=hidden)
        rng = np.random.default_rng(3)
        expected = []
        for fan_in, fan_out in [(5, 4), (4, 3)]:   # W then b, layer by layer
            bound = math.sqrt(factor / (fan_in + fan_out))
            expected += [rng.uniform(-bound, bound, (fan_in, fan_out)).ravel(),
                         rng.uniform(-bound, bound, fan_out)]
        np.testing.assert_array_equal(net.init_params(3), np.concatenate(expected))


def test_layout_views_and_mask():
    net = MLP([3, 4, 2], output="sigmoid")
    assert net.sizes == (3, 4, 2) and (net.n_inputs, net.n_outputs) == (3, 2)
    assert net.n_params == 3 * 4 + 4 + 4 * 2 + 2
    params = np.arange(net.n_params, dtype=float)
    (W0, b0), (W1, b1) = net.unflatten(params)
    assert W0.shape == (3, 4) and b0.shape == (4,) and W1.shape == (4, 2) and b1.shape == (2,)
    assert W0[1, 0] == 4 and b0[0] == 12 and W1[0, 1] == 17 and b1[-1] == net.n_params - 1
    assert all(np.shares_memory(a, params) for layer in net.unflatten(params) for a in layer)
    W1[0, 0] = -1.0
    assert params[16] == -1.0
    mask = net.weight_mask()
    assert mask.dtype == np.float64 and mask.sum() == 3 * 4 + 4 * 2
    assert mask[12:16].tolist() == [0, 0, 0, 0] and mask[-2:].tolist() == [0, 0]


def test_config_normalised_hashable_picklable():
    net = MLP(np.array([3, 4, 2]), output="linear")
    assert net.sizes == (3, 4, 2) and all(type(w) is int for w in net.sizes)
    assert net.loss == "mse" and MLP((3, 2)).loss == "cross_entropy"
    assert MLP((3, 2), output="sigmoid").loss == "cross_entropy"
    assert net == MLP((3, 4, 2), output="linear", loss="mse")
    assert hash(net) == hash(MLP((3, 4, 2), output="linear", loss="mse"))
    clone = pickle.loads(pickle.dumps(net))
    assert clone == net and hash(clone) == hash(net)


def test_predict():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 3))
    soft = MLP((3, 4, 3))
    p = soft.init_params(0)
    proba = soft.predict_proba(p, X)
    np.testing.assert_allclose(proba.sum(axis=1), 1)
    np.testing.assert_array_equal(soft.predict(p, X), proba.argmax(axis=1))
    sig = MLP((3, 1), output="sigmoid")
    p = sig.init_params(0)
    assert sig.predict(p, X).shape == (6,)
    np.testing.assert_array_equal(sig.predict(p, X), (sig.forward(p, X)[:, 0] > 0.5).astype(int))
    lin = MLP((3, 2), output="linear")
    p = lin.init_params(0)
    np.testing.assert_array_equal(lin.predict(p, X), X @ lin.unflatten(p)[0][0] + p[-2:])
    with pytest.raises(ValueError, match="linear"):
        lin.predict_proba(p, X)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sizes=(3,)), "at least 2"),
    (dict(sizes=3), "at least 2"),
    (dict(sizes=(3, 0, 2)), "integer >= 1, got 0"),
    (dict(sizes=(3, 2.5)), "integer >= 1, got 2.5"),
    (dict(sizes=(3, 2), hidden="softplus"), r"'softplus'.*\['relu', 'sigmoid', 'tanh'\]"),
    (dict(sizes=(3, 2), output="tanh"), r"'tanh'.*\['linear', 'sigmoid', 'softmax'\]"),
    (dict(sizes=(3, 2), loss="hinge"), r"'hinge'.*\['cross_entropy', 'mse'\]"),
    (dict(sizes=(3, 2), dtype="float16"), "float16"),
    (dict(sizes=(3, 1)), "softmax output needs >= 2 outputs"),
    (dict(sizes=(3, 1), output="linear", loss="cross_entropy"), "'linear'.*'cross_entropy'"),
    (dict(sizes=(3, 1), output="linear", tolerance=-1), "tolerance.*-1"),
    (dict(sizes=(3, 1), output="linear", tolerance=float("nan")), "tolerance.*nan"),
])
def test_invalid_network(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MLP(**kwargs)


def test_invalid_inputs():
    net = MLP((3, 4, 3))                                 # 31 parameters
    params, X, y = net.init_params(0), np.zeros((5, 3)), np.zeros(5, dtype=int)
    with pytest.raises(ValueError, match=r"n_params=31.*\(30,\)"):
        net.loss_and_grad(params[:-1], X, y)
    with pytest.raises(ValueError, match=r"\(n, 3\), got \(5, 4\)"):
        net.loss_grad_stats(params, np.zeros((5, 4)), y)
    with pytest.raises(ValueError, match=r"\(n, 3\), got \(3,\)"):
        net.forward(params, np.zeros(3))
    with pytest.raises(ValueError, match="Y has 4 rows but X has 5"):
        net.stats(params, X, y[:4])
    with pytest.raises(ValueError, match=r"0\.\.2, got values in 0\.\.3"):
        net.loss_and_grad(params, X, np.array([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match="0..2"):
        net.loss_and_grad(params, X, np.array([0, -1, 2, 1, 0]))
    with pytest.raises(ValueError, match="integer class labels"):
        net.loss_and_grad(params, X, np.full(5, 0.5))
    with pytest.raises(ValueError, match=r"\(n, 3\).*got \(5, 2\)"):
        net.loss_and_grad(params, X, np.zeros((5, 2)))
    multi = MLP((3, 2), output="sigmoid")
    with pytest.raises(ValueError, match=r"\(n, 2\), got \(5,\)"):
        multi.stats(multi.init_params(0), X, np.zeros(5))
    # whole-number float labels are accepted
    assert net.stats(params, X, y.astype(float))[2] == 5


def test_activations_stable_and_correct():
    z = np.array([[-1000.0, -30.0, 0.0, 30.0, 1000.0]])
    with np.errstate(over="raise", divide="raise", invalid="raise"):   # underflow to 0 is fine
        s = HIDDEN["sigmoid"](z)
        soft = OUTPUT["softmax"](z)
    assert s[0, 0] == 0.0 and s[0, 2] == 0.5 and s[0, 3] == pytest.approx(1 - math.exp(-30)) and s[0, 4] == 1.0
    assert s[0, 1] == pytest.approx(math.exp(-30) / (1 + math.exp(-30)), rel=1e-13)   # full relative precision
    assert soft[0, -1] == 1.0 and np.isfinite(soft).all()
    assert z[0, 0] == -1000.0                               # __call__ leaves z alone

    # the derivative written through a = f(z) matches central differences in z
    rng = np.random.default_rng(1)
    z = rng.standard_normal((4, 3))
    for act in HIDDEN.values():
        h = 1e-6
        numeric = (act(z + h) - act(z - h)) / (2 * h)
        np.testing.assert_allclose(act.backward(act(z), np.ones_like(z)), numeric, rtol=1e-7, atol=1e-9)


def test_losses_pairs_and_clipping():
    with pytest.raises(ValueError, match="'linear'.*'cross_entropy'"):
        check_pair("linear", "cross_entropy")
    out = np.array([[1.0, 0.0, 0.0]])                     # a confident, wrong prediction
    value = LOSSES["cross_entropy"].value(out, np.array([1]), "softmax")
    assert value == pytest.approx(-math.log(np.finfo(float).eps))
    # mse sums over outputs and patterns with a factor 0.5
    out, t = np.array([[0.5, 1.0], [2.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 1.0]])
    assert LOSSES["mse"].value(out, t, "linear") == 0.5 * (0.25 + 0 + 1 + 1)
    np.testing.assert_array_equal(output_delta("mse", "linear", out, t), out - t)


def test_read_only_inputs_are_not_modified():
    net, params, X, Y = make_problem("sigmoid", "softmax", "cross_entropy", 3, "labels", n=10)
    copies = [params.copy(), X.copy(), Y.copy()]
    for a in (params, X, Y):
        a.flags.writeable = False                 # like buffers shared between Dask tasks
    grad, stats = net.loss_grad_stats(params, X, Y)
    assert grad.flags.writeable and not np.shares_memory(grad, params)
    for a, c in zip((params, X, Y), copies):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("dtype,weights", [("float32", "float32"), ("float32", "float64"), ("float64", "float64")])
def test_passes_are_loss_grad_stats_of_the_weights_at_each_call(dtype, weights):
    """The local loop's passes (views and checks made once) give loss_grad_stats' bits on the
    weights as they are at each call, also when the weights change in place in between and
    when they must be cast (float64 weights of a float32 network)."""
    net = MLP((12, 7, 5, 3), hidden="tanh", output="softmax", dtype=dtype)
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((40, 12)).astype(dtype), rng.integers(0, 3, 40)
    params = net.init_params(2).astype(weights)
    one = net.passes(params, X, y)
    for step, rows in enumerate([slice(0, 10), slice(10, 20), np.r_[35:40, 0:5], slice(0, 40)]):
        expected_grad, expected_stats = net.loss_grad_stats(params, X[rows], y[rows])
        grad, stats = one(rows)
        assert grad.dtype == np.dtype(dtype) and np.array_equal(grad, expected_grad), step
        assert np.array_equal(stats, expected_stats), step
        params -= 0.05 * grad.astype(weights)  # in place, as the local loop does
    with pytest.raises(ValueError, match="at least one row"):
        one(slice(0, 0))
    with pytest.raises(ValueError, match="needs an ndarray"):
        net.passes(list(params), X, y)
