"""Who may join the loops' links (ppt_dask/engine/wire/handshake.py, links.py): strangers
knocking on a loop's listener while the loops link up (nothing sent, the old slot-then-pickle
message, garbage, a slot not a peer, a slot that is one) are refused and named, nothing they
send is unpickled, and the loops link and talk all the same; over TLS too. A header past
what a peer sends is a lost link at once; every scheme is carried or refused."""

from __future__ import annotations

import os
import socket
import struct
import threading

import numpy as np
import pytest

from ppt_dask.engine.wire import handshake
from ppt_dask.engine.wire.handshake import new_secret
from ppt_dask.engine.wire.links import LinkLost, Links, frames_of
from ppt_dask.engine.wire.schemes import check_scheme, listen_host, tls_contexts


class _Creates:
    """Unpickled, it creates ``path`` (what a stranger's pickle could do as the training user)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def _connect_all(links: list, timeout: float = 20, meanwhile=lambda: None) -> list:
    """Link every loop (threads); ``meanwhile()`` runs once loop 0 accepts, before the others
    start. The errors of the loops that failed."""
    failed: list = []

    def connect(i):
        try:
            links[i].connect({j: links[j].address for j in range(len(links)) if j != i}, timeout=timeout)
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=connect, args=(i,)) for i in range(len(links))]
    threads[0].start()
    try:
        meanwhile()
    finally:
        for t in threads[1:]:
            t.start()
        for t in threads:
            t.join(timeout + 10)
    assert not any(t.is_alive() for t in threads)
    return failed


def _strangers(address: str, path: str, wrap=None) -> dict:
    """Connections to a loop's listener, by the local address they come from: what each sent."""
    host, port = address.partition("://")[2].rsplit(":", 1)
    old_message = struct.pack("!q", 1) + b"".join(bytes(f) for f in frames_of({"sum": _Creates(path)}))
    sends = {"nothing": b"", "slot and pickle": old_message.ljust(handshake.HELLO.size + 8, b"\0"),
             "garbage": os.urandom(300), "not a peer": handshake.HELLO.pack(7, b"n" * 32, b"p" * 32),
             "a peer's slot": handshake.HELLO.pack(1, b"n" * 32, b"p" * 32)}
    opened = {}
    for what, data in sends.items():
        sock = socket.create_connection((host, int(port)), timeout=10)
        if wrap is not None:
            sock = wrap(sock)
        sock.sendall(data)
        opened[what] = sock
    return opened


def _check_refused(links: list, opened: dict, path: str) -> None:
    names = {f"{s.getsockname()[0]}:{s.getsockname()[1]}": what for what, s in opened.items()}
    refused = {names[peer]: why for peer, why in links[0].refused if peer in names}
    assert set(refused) == set(opened), links[0].refused  # every stranger named, none linked
    assert set(links[0].incoming) == {1, 2} and not any(links[i].refused for i in (1, 2))
    # the handshakes run beside each other: the idle stranger held no one up (one after the
    # other, it would have been refused for sending too little within HANDSHAKE_SECONDS)
    assert "within" not in refused["nothing"], refused
    assert not os.path.exists(path)  # nothing a stranger sent was unpickled
    for sock in opened.values():
        sock.close()
    # the loops talk as if no one had knocked
    for i in range(3):
        links[i].send((("x", 0), np.full(3, float(i))))
    for i in range(3):
        got = links[i].receive(20, tag=("x", 0))
        assert [float(g[0]) for g in got] == [float(j) for j in range(3) if j != i]


def test_strangers_on_a_listener_are_refused_and_named_and_the_loops_link_all_the_same(tmp_path):
    path = str(tmp_path / "created")
    secret = new_secret()
    links = [Links(i, "tcp://127.0.0.1:1", secret=secret) for i in range(3)]
    try:
        opened: dict = {}
        assert _connect_all(links, meanwhile=lambda: opened.update(_strangers(links[0].address, path))) == []
        _check_refused(links, opened, path)
    finally:
        for link in links:
            link.close()


