"""Message batching turned off on the clusters ppt_dask connects to (ppt_dask.engine.wire.messages)."""

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.engine.wire import messages


def _worker_interval(dask_worker):
    return dask_worker.batched_stream.interval


def test_connect_sends_messages_at_once_on_scheduler_workers_and_client():
    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        seen = client.run_on_scheduler(messages._intervals)
        assert len(seen["workers"]) == 2 and set(seen["workers"].values()) == {0.0}
        assert seen["clients"][client.id] == 0.0
        assert set(client.run(_worker_interval).values()) == {0.0}
        assert client.scheduler_comm.interval == 0.0
        client.cluster.scale(3)  # a worker that joins later gets it too
        client.wait_for_workers(3, timeout=60)
        assert set(client.run(_worker_interval).values()) == {0.0}
        assert set(client.run_on_scheduler(messages._intervals)["workers"].values()) == {0.0}
        # training gives bitwise the serial path's weights, as with distributed's timers
        rng = np.random.default_rng(0)
        X, y = rng.normal(size=(120, 6)), rng.integers(0, 3, 120)
        net = ppt.MLP((6, 8, 3), hidden="tanh", output="softmax")
        strategy = ppt.Sync(lr=0.3, momentum=0.9, block=24)
        expected, _ = train_serial(net, X, y, strategy, rounds=25, n_shards=3, seed=1)
        shards = ppt.enter_data(client, X, y, n_shards=3)
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=5), seed=1)
        ppt.exit_data(shards)
        assert result.rounds == 25 and result.params.tobytes() == expected.tobytes()
    finally:
        ppt.cluster.close(client)


def test_batch_interval_none_keeps_distributed_timers():
    client = ppt.connect(n_workers=1, dashboard_address=None, batch_interval=None)
    try:
        seen = client.run_on_scheduler(messages._intervals)
        assert set(seen["workers"].values()) == {0.005}  # distributed's scheduler -> worker
        assert set(client.run(_worker_interval).values()) == {0.002}  # worker -> scheduler
    finally:
        ppt.cluster.close(client)


@pytest.mark.parametrize("bad", [-0.001, 1.0, "1ms", True, float("nan")])
def test_bad_batch_interval_is_refused_before_a_cluster_starts(bad):
    with pytest.raises(ValueError, match="batch interval must be seconds in \\[0, 1\\), got"):
        ppt.connect(n_workers=1, dashboard_address=None, batch_interval=bad)


def test_another_client_of_the_same_scheduler_reuses_its_plugins(client4):
    """Every ``ppt-dask train --scheduler`` on a cluster that lives on connects anew: its
    client stream is set, and the plugins already there are not registered again (each
    time that logged a warning on the scheduler, here in this process)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other = ppt.connect(client4.scheduler.address)
        try:
            assert client4.run_on_scheduler(messages._intervals)["clients"][other.id] == 0.0
            assert other.scheduler_comm.interval == 0.0
        finally:
            other.close()
    assert not [w for w in caught if "already contains a plugin" in str(w.message)], caught
