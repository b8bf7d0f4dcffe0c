"""PPTClassifier and PPTRegressor: scikit-learn's own estimator checks, Pipeline and
GridSearchCV, dask-array input, a fit with no client around, and MNIST.

scikit-learn is a test extra: the estimators never import it (checked in a fresh process).
"""

import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import ppt_dask as ppt
from ppt_dask import PPTClassifier, PPTRegressor


def blobs(n=300, seed=0, k=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=4.0, size=(k, 4))
    y = rng.integers(0, k, n)
    return centers[y] + rng.normal(size=(n, 4)), y


# ---- first, while no client of this module exists ------------------------------------------

NO_CLIENT_SCRIPT = textwrap.dedent("""
    import json, sys, time, warnings
    import numpy as np, psutil
    import ppt_dask as ppt
    assert "sklearn" not in sys.modules, "importing ppt_dask imported scikit-learn"
    from distributed import default_client
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)); y = (X[:, 0] > 0).astype(int)
    clf = ppt.PPTClassifier(hidden_layer_sizes=(8,), max_iter=200, n_workers=2, random_state=0)
    try:
        clf.predict(X)
    except ValueError as exc:   # not fitted: scikit-learn's NotFittedError, a ValueError
        unfitted = type(exc).__name__
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    try:
        default_client()
        left_client = True
    except ValueError:
        left_client = False
    def workers():  # multiprocessing's resource tracker lives until the interpreter exits
        return [p for p in psutil.Process().children(recursive=True)
                if "resource_tracker" not in " ".join(p.cmdline())]
    deadline = time.monotonic() + 30
    while workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    print(json.dumps({"score": clf.score(X, y), "unfitted": unfitted, "left_client": left_client,
                      "children": len(workers()),
                      "sklearn": "sklearn" in sys.modules}))
""")


def test_fit_with_no_client_starts_and_closes_a_local_cluster():
    """Worker processes are started for the fit and none is left after it."""
    out = subprocess.run([sys.executable, "-c", NO_CLIENT_SCRIPT], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"score": pytest.approx(report["score"]), "unfitted": "NotFittedError",
                      "left_client": False, "children": 0, "sklearn": True}
    assert report["score"] > 0.9


