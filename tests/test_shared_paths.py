"""The shared-memory exchange's paths other than the plain run, through what they do today:
another loop's segment gone before loop 0 maps it (a LinkLost: the run rolls back and ends
bitwise as undisturbed), a /dev/shm too full for a segment (said when the segment is made,
not with a SIGBUS at a write, and nothing left), the room check that sends the exchange
through the sockets instead, and the examples of the docstrings that size it."""

from __future__ import annotations

import doctest
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.cli import presets
from ppt_dask.engine.rounds import choose, graph, sharedreduce
from ppt_dask.engine.rounds.sharedreduce import SharedLost
from ppt_dask.engine.wire import sharedmem
from ppt_dask.engine.wire.inboxes import LinkLost
from ppt_dask.testing import Slowed

from conftest import own_shm

NET = ppt.MLP((6, 16, 3), hidden="tanh", output="softmax")


def _data(n=240, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 6))
    return X, (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)


@pytest.mark.parametrize("function", [sharedreduce.segment_bytes, presets.for_shards])
def test_the_docstrings_examples_run(function):
    tests = doctest.DocTestFinder().find(function, globs=vars(sys.modules[function.__module__]))
    assert tests and tests[0].examples
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(tests[0])
    assert result.failed == 0 and result.attempted == len(tests[0].examples)


def _mapped(pid: int, folder: Path) -> set:
    """The files of ``folder`` process ``pid`` maps now."""
    with open(f"/proc/{pid}/maps") as maps:
        return {line.split(None, 5)[-1].strip() for line in maps if str(folder) in line}


@pytest.mark.slow  # 10-20 s (slot 1's gradients slowed 2 s): in CI's full run (.ci/run)
def test_a_segment_gone_before_loop_0_maps_it_is_a_lost_link_and_the_run_rolls_back(client2):
    """Slot 1's first segment is taken away (as a stray process with the same user could)
    before loop 0 maps it: loop 0 cannot map it, a LinkLost, and the head rolls back and runs
    the rounds again, ending bitwise as the serial path; nothing is left. Loop 0 is stopped
    (SIGSTOP) once its segment of totals is there, so it cannot map slot 1's meanwhile; slot 1,
    whose gradients take 2 s more, makes its segment after that, and the one loop 0's process
    does not map is taken (its maps say which: no race with the loops' pace)."""
    X, y = _data()
    strategy = Slowed(ppt.Sync(lr=0.3, momentum=0.9, block=40), seconds=2.0, shards=(1,))
    rounds = 3
    expected, _ = train_serial(NET, X, y, strategy.inner, rounds=rounds, n_shards=2, seed=1)
    shards = ppt.enter_data(client2, X, y, n_shards=2)
    leader = shards.workers[0]
    pid = client2.run(os.getpid, workers=[leader])[leader]
    taken: dict = {}

    def take_slot_1s_segment(folder: Path):
        deadline = time.monotonic() + 120
        try:
            while not list(folder.iterdir()):  # loop 0's totals, made before any loop sends
                assert time.monotonic() < deadline
                time.sleep(0.001)
            os.kill(pid, signal.SIGSTOP)
            while not (theirs := {str(f) for f in folder.iterdir()} - _mapped(pid, folder)):
                assert time.monotonic() < deadline
                time.sleep(0.005)
            (gone,) = theirs
            Path(gone).unlink()
            taken["name"] = Path(gone).name
        finally:
            os.kill(pid, signal.SIGCONT)

    try:
        with own_shm(client2) as segments:
            folder = Path(sharedmem.SHM_DIR)
            thief = threading.Thread(target=take_slot_1s_segment, args=(folder,), daemon=True)
            thief.start()
            result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=rounds / strategy.rounds_per_epoch(len(X))),
                               seed=1, allreduce="shared")
            thief.join(130)
            left = segments()
    finally:
        ppt.exit_data(shards)
    assert taken and result.settings["allreduce"] == "shared"
    assert result.settings["recoveries"] >= 1
    event = result.settings["events"][0]
    # SharedLost: shared memory's own LinkLost (engine/rounds/sharedreduce.py), named in the event
    assert issubclass(SharedLost, LinkLost)
    assert event["event"] == "recovered" and "SharedLost" in event["error"] and taken["name"] in event["error"]
    assert [r["round"] for r in result.history] == list(range(rounds))
    assert result.params.tobytes() == expected.tobytes()
    assert left == []


FULL = """
import os, resource, signal, sys
from ppt_dask.engine.wire import sharedmem
sharedmem.SHM_DIR = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, not a signal
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
sharedmem.Segment(nbytes=4096).close()  # fits
try:
    sharedmem.Segment(nbytes=1 << 20)
except OSError as exc:
    print(exc.errno)
"""


def test_a_segment_that_does_not_fit_is_refused_when_made_and_leaves_nothing(tmp_path):
    """The room a segment takes is taken when it is made (posix_fallocate): a /dev/shm without
    that room says so there, an OSError, not a SIGBUS at the first write; its file is gone.
    A process limited to files of 4 KiB stands for the full /dev/shm (filling the real one
    would fail every other process of the machine)."""
    import errno

    with own_shm() as segments:
        out = subprocess.run([sys.executable, "-c", FULL, sharedmem.SHM_DIR], capture_output=True, text=True,
                             timeout=60)
        left = segments()
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) in (errno.EFBIG, errno.ENOSPC)
    assert left == []


def test_the_room_check_sends_the_exchange_through_the_sockets(client2):
    """Shared memory needs the workers' /dev/shm to hold the segments (twice over): asked of the
    workers, and with more than they have free the streamed exchange goes through the sockets."""
    X, y = _data()
    shards = ppt.enter_data(client2, X, y, n_shards=2)
    try:
        free = min(client2.run(sharedmem.free_bytes).values())
        assert shards.colocated(0) and shards.colocated(free // 2)
        assert not shards.colocated(free + (1 << 30))
        plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, 2)
        sync = ppt.Sync(lr=0.1, block=40).check([120, 120])
        need = 2 * sharedreduce.segment_bytes(2, NET.n_params * 8)
        assert choose.choose_allreduce("stream", "auto", plan, sync, NET, shards.colocated) == "shared"
        assert choose.choose_allreduce("stream", "auto", plan, sync, NET,
                                       lambda n: shards.colocated(n + free - need + 1)) != "shared"
    finally:
        ppt.exit_data(shards)
