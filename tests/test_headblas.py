"""The head takes one BLAS thread while a run's workers share its machine, and gives it back."""

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import ppt_dask as ppt
from ppt_dask.engine import headblas


def blas_threads() -> set:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_local_workers_share_the_machine_and_a_remote_one_does_not(client4, workers4):
    assert headblas.shares_machine(workers4[:1])
    assert headblas.shares_machine(["tls://localhost:8786"])
    assert not headblas.shares_machine(["tcp://192.0.2.77:8786"])  # TEST-NET-1: no machine's own address
    assert headblas.shares_machine(["tcp://192.0.2.77:8786", workers4[0]])


def test_one_thread_only_beside_local_workers_and_the_setting_comes_back(workers4):
    with threadpool_limits(2, user_api="blas"):
        with headblas.one_thread_beside(workers4[:2]):
            assert blas_threads() == {1}
        assert blas_threads() == {2}
        with headblas.one_thread_beside(["tcp://192.0.2.77:8786"]):
            assert blas_threads() == {2}


def test_a_run_on_local_workers_checks_with_one_thread_then_gives_it_back(client4, workers4):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(64, 5))
    y = (X[:, 0] > 0).astype(int)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    seen = []
    with threadpool_limits(2, user_api="blas"):
        ppt.train(ppt.MLP((5, 4, 2)), shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=2),
                  on_round=lambda record: seen.append(blas_threads()) and False)
        after = blas_threads()
    assert seen and all(s == {1} for s in seen)
    assert after == {2}
