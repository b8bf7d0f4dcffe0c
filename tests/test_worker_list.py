"""Worker lists come from the scheduler, not from the client's cache.

``Client.scheduler_info(n_workers=-1)`` refreshes the client's cached identity with every
worker and then returns the cache; distributed's periodic refresh stores an identity
without per-worker entries, and when it lands in between, the caller saw no workers
while all were alive ("unknown worker addresses [...]; the cluster has []"). These tests
force that refresh into the gap on every call, so the old reads fail every time.
"""

import pytest

import ppt_dask as ppt
from ppt_dask.data import datasets
from ppt_dask.perf import calls


@pytest.fixture
def refresh_in_the_gap(client4):
    """``client4`` whose ``scheduler_info`` always meets the periodic refresh before the read."""
    original = client4._update_scheduler_info

    async def refresh_then_periodic(n_workers=0):
        await original(n_workers=n_workers)
        await original()  # the periodic callback's own call: n_workers=0

    client4._update_scheduler_info = refresh_then_periodic
    try:
        yield client4
    finally:
        del client4._update_scheduler_info  # the class's method again


def _scheduler_workers(client):
    """The oracle: the scheduler's own table of workers."""
    return sorted(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers)))


def test_the_cached_identity_loses_the_workers_the_scheduler_keeps(refresh_in_the_gap):
    client = refresh_in_the_gap
    truth = _scheduler_workers(client)
    assert len(truth) == 4
    # the failure mode, reproduced: the cache says there are no workers ...
    assert client.scheduler_info(n_workers=-1)["workers"] == {}
    # ... while the scheduler, asked directly, lists all four
    assert ppt.cluster.worker_addresses(client) == truth
    assert set(ppt.cluster.workers(client)) == set(truth)
    assert all(info["status"] == "running" for info in ppt.cluster.workers(client).values())


def test_placement_and_measurement_see_every_worker_despite_the_refresh(refresh_in_the_gap):
    client = refresh_in_the_gap
    truth = _scheduler_workers(client)
    data = datasets.parity(8)
    shards = ppt.enter_data(client, data.X, data.y, 4, workers=truth[:2])  # checks the names
    try:
        assert shards.workers == truth[:2]
        assert shards.lost_workers() == []  # not "every worker lost"
        assert shards.joined_workers() == truth[2:]
    finally:
        ppt.exit_data(shards)
    spread = ppt.enter_data(client, data.X, data.y, 4)  # all workers, chosen by the head
    try:
        assert sorted(set(spread.workers)) == truth
    finally:
        ppt.exit_data(spread)
    assert calls.cluster_workers(client, truth[1:3]) == truth[1:3]
    with pytest.raises(ValueError, match="tcp://nowhere:1"):
        calls.cluster_workers(client, ["tcp://nowhere:1"])
