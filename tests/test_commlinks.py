"""The loops' links over distributed's comms (graphs/commlinks.py, graphs/transports.py's transport: not
part of the package, see its notes): our allreduce over them between threads gives bitwise the serial
tree's total, as over our own sockets (tests/test_allreduce.py). graphs/transports.py times them
beside the other transports. And the package has no listener on distributed's comms."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from ppt_dask.core import tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "graphs"))
from commlinks import CommLinks, listen_address, payload_bytes  # noqa: E402  (graphs/commlinks.py)

from ppt_dask.engine.rounds.allreduce import Allreduce
from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import LinkLost


def _linked(p: int, address: str = "tcp://127.0.0.1:1", security=None) -> list:
    secret = new_secret()
    links = [CommLinks(i, address, security, secret=secret) for i in range(p)]
    failed: list = []

    def connect(i):
        try:
            links[i].connect({j: links[j].address for j in range(p) if j != i}, timeout=20)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(p)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not failed and not any(t.is_alive() for t in threads), failed
    return links


def _leaves(n_shards: int, size: int, seed: int) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(size).astype(np.float32), rng.standard_normal(3)) for _ in range(n_shards)]


def _subtrees(leaves: list, p: int, fan_in: int) -> list:
    """Each of p loops' subtree values of the fixed shard tree."""
    n_shards = len(leaves)
    return [{n: tree.evaluate(n, leaves.__getitem__, fan_in, n_shards) for n in tree.decompose(a, b, fan_in, n_shards)}
            for a, b in tree.split_shards(n_shards, p)]


def _allreduce(links: list, p: int, algorithm: str, n_shards: int, size: int, rounds: int) -> dict:
    """p loops (threads), two rounds in flight as local SGD has them: every loop's totals."""
    results: dict = {}
    errors: list = []

    def loop(i):
        try:
            exchange = Allreduce(links[i], i, p, 2, n_shards, algorithm, wait=30)
            for r in (0, 1):
                exchange.start(r, _subtrees(_leaves(n_shards, size, r), p, 2)[i])
            for r in range(rounds):
                results[i, r] = exchange.finish(r, {})[0]
                if r + 2 < rounds:
                    exchange.start(r + 2, _subtrees(_leaves(n_shards, size, r + 2), p, 2)[i])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(p)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        for links_i in links:
            links_i.close(1.0)
    assert not errors and not any(t.is_alive() for t in threads), errors
    return results


@pytest.mark.parametrize("p, algorithm", [(2, "direct"), (2, "scatter"), (4, "halving"),  # 3 s each: p = 4's
                                          *(pytest.param(4, a, marks=pytest.mark.slow) for a in ("scatter", "direct"))])
def test_our_allreduce_over_distributed_comms_gives_the_serial_trees_bits(p, algorithm):
    n_shards, size, rounds = 8, 5000, 4
    results = _allreduce(_linked(p), p, algorithm, n_shards, size, rounds)
    for r in range(rounds):
        expected = tree.reduce_serial(_leaves(n_shards, size, r), 2)
        for i in range(p):
            total = results[i, r]
            assert all(t.tobytes() == e.tobytes() for t, e in zip(total, expected)), (i, r)


def test_over_tls_with_the_clusters_certificates():
    pytest.importorskip("cryptography")
    from distributed.security import Security
    security = Security.temporary()
    results = _allreduce(_linked(2, "tls://127.0.0.1:1", security), 2, "scatter", 4, 100, 2)
    expected = tree.reduce_serial(_leaves(4, 100, 1), 2)
    assert all(t.tobytes() == e.tobytes() for t, e in zip(results[1, 1], expected))
    with pytest.raises(ValueError, match="tls:// worker .* without its security settings"):
        CommLinks(0, "tls://127.0.0.1:1", secret=new_secret())


def test_a_peer_that_closes_is_a_lost_link_not_a_hang():
    a, b = _linked(2)
    try:
        b.close()
        a.send((("x", 0), np.zeros(4)))
        with pytest.raises(LinkLost):
            a.receive(10, tag=("x", 0))
    finally:
        a.close()


def test_addresses_and_reported_bytes():
    assert listen_address("tcp://10.0.0.5:8786") == "tcp://10.0.0.5:0"
    assert listen_address("tls://[::1]:8786") == "tls://[::1]:0"
    assert listen_address("inproc://10.0.0.5/123/1") == "tcp://127.0.0.1:0"  # a threads cluster
    message = (("scatter", 3), {(0, 1): (np.zeros(10, np.float32), np.zeros(3))})
    assert payload_bytes(message) == 40 + 24


class _Creates:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_stranger_comm_is_refused_before_anything_of_it_is_deserialized(tmp_path):
    """A comm of distributed's own protocol that sends a pickle (the old first message was
    the slot, read deserialized): refused and named, the pickle never loaded, the loops link."""
    import asyncio

    from distributed.comm import connect
    from distributed.protocol import to_serialize

    path = str(tmp_path / "created")
    secret = new_secret()
    links = [CommLinks(i, "tcp://127.0.0.1:1", secret=secret) for i in range(2)]

    knocked, done = threading.Event(), threading.Event()

    async def knock():  # distributed's own handshake runs when the listener's loop does
        comm = await connect(links[0].address, deserialize=False, timeout=20)
        await comm.write(to_serialize(_Creates(path)))
        knocked.set()
        while not done.is_set():
            await asyncio.sleep(0.01)
        comm.abort()

    stranger = threading.Thread(target=lambda: asyncio.run(knock()), daemon=True)
    stranger.start()
    try:
        failed: list = []

        def connect_one(i):
            try:
                links[i].connect({1 - i: links[1 - i].address}, timeout=20)
            except BaseException as exc:
                failed.append(exc)

        threads = [threading.Thread(target=connect_one, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not failed, failed
        for _ in range(400):  # the listener's loop runs on: the stranger's handshake ends (a pickle, no hello)
            if links[0].refused:
                break
            links[0]._run(asyncio.sleep(0.05))
        assert knocked.is_set() and [why for _peer, why in links[0].refused] == ["sent no hello"]
        assert not os.path.exists(path)
        links[1].send((("x", 0), np.arange(3.0)))
        (got,) = links[0].receive(20, tag=("x", 0))
        assert got.tolist() == [0.0, 1.0, 2.0]
    finally:
        done.set()
        stranger.join(10)
        for link in links:
            link.close()


def test_no_module_of_the_package_listens_on_distributeds_comms():
    """distributed unpickles what a comm sends during its own handshake and reads, before any
    check of ours could refuse a stranger (a local process created a file through the
    package's CommLinks, which listened with ``distributed.comm.listen``): the package's loops
    listen on sockets of their own (engine/wire/links.py) whose handshake comes first."""
    import ppt_dask

    root = Path(ppt_dask.__file__).parent
    listening = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if "comm import listen" in p.read_text() or "comm.listen(" in p.read_text()]
    assert listening == [], listening
