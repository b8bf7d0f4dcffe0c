"""PPTClassifier(module=...) and PPTRegressor(module=...): a PyTorch module behind scikit-learn's
API (skorch's convention), on rows of images, numpy and dask; the oracle is the API's own run
of the same TorchNet with the same strategy and seed."""

import pickle

import numpy as np
import pytest

from system import needs_module

needs_module("torch", "pip install 'ppt_dask[torch]'")
needs_module("sklearn", "pip install 'ppt_dask[sklearn]'")

from torch import nn  # noqa: E402

import ppt_dask as ppt  # noqa: E402


class Conv(nn.Module):
    def __init__(self, outputs=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 4 * 4, outputs))

    def forward(self, x):
        return self.body(x)


def _images(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 1, 6, 6)).astype(np.float32)
    y = (X[:, 0, 0, 0] + X[:, 0, 1, 1] > 0).astype(np.int64) + (X[:, 0, 3, 3] > 1)
    return X, np.array(["a", "b", "c"])[y]


def test_a_classifier_of_a_module_fits_as_the_api_trains_and_predicts_on_numpy_and_dask(threads_client):
    da = pytest.importorskip("dask.array")
    X, labels = _images()
    clf = ppt.PPTClassifier(module=Conv, max_iter=3, tol=0.0, random_state=0, strategy="block", batch_size=60,
                            learning_rate_init=0.2, n_shards=2)
    clf.fit(X, labels)
    assert list(clf.classes_) == ["a", "b", "c"] and clf.row_shape_ == (1, 6, 6) and clf.n_features_in_ == 36
    assert isinstance(clf.module_, nn.Module) and not hasattr(clf, "coefs_")
    # the oracle: the API's run of the same network, strategy, shards and seed
    shards = ppt.enter_data(threads_client, X, np.searchsorted(clf.classes_, labels), n_shards=2, dtype="float32")
    try:
        result = ppt.train(ppt.TorchNet(Conv), shards, ppt.Sync(lr=0.2, momentum=0.9, l2=1e-4, block=60),
                           ppt.Stop(max_epochs=3), seed=0)
    finally:
        ppt.exit_data(shards)
    assert clf.params_.tobytes() == result.params.tobytes()
    pred = clf.predict(X)
    assert set(pred) <= {"a", "b", "c"} and clf.score(X, labels) == np.mean(pred == labels)
    proba = clf.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-5)
    lazy = da.from_array(X, chunks=(60, 1, 6, 6))
    np.testing.assert_array_equal(clf.predict(lazy).compute(), pred)
    np.testing.assert_allclose(clf.predict_proba(lazy).compute(), proba)
    again = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(again.predict(X), pred)
    with pytest.raises(ValueError, match="X has rows of shape \\(36,\\); PPTClassifier was fitted on rows of shape"):
        clf.predict(X.reshape(len(X), 36))


def test_a_regressor_of_a_module(threads_client):
    X, _ = _images()
    y = X[:, 0, :2, :2].reshape(len(X), 4).sum(axis=1, keepdims=True)
    reg = ppt.PPTRegressor(module=lambda: Conv(outputs=1), max_iter=20, random_state=0, learning_rate_init=0.05)
    reg.fit(X, y)
    assert reg.predict(X).shape == (len(X),) and reg.score(X, y) > 0.5


@pytest.mark.parametrize("params, match", [
    (dict(hidden_layer_sizes=(10,)), "hidden_layer_sizes=\\(10,\\) applies to the built-in MLP, not with module="),
    (dict(activation="tanh"), "activation='tanh' applies to the built-in MLP"),
    (dict(dtype="float64"), "dtype='float64', but the module's parameters are float32"),
    (dict(module=lambda: Conv(outputs=5)), "module has 5 outputs; y needs 3 \\(classes\\)"),
    (dict(module=lambda: nn.Sequential(nn.Flatten(), nn.BatchNorm1d(36), nn.Linear(36, 3))),
     "module: .*changes buffer\\(s\\) 1.running_mean"),
])
def test_what_does_not_fit_is_refused_before_any_cluster_work(params, match):
    X, labels = _images(40)
    clf = ppt.PPTClassifier(**{"module": Conv, **params}, scheduler="tcp://127.0.0.1:1")  # unreachable: not reached
    with pytest.raises(ValueError, match=match):
        clf.fit(X, labels)
