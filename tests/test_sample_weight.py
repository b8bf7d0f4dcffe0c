"""``sample_weight`` in ``fit`` and ``partial_fit``, MLPClassifier's meaning: a row of weight 2 is
the row twice, a row of weight 0 is left out.

The oracle is the data with its rows repeated (``np.repeat(X, w)``): with a full-batch step the
weighted sums are the repeated rows' sums, up to the order of the adds, so the weights after a
fit agree to float64 rounding. Fits run in this process and on a cluster of two worker
processes, whose shards carry the weights; the weighted rounds on the cluster are held bitwise
to the serial path, as the unweighted ones are.
"""

import contextlib
import warnings

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask import PPTClassifier, PPTRegressor
from ppt_dask.algorithms.serial import train_serial

TIGHT = dict(rtol=1e-9, atol=1e-12)  # float64 rounding of sums added in another order, over a few epochs


def data(n=60, seed=0):
    """Rows, labels of 3 classes, regression targets, and integer weights 0, 1, 2 and 3."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    labels = np.digitize(X[:, 0] + 0.5 * X[:, 1], [-0.5, 0.5])
    targets = X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=n)
    w = np.ones(n, dtype=int)
    w[::5], w[3::7], w[1::11] = 2, 0, 3
    return X, labels, targets, w


# ---- the network: weighted sums over rows -------------------------------------------------


@pytest.mark.parametrize("output, k", [("softmax", 3), ("sigmoid", 1), ("sigmoid", 3), ("linear", 2)])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_weighted_pass_is_the_pass_over_the_rows_repeated(output, k, dtype):
    """``MLP(weighted=True)`` reads the last target column as weights: its gradient sum and stats
    are those of the rows repeated that many times; weights of one give the plain pass's bits,
    and the batched and the step-by-step passes the single pass's bits, as unweighted."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 4))
    y = {"softmax": rng.integers(0, k, 12), "sigmoid": rng.integers(0, 2, (12, k)).astype(float),
         "linear": rng.normal(size=(12, k))}[output]
    w = rng.integers(0, 4, 12)
    net = ppt.MLP((4, 5, k), hidden="tanh", output=output, dtype=dtype)
    weighted = ppt.MLP((4, 5, k), hidden="tanh", output=output, dtype=dtype, weighted=True)
    Y = np.column_stack([y, w])
    params = net.init_params(0)
    tolerance = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=2e-5, atol=1e-5)
    grad, stats = weighted.loss_grad_stats(params, X, Y)
    grad_repeated, stats_repeated = net.loss_grad_stats(params, np.repeat(X, w, axis=0), np.repeat(y, w, axis=0))
    np.testing.assert_allclose(grad, grad_repeated, **tolerance)
    np.testing.assert_allclose(stats, stats_repeated, **tolerance)
    assert stats[2] == w.sum()
    ones = weighted.loss_grad_stats(params, X, np.column_stack([y, np.ones(12)]))
    plain = net.loss_grad_stats(params, X, y)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(ones, plain))
    step = weighted.passes(params, X, Y)(slice(2, 8))
    alone = weighted.loss_grad_stats(params, X[2:8], Y[2:8])
    assert all(a.tobytes() == b.tobytes() for a, b in zip(step, alone))
    grads, stats_shards = weighted.loss_grad_stats_shards(params, [(X[:6], Y[:6]), (X[6:], Y[6:])])
    assert grads[1].tobytes() == weighted.loss_grad_stats(params, X[6:], Y[6:])[0].tobytes()
    with pytest.raises(ValueError, match="last column"):
        weighted.loss_grad_stats(params, X, y if y.ndim == 1 else y[:, 0])


