"""The loops' direct links (ppt_dask/engine/wire/links.py) between two threads of this process, on
real loopback sockets: what one sends the other reads whole, and a graceful close reads and
drops what still arrives without taking its bytes for messages."""

from __future__ import annotations

import threading

import numpy as np

from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import CHUNK, JOIN_BYTES, Links


def _pair():
    secret = new_secret()
    a, b = Links(0, "tcp://127.0.0.1:1", secret=secret), Links(1, "tcp://127.0.0.1:1", secret=secret)
    failed: list = []

    def connect(links, peers):
        try:
            links.connect(peers, timeout=10)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=connect, args=(a, {1: b.address})),
               threading.Thread(target=connect, args=(b, {0: a.address}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert not failed and not any(t.is_alive() for t in threads), failed
    return a, b


def test_a_message_larger_than_a_read_arrives_whole_and_writable():
    a, b = _pair()
    try:
        sent = np.arange(3 * CHUNK // 8, dtype=np.float64)
        a.send({"round": 7, "sum": sent})
        (got,) = b.receive(timeout=20)
        assert got["round"] == 7 and np.array_equal(got["sum"], sent)
        got["sum"][0] = -1.0  # writable: the loop adds into what it received
    finally:
        a.close()
        b.close()


def test_closing_gracefully_drops_a_large_message_still_arriving():
    """A loop that closes while its peer's last message (several reads long, all zeros: a
    header of zero frames if read from its middle) is still on its way: the close reads and
    drops the bytes until the peer says it is done, and raises nothing."""
    a, b = _pair()
    errors: list = []

    def close(links):
        try:
            links.close(linger=10)
        except BaseException as exc:
            errors.append(exc)

    closer = threading.Thread(target=close, args=(b,))
    closer.start()  # b lingers, reading what a still sends
    a.send({"sum": np.zeros(64 * CHUNK // 8)}, lose=True)  # more than the sockets buffer
    close(a)
    closer.join(20)
    assert not closer.is_alive() and errors == [], errors
    assert 0 in b.ended  # it read until the peer closed its side, not until its time ran out


def test_tagged_messages_are_taken_by_tag_whatever_their_order_on_the_link():
    """A local-SGD loop takes round r - 2's reduce-scatter after round r - 1's arrived: a tagged
    receive keeps what came first for its own call."""
    a, b = _pair()
    try:
        sent = [a.send((("scatter", 1), np.full(4, 1.0))), a.send((("scatter", 2), np.full(4, 2.0))),
                a.send((("gather", 1), np.full(4, 3.0)))]
        assert all(n > 4 * 8 for n in sent)  # the arrays' bytes and their framing, once per peer
        (gathered,) = b.receive(timeout=20, tag=("gather", 1))
        (first,) = b.receive(timeout=20, tag=("scatter", 1))
        (second,) = b.receive(timeout=20, tag=("scatter", 2))
        assert [gathered[0], first[0], second[0]] == [3.0, 1.0, 2.0]
    finally:
        a.close()
        b.close()


def test_a_message_that_ends_in_empty_arrays_is_written_and_read_whole():
    """Frames of no bytes (an empty slice of a small layer, as the halving's later steps give)
    last in what is queued: a write that takes nothing still moves past them (it once went
    round forever, and the loop with it; the send runs in a thread so that a test of the old
    code fails instead of hanging)."""
    a, b = _pair()
    try:
        big = np.arange(JOIN_BYTES // 8 + 1, dtype=np.float64)  # a frame of its own, then the empty one
        message = (big, np.zeros(0))
        sender = threading.Thread(target=a.send_each, args=({1: message}, ("half", 3, 2)), daemon=True)
        sender.start()
        sender.join(20)
        assert not sender.is_alive(), "the send of a message ending in empty arrays did not return"
        (got,) = b.receive(timeout=20, tag=("half", 3, 2))
        assert len(got) == 2 and np.array_equal(got[0], big) and got[1].size == 0
        assert a.backlog(1) == 0
    finally:
        a.close()
        b.close()


def test_a_lingering_close_whose_peers_have_closed_does_not_wait():
    """A loop that closes once its peers have closed reads their end and returns without a
    wait for more (a wait after the last read had nothing left to wake it: it slept a whole
    poll, 0.1 s at the end of every generation of every run)."""
    a, b = _pair()
    b.close()  # the peer is gone: its end of the link is all there is to read
    waits: list = []
    wait = a._wait
    a._wait = lambda seconds: waits.append(seconds) or wait(seconds)
    a.close(linger=600)
    assert 1 in a.ended and waits == []
