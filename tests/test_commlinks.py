"""The loops' links over distributed's comms (ppt_dask/engine/placement/commlinks.py): our allreduce
over them between threads gives bitwise the serial tree's total, as over our own sockets
(tests/test_allreduce.py). graphs/transports.py times them beside the other transports."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ppt_dask.core import tree
from ppt_dask.engine.placement.commlinks import CommLinks, listen_address, payload_bytes
from ppt_dask.engine.placement.links import LinkLost
from ppt_dask.engine.rounds.allreduce import Allreduce


def _linked(p: int, address: str = "tcp://127.0.0.1:1", security=None) -> list:
    links = [CommLinks(i, address, security) for i in range(p)]
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
        CommLinks(0, "tls://127.0.0.1:1")


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
