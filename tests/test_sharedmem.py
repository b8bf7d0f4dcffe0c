"""Shared memory between the loops of one host (ppt_dask/engine/placement/sharedmem.py): a
segment one process makes and another maps, what tells two processes they share /dev/shm,
and the head's question to a real cluster's workers."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.engine.placement import sharedmem

CHILD = """
import sys
import numpy as np
from ppt_dask.engine.placement import sharedmem
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