def test_train_refuses_shards_without_the_weight_column_before_any_round():
    """The check of the data against the network counts the weight column (it cannot read the labels'
    range: the weights share the column statistics)."""
    from types import SimpleNamespace

    from ppt_dask.core.validation import check_network_fits

    def shards(*y_shape):
        return SimpleNamespace(row_shape=(4,), dtype="float64", info=[SimpleNamespace(y_shape=y_shape)])
    classifier = ppt.MLP((4, 5, 3), output="softmax", weighted=True)
    regressor = ppt.MLP((4, 5, 2), output="linear", weighted=True)
    for net, good, bad in ((classifier, [(2,), (4,)], [(), (3,)]), (regressor, [(3,)], [(), (2,)])):
        for y_shape in good:
            check_network_fits(net, shards(*y_shape))
        for y_shape in bad:
            with pytest.raises(ValueError, match="weights as one more column"):
                check_network_fits(net, shards(*y_shape))


@pytest.fixture(scope="module")
def cluster_client():
    """A LocalCluster of two worker processes; a test makes its client current where it fits."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


@contextlib.contextmanager
def no_current_client():
    """No current Dask client (those of other test modules set aside): a one-shard fit trains in
    this process. distributed's registry of global clients is not public: a test helper only."""
    import distributed.client as dc

    saved = dict(dc._global_clients)
    dc._global_clients.clear()
    try:
        yield
    finally:
        dc._global_clients.update(saved)


def fit(estimator, X, y, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter reached; a batch_size clipped to the rows
        return estimator.fit(X, y, **kwargs)


# Full-batch gradient descent ("epoch"), float64, the tol rule out of the way: every step is the
# gradient over all rows, so the weighted fit and the repeated rows' fit take the same steps.
FULL_BATCH = dict(hidden_layer_sizes=(6,), strategy="epoch", max_iter=12, n_iter_no_change=12, random_state=0,
                  dtype="float64")


@pytest.mark.parametrize("kind", [PPTClassifier, PPTRegressor])
@pytest.mark.parametrize("where", ["here", "cluster"])
def test_integer_weights_fit_as_the_rows_repeated(kind, where, cluster_client):
    X, labels, targets, w = data()
    y = labels if kind is PPTClassifier else targets
    params = {**FULL_BATCH, "n_shards": 1 if where == "here" else 2}
    context = no_current_client() if where == "here" else cluster_client.as_current()
    with context:
        weighted = fit(kind(**params), X, y, sample_weight=w)
        repeated = fit(kind(**params), np.repeat(X, w, axis=0), np.repeat(y, w))
        plain = fit(kind(**params), X, y)
    assert weighted.placement_.startswith("in this process" if where == "here" else "the current client")
    assert weighted.n_shards_ == repeated.n_shards_ == params["n_shards"]
    assert not np.allclose(plain.params_, repeated.params_, **TIGHT)  # the weights matter here
    np.testing.assert_allclose(weighted.params_, repeated.params_, **TIGHT)
    np.testing.assert_allclose(weighted.loss_curve_, repeated.loss_curve_, **TIGHT)
    assert weighted.t_ == repeated.t_ == w.sum() * weighted.n_iter_  # patterns count as their weights


def test_the_default_strategy_weights_its_adam_steps_too():
    """The estimator's default ("local", Adam on one shard for a small set), with a batch that
    covers every row: a full-batch Adam step on the weighted rows is the repeated rows' step."""
    X, labels, _, w = data()
    params = dict(hidden_layer_sizes=(6,), max_iter=8, n_iter_no_change=8, random_state=0, dtype="float64",
                  batch_size=int(w.sum()))
    with no_current_client():
        weighted = fit(PPTClassifier(**params), X, labels, sample_weight=w)
        repeated = fit(PPTClassifier(**params), np.repeat(X, w, axis=0), np.repeat(labels, w))
    assert weighted.solver_ == repeated.solver_ == "adam" and weighted.strategy == "local"
    np.testing.assert_allclose(weighted.params_, repeated.params_, **TIGHT)


def test_weights_change_the_fit_and_weights_of_one_do_not(cluster_client):
    """Mini-batch SGD on two shards of a cluster: non-uniform weights give other weights than
    none; all ones give bitwise the unweighted fit (each weighted sum multiplies by 1)."""
    X, labels, targets, w = data()
    params = dict(hidden_layer_sizes=(6,), strategy="block", batch_size=20, max_iter=6, n_shards=2, random_state=0)
    with cluster_client.as_current():
        for kind, y in ((PPTClassifier, labels), (PPTRegressor, targets)):
            plain = fit(kind(**params), X, y)
            ones = fit(kind(**params), X, y, sample_weight=np.ones(len(X)))
            weighted = fit(kind(**params), X, y, sample_weight=w + 0.5)
            assert ones.params_.tobytes() == plain.params_.tobytes()
            assert ones.loss_curve_ == plain.loss_curve_
            assert np.abs(weighted.params_ - plain.params_).max() > 1e-3


@pytest.mark.parametrize("strategy", [ppt.Sync(lr=0.5, momentum=0.9, block=24),
                                      ppt.LocalSGD(lr=0.1, momentum=0.9, block=6, interval=12)],
                         ids=["block", "local"])
def test_weighted_rounds_on_the_cluster_are_the_serial_paths_bits(strategy, cluster_client):
    """The weights travel in the shards (a column of the targets) and each shard's weighted
    sums and weight totals are added along the fixed tree: the serial path's bits, per strategy."""
    X, labels, _, w = data(n=48)
    net = ppt.MLP((4, 5, 3), hidden="tanh", output="softmax", weighted=True)
    Y = np.column_stack([labels, w + 0.25])
    expected, _ = train_serial(net, X, Y, strategy, rounds=4, n_shards=4, seed=2, reproducible="same-p",
                               workers=2)
    with cluster_client.as_current():
        shards = ppt.enter_data(cluster_client, X, Y, n_shards=4)
        try:
            epochs = 4 / strategy.check([12] * 4, 2).rounds_per_epoch(len(X))
            result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=epochs), seed=2)
        finally:
            ppt.exit_data(shards)
    assert result.rounds == 4
    assert result.params.tobytes() == expected.tobytes()
    unweighted, _ = train_serial(ppt.MLP((4, 5, 3), hidden="tanh", output="softmax"), X, labels, strategy,
                                 rounds=4, n_shards=4, seed=2, reproducible="same-p", workers=2)
    assert not np.allclose(unweighted, expected)


