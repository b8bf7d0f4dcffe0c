"""PPTClassifier where scikit-learn and dask-ml users put it: joblib's loky processes, a Dask
task (dask's joblib backend, dask-ml's Incremental), many fits without a client, dask
DataFrames both ways, and MLPClassifier's API (n_iter_, early stopping, multilabel,
float64 probabilities). Real processes and real clusters; every test has a time limit.

The oracle for a fit trained in this process is the same fit on a cluster: the same rounds
in the same order, so the same weights to the bit for the same seed and shard count.
"""

import contextlib
import json
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_digits
from sklearn.neural_network import MLPClassifier

import ppt_dask as ppt
from ppt_dask import PPTClassifier

X_DIGITS, Y_DIGITS = load_digits(return_X_y=True)
X_DIGITS = X_DIGITS / 16
SMALL = dict(hidden_layer_sizes=(16,), max_iter=5, random_state=0)


def run_script(code: str, timeout: float = 120) -> dict:
    """``code`` in a fresh interpreter; its last line of output, read as JSON."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cluster_client():
    """A LocalCluster of two worker processes, whose client is not the default one: a test
    makes it current (``as_current``) where a user would have it."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


def quietly(call):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return call()


# ---- where the fit runs ---------------------------------------------------------------------


@pytest.mark.timeout(180)
@contextlib.contextmanager
def no_current_client():
    """No current Dask client for a while: the clients the suite's session fixtures made (the
    default ones) are set aside, as a user's process without a client has none. distributed's
    registry of global clients (``distributed.client._global_clients``) is not public: a test
    helper only."""
    import dask
    import distributed.client as dc

    saved = dict(dc._global_clients)
    dc._global_clients.clear()
    try:
        with dask.config.set(scheduler="threads"):  # what dask computes with where no client is
            yield
    finally:
        dc._global_clients.update(saved)


def test_a_fit_in_this_process_gives_the_clusters_weights_bitwise(cluster_client):
    """Without a client a one-shard fit trains here; with the client, on a worker: the same bits."""
    with no_current_client():  # the suite's own clients (conftest's session fixtures) set aside
        here = quietly(lambda: PPTClassifier(**SMALL).fit(X_DIGITS, Y_DIGITS))
    assert here.placement_.startswith("in this process")
    with cluster_client.as_current():
        there = quietly(lambda: PPTClassifier(**SMALL).fit(X_DIGITS, Y_DIGITS))
    assert there.placement_ == "the current client's cluster"
    np.testing.assert_array_equal(here.params_, there.params_)
    assert here.loss_curve_ == there.loss_curve_ and here.n_iter_ == there.n_iter_ == 5


@pytest.mark.timeout(150)
def test_a_search_with_n_jobs_2_trains_in_lokys_processes():
    """joblib's loky workers cannot start a LocalCluster (its start method is not
    multiprocessing's): a two-shard fit there, which would want a cluster, trains in its
    process with a one-time warning, and the search gives the n_jobs=1 search's scores."""
    out = run_script("""
        import json, warnings
        import numpy as np
        from sklearn.model_selection import GridSearchCV
        import ppt_dask as ppt
        rng = np.random.default_rng(0)
        X = rng.normal(size=(2000, 6)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
        est = ppt.PPTClassifier(hidden_layer_sizes=(8,), max_iter=10, learning_rate_init=0.3, random_state=0,
                                n_shards=2)
        grid = {"alpha": [1e-4, 1e-2]}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            two = GridSearchCV(est, grid, n_jobs=2, cv=3).fit(X, y)
            one = GridSearchCV(est, grid, n_jobs=1, cv=3, error_score="raise").fit(X, y)
        print(json.dumps({"two": two.cv_results_["mean_test_score"].tolist(),
                          "one": one.cv_results_["mean_test_score"].tolist()}))
    """)
    assert out["two"] == out["one"] and min(out["two"]) > 0.9


