"""Who is gone after a failed call (:func:`ppt_dask.engine.waits.who_is_gone`): a worker, the
scheduler, or nobody (a timeout of ours), on a real cluster started apart (tests/apart.py):
a worker SIGKILLed, a scheduler SIGKILLed, a call that timed out on a live cluster. Each
answer is checked exactly, so a helper that answered another meaning fails here; the three
callers (placement's retry, a shard set's repair, the start state's scatter) are tested in
test_faults.py and test_sharedmem.py."""

from __future__ import annotations

import os
import signal
import time

import dask
import pytest
from distributed import Client

from ppt_dask.engine import waits
from ppt_dask.engine.placement.cluster import worker_addresses

from apart import cluster_apart

LET_GO_SECONDS = 60.0  # the scheduler drops a killed worker when it sees its comm close: a moment


def test_a_killed_worker_is_gone_once_the_scheduler_lets_it_go(tmp_path):
    """The killed worker alone is named, after the wait the caller gives (ShardSet's repair);
    the live one beside it is not."""
    with cluster_apart(tmp_path, workers=2) as cluster, Client(cluster.address, timeout="60s") as client:
        victim, alive = worker_addresses(client)
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        who, gone = waits.who_is_gone(client, [victim, alive], worker_addresses,
                                      wait_seconds=LET_GO_SECONDS)
        assert (who, gone) == (waits.WORKERS, [victim])
        assert worker_addresses(client) == [alive]  # the oracle: the scheduler's own list
        # asked once, now (placement's retry), it is gone still
        assert waits.who_is_gone(client, [victim], worker_addresses) == (waits.WORKERS, [victim])


def test_a_listed_worker_is_ours_unless_the_caller_blames_it(tmp_path):
    """A worker the scheduler lists and answers for is not gone (placement's retry and a repair
    raise the call's own error); the start state's scatter blames it while the scheduler answers."""
    with cluster_apart(tmp_path, workers=1) as cluster, Client(cluster.address, timeout="60s") as client:
        [alive] = worker_addresses(client)
        assert waits.who_is_gone(client, [alive], worker_addresses) == (waits.OURS, [])
        assert waits.who_is_gone(client, [alive], worker_addresses,
                                 wait_seconds=0.5) == (waits.OURS, [])
        assert waits.who_is_gone(client, [alive], worker_addresses,
                                 blame_listed=True) == (waits.WORKERS, [alive])


def test_a_timeout_of_ours_on_a_live_cluster_is_nobody_gone(tmp_path):
    with cluster_apart(tmp_path, workers=1) as cluster, Client(cluster.address, timeout="60s") as client:
        [alive] = worker_addresses(client)
        slow = client.submit(time.sleep, 30, workers=[alive], pure=False)
        with pytest.raises(TimeoutError):
            waits.result(slow, 0.2, "a slow call")
        assert waits.who_is_gone(client, [alive], worker_addresses) == (waits.OURS, [])
        client.cancel(slow)


def test_a_killed_scheduler_is_the_scheduler_gone(tmp_path):
    """Whatever the workers were: with the scheduler gone nobody can say, and the answer is
    the scheduler (the run ends in one line naming it), not a worker to replace."""
    with dask.config.set({"distributed.comm.timeouts.connect": "5s"}), \
            cluster_apart(tmp_path, workers=1) as cluster, Client(cluster.address, timeout="60s") as client:
        [worker] = worker_addresses(client)
        cluster.kill_scheduler()
        for blame in (False, True):
            assert waits.who_is_gone(client, [worker], worker_addresses,
                                     blame_listed=blame, wait_seconds=1.0) == (waits.SCHEDULER, [])
