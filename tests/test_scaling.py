"""More workers: the streamed allreduce at p = 8 on worker processes (oversubscribed on two
cores, which changes the timing, not the bits) and at 12 worker threads: never a per-round
graph by default, bitwise the serial path, through a SIGKILLed worker, and the bytes each
worker sends a round within twice the weights. On one host (a LocalCluster) the default is
the shared-memory exchange; the socket algorithms (what workers of several hosts use) are
asked for by name here, and leave no shared memory behind either way."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.testing import Slowed

from conftest import RESTART_SECONDS, own_shm, sigkill_at

# 6,147 weights of 8 bytes: 7 others x 49 kB is past the 256 KiB that "auto" sends whole, so
# 8 workers reduce-scatter and all-gather (pairwise, or by recursive halving and doubling when
# asked), as MNIST's 784-64-64-10 does
NET = ppt.MLP((20, 256, 3), hidden="tanh", output="softmax")
SYNC = ppt.Sync(lr=0.2, momentum=0.9, block=64)
BOUND = 2.2  # bytes a worker sends a round, in weights' bytes (2 (p - 1) / p and the framing)


def _data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 20))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


@pytest.fixture(scope="module")
def _processes8():
    client = ppt.connect(n_workers=8, dashboard_address=None)
    client.wait_for_workers(8, timeout=RESTART_SECONDS)
    yield client
    ppt.cluster.close(client)


@pytest.fixture
def client8(_processes8):
    """Eight worker processes under nannies: each test starts with all eight (a worker the test
    before killed is waited for, and said if it does not come back, not left to the next case)."""
    deadline = time.monotonic() + RESTART_SECONDS
    while len(ppt.cluster.worker_addresses(_processes8)) < 8:
        assert time.monotonic() < deadline, (f"8 workers again within {RESTART_SECONDS} s: "
                                             f"{ppt.cluster.worker_addresses(_processes8)}")
        time.sleep(0.1)
    return _processes8


def _within_bound(result, workers: int) -> None:
    weights = NET.n_params * 8
    rows = result.breakdown()
    assert rows and all(r["workers"] == workers for r in rows)
    for row in rows:
        assert 0 < row["transfer_bytes"] / workers <= BOUND * weights, row["transfer_bytes"]


@pytest.mark.parametrize("asked, used, promise", [("auto", "shared", "same-p"), ("scatter", "scatter", "any-p")])
def test_eight_worker_processes_stream_and_end_bitwise_as_serial_within_the_bound(client8, asked, used, promise):
    X, y = _data()
    rounds = 12
    expected, _ = train_serial(NET, X, y, SYNC, rounds=rounds, n_shards=16, seed=4, reproducible=promise, workers=8)
    shards = ppt.enter_data(client8, X, y, n_shards=16)
    try:
        with own_shm(client8) as segments:
            result = ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=rounds / SYNC.rounds_per_epoch(len(X))),
                               seed=4, allreduce=asked, reproducible=promise)
            left = segments()
    finally:
        ppt.exit_data(shards)
    assert result.settings["exchange"] == "stream" and result.settings["allreduce"] == used
    assert result.settings["workers"] == 8 and result.rounds == rounds
    assert result.params.tobytes() == expected.tobytes()
    _within_bound(result, 8)
    assert left == []  # the loops unlinked what they made


@pytest.mark.parametrize("algorithm", ["shared", "halving"])
def test_local_sgd_on_eight_workers_two_rounds_in_flight_bitwise(client8, algorithm):
    X, y = _data()
    strategy = ppt.LocalSGD(lr=0.1, momentum=0.9, block=8, interval=16, ema=0.5)
    rounds = 7
    expected, _ = train_serial(NET, X, y, strategy, rounds=rounds, n_shards=8, seed=2)
    shards = ppt.enter_data(client8, X, y, n_shards=8)
    try:
        result = ppt.train(NET, shards, strategy,
                           ppt.Stop(max_epochs=rounds / strategy.check([32] * 8).rounds_per_epoch(len(X))), seed=2,
                           allreduce=algorithm)
    finally:
        ppt.exit_data(shards)
    assert result.settings["allreduce"] == algorithm and result.rounds == rounds
    assert result.params.tobytes() == expected.tobytes()
    _within_bound(result, 8)


@pytest.mark.slow  # 3 s each: in CI's full run (.ci/run), out of the default suite's few minutes
@pytest.mark.parametrize("asked, used, promise", [("auto", "shared", "same-p"), ("scatter", "scatter", "any-p")])
def test_a_worker_killed_among_eight_the_run_ends_bitwise_as_undisturbed(client8, asked, used, promise):
    X, y = _data()
    rounds = 40
    strategy = Slowed(SYNC, seconds=0.01)
    expected, _ = train_serial(NET, X, y, SYNC, rounds=rounds, n_shards=16, seed=5, reproducible=promise, workers=8)
    shards = ppt.enter_data(client8, X, y, n_shards=16)
    progress, killed = sigkill_at(client8, at_round=15, slot=3)
    try:
        with own_shm(client8) as segments:
            result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=rounds / SYNC.rounds_per_epoch(len(X))),
                               seed=5, checkpoint_every=10, progress=progress, allreduce=asked,
                               reproducible=promise)
            left = segments()
    finally:
        ppt.exit_data(shards)  # the nanny brings the worker back: the next test waits for it (client8)
    assert killed["killed_at"] is not None and result.settings["recoveries"] >= 1
    assert result.settings["allreduce"] == used
    assert [r["round"] for r in result.history] == list(range(rounds))  # replayed, no gaps
    assert result.params.tobytes() == expected.tobytes()
    assert left == []  # the killed loop's too: unlinked once loop 0 had mapped it


def test_twelve_worker_threads_stream_by_default_bitwise_as_serial():
    """Not a power of two: still streamed (never the scheduler in a round), still the bits."""
    X, y = _data(240)
    rounds = 6
    expected, _ = train_serial(NET, X, y, SYNC, rounds=rounds, n_shards=12, seed=6, reproducible="same-p", workers=12)
    client = ppt.connect(n_workers=12, processes=False, dashboard_address=None)
    try:
        shards = ppt.enter_data(client, X, y, n_shards=12)
        result = ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=rounds / SYNC.rounds_per_epoch(len(X))), seed=6)
        ppt.exit_data(shards)
    finally:
        ppt.cluster.close(client)
    assert result.settings["exchange"] == "stream" and result.settings["allreduce"] == "shared"  # one process
    assert result.settings["workers"] == 12
    assert result.params.tobytes() == expected.tobytes()
    _within_bound(result, 12)


def test_the_algorithm_is_refused_where_it_does_not_apply(client8):
    X, y = _data()
    shards = ppt.enter_data(client8, X, y, n_shards=8, workers=ppt.cluster.worker_addresses(client8)[:2])
    try:
        with pytest.raises(ValueError, match="allreduce 'scatter' applies to streamed rounds .* not to exchange 'all'"):
            ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=1), exchange="all", allreduce="scatter")
        with pytest.raises(ValueError, match="allreduce must be one of .* got 'ring'"):
            ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=1), allreduce="ring")
        with pytest.raises(ValueError, match="allreduce 'direct' applies to the synchronous and local strategies"):
            ppt.train(NET, shards, ppt.Async(lr=0.1), ppt.Stop(max_epochs=1), allreduce="direct")
        with pytest.raises(ValueError, match="'halving' needs a power-of-two number of workers"):
            ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=1), fan_in=4, allreduce="halving")
        with pytest.raises(ValueError, match="allreduce 'shared' applies to the synchronous and local strategies"):
            ppt.train(NET, shards, ppt.Async(lr=0.1), ppt.Stop(max_epochs=1), allreduce="shared")
    finally:
        ppt.exit_data(shards)
