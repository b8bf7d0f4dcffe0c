"""Nothing of a run in /dev/shm, whatever is killed at round 0 (ppt_dask/engine/wire/
sharedmem.py: the loops' segments are unlinked as they are made and mapped through their
writer's descriptor). A worker, or the head whose LocalCluster the workers belong to, is
SIGKILLed the moment a loop holds its first segment (a generation's first round, before its
peers have mapped it): once the killed processes are gone, no segment of theirs is named in
/dev/shm. (Before: each segment was named until its peers had sent their first round's
tokens, and a kill then left it there until a later run's sweep.)

``python tests/test_shm_kills.py worker|head N`` runs N tries of one kind and prints how
many left a segment (the closing figures: 20 of each)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

SHM = "/dev/shm"

HEAD = r"""
import os, sys
import numpy as np
import ppt_dask as ppt
from ppt_dask.testing import Slowed

if __name__ == "__main__":
    client = ppt.connect(n_workers=3, dashboard_address=None)
    client.wait_for_workers(3, timeout=120)
    print(" ".join(str(p) for p in client.run(os.getpid).values()), flush=True)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((192, 12))
    y = (X[:, 0] > 0).astype(np.int64)
    shards = ppt.enter_data(client, X, y, n_shards=6)
    net = ppt.MLP((12, 32, 2), hidden="tanh", output="softmax")
    ppt.train(net, shards, Slowed(ppt.Sync(lr=0.2, block=32), seconds=2.0, shards=(5,)), ppt.Stop(max_epochs=2))
"""


def named(pids: set) -> set:
    """The segments named in /dev/shm whose names carry one of ``pids`` as their maker."""
    from ppt_dask.engine.wire import sharedmem

    return {n for n in os.listdir(SHM) if (sharedmem.creator(n) or (0, 0, -1))[2] in pids}


def held(pids: set) -> set:
    """The segments these processes have made or mapped now, named or not (their descriptors
    and mappings of files of /dev/shm that are ppt_dask's)."""
    found = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(f"{SHM}/ppt_dask-"):
                    found.add(target)
            with open(f"/proc/{pid}/maps") as maps:
                found |= {line.split(None, 5)[-1].strip() for line in maps if f"{SHM}/ppt_dask-" in line}
        except OSError:  # gone meanwhile
            pass
    return found


def kill_when_held(makers: set, victim: int, timeout: float = 120.0) -> bool:
    """SIGKILL ``victim`` the moment one of ``makers`` holds a segment; whether it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if held(makers) or named(makers):
            os.kill(victim, signal.SIGKILL)
            return True
        time.sleep(0.002)
    return False


def head_try() -> set:
    """One try: a head with a LocalCluster of its own, SIGKILLed at round 0; the segments of
    its workers named in /dev/shm once the workers are gone."""
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdout=subprocess.PIPE, text=True)
    workers: set = set()
    try:
        workers = {int(p) for p in head.stdout.readline().split()}
        assert len(workers) == 3, "the head did not start its cluster"
        assert kill_when_held(workers, head.pid), "no loop made a segment"
        head.wait(30)
        procs = [psutil.Process(p) for p in workers if psutil.pid_exists(p)]
        _gone, alive = psutil.wait_procs(procs, timeout=60)  # the workers end with their head
        for p in alive:
            p.kill()
        psutil.wait_procs(alive, timeout=30)
        return named(workers)
    finally:
        head.kill()
        head.wait(30)
        head.stdout.close()
        for pid in workers:  # whatever the try left: not the next test's
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def worker_try(client) -> set:
    """One try: a worker of ``client``'s cluster SIGKILLed the moment it holds its first
    segment; the segments named in /dev/shm of it once it is gone (the run goes on and
    recovers: its outcome is tests/test_exchange_trust.py's)."""
    import threading

    import numpy as np

    import ppt_dask as ppt
    from ppt_dask.testing import Slowed

    address = ppt.cluster.worker_addresses(client)[0]
    victim = client.run(os.getpid, workers=[address])[address]
    killed: dict = {}

    def watch():
        killed["done"] = kill_when_held({victim}, victim)
        try:
            psutil.Process(victim).wait(30)
        except psutil.NoSuchProcess:
            pass
        killed["left"] = named({victim})

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((192, 12))
    y = (X[:, 0] > 0).astype(np.int64)
    shards = ppt.enter_data(client, X, y, n_shards=6)
    try:
        ppt.train(ppt.MLP((12, 32, 2), hidden="tanh", output="softmax"), shards,
                  Slowed(ppt.Sync(lr=0.2, block=32), seconds=1.5, shards=(5,)), ppt.Stop(max_epochs=1),
                  recorder=None, progress=False)
    finally:
        ppt.exit_data(shards)
        watcher.join(60)
    assert killed.get("done"), "the worker made no segment"
    return killed["left"]


@pytest.mark.timeout(300)
def test_the_head_killed_at_round_zero_leaves_no_segment_of_its_workers():
    assert head_try() == set()


@pytest.mark.timeout(300)
def test_a_worker_killed_at_round_zero_leaves_no_segment_of_its_own():
    import ppt_dask as ppt

    client = ppt.connect(n_workers=3, dashboard_address=None)
    try:
        client.wait_for_workers(3, timeout=120)
        assert worker_try(client) == set()
    finally:
        ppt.cluster.close(client)


if __name__ == "__main__":
    import ppt_dask as ppt

    kind, tries = sys.argv[1], int(sys.argv[2])
    left = []
    for i in range(tries):
        if kind == "head":
            found = head_try()
        else:
            client = ppt.connect(n_workers=3, dashboard_address=None)
            try:
                client.wait_for_workers(3, timeout=120)
                found = worker_try(client)
            finally:
                ppt.cluster.close(client)
        left.append(len(found))
        print(f"try {i + 1}: {len(found)} segment(s) left {sorted(found)}", flush=True)
    print(f"{kind} killed at round 0: {sum(1 for n in left if n)} of {tries} tries left a segment")
