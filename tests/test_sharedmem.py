"""Shared memory between the loops of one host (ppt_dask/engine/wire/sharedmem.py): a
segment one process makes and another maps, what tells two processes they share /dev/shm,
and the head's question to a real cluster's workers."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.engine.wire import sharedmem

CHILD = """
import sys
import numpy as np
from ppt_dask.engine.wire import sharedmem
segment = sharedmem.Segment(sys.argv[1])
a = segment.array(64, (3, 4), np.float32)
assert a.tolist() == np.arange(12, dtype=np.float32).reshape(3, 4).tolist(), a
a *= -1  # the writer sees it
print(repr(sharedmem.identity()))
"""


def test_a_segment_one_process_writes_another_maps_by_name_reads_and_writes():
    segment = sharedmem.Segment(nbytes=4096)
    try:
        assert segment.nbytes == 4096 and os.path.exists(segment.path)
        mine = segment.array(64, (3, 4), np.float32)
        mine[:] = np.arange(12, dtype=np.float32).reshape(3, 4)
        out = subprocess.run([sys.executable, "-c", CHILD, segment.name], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert mine.tolist() == (-np.arange(12, dtype=np.float32).reshape(3, 4)).tolist()
        assert out.stdout.strip() == repr(sharedmem.identity())  # one machine, one /dev/shm, one user
    finally:
        segment.close()
    assert not os.path.exists(segment.path)  # the writer unlinks it
    with pytest.raises(FileNotFoundError):
        sharedmem.Segment(segment.name)


def test_shared_wants_one_identity_and_never_none():
    me = sharedmem.identity()
    assert sharedmem.shared([me, me, me])
    assert not sharedmem.shared([me, (*me[:-1], me[-1] + 1)])  # another user
    assert not sharedmem.shared([None, None]) and not sharedmem.shared([])
    assert sharedmem.aligned(1) == 64 and sharedmem.aligned(64) == 64 and sharedmem.aligned(65) == 128


def test_workers_of_a_local_cluster_share_memory_and_hosts_told_apart_by_address_do_not():
    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        addresses = ppt.cluster.worker_addresses(client)
        assert sharedmem.colocated(client, addresses)
        assert sharedmem.free_bytes() > 0
        assert not sharedmem.colocated(client, addresses, need=sharedmem.free_bytes() + 2**40)  # no room
    finally:
        ppt.cluster.close(client)
    # network namespaces of one machine (graphs/netns.py's test hosts) have addresses of their
    # own: apart, without asking the workers
    assert not sharedmem.colocated(None, ["tls://10.77.0.12:40001", "tls://10.77.0.13:40001"])
    assert sharedmem.colocated(None, ["tcp://127.0.0.1:1"])  # one worker: nothing to share


def test_a_worker_that_cannot_be_asked_is_named_not_a_traceback_from_the_broadcast():
    """A worker killed a moment ago (the scheduler may list it still): the question cannot
    reach it, and :class:`sharedmem.Unanswered` names it (the run takes that for a lost worker,
    engine/roundloop.py), where the broadcast's own error once ended the run."""
    import signal

    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}):
        client = ppt.connect(n_workers=3, dashboard_address=None)
        try:
            client.wait_for_workers(3, timeout=120)
            addresses = ppt.cluster.worker_addresses(client)
            pids = client.run(os.getpid)
            os.kill(pids[addresses[1]], signal.SIGKILL)
            with pytest.raises(sharedmem.Unanswered) as info:
                sharedmem.colocated(client, addresses)
            assert info.value.addresses == [addresses[1]] and addresses[1] in str(info.value)
        finally:
            ppt.cluster.close(client)


async def _hang_up(comm, **message):
    """A worker's ``update_data`` (the message a scatter sends) that closes the connection
    instead of answering: a worker as the scheduler sees one killed a moment ago, listed
    still, whose connections close."""
    comm.abort()


@pytest.mark.parametrize("when", ["listed", "dropped"])
def test_a_start_state_sent_to_a_worker_just_killed_names_the_worker_not_a_lost_scheduler(when):
    """The scheduler's scatter to a worker whose connection closes (killed a moment ago, still
    listed) ends the scheduler's handler on the closed comm, and the scheduler closes the head's
    connection: CI once read that as the scheduler lost and ended the run. A worker dropped
    already is a ``KeyError``. Either way, while the scheduler answers,
    :func:`choose.place_state` names the worker (:class:`Unanswered`, a lost worker the run
    repairs), and the head's client goes on."""
    import signal
    import time

    import dask

    from ppt_dask.engine.rounds import choose

    def hang_up(dask_worker):
        dask_worker.handlers["update_data"] = _hang_up  # distributed's Server: handlers by op
        return "update_data" in dask_worker.handlers

    with dask.config.set({"distributed.comm.timeouts.connect": "3s"}):
        client = ppt.connect(n_workers=2, dashboard_address=None)
        try:
            client.wait_for_workers(2, timeout=120)
            addresses = ppt.cluster.worker_addresses(client)
            victim = addresses[1]
            if when == "listed":
                assert client.run(hang_up, workers=[victim])[victim]
            else:
                os.kill(client.run(os.getpid)[victim], signal.SIGKILL)
                deadline = time.monotonic() + 60
                while victim in ppt.cluster.worker_addresses(client):
                    assert time.monotonic() < deadline, "the scheduler did not drop the killed worker in 60 s"
                    time.sleep(0.1)
            with pytest.raises(sharedmem.Unanswered) as info:
                choose.place_state(client, np.arange(3.0), victim)
            assert info.value.addresses == [victim]
            if when == "listed":
                assert victim in ppt.cluster.worker_addresses(client)  # what the scheduler saw: a listed worker
            kept = choose.place_state(client, np.arange(3.0), addresses[0])  # the head's link is fine
            assert kept.result(timeout=30).tolist() == [0.0, 1.0, 2.0]
        finally:
            ppt.cluster.close(client)