def test_strangers_on_a_tls_listener_with_or_without_the_clusters_certificate(tmp_path):
    """Plain bytes fail the TLS handshake; a stranger holding the cluster's certificate (any
    of its clients) gets through TLS and is refused by the secret."""
    pytest.importorskip("cryptography")
    from distributed.security import Security
    security = Security.temporary()
    path = str(tmp_path / "created")
    secret = new_secret()
    links = [Links(i, "tls://127.0.0.1:1", security, secret=secret) for i in range(3)]
    member = security.get_connection_args("worker")["ssl_context"]
    try:
        plain: dict = {}
        with_certificate: dict = {}

        def knock():
            plain.update(_strangers(links[0].address, path))
            with_certificate.update(_strangers(links[0].address, path, wrap=member.wrap_socket))
        assert _connect_all(links, meanwhile=knock) == []
        names = {f"{s.getsockname()[0]}:{s.getsockname()[1]}": what for what, s in plain.items()}
        tls_failed = [why for peer, why in links[0].refused if peer in names]
        assert len(tls_failed) == len(plain) and any("TLS" in why for why in tls_failed), links[0].refused
        _check_refused(links, with_certificate, path)
    finally:
        for link in links:
            link.close()


def test_a_loop_without_the_generations_secret_cannot_link():
    a, b = Links(0, "tcp://127.0.0.1:1", secret=new_secret()), Links(1, "tcp://127.0.0.1:1", secret=new_secret())
    try:
        failed = _connect_all([a, b], timeout=3)
        assert len(failed) == 2 and all(isinstance(f, LinkLost) for f in failed), failed
        assert any("without the generation's secret" in why for _peer, why in a.refused + b.refused)
    finally:
        a.close()
        b.close()


def test_a_header_past_what_a_peer_sends_is_a_lost_link_at_once():
    """A garbled header that announces 1 TB: the reader gives the link up as soon as it reads
    the header (it once buffered and waited for the bytes until its timeout)."""
    secret = new_secret()
    a, b = Links(0, "tcp://127.0.0.1:1", secret=secret), Links(1, "tcp://127.0.0.1:1", secret=secret)
    try:
        assert _connect_all([a, b]) == []
        b.expect(2**20)
        a.outgoing[1].setblocking(True)
        a.outgoing[1].sendall(struct.pack("!QQ", 1, 2**40))
        with pytest.raises(LinkLost, match="past the 1048576 a peer sends at most"):
            b.receive(60, tag=("x", 0))
    finally:
        a.close()
        b.close()


def test_every_scheme_carried_or_refused_with_the_way_out():
    assert listen_host("tcp://10.0.0.5:8786") == ("tcp", "10.0.0.5")
    assert listen_host("ws://10.0.0.5:8786") == ("tcp", "10.0.0.5")  # the worker's own host, not the loopback
    assert listen_host("tls://[::1]:8786") == ("tls", "::1")
    assert listen_host("wss://10.0.0.5:8786") == ("tls", "10.0.0.5")  # TLS, never plaintext
    assert listen_host("inproc://10.0.0.5/123/1") == ("tcp", "127.0.0.1")  # a threads cluster: one process
    for scheme in ("ucx", "ucxx"):
        with pytest.raises(ValueError, match=f"cannot carry {scheme}:// .*exchange='all'"):
            check_scheme(f"{scheme}://10.0.0.5:8786")
    with pytest.raises(ValueError, match="cannot carry ucx://"):
        Links(0, "ucx://10.0.0.5:8786", secret=new_secret())
    from distributed.security import Security
    with pytest.raises(ValueError, match="make no TLS context .* refuse to fall back to plaintext"):
        tls_contexts(0, "wss://127.0.0.1:1", Security())
    with pytest.raises(ValueError, match="without its security settings"):
        Links(0, "wss://127.0.0.1:1", secret=new_secret())
    with pytest.raises(ValueError, match="a links secret of 0 bytes"):
        Links(0, "tcp://127.0.0.1:1", secret=b"")


def test_the_handshakes_proof_binds_the_secret_the_slots_and_the_direction():
    secret = new_secret()
    proof = handshake.proof(secret, b"open", b"n" * 32, 1, 0)
    assert proof != handshake.proof(new_secret(), b"open", b"n" * 32, 1, 0)
    assert proof != handshake.proof(secret, b"open", b"n" * 32, 2, 0)  # another slot
    assert proof != handshake.proof(secret, b"accept", b"n" * 32, 1, 0)  # the other direction
    assert proof != handshake.proof(secret, b"open", b"m" * 32, 1, 0)  # another challenge
    assert len(proof) == handshake.DIGEST


