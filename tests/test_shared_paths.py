"""The shared-memory exchange's paths other than the plain run, through what they do today:
a /dev/shm too full for a segment (said when the segment is made, not with a SIGBUS at a
write, and nothing left), the room check that sends the exchange through the sockets instead,
and the examples of the docstrings that size it. (A segment's name taken away before a peer
maps it is no longer a path: the loops' segments have no name past their making, see
ppt_dask/engine/wire/sharedmem.py; a peer's segment that cannot be mapped is a lost
link, tests/test_segments.py.)"""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.cli import presets
from ppt_dask.engine.rounds import choose, graph, sharedreduce
from ppt_dask.engine.wire import sharedmem

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