def test_partial_fit_takes_weights():
    """One epoch of partial_fit, full batch: the weighted call steps as the repeated rows do, and
    a call without weights goes on from it."""
    X, labels, targets, w = data()
    params = {**FULL_BATCH, "n_shards": 1}
    with no_current_client():
        weighted = PPTClassifier(**params).partial_fit(X, labels, classes=[0, 1, 2], sample_weight=w)
        repeated = PPTClassifier(**params).partial_fit(np.repeat(X, w, axis=0), np.repeat(labels, w),
                                                       classes=[0, 1, 2])
        plain = PPTClassifier(**params).partial_fit(X, labels, classes=[0, 1, 2])
        np.testing.assert_allclose(weighted.params_, repeated.params_, **TIGHT)
        assert not np.allclose(weighted.params_, plain.params_, **TIGHT)
        reg = PPTRegressor(**params).partial_fit(X, targets, sample_weight=w)
        reg_repeated = PPTRegressor(**params).partial_fit(np.repeat(X, w, axis=0), np.repeat(targets, w))
        np.testing.assert_allclose(reg.params_, reg_repeated.params_, **TIGHT)
        before = weighted.params_.copy()
        weighted.partial_fit(X, labels)
    assert weighted.n_iter_ == 1 and not np.array_equal(before, weighted.params_)


