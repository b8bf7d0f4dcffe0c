"""The head keeps to the cores its machine's workers leave while a run trains, and gives them back."""

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import ppt_dask as ppt
from ppt_dask.engine import headblas


def blas_threads() -> set:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_local_workers_are_counted_and_a_remote_one_is_not(client4, workers4):
    assert headblas.local_workers(workers4[:3]) == 3
    assert headblas.local_workers(["tls://localhost:8786"]) == 1
    assert headblas.local_workers(["tcp://192.0.2.77:8786"]) == 0  # TEST-NET-1: no machine's own address
    assert headblas.local_workers(["tcp://192.0.2.77:8786", workers4[0]]) == 1


def test_the_head_takes_the_cores_the_workers_leave_at_least_one():
    assert headblas.head_threads(cores=8, n_local=1) == 7
    assert headblas.head_threads(cores=8, n_local=8) == 1
    assert headblas.head_threads(cores=2, n_local=4) == 1
    assert headblas.head_threads(cores=2, n_local=0) is None  # no worker here: no limit


def test_beside_local_workers_the_setting_drops_and_comes_back(workers4):
    want = headblas.head_threads(headblas.cores(), len(workers4))
    with threadpool_limits(want + 1, user_api="blas"):
        with headblas.beside(workers4):
            assert blas_threads() == {want}
        assert blas_threads() == {want + 1}
        with headblas.beside(["tcp://192.0.2.77:8786"]):
            assert blas_threads() == {want + 1}
    with threadpool_limits(1, user_api="blas"), headblas.beside(workers4):
        assert blas_threads() == {1}  # never more than it had


def test_a_run_on_local_workers_checks_with_the_cores_they_leave_then_gives_them_back(client4, workers4):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 5))
    y = (X[:, 0] > 0).astype(int)
    workers = workers4[: max(2, headblas.cores())]
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers)
    want = headblas.head_threads(headblas.cores(), len(workers))
    seen = []
    with threadpool_limits(want + 1, user_api="blas"):
        ppt.train(ppt.MLP((5, 4, 2)), shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=2),
                  on_round=lambda record: seen.append(blas_threads()) and False)
        after = blas_threads()
    assert seen and all(s == {want} for s in seen)
    assert after == {want + 1}