def test_without_scikit_learn_the_estimators_say_how_to_get_it_and_the_rest_runs():
    """scikit-learn is the [sklearn] extra: with it missing, the estimators raise an ImportError
    naming the extra, and training through the API still works (the serial path as oracle)."""
    script = textwrap.dedent("""
        import sys
        sys.modules["sklearn"] = None  # as if it were not installed
        import numpy as np
        import ppt_dask as ppt
        from ppt_dask.algorithms.serial import train_serial
        try:
            ppt.PPTClassifier
        except ImportError as exc:
            print("refused:", exc)
        X = np.random.default_rng(0).normal(size=(64, 3)); y = (X[:, 0] > 0).astype(int)
        net = ppt.MLP((3, 4, 2), hidden="tanh", output="softmax")
        client = ppt.connect(n_workers=1, processes=False)
        shards = ppt.enter_data(client, X, y, n_shards=2)
        result = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3), seed=1)
        serial, _ = train_serial(net, X, y, ppt.Sync(lr=0.5), rounds=3, n_shards=2, seed=1, reproducible="same-p",
                                 workers=1)
        print("bitwise:", np.array_equal(result.params, serial))
        ppt.exit_data(shards); ppt.cluster.close(client)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    hint = "PPTClassifier and PPTRegressor need scikit-learn: pip install 'ppt_dask[sklearn]'"
    assert f"refused: {hint}" in out.stdout, out.stdout
    assert "bitwise: True" in out.stdout, out.stdout


def test_bad_hyper_parameters_fail_before_any_cluster_work():
    """A ValueError naming the value, raised before connecting (the address is dead)."""
    X, y = blobs(50)
    dead = "tcp://127.0.0.1:9"
    cases = [({"learning_rate_init": -1.0}, "-1.0"), ({"momentum": 1.5}, "1.5"),
             ({"hidden_layer_sizes": (10, 0)}, "0"), ({"activation": "swish"}, "swish"),
             ({"strategy": "nope"}, "nope"), ({"batch_size": 0}, "0"), ({"max_iter": 2.5}, "2.5"),
             ({"dtype": "int8"}, "int8"), ({"strategy_params": {"local_epoch": -3}, "strategy": "ppt"}, "-3"),
             ({"scheduler": "not an address"}, "not an address")]
    for params, shown in cases:
        with pytest.raises(ValueError, match=shown.replace("(", r"\(")):
            PPTClassifier(scheduler=dead).set_params(**params).fit(X, y)
    bad_X = X.copy()
    bad_X[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X\[3, 1\] = nan"):
        PPTClassifier(scheduler=dead).fit(bad_X, y)
    with pytest.raises(ValueError, match="continuous"):
        PPTClassifier(scheduler=dead).fit(X, y + 0.5)
    with pytest.raises(ValueError, match="y has 49 rows but X has 50"):
        PPTRegressor(scheduler=dead).fit(X, y[:-1])
    with pytest.raises(ValueError, match="classes must be passed"):
        PPTClassifier(scheduler=dead).partial_fit(X, y)


# ---- one shared in-process cluster for everything below -----------------------------------


@pytest.fixture(scope="module")
def client():
    """Two worker threads; the newest client is the default one, which fit finds."""
    client = ppt.connect(n_workers=2, processes=False, dashboard_address=None)
    client.wait_for_workers(2, timeout=30)
    yield client
    ppt.cluster.close(client)


# Small and quick: scikit-learn's checks fit a few hundred times.
FAST = dict(hidden_layer_sizes=(8,), max_iter=10, learning_rate_init=0.3, random_state=0)


def expected_failures(estimator) -> dict:
    """The one check expected to fail, and why: float32 (the classifier's default) puts the
    weighted sums and the repeated rows' sums, added in another order, 2e-6 apart in
    predict_proba where the check asks 1e-7. The float64 classifier passes it
    (tests/test_sample_weight.py), as the float64 regressor does here."""
    if estimator._dtype() != "float32":
        return {}
    return {"check_sample_weight_equivalence_on_dense_data": "float32 sums added in another order (2e-6 > 1e-7)"}


with warnings.catch_warnings():  # by design they do not inherit from sklearn.base.BaseEstimator
    warnings.filterwarnings("ignore", message="Estimator .* does not inherit from")
    SKLEARN_CHECKS = parametrize_with_checks(
        [PPTClassifier(**FAST), PPTRegressor(**{**FAST, "learning_rate_init": 0.1, "batch_size": 50})],
        expected_failed_checks=expected_failures, xfail_strict=True)


@SKLEARN_CHECKS
def test_sklearn_contract(estimator, check, client):
    """Every check of scikit-learn's, one expected to fail by this estimator (:func:`expected_failures`).

    scikit-learn skips four by itself here (two per estimator), each naming its reason:
    ``check_estimators_data_not_an_array`` with pandas objects ("pandas is not installed")
    and ``check_array_api_input`` ("SCIPY_ARRAY_API is not set"); pandas and the array API
    are not dependencies of this project."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Maximum iterations")
        check(estimator)


def test_pipeline_and_grid_search(client):
    X, y = blobs(240)
    X = X * 50 + 200  # unscaled: the scaler in front matters
    pipe = Pipeline([("scale", StandardScaler()), ("clf", PPTClassifier(**FAST))])
    search = GridSearchCV(pipe, {"clf__hidden_layer_sizes": [(4,), (16,)]}, cv=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search.fit(X, y)
    assert search.best_params_["clf__hidden_layer_sizes"] in [(4,), (16,)]
    assert search.best_estimator_.named_steps["clf"].coefs_[0].shape[0] == 4
    assert search.score(X, y) > 0.9
    assert search.best_estimator_.predict_proba(X).shape == (240, 3)


def test_fit_is_reproducible_and_clone_keeps_parameters(client):
    X, y = blobs(200, k=2)
    a = PPTClassifier(**FAST).fit(X, y)
    b = clone(a).fit(X, y)
    np.testing.assert_array_equal(a.params_, b.params_)
    assert b.get_params() == a.get_params() and b.n_shards_ == 1  # local SGD: one shard for a small set
    # coefs_ and intercepts_ are the flat vector's layers, sklearn's shapes
    assert [W.shape for W in a.coefs_] == [(4, 8), (8, 2)]
    assert a.params_.size == sum(W.size + b.size for W, b in zip(a.coefs_, a.intercepts_))
    assert len(a.loss_curve_) == a.n_iter_ == 10 and a.t_ == 2000


BUILT_ON = []  # the workers that built the row blocks of a dask array (threads: one process)


def _load_rows(X, i):
    from distributed import get_worker

    BUILT_ON.append(get_worker().address)  # get_worker raises ValueError outside a worker
    return X[i * 100:(i + 1) * 100]


def test_dask_arrays_stay_on_the_workers(client):
    """The shards of a dask array are built by tasks on the workers; predictions are lazy."""
    da = pytest.importorskip("dask.array")
    import dask

    X, y = blobs(400)
    BUILT_ON.clear()
    X_d = da.concatenate([da.from_delayed(dask.delayed(_load_rows)(X, i), (100, 4), X.dtype)
                          for i in range(4)])
    y_d = da.from_array(y, chunks=100)
    est = PPTClassifier(**FAST).fit(X_d, y_d)
    ref = PPTClassifier(**FAST).fit(X, y)
    assert len(BUILT_ON) >= 4 and set(BUILT_ON) <= set(ppt.cluster.worker_addresses(client))
    np.testing.assert_allclose(est.params_, ref.params_, rtol=1e-12, atol=1e-12)
    proba = est.predict_proba(X_d)
    assert isinstance(proba, da.Array) and proba.shape == (400, 3)
    np.testing.assert_allclose(proba.compute(), ref.predict_proba(X), rtol=1e-12)
    np.testing.assert_array_equal(est.predict(X_d).compute(), ref.predict(X))
    assert est.score(X_d, y_d) == ref.score(X, y)


def test_partial_fit_continues_one_epoch_at_a_time(client):
    X, y = blobs(300)
    labels = np.array(["a", "b", "c"])[y]
    est = PPTClassifier(**FAST)
    est.partial_fit(X[:150], labels[:150], classes=["c", "b", "a"])
    first = est.params_.copy()
    for _ in range(4):
        est.partial_fit(X, labels)
    # n_iter_ counts the last call's epochs, loss_curve_ every call's, as MLPClassifier's
    assert list(est.classes_) == ["a", "b", "c"] and est.n_iter_ == 1 and len(est.loss_curve_) == 5
    assert not np.array_equal(first, est.params_)
    assert est.loss_curve_[-1] < est.loss_curve_[0]
    assert est.score(X, labels) > 0.9
    with pytest.raises(ValueError, match="X has 3 features, but PPTClassifier is expecting 4"):
        est.partial_fit(X[:, :3], labels)
    with pytest.raises(ValueError, match=r"labels \['d'\]"):
        est.partial_fit(X[:2], np.array(["a", "d"]))


def test_tol_rule_stops_at_the_same_epoch_as_scikit_learn(client):
    """With a huge tol every epoch after the first is 'no improvement': MLPClassifier stops
    when more than n_iter_no_change of them follow the first, after n_iter_no_change + 2."""
    X, y = blobs(200)
    est = PPTClassifier(**{**FAST, "max_iter": 50, "tol": 10.0, "n_iter_no_change": 3}).fit(X, y)
    assert est.n_iter_ == 5 and len(est.loss_curve_) == 5
    # one train call, stopped from inside at the round that completes epoch 5
    assert [r["round"] for r in est.history_] == list(range(5))
    with pytest.warns(UserWarning, match="Maximum iterations \\(3\\)"):
        PPTClassifier(**{**FAST, "max_iter": 3}).fit(X, y)


def test_digits_epochs_count_once_and_the_warning_only_after_max_iter(client):
    """scikit-learn's digits, MLPClassifier's call: n_iter_ counts each epoch once (one entry of
    loss_curve_ each, the rounds cover exactly those epochs), the tol rule fires at the epoch
    its own replay over loss_curve_ names, and no ConvergenceWarning when it stopped early."""
    from sklearn.datasets import load_digits

    from ppt_dask.sklearn.epochs import ToleranceRule

    X, y = load_digits(return_X_y=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = PPTClassifier(max_iter=300, random_state=0).fit(X / 16, y)
    converge = [w for w in caught if "Maximum iterations" in str(w.message)]
    assert clf.n_iter_ == len(clf.loss_curve_)
    rounds_per_epoch = (clf.history_[0]["round"] + 1) / clf.history_[0]["epoch"]
    assert clf.n_iter_ <= clf.history_[-1]["epoch"] < clf.n_iter_ + 1 / rounds_per_epoch + 1e-9
    rule = ToleranceRule(clf.tol, clf.n_iter_no_change)
    fired = [rule.add(loss) for loss in clf.loss_curve_]
    if clf.n_iter_ < clf.max_iter:  # stopped by the rule: at its first firing, no warning
        assert fired.index(True) == clf.n_iter_ - 1 and not converge
    else:
        assert True not in fired and len(converge) == 1
    assert clf.score(X / 16, y) > 0.95


def test_regressor_multi_output_and_strategies(client):
    """Two targets; every strategy of choose.make behind the same estimator."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 5))
    Y = np.c_[X[:, 0] - X[:, 1], 0.5 * X[:, 2]]
    # stale gradients and heavy momentum diverge: the asynchronous run takes a lighter one
    for strategy, extra, momentum, r2 in [("block", None, 0.9, 0.95), ("epoch", None, 0.9, 0.5),
                                          ("ppt", None, 0.9, 0.95), ("average", {"local_epochs": 1}, 0.9, 0.9),
                                          ("async", None, 0.5, 0.9)]:
        est = PPTRegressor(hidden_layer_sizes=(16,), activation="tanh", max_iter=15,
                           batch_size="auto" if strategy == "epoch" else 100,  # epoch: the whole set
                           momentum=momentum, strategy=strategy, strategy_params=extra, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(X, Y)
        assert est.predict(X).shape == (400, 2) and 1 <= est.n_iter_ <= 15  # tol may stop it early
        assert est.score(X, Y) > r2, (strategy, est.score(X, Y))


def test_divergence_keeps_the_last_good_weights_and_warns(client, capsys):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = 1e3 * X[:, 0]  # unscaled targets and a huge step: the loss overflows
    est = PPTRegressor(hidden_layer_sizes=(4,), learning_rate_init=50.0, max_iter=20, random_state=0,
                       verbose=True, solver="sgd")  # Adam's steps are bounded by the rate: it would not overflow
    with pytest.warns(UserWarning, match="diverged at round"):
        est.fit(X, y)
    assert np.isfinite(est.params_).all() and est.n_iter_ < 20
    assert "Iteration 1, loss = " in capsys.readouterr().out


def test_mnist_subset_with_default_settings(client):
    data = ppt.datasets.mnist(n_train=6000, n_test=1000)  # one tenth, for speed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = PPTClassifier(random_state=0).fit(data.X, data.y)
    assert clf.n_iter_ < clf.max_iter  # stopped by the tol rule
    assert clf.score(data.X_test, data.y_test) > 0.92


@pytest.mark.slow
def test_mnist_full_with_default_settings():
    """The closing-note number: full MNIST, default settings, two worker processes."""
    import time

    data = ppt.datasets.mnist()
    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        t0 = time.perf_counter()
        clf = PPTClassifier(random_state=0).fit(data.X, data.y)
        seconds = time.perf_counter() - t0
        accuracy = clf.score(data.X_test, data.y_test)
    finally:
        ppt.cluster.close(client)
    print(f"\nMNIST default settings: test accuracy {accuracy:.4f}, fit {seconds:.1f} s, "
          f"{clf.n_iter_} epochs, loss {clf.loss_curve_[-1]:.4f}")
    assert accuracy > 0.97


def test_defaults_are_local_sgd_in_float32_and_match_the_serial_reference(client):
    """PPTClassifier()'s defaults: LocalSGD, 50-row steps on each of 2 shards (batch 100),
    a round at most a pass over a shard, lr 0.05, float32; its weights are bitwise those of
    the serial reference run with that strategy. A set smaller than 60 batches of 100: one
    shard, Adam (lr 0.001, 200-row steps, each pass in a new order), as MLPClassifier.
    PPTRegressor keeps float64."""
    from ppt_dask.algorithms.localsgd import LocalSGD
    from ppt_dask.algorithms.serial import train_serial
    from ppt_dask.sklearn.contract import seed_of

    X, y = blobs(6000, k=3)  # 60 batches of 100: one shard per worker
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = PPTClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(X, y)
        small = PPTClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(X[:5999], y[:5999])
        reg = PPTRegressor(hidden_layer_sizes=(8,), max_iter=2, random_state=0).fit(X[:400], X[:400, 0])
    assert clf.params_.dtype == np.float32 and reg.params_.dtype == np.float64
    assert clf.batch_size_ == 100 and clf.n_shards_ == 2 and clf.n_iter_ == 2 and clf.solver_ == "sgd"
    assert (small.n_shards_, small.batch_size_, small.solver_) == (1, 200, "adam")
    assert clf.history_[0]["epoch"] == pytest.approx(1.0)  # 60 steps of 50 rows: a pass of a 3000-row shard
    assert small.history_[0]["epoch"] == pytest.approx(5800 / 5999)  # 29 steps of 200 rows: all that fit
    net = ppt.MLP((4, 8, 3), hidden="relu", output="softmax", dtype="float32")
    for est, rows, block, steps, n_shards, adam in ((clf, 6000, 50, 60, 2, False), (small, 5999, 200, 29, 1, True)):
        strategy = LocalSGD(lr=0.001 if adam else 0.05, momentum=0.9, l2=0.0001, block=block,
                            interval=steps * block, solver="adam" if adam else "sgd", shuffle=adam)
        params, _ = train_serial(net, X[:rows], y[:rows], strategy, len(est.history_), n_shards=n_shards,
                                 seed=seed_of(0))
        np.testing.assert_array_equal(est.params_, params)


def test_digits_with_the_defaults_reach_mlpclassifiers_accuracy(client):
    """scikit-learn's digits (1347/450, the race's split): the defaults choose Adam on one
    shard and reach MLPClassifier()'s 98.0 % (the local momentum SGD of before: 96.9 %)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = PPTClassifier(random_state=0).fit(X_train, y_train)
    assert clf.solver_ == "adam" and clf.n_shards_ == 1
    assert clf.score(X_test, y_test) >= 0.98


def test_solver_is_checked_and_refused_where_it_does_not_apply():
    X, y = blobs(100)
    with pytest.raises(ValueError, match="solver must be one of"):
        PPTClassifier(solver="lbfgs").fit(X, y)
    with pytest.raises(ValueError, match="solver='adam' applies to strategy local, not to strategy block"):
        PPTClassifier(solver="adam", strategy="block").fit(X, y)
    with pytest.raises(ValueError, match="give solver="):
        PPTClassifier(strategy_params={"solver": "adam"}).fit(X, y)
