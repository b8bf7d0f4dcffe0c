"""The streamed rounds' allreduce: its pure pieces against the serial tree, then the
interface over real links between threads (ppt_dask/core/allreduce.py,
ppt_dask/engine/rounds/allreduce.py). Runs on the cluster: tests/test_engine.py and tests/test_scaling.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppt_dask.core import allreduce, tree
from ppt_dask.engine.rounds import sharedreduce
from ppt_dask.engine.rounds.allreduce import Allreduce
from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import Links

from conftest import own_shm


def _partials(n_shards: int, p: int, fan_in: int, size: int, seed: int) -> tuple[list, list]:
    """Every shard's partial (a vector and a stats triple) and each of p loops' subtree values."""
    rng = np.random.default_rng(seed)
    # a network's arrays of one dtype (joined into one vector to travel), then its float64 stats
    leaves = [(rng.standard_normal(size).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32),
               rng.standard_normal(3)) for _ in range(n_shards)]
    loops = []
    for a, b in tree.split_shards(n_shards, p):
        nodes = tree.decompose(a, b, fan_in, n_shards)
        loops.append({n: tree.evaluate(n, leaves.__getitem__, fan_in, n_shards) for n in nodes})
    return leaves, loops


@settings(deadline=None, max_examples=60)
@given(p=st.integers(1, 9), extra=st.integers(0, 9), fan_in=st.integers(2, 4), size=st.integers(1, 300),
       seed=st.integers(0, 2**16))
def test_reduce_scatter_and_all_gather_give_the_serial_trees_bits(p, extra, fan_in, size, seed):
    n_shards = p + extra
    leaves, loops = _partials(n_shards, p, fan_in, size, seed)
    expected = tree.reduce_serial(leaves, fan_in)
    owned = [allreduce.tree_sum([allreduce.scatter_parts(loop, p)[j] for loop in loops], fan_in, n_shards)
             for j in range(p)]
    total = allreduce.gather(owned, allreduce.layout_of(loops[0]))
    assert all(t.tobytes() == e.tobytes() for t, e in zip(total, expected))
    direct = allreduce.tree_sum(loops, fan_in, n_shards)
    assert all(t.tobytes() == e.tobytes() for t, e in zip(direct, expected))


def test_the_choice_and_the_bound_on_what_a_loop_sends():
    assert allreduce.choose("auto", 2, 10**6) == "direct"  # the same bytes, fewer messages
    assert allreduce.choose("auto", 8, 1000) == "direct"  # 7 kB: latency-bound
    assert allreduce.choose("auto", 8, 220_200) == "scatter"  # MNIST's 784-64-64-10 in float32
    assert allreduce.choose("halving", 8, 220_200) == "halving"  # asked for, where the layout allows
    assert allreduce.choose("scatter", 2, 8) == "scatter"  # asked for: taken
    # loops of one host: through shared memory at any p from 2, whatever the size
    assert [allreduce.choose("auto", p, n, shared=True) for p, n in ((2, 10**6), (8, 1000), (8, 220_200), (12, 8))] \
        == ["shared"] * 4
    assert allreduce.choose("auto", 1, 8, shared=True) == "direct"  # alone: nothing to exchange
    assert allreduce.choose("scatter", 8, 220_200, shared=True) == "scatter"  # asked for: taken
    with pytest.raises(ValueError, match="allreduce 'shared' needs every worker holding shards on one host"):
        allreduce.choose("shared", 4, 8)
    # shared memory: a small network's sums one loop adds (its tokens: one to each other loop),
    # a large one's every loop adds a part of (a token to each other adder and each other loop)
    assert [allreduce.adders(p, 8000) for p in (2, 8, 16)] == [1, 1, 1]
    assert [allreduce.messages("shared", p, 8000) for p in (2, 8, 16)] == [1, 7, 15]
    assert [allreduce.sent_values("shared", p, 1000) for p in (2, 8, 64)] == [2000.0] * 3  # its sums, the total
    assert [allreduce.adders(p, 50 * 2**20) for p in (2, 8, 16)] == [2, 8, 16]
    assert allreduce.messages("shared", 8, 50 * 2**20) == 14
    assert allreduce.sent_values("shared", 8, 10**7, itemsize=4) == 10**7 * (1 + 1 / 8)
    assert allreduce.partners("halving", 8, 5) == [1, 4, 7] and allreduce.partners("shared", 3, 1) == [0, 2]
    with pytest.raises(ValueError, match="allreduce algorithm must be one of .* got 'ring'"):
        allreduce.choose("ring", 4, 8)
    with pytest.raises(ValueError, match="'halving' needs a power-of-two number of workers"):
        allreduce.choose("halving", 6, 10**6, halves=False)
    for p in (2, 3, 4, 8, 12, 16, 64):
        for algorithm in ("scatter", "halving"):
            assert allreduce.sent_values(algorithm, p, 1000) < 2 * 1000  # under twice the weights at any p
        assert allreduce.sent_values("direct", p, 1000) == (p - 1) * 1000
        assert allreduce.messages("scatter", p) == 2 * allreduce.messages("direct", p) == 2 * (p - 1)
    assert [allreduce.messages("halving", p) for p in (2, 4, 8, 16)] == [2, 4, 6, 8]
    for n, p in ((10, 4), (7, 7), (3, 5), (1000, 3), (0, 2)):  # p contiguous parts of n, sizes within one
        parts = allreduce.bounds(n, p)
        assert len(parts) == p and parts[0][0] == 0 and parts[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
        assert {stop - start for start, stop in parts} <= {n // p, -(-n // p)}
    # the halving adds as the tree only where the loops' subtrees are the perfect tree's leaves
    blocks = lambda p, s, k=2: [tree.decompose(a, b, k, s) for a, b in tree.split_shards(s, p)]  # noqa: E731
    assert allreduce.can_halve(8, blocks(8, 16), 2) and allreduce.can_halve(4, blocks(4, 4), 2)
    assert not allreduce.can_halve(4, blocks(4, 12), 2)  # blocks of 3 shards: not subtrees
    assert not allreduce.can_halve(3, blocks(3, 3), 2) and not allreduce.can_halve(4, blocks(4, 16, 4), 4)
    # recursive halving: at distance d = 1, 2, 4 ... each loop pairs with the loop whose slot
    # differs in bit d, the pair keep opposite halves (the lower half: the one without bit d),
    # and after the last step each loop's halves name a part of the vector no other loop holds
    for p in (2, 4, 8, 16):
        steps = {slot: allreduce.halving_steps(p, slot) for slot in range(p)}
        for slot, mine in steps.items():
            assert [partner ^ slot for partner, _ in mine] == [2 ** k for k in range(len(mine))] and 2 ** len(mine) == p
            for k, (partner, lower) in enumerate(mine):
                assert steps[partner][k] == (slot, not lower) and lower == (slot >> k & 1 == 0)
        assert len({tuple(lower for _, lower in mine) for mine in steps.values()}) == p


def _linked(p: int) -> list:
    secret = new_secret()
    links = [Links(i, "tcp://127.0.0.1:1", secret=secret) for i in range(p)]
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


@pytest.mark.parametrize("p, algorithm", [(2, "direct"), (3, "scatter"), (4, "scatter"), (8, "scatter"),
                                          (8, "direct"), (2, "halving"), (4, "halving"), (8, "halving"),
                                          (2, "shared"), (3, "shared"), (8, "shared")])
def test_loops_on_real_links_get_the_serial_total_and_send_within_the_bound(p, algorithm):
    """p loops (threads) allreduce three rounds each, two rounds in flight as local SGD has
    them: every loop's total is bitwise the serial tree's; by reduce-scatter each loop sends
    at most 2 (p - 1) / p of the partial sums' bytes and its messages' framing; through
    shared memory it writes its sums and its 1 / p of the total once, and leaves no segment
    behind. More rounds than a segment holds (``sharedreduce.RING``): its places are used again."""
    n_shards, size, rounds = 16, 5000, 2 * sharedreduce.RING + 1
    links = _linked(p)
    results: dict = {}
    errors: list = []

    def loop(i):
        try:
            with Allreduce(links[i], i, p, 2, n_shards, algorithm, wait=30) as exchange:
                sent = {r: exchange.start(r, _partials(n_shards, p, 2, size, seed=r)[1][i]) for r in (0, 1)}
                for r in range(rounds):
                    phases: dict = {}
                    total, more = exchange.finish(r, phases)
                    if r + 2 < rounds:
                        sent[r + 2] = exchange.start(r + 2, _partials(n_shards, p, 2, size, seed=r + 2)[1][i])
                    results[i, r] = total, sent[r] + more, phases
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(p)]
    with own_shm() as segments:
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
        finally:
            for links_i in links:
                links_i.close()
        left = segments()
    assert not errors and not any(t.is_alive() for t in threads), errors
    assert left == []  # every loop's segment unlinked
    payload = size * 4 + 3 * 8
    for r in range(rounds):
        expected = tree.reduce_serial(_partials(n_shards, p, 2, size, seed=r)[0], 2)
        for i in range(p):
            total, sent, phases = results[i, r]
            assert all(t.tobytes() == e.tobytes() for t, e in zip(total, expected)), (i, r)
            assert set(phases) <= {"idle", "reduce", "transfer"}
            framing = 512 * allreduce.messages(algorithm, p, payload)
            subtrees = len(_partials(n_shards, p, 2, 1, 0)[1][i])  # unaligned blocks (p = 3) hold several
            assert sent <= allreduce.sent_values(algorithm, p, payload, subtrees) + subtrees * framing
            if algorithm in ("scatter", "halving") and subtrees == 1:
                assert sent <= 2 * (p - 1) / p * payload + framing < 2.2 * payload
            if algorithm == "shared" and subtrees == 1:  # its sums and at most the total, written once
                assert sent <= 2 * payload + framing
