"""Shared fixtures: real Dask clusters (worker processes, and threads) and real data."""

import gc
import time

import pytest

import ppt_dask as ppt


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """The serial oracle runs with one BLAS thread, as every worker does: a BLAS with
    two threads splits the products differently and the last bits change."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture(scope="session")
def client4():
    """Four single-threaded worker *processes* (oversubscribed on two cores: fine for
    correctness); tests choose 1, 2 or 4 of them through ``enter_data(workers=...)``."""
    client = ppt.connect(n_workers=4, dashboard_address=None)
    client.wait_for_workers(4, timeout=60)
    yield client
    ppt.cluster.close(client)


@pytest.fixture(scope="session")
def workers4(client4):
    return ppt.cluster.worker_addresses(client4)


@pytest.fixture
def threads_client():
    client = ppt.connect(n_workers=2, processes=False, dashboard_address=None)
    yield client
    ppt.cluster.close(client)


def scheduler_keys(client, timeout=10.0):
    """Keys the scheduler still holds, once released futures have had time to go."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        keys = client.run_on_scheduler(lambda dask_scheduler: sorted(map(str, dask_scheduler.tasks)))
        if not keys or time.monotonic() > deadline:
            return keys
        time.sleep(0.1)


def sigkill_at(client, at_round: int, slot: int = 1):
    """A progress callback that SIGKILLs the process of the ``slot``-th worker at round
    ``at_round``, and the dict that records when (``killed_at``)."""
    import os
    import signal

    address = ppt.cluster.worker_addresses(client)[slot]
    pid = client.run(os.getpid, workers=[address])[address]
    state = {"killed_at": None}

    def progress(record):
        if record["round"] == at_round and state["killed_at"] is None:
            os.kill(pid, signal.SIGKILL)
            state["killed_at"] = time.perf_counter()
    return progress, state
