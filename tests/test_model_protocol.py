"""The model protocol (ppt_dask.core.model): a numpy model written here trains on the cluster.

The logistic regression below knows nothing of ppt_dask: it only follows the protocol. It
trains on real worker processes bitwise as the serial reference does, learns, and goes
through a model file. Nothing in the engine may assume an MLP.
"""

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.core import model


class LogReg:
    """Logistic regression of 0/1 labels, sums over rows, no ppt_dask import."""

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
        return np.array([loss, np.count_nonzero((p > 0.5) != (y > 0.5)), len(X)], dtype=float)

    def loss_grad_stats(self, params, X, y):
        r = self._p(params, X) - y
        return np.append(X.T @ r, r.sum()), self.stats(params, X, y)

    def predict(self, params, X):
        return (self._p(params, X) > 0.5).astype(np.int64)


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4))
    y = (X @ np.array([1.5, -2.0, 0.5, 0.0]) + 0.3 > 0).astype(np.int64)
    return X, y


def test_the_numpy_model_follows_the_protocol_and_its_gradient_is_right():
    net = LogReg(4)
    assert isinstance(net, ppt.Network) and model.check_network(net) is net
    X, y = _data(20)
    params = net.init_params(1)
    grad, stats = net.loss_grad_stats(params, X, y)
    eps, numeric = 1e-6, np.zeros_like(params)
    for i in range(len(params)):  # finite differences of the summed loss
        step = np.zeros_like(params)
        step[i] = eps
        numeric[i] = (net.stats(params + step, X, y)[0] - net.stats(params - step, X, y)[0]) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
    assert model.label(net) == "LogReg" and model.describe(net)["n_params"] == 5
    np.testing.assert_array_equal(model.weight_mask(net), np.ones(5))  # no mask given: L2 on every parameter


@pytest.mark.parametrize("strategy", [ppt.Sync(lr=0.5, momentum=0.9, l2=0.01),
                                      ppt.Average(lr=0.3, momentum=0.9, block=10, interval=20),
                                      ppt.LocalSGD(lr=0.3, momentum=0.9, block=10, interval=20)],
                         ids=["epoch", "average", "local"])
def test_a_model_of_ones_own_trains_on_worker_processes_bitwise_as_serial(client4, workers4, strategy):
    X, y = _data()
    net = LogReg(4)
    rounds = 8
    expected, _ = train_serial(net, X, y, strategy, rounds=rounds, n_shards=4, seed=2)
    epochs = rounds / strategy.check([50] * 4, 2).rounds_per_epoch(len(X))
    for p in (1, 2):
        shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:p])
        try:
            result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=epochs), seed=2, reproducible="any-p")
        finally:
            ppt.exit_data(shards)
        assert result.rounds == rounds
        assert result.params.tobytes() == expected.tobytes(), f"p={p} differs from serial"
    assert result.settings["workers"] == 2


def test_a_model_of_ones_own_learns_verifies_its_target_and_goes_through_a_file(client4, workers4, tmp_path):
    X, y = _data(400)
    net = LogReg(4)
    shards = ppt.enter_data(client4, X[:300], y[:300], n_shards=2, workers=workers4[:2])
    try:
        result = ppt.train(net, shards, ppt.Sync(lr=1.0, momentum=0.5),
                           ppt.Stop(max_epochs=200, target_error=0.05, test=(X[300:], y[300:])))
    finally:
        ppt.exit_data(shards)
    assert result.learned and result.test_accuracy >= 0.95
    assert result.diagnostics.settings["network"] == "LogReg"  # the report names it
    path = result.save(tmp_path / "logreg.npz")
    with pytest.raises(ValueError, match="holds the weights of a LogReg.*load_model\\(path, module=...\\)"):
        ppt.load_model(path)
    loaded = ppt.load_model(path, module=LogReg(4))
    assert loaded.task == "binary" and loaded.score(X[300:], y[300:]) == result.test_accuracy
    with pytest.raises(ValueError, match="not the one trained.*n_params"):
        ppt.load_model(path, module=LogReg(5))


def test_what_is_not_a_network_is_refused_before_any_work(client4, workers4):
    X, y = _data(40)
    shards = ppt.enter_data(client4, X, y, n_shards=2, workers=workers4[:1])
    try:
        with pytest.raises(ValueError, match="net must be a network .* a dict has no dtype"):
            ppt.train({}, shards, ppt.Sync(lr=0.1), ppt.Stop(max_epochs=1))
        with pytest.raises(ValueError, match="takes 5 inputs but the data has 4 features"):
            ppt.train(LogReg(5), shards, ppt.Sync(lr=0.1), ppt.Stop(max_epochs=1))
        with pytest.raises(ValueError, match="the test set has rows of shape \\(3,\\); the network takes \\(4,\\)"):
            ppt.train(LogReg(4), shards, ppt.Sync(lr=0.1), ppt.Stop(max_epochs=1, test=(X[:, :3], y)))
    finally:
        ppt.exit_data(shards)