def test_a_fit_in_this_process_imports_neither_dask_nor_distributed():
    """A fit without a client that trains in this process (one shard here; a joblib worker's
    fits alike) needs no cluster: it imports neither dask nor distributed, whose import (about
    0.3 s, most of the estimator's) every loky worker of a search would pay again. A fit
    under a client still finds the client (test_a_fit_in_this_process_gives_the_clusters_weights_bitwise)."""
    out = run_script("""
        import json, sys, warnings
        from sklearn.datasets import load_digits
        import ppt_dask as ppt
        X, y = load_digits(return_X_y=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = ppt.PPTClassifier(max_iter=60, random_state=0).fit(X / 16, y)
        print(json.dumps({"imported": sorted(m for m in ("dask", "distributed") if m in sys.modules),
                          "placement": est.placement_, "score": est.score(X, y)}))
    """)
    assert out["placement"].startswith("in this process") and out["score"] > 0.8, out  # it trained
    assert out["imported"] == [], out


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_process_warning_is_said_once_in_a_process_that_cannot_start_workers():
    out = run_script("""
        import json, warnings
        import numpy as np
        from joblib import Parallel, delayed
        def fit_twice():
            import ppt_dask as ppt
            rng = np.random.default_rng(0)
            X = rng.normal(size=(2000, 4)); y = (X[:, 0] > 0).astype(int)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(2):
                    est = ppt.PPTClassifier(hidden_layer_sizes=(4,), max_iter=1, n_shards=2).fit(X, y)
            return [str(w.message) for w in caught if w.category.__name__ == "PlacementWarning"], est.placement_
        said, where = Parallel(n_jobs=2)(delayed(fit_twice)() for _ in range(1))[0]
        print(json.dumps({"said": said, "where": where}))
    """)
    assert len(out["said"]) == 1 and "cannot start a LocalCluster's workers" in out["said"][0]
    assert out["where"] == "in this process: it cannot start worker processes"


@pytest.mark.timeout(180)
def test_a_search_under_dasks_joblib_backend_trains_inside_the_tasks(cluster_client):
    """Each fit is a task on a worker that holds its thread: it trains in that task's process
    (on today's code the shards' tasks waited for that thread: 120 s, then a TimeoutError)."""
    import joblib
    from sklearn.model_selection import GridSearchCV

    grid = {"alpha": [1e-4, 1e-1]}
    with cluster_client.as_current(), joblib.parallel_backend("dask"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        search = GridSearchCV(PPTClassifier(**SMALL), grid, cv=2).fit(X_DIGITS, Y_DIGITS)
    here = quietly(lambda: GridSearchCV(PPTClassifier(**SMALL), grid, cv=2).fit(X_DIGITS, Y_DIGITS))
    np.testing.assert_array_equal(search.cv_results_["mean_test_score"], here.cv_results_["mean_test_score"])


@pytest.mark.timeout(180)
def test_dask_ml_incremental_under_a_client_and_without_one(cluster_client):
    """partial_fit inside a task trains there; without a client each block trains here (no
    cluster per block); both give the weights of partial_fit called block by block."""
    import dask.array as da
    from dask_ml.wrappers import Incremental

    Xd, yd = da.from_array(X_DIGITS, chunks=450), da.from_array(Y_DIGITS, chunks=450)
    classes = np.arange(10)
    oracle = PPTClassifier(**SMALL)
    with no_current_client():  # the suite's own clients (conftest's session fixtures) set aside
        for a in range(0, len(X_DIGITS), 450):
            quietly(lambda a=a: oracle.partial_fit(X_DIGITS[a:a + 450], Y_DIGITS[a:a + 450], classes=classes))
    with cluster_client.as_current():
        inc = quietly(lambda: Incremental(PPTClassifier(**SMALL), shuffle_blocks=False).fit(Xd, yd, classes=classes))
        assert inc.estimator_.placement_ == "in this process: inside a Dask task"
        np.testing.assert_array_equal(inc.estimator_.params_, oracle.params_)
    with no_current_client():
        alone = quietly(lambda: Incremental(PPTClassifier(**SMALL), shuffle_blocks=False).fit(Xd, yd, classes=classes))
    assert alone.estimator_.placement_.startswith("in this process")
    np.testing.assert_array_equal(alone.estimator_.params_, oracle.params_)
    assert alone.estimator_.n_iter_ == 1 and len(alone.estimator_.loss_curve_) == 4


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_fits_without_a_client_share_one_cluster_closed_at_exit():
    """Two fits that want a cluster (two shards) share one LocalCluster; a one-shard fit trains
    here; nothing is left running after the interpreter exits."""
    out = run_script("""
        import json, warnings
        import numpy as np, psutil
        import ppt_dask as ppt
        from ppt_dask.sklearn import shared
        warnings.simplefilter("ignore")
        rng = np.random.default_rng(0)
        X = rng.normal(size=(2000, 4)); y = (X[:, 0] > 0).astype(int)
        addresses = []
        for _ in range(2):
            est = ppt.PPTClassifier(hidden_layer_sizes=(4,), max_iter=1, n_shards=2, n_workers=2).fit(X, y)
            addresses.append(shared._SHARED["client"].scheduler.address)
        small = ppt.PPTClassifier(hidden_layer_sizes=(4,), max_iter=1).fit(X, y)
        print(json.dumps({"addresses": addresses, "where": est.placement_, "small": small.placement_,
                          "pid": __import__("os").getpid()}))
    """)
    assert out["addresses"][0] == out["addresses"][1]
    assert out["where"] == "the shared LocalCluster (no client given)"
    assert out["small"].startswith("in this process")
    import psutil
    assert not [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] == out["pid"]]