def test_a_second_connection_for_a_slot_already_linked_is_refused():
    """Even one that proves the secret (a loop's own connection opened twice): refused as a
    duplicate, and the first link stays the link."""
    import time

    secret = new_secret()
    listener = socket.create_server(("127.0.0.1", 0))
    gate = handshake.Gate(listener, secret, 0, {1, 2}, time.monotonic() + 20)
    linker = threading.Thread(target=gate.run)
    linker.start()
    opened = []
    try:
        for _ in range(2):  # slot 1 twice
            sock = socket.create_connection(listener.getsockname(), timeout=10)
            opened.append(sock)
            try:
                handshake.answer(sock, secret, 1, 0)
            except (OSError, EOFError):
                pass
        sock = socket.create_connection(listener.getsockname(), timeout=10)
        opened.append(sock)
        handshake.answer(sock, secret, 2, 0)
        linker.join(20)
        assert not linker.is_alive() and set(gate.linked) == {1, 2}
        assert [why for _peer, why in gate.refused] == ["named slot 1, already linked"]
        first = f"{opened[0].getsockname()[0]}:{opened[0].getsockname()[1]}"
        assert gate.linked[1].getpeername()[1] == opened[0].getsockname()[1], first
    finally:
        for sock in opened + list(gate.linked.values()):
            sock.close()
        listener.close()


def test_forty_dripping_strangers_that_came_first_keep_no_loop_out(caplog):
    """40 connections on loop 0's listener before its peers connect, each sending a byte every
    second (:class:`dripper.Dripper`): more than the handshakes allowed at once. Each newcomer
    shuts the oldest unproved handshake, so the peers link; every stranger is refused, counted
    per source host, and the log says it once for the listener, not once per connection.
    (Before: the strangers held every handshake, each read's timeout starting again with each
    byte, and the listener closed the peers' connections: no link within the timeout.)"""
    from dripper import Dripper

    secret = new_secret()
    links = [Links(i, "tcp://127.0.0.1:1", secret=secret) for i in range(3)]
    host, port = links[0].address.partition("://")[2].rsplit(":", 1)
    try:
        with Dripper(host, int(port), per=40, every=1.0) as strangers, caplog.at_level("WARNING"):
            assert _connect_all(links, timeout=20) == []
            assert set(links[0].incoming) == {1, 2}
            assert links[0].refused_total == 40 and dict(links[0].refused_counts) == {"127.0.0.1": 40}
            named = {peer for peer, _why in links[0].refused}
            assert len(links[0].refused) == handshake.MAX_NAMED + 1  # the first named, the rest counted
            assert named & strangers.names and "24 more refused" in links[0].refused[-1][1]
            assert links[0].refused_events() == [{"from": links[0].refused[0][0], "why": links[0].refused[0][1],
                                                  "count": 40}]
        said = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(said) == 1 and "worker slot 0 refused 40 connections" in said[0], said
    finally:
        for link in links:
            link.close()


def test_a_stranger_that_drips_is_shut_at_its_handshakes_deadline_not_each_reads(monkeypatch):
    """A connection that sends a byte every 0.3 s has one deadline for its whole handshake
    (here 1 s, :data:`handshake.HANDSHAKE_SECONDS`): refused for sending too little within it,
    while the listener goes on waiting for its peers. (Before: each byte started the read's
    timeout again, and the stranger held its handshake until it had sent a whole hello.)"""
    import time

    from dripper import Dripper

    monkeypatch.setattr(handshake, "HANDSHAKE_SECONDS", 1.0)
    listener = socket.create_server(("127.0.0.1", 0))
    gate = handshake.Gate(listener, new_secret(), 0, {1}, time.monotonic() + 30)
    linker = threading.Thread(target=gate.run)
    linker.start()
    try:
        with Dripper(*listener.getsockname()[:2], per=1, every=0.3):
            waited = time.monotonic() + 25
            while not gate.refused and time.monotonic() < waited:
                time.sleep(0.05)
            assert gate.refused and gate.refused[0][1] == "sent too little within 1 s", gate.refused
        sock = socket.create_connection(listener.getsockname(), timeout=10)  # the peer links all the same
        handshake.answer(sock, gate.secret, 1, 0)
        linker.join(20)
        assert not linker.is_alive() and set(gate.linked) == {1}
        sock.close()
    finally:
        gate.deadline = 0
        linker.join(20)
        for s in gate.linked.values():
            s.close()
        listener.close()
