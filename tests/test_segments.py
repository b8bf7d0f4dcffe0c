"""Shared-memory segments a shared host can trust (ppt_dask/engine/wire/sharedmem.py,
ppt_dask/engine/rounds/sharedreduce.py): names that say whose and which process's they are, a
sweep that removes a dead creator's and leaves a live one's, a peer's name validated before
it is opened, a full /dev/shm told apart, a bad segment a lost link. Each test counts only the
segments it made (other runs may use /dev/shm meanwhile)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from ppt_dask.engine.rounds.allreduce import Allreduce
from ppt_dask.engine.rounds.sharedreduce import SharedLost
from ppt_dask.engine.wire import sharedmem
from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import Links
from ppt_dask.engine.wire.sharedmem import BadSegment, Segment, SharedMemoryFull

MAKER = """
import sys, time
from ppt_dask.engine.wire import sharedmem
segment = sharedmem.Segment(nbytes=4096)
print(segment.name, flush=True)
time.sleep(120)
"""


def test_a_segments_name_carries_the_user_the_pid_namespace_and_the_pid():
    segment = Segment(nbytes=4096)
    try:
        uid, namespace, pid = sharedmem.creator(segment.name)
        assert (uid, pid) == (os.getuid(), os.getpid()) and namespace == os.stat("/proc/self/ns/pid").st_ino
        st = os.stat(segment.path)
        assert st.st_mode & 0o777 == 0o600 and st.st_size == 4096
    finally:
        segment.close()
    assert not os.path.exists(segment.path)
    assert sharedmem.creator("ppt_dask-0123456789abcdef") is None  # the old bare names: not ours to judge
    assert sharedmem.creator(f"ppt_dask-{os.getuid()}-1-2-{'a' * 16}/../x") is None


def test_the_sweep_removes_a_killed_creators_segment_and_leaves_a_live_ones():
    maker = subprocess.Popen([sys.executable, "-c", MAKER], stdout=subprocess.PIPE, text=True)
    mine = Segment(nbytes=4096)
    try:
        name = maker.stdout.readline().strip()
        assert sharedmem.creator(name)[2] == maker.pid
        assert name not in sharedmem.sweep()  # its creator lives
        os.kill(maker.pid, signal.SIGKILL)  # as an OOM kill would, before it could unlink
        maker.wait(30)
        assert os.path.exists(os.path.join(sharedmem.SHM_DIR, name))
        removed = sharedmem.sweep()
        assert name in removed and mine.name not in removed
        assert not os.path.exists(os.path.join(sharedmem.SHM_DIR, name)) and os.path.exists(mine.path)
    finally:
        maker.kill()
        maker.wait(30)
        maker.stdout.close()
        mine.close()


def test_a_peers_name_is_validated_before_anything_is_mapped(tmp_path):
    target = tmp_path / "weights.npy"
    target.write_bytes(b"\0" * 8192)
    fake = sharedmem.new_name()
    link = os.path.join(sharedmem.SHM_DIR, fake)
    os.symlink(target, link)  # a name of the right pattern, a link to a file of the user's
    try:
        with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP, the file is never opened read-write
            Segment(fake, nbytes=4096)
    finally:
        os.unlink(link)
    for bad in ("../../etc/passwd", "weights.npy", f"ppt_dask-{os.getuid()}-1-2-{'a' * 16}/x"):
        with pytest.raises(BadSegment, match="not the name of a ppt_dask segment"):
            Segment(bad, nbytes=1)
    short = Segment(nbytes=4096)
    try:
        with pytest.raises(BadSegment, match="4096 bytes, short of the 8192 expected"):
            Segment(short.name, nbytes=8192)
        os.chmod(short.path, 0o644)
        with pytest.raises(BadSegment, match="not this user's alone"):
            Segment(short.name, nbytes=4096)
    finally:
        short.close()


def test_a_full_dev_shm_is_told_apart_and_leaves_no_file():
    st = os.statvfs(sharedmem.SHM_DIR)
    too_much = st.f_blocks * st.f_frsize + 2**20  # more than the tmpfs holds: refused at once, nothing taken
    before = set(os.listdir(sharedmem.SHM_DIR))
    with pytest.raises(SharedMemoryFull, match="has no room for a segment"):
        Segment(nbytes=too_much)
    mine = {n for n in set(os.listdir(sharedmem.SHM_DIR)) - before if sharedmem.creator(n)
            and sharedmem.creator(n)[2] == os.getpid()}
    assert mine == set()


def test_a_peers_segment_that_is_short_is_a_lost_link_not_a_crash():
    """Loop 1 names a segment too short for the nodes it says it holds: loop 0 raises the lost
    link (the head rolls back) instead of reading past its end."""
    secret = new_secret()
    links = [Links(i, "tcp://127.0.0.1:1", secret=secret) for i in range(2)]
    errors: list = []

    def connect(i):
        try:
            links[i].connect({1 - i: links[1 - i].address}, timeout=20)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    short = Segment(nbytes=64)
    try:
        links[1].send((("segment", 0), (short.name, ((0, 1),))))
        exchange = Allreduce(links[0], 0, 2, 2, 2, "shared", wait=20)
        with pytest.raises(SharedLost, match="short of"):
            exchange.start(0, {(0, 0): (np.zeros(1000, np.float32),)})
        exchange.close()
    finally:
        short.close()
        for link in links:
            link.close()


def _linked(p: int) -> list:
    secret = new_secret()
    links = [Links(i, "tcp://127.0.0.1:1", secret=secret) for i in range(p)]
    errors: list = []

    def connect(i):
        try:
            links[i].connect({j: links[j].address for j in range(p) if j != i}, timeout=20)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(p)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return links


@pytest.mark.parametrize("p, spread", [(3, 2**10), (8, 2**10), (8, 2**40)])
def test_the_adds_spread_over_the_loops_give_the_serial_trees_bits(monkeypatch, p, spread):
    """Every loop adds its part (a small SPREAD_BYTES, as a large network has it), or one loop
    adds all (a large one): three rounds, two in flight as local SGD has them, bitwise the
    serial tree's on every loop; each adder writes its sums and its 1 / k of the total; no
    segment of this process is left."""
    from ppt_dask.core import allreduce, tree
    monkeypatch.setattr(allreduce, "SPREAD_BYTES", spread)
    k = allreduce.adders(p, 4 * 3000 + 2 * 64)
    assert k == (p if spread < 2**20 else 1)
    n_shards, rng = 16, np.random.default_rng(p)
    leaves = [[(rng.standard_normal(3000).astype(np.float32), rng.standard_normal(3)) for _ in range(n_shards)]
              for _r in range(3)]
    blocks = [tree.decompose(a, b, 2, n_shards) for a, b in tree.split_shards(n_shards, p)]
    partial = [[{n: tree.evaluate(n, leaves[r].__getitem__, 2, n_shards) for n in blocks[i]} for i in range(p)]
               for r in range(3)]
    links = _linked(p)
    results, errors = {}, []

    def loop(i):
        try:
            with Allreduce(links[i], i, p, 2, n_shards, "shared", wait=30) as exchange:
                sent = {r: exchange.start(r, partial[r][i]) for r in (0, 1)}
                for r in range(3):
                    total, more = exchange.finish(r, {})
                    if r == 0:
                        sent[2] = exchange.start(2, partial[2][i])
                    results[i, r] = [a.copy() for a in total], sent[r] + more
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(p)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for link in links:
            link.close()
    assert not errors and not any(t.is_alive() for t in threads), errors
    for r in range(3):
        expected = tree.reduce_serial(leaves[r], 2)
        for i in range(p):
            total, sent = results[i, r]
            assert all(a.tobytes() == e.tobytes() for a, e in zip(total, expected)), (i, r)
            node = 3000 * 4 + 3 * 8
            written = len(blocks[i]) * node + (node / k if i < k else 0)
            assert written <= sent <= written + len(blocks[i]) * 128 + 512 * (k - 1 + p - 1) + 128
    mine = [n for n in os.listdir(sharedmem.SHM_DIR) if (sharedmem.creator(n) or (0, 0, 0))[2] == os.getpid()]
    assert mine == []