# ---- dask collections both ways -------------------------------------------------------------


@pytest.mark.timeout(120)
def test_dask_dataframe_predict_without_a_client_keeps_the_index():
    import dask.dataframe as dd

    columns = [f"p{i}" for i in range(64)]
    index = np.arange(len(X_DIGITS)) * 10 + 3
    frame = pd.DataFrame(X_DIGITS, columns=columns, index=index)
    df = dd.from_pandas(frame, npartitions=3)
    ys = dd.from_pandas(pd.Series(Y_DIGITS, index=index), npartitions=3)
    clf = quietly(lambda: PPTClassifier(**SMALL).fit(df, ys))
    numpy_fit = quietly(lambda: PPTClassifier(**SMALL).fit(frame, Y_DIGITS))
    np.testing.assert_array_equal(clf.params_, numpy_fit.params_)
    predicted = clf.predict(df)
    assert isinstance(predicted, dd.Series)
    got = predicted.compute()
    assert got.index.tolist() == index.tolist()
    assert got.to_numpy().tolist() == clf.predict(frame).tolist()
    proba = clf.predict_proba(df)
    assert proba.dtype == np.float64
    np.testing.assert_array_equal(proba.compute(), clf.predict_proba(frame))
    assert clf.score(df, ys) == clf.score(frame, Y_DIGITS)


@pytest.mark.timeout(120)
def test_a_wait_on_the_cluster_names_what_it_waited_for(cluster_client):
    import dask

    from ppt_dask.sklearn.contract import compute

    slow = dask.delayed(__import__("time").sleep)(5)
    with cluster_client.as_current(), pytest.raises(TimeoutError, match="waited 0.5 s for the rows of X"):
        compute(slow, 0.5, "the rows of X")


# ---- MLPClassifier's API --------------------------------------------------------------------


def test_probabilities_are_float64_as_every_scikit_learn_classifier():
    clf = quietly(lambda: PPTClassifier(**SMALL).fit(X_DIGITS, Y_DIGITS))
    assert clf.params_.dtype == np.float32 and clf.predict_proba(X_DIGITS[:5]).dtype == np.float64
    assert clf.predict_log_proba(X_DIGITS[:5]).dtype == np.float64


def test_n_iter_counts_as_mlpclassifier_under_warm_start_and_partial_fit():
    """The oracle is MLPClassifier itself, called the same way."""
    counts = {}
    for name, make in (("mlp", lambda: MLPClassifier(hidden_layer_sizes=(16,), max_iter=5, random_state=0)),
                       ("ppt", lambda: PPTClassifier(**SMALL))):
        warm = make().set_params(warm_start=True, tol=0.0)
        first = quietly(lambda warm=warm: warm.fit(X_DIGITS, Y_DIGITS)).n_iter_
        second = quietly(lambda warm=warm: warm.fit(X_DIGITS, Y_DIGITS)).n_iter_
        part = make()
        calls = [quietly(lambda part=part: part.partial_fit(X_DIGITS, Y_DIGITS, classes=np.arange(10))).n_iter_
                 for _ in range(3)]
        counts[name] = (first, second, calls, len(warm.loss_curve_), len(part.loss_curve_))
    assert counts["ppt"] == counts["mlp"] == (5, 5, [1, 1, 1], 10, 3)