def test_early_stopping_splits_the_weights_with_the_rows():
    """The validation rows keep their weights: the validation score is the weighted accuracy on
    MLPClassifier's split (the same seeded, stratified split, the weights a third array in it)."""
    from sklearn.model_selection import train_test_split

    X, labels, _, w = data(n=120)
    w = w + 0.5 * (labels == 2)  # weights that move the accuracy
    clf = PPTClassifier(hidden_layer_sizes=(6,), early_stopping=True, validation_fraction=0.25, max_iter=15,
                        n_shards=1, random_state=3)
    with no_current_client():
        fit(clf, X, labels, sample_weight=w)
    keep = w > 0
    _, X_val, _, y_val, _, w_val = train_test_split(X[keep], labels[keep], w[keep], test_size=0.25, random_state=3,
                                                    stratify=labels[keep])
    assert clf.best_validation_score_ == max(clf.validation_scores_)
    best = int(np.argmax(clf.validation_scores_))
    assert clf.score(X_val, y_val, sample_weight=w_val) == clf.validation_scores_[best]


DEAD = "tcp://127.0.0.1:9"  # nothing listens: a fit that reached for the cluster would fail otherwise


@pytest.mark.parametrize("bad, words", [
    ([1.0, -1.0] + [1.0] * 48, r"sample_weight\[1\] = -1\.0.*>= 0"),
    ([1.0] * 4 + [np.nan] + [1.0] * 45, r"sample_weight\[4\] = nan"),
    ([1.0] * 49, r"shape \(49,\); expected \(50,\)"),
    (np.ones((50, 2)), r"shape \(50, 2\); expected \(50,\)"),
    ([0.0] * 50, "zero for every row"),
    (["a"] * 50, "must be numeric"),
])
def test_bad_weights_are_refused_by_value_before_any_cluster_work(bad, words):
    X, labels, _, _ = data(n=50)
    for kind in (PPTClassifier, PPTRegressor):
        with pytest.raises(ValueError, match=words):
            kind(scheduler=DEAD).fit(X, labels, sample_weight=bad)
    with pytest.raises(ValueError, match=words):
        PPTClassifier(scheduler=DEAD).partial_fit(X, labels, classes=[0, 1, 2], sample_weight=bad)


def test_weights_with_a_module_or_dask_data_are_refused_by_name():
    """A TorchNet's loss is unweighted, and the rows of weight 0 are left out here, not on the workers."""
    import dask.array as da

    X, labels, _, _ = data(n=50)
    with pytest.raises(ValueError, match="does not apply with module="):
        PPTClassifier(module=object(), scheduler=DEAD).fit(X, labels, sample_weight=np.ones(50))
    with pytest.raises(ValueError, match="compute a dask collection first"):
        PPTClassifier(scheduler=DEAD).fit(da.from_array(X, chunks=25), labels, sample_weight=np.ones(50))
    with pytest.raises(ValueError, match="not a dask collection"):
        PPTClassifier(scheduler=DEAD).fit(X, labels, sample_weight=da.ones(50, chunks=25))


def test_a_number_weighs_every_row_and_unknown_arguments_are_still_refused():
    X, labels, _, _ = data()
    with no_current_client():
        twice = fit(PPTClassifier(**FULL_BATCH, n_shards=1), X, labels, sample_weight=2)
        repeated = fit(PPTClassifier(**FULL_BATCH, n_shards=1), np.repeat(X, 2, axis=0), np.repeat(labels, 2))
    # every row twice (not once: the L2 term is divided by the sum of the weights, as scikit-learn's)
    np.testing.assert_allclose(twice.params_, repeated.params_, **TIGHT)
    assert twice.t_ == repeated.t_
    with pytest.raises(TypeError, match="unexpected keyword argument 'weights'"):
        PPTClassifier().fit(X, labels, weights=np.ones(len(X)))


def test_scikit_learns_weight_equivalence_check_passes_in_float64():
    """scikit-learn's own check (weights 0-4 against the rows removed or repeated, predict_proba
    to 1e-7) on the float64 classifier; the float32 default is 2e-6 off (tests/test_estimator.py)."""
    from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data

    clf = PPTClassifier(hidden_layer_sizes=(8,), max_iter=10, learning_rate_init=0.3, random_state=0,
                        dtype="float64")
    with no_current_client(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_sample_weight_equivalence_on_dense_data("PPTClassifier", clf)