def test_early_stopping_keeps_the_best_validation_weights():
    """MLPClassifier's rule on the validation accuracy: one score an epoch, stopped after more
    than n_iter_no_change epochs without an improvement of tol, the best epoch's weights kept."""
    from sklearn.model_selection import train_test_split

    clf = quietly(lambda: PPTClassifier(hidden_layer_sizes=(16,), random_state=0, early_stopping=True,
                                        validation_fraction=0.2, n_iter_no_change=3, max_iter=100)
                  .fit(X_DIGITS, Y_DIGITS))
    scores = clf.validation_scores_
    assert len(scores) == clf.n_iter_ == len(clf.loss_curve_) < 100
    assert clf.best_validation_score_ == max(scores) > 0.85
    best, count = -np.inf, 0  # the rule replayed over the scores fires at the last epoch
    for k, score in enumerate(scores):
        count = count + 1 if score < best + clf.tol else 0
        best = max(best, score)
        assert (count > clf.n_iter_no_change) == (k == len(scores) - 1)
    seed = clf.random_state  # the split is MLPClassifier's: seeded and stratified
    _, X_val, _, y_val = train_test_split(X_DIGITS, Y_DIGITS, test_size=0.2, random_state=seed,
                                          stratify=Y_DIGITS)
    assert clf.score(X_val, y_val) == clf.best_validation_score_
    with pytest.raises(ValueError, match="partial_fit does not support early_stopping"):
        PPTClassifier(early_stopping=True).partial_fit(X_DIGITS, Y_DIGITS, classes=np.arange(10))
    with pytest.raises(ValueError, match="validation_fraction must be in \\(0, 1\\), got 1.5"):
        PPTClassifier(early_stopping=True, validation_fraction=1.5).fit(X_DIGITS, Y_DIGITS)


def test_a_multilabel_y_fits_a_sigmoid_output_per_label():
    Y = np.c_[Y_DIGITS % 2, Y_DIGITS > 4, Y_DIGITS == 0].astype(int)
    clf = quietly(lambda: PPTClassifier(hidden_layer_sizes=(32,), max_iter=60, random_state=0).fit(X_DIGITS, Y))
    assert clf.out_activation_ == "logistic" and clf.classes_.tolist() == [0, 1, 2]
    predicted = clf.predict(X_DIGITS)
    assert predicted.shape == Y.shape and set(np.unique(predicted)) <= {0, 1}
    proba = clf.predict_proba(X_DIGITS)
    assert proba.shape == Y.shape and proba.dtype == np.float64
    np.testing.assert_array_equal(predicted, (proba > 0.5).astype(int))
    assert clf.score(X_DIGITS, Y) == np.all(predicted == Y, axis=1).mean() > 0.85
    with pytest.raises(ValueError, match="indicator matrix of 0 and 1"):
        PPTClassifier().fit(X_DIGITS, Y * 2)


def test_an_unknown_fit_argument_is_refused_by_name():
    """sample_weight is taken (tests/test_sample_weight.py); anything else is a TypeError."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'weights'"):
        PPTClassifier().fit(X_DIGITS, Y_DIGITS, weights=1)


def test_in_process_rounds_run_on_one_blas_thread_as_a_worker_and_put_it_back():
    """A default worker computes on one BLAS thread; the rounds in this process do too (two
    contended threads made a digits fit 4-17x as long, and a BLAS with two threads changes
    the last bits), and the caller's threads come back. The suite runs on one thread
    (conftest's one_blas_thread): here the caller has two, as a user's process."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from ppt_dask.algorithms.localsgd import LocalSGD
    from ppt_dask.sklearn.inprocess import train_here

    def threads():
        return {i["internal_api"]: i["num_threads"] for i in threadpool_info()}

    seen = []
    net = ppt.MLP((64, 16, 10), hidden="relu", output="softmax", dtype="float32")
    strategy = LocalSGD(lr=0.05, momentum=0.9, block=100, interval=500)
    with threadpool_limits(limits=2):
        before = threads()
        train_here(net, X_DIGITS, Y_DIGITS, strategy, 2, n_shards=1, seed=0,
                   on_round=lambda record: seen.append(threads()))
        after = threads()
    assert seen and all(set(s.values()) == {1} for s in seen)
    assert after == before and 2 in before.values()
