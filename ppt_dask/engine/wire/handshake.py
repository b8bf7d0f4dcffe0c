"""Who may join a loop's links: a challenge-response on each new connection, before anything is read from it.

A loop's listener (:class:`ppt_dask.engine.wire.links.Links`) is a port on the worker's
host that any local process can find (``/proc/net/tcp``) and connect to while the loops of a
generation link up. What arrives on a link is unpickled, so a connection must prove that it is
one of the generation's loops before a byte of it is read as a message. Each generation has a
secret of its own (:func:`new_secret`, made by the head and handed to the loops inside their
tasks' arguments, which travel over the cluster's own comms: TLS where the cluster is TLS),
and each new connection answers a challenge with it, as :mod:`multiprocessing.connection`'s
``deliver_challenge`` and ``answer_challenge`` do, both ways (HMAC-SHA256 over a fresh random
nonce, the two slots and the direction; nothing of the secret on the wire):

1. the listening loop sends a nonce (:data:`NONCE` bytes);
2. the opening loop sends its slot, a nonce of its own and its proof (:data:`HELLO`);
3. the listening loop checks that the slot is one it waits for and not already linked, and
   the proof; then sends its own proof, over the opener's nonce, and the link is made.

A connection that sends nothing, too little, a slot it is not waiting for, a slot already
linked, or a wrong proof is closed and named in :attr:`Gate.refused` (the run's log), and the
loop goes on accepting until every peer has linked or the deadline passed. Each handshake runs
in a short-lived thread of its own, beside the accepts, so one idle or slow connection holds
up no other, and has one absolute deadline (:data:`HANDSHAKE_SECONDS` from its accept, not
per read: a connection that sends a byte now and then is shut all the same when it passes).
At most :data:`MAX_PENDING` handshakes run at once; a newcomer past them shuts the oldest one
that has not proved itself, not itself, so strangers that connect first and drip cannot keep
the loops out. Refusals are counted per source host; the first :data:`MAX_NAMED` are named
one by one, and the log says them once per listener, with the count, when the link-up ends.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import select
import socket
import ssl
import struct
import threading
import time
from collections import Counter

KEY_BYTES = 32  # a generation's secret
NONCE = 32  # bytes of a challenge
DIGEST = 32  # bytes of a proof (SHA-256)
HELLO = struct.Struct(f"!q{NONCE}s{DIGEST}s")  # the opener's slot, its nonce, its proof
# A loop answers a challenge within milliseconds; a handshake gets this long all the same (8
# loops on this project's 2 cores, with other processes about, wait their turn for a core)
HANDSHAKE_SECONDS = 10.0
MAX_PENDING = 32  # handshakes at once: a newcomer past them shuts the oldest unproved one
MAX_NAMED = 16  # refusals named one by one per listener (address and why); the rest are counted
RETRY_SECONDS = 0.05  # an opener refused (too many handshakes at the listener) tries again after this

logger = logging.getLogger(__name__)


class Refused(ConnectionError):
    """A connection that did not prove it is one of the generation's loops."""


def new_secret() -> bytes:
    """A generation's secret: :data:`KEY_BYTES` random bytes."""
    return secrets.token_bytes(KEY_BYTES)


def proof(secret: bytes, role: bytes, nonce: bytes, speaker: int, listener: int) -> bytes:
    """HMAC-SHA256 over the role (``b"open"`` or ``b"accept"``), the other side's challenge
    and both slots, keyed by the generation's secret."""
    return hmac.new(secret, role + nonce + struct.pack("!qq", speaker, listener), hashlib.sha256).digest()


def read_exactly(sock, n: int) -> bytes:
    """``n`` bytes from ``sock`` (its own timeout applies); ``EOFError`` if it closes first."""
    data = bytearray()
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise EOFError(f"the connection closed after {len(data)} of {n} bytes")
        data += more
    return bytes(data)


def answer(sock, secret: bytes, slot: int, peer: int) -> None:
    """The opening side (slot ``slot``, linking to ``peer``): answer the peer's challenge and
    check its proof; :class:`Refused` if the peer cannot prove the secret."""
    challenge = read_exactly(sock, NONCE)
    mine = os.urandom(NONCE)
    sock.sendall(HELLO.pack(slot, mine, proof(secret, b"open", challenge, slot, peer)))
    if not hmac.compare_digest(read_exactly(sock, DIGEST), proof(secret, b"accept", mine, peer, slot)):
        raise Refused(f"worker slot {slot}: the loop at slot {peer}'s address did not prove the generation's secret")


def describe(exc: BaseException) -> str:
    """Why a connection was refused, in a few words for the run's log."""
    if isinstance(exc, Refused):
        return str(exc)
    if isinstance(exc, socket.timeout):
        return f"sent too little within {HANDSHAKE_SECONDS:g} s"
    if isinstance(exc, EOFError):
        return f"closed during the handshake ({exc})"
    if isinstance(exc, ssl.SSLError):
        return f"failed the TLS handshake ({exc.reason or exc})"
    return f"failed the handshake: {exc!r}"[:200]


class _Pending:
    """One connection in its handshake: its socket, the time it must have proved itself by,
    whether it has (its answer being sent), and why it was shut, when it was."""

    __slots__ = ("sock", "ends", "proved", "why")

    def __init__(self, sock, ends: float):
        self.sock, self.ends, self.proved, self.why = sock, ends, False, None

    def shut(self, why: str) -> None:
        """Shut the connection (a thread blocked reading it wakes) and say why, once."""
        if self.why is None:
            self.why = why
            try:
                socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
            except OSError:
                pass


class Gate:
    """The listening side of one loop's links for one generation: accept on ``listener``
    until every slot of ``peers`` has linked (or ``deadline``, a ``time.monotonic()`` time),
    each connection admitted by the challenge-response in a thread of its own.

    ``linked`` maps each admitted slot to its socket (TLS-wrapped with ``tls``, a server-side
    context); ``refused`` names the first :data:`MAX_NAMED` connections closed, as ``(peer
    address, why)``; ``counts`` counts every one per source host (``total`` in all)."""

    def __init__(self, listener, secret: bytes, slot: int, peers, deadline: float, tls=None):
        self.listener, self.secret, self.slot = listener, secret, slot
        self.peers, self.deadline, self.tls = set(peers), deadline, tls
        self.linked: dict = {}
        self.refused: list = []
        self.counts: Counter = Counter()  # source host -> connections refused
        self.total = 0
        self._claimed: set = set()  # slots whose proof checked, the answer being sent
        self._lock = threading.Lock()
        self._pending: dict = {}  # thread -> its _Pending, oldest first
        self._wake_r, self._wake_w = socket.socketpair()  # a handshake that linked wakes the accepts

    def run(self) -> dict:
        """Accept and admit until every peer has linked or the deadline; the slots linked.
        Connections still in their handshake then are closed (and refused); the refusals are
        logged once, counted."""
        self.listener.setblocking(False)
        threads: list = []
        try:
            while True:
                with self._lock:
                    if set(self.linked) == self.peers:
                        break
                now = time.monotonic()
                if now >= self.deadline:
                    break
                ready, _, _ = select.select([self.listener, self._wake_r], [], [], self._expire(now) - now)
                if self._wake_r in ready:
                    self._wake_r.recv(4096)
                if self.listener in ready:
                    threads += self._accept()
        finally:
            self._close_pending()
            for thread in threads:
                thread.join(1.0)
            self._wake_r.close()
            self._wake_w.close()
            self._log()
        return dict(self.linked)

    def _expire(self, now: float) -> float:
        """Shut the handshakes past their deadline; the next time to look (a deadline or the end)."""
        with self._lock:
            waiting = [p for p in self._pending.values() if not p.proved and p.why is None]
        wake = self.deadline
        for pending in waiting:
            if pending.ends <= now:
                pending.shut(f"sent too little within {HANDSHAKE_SECONDS:g} s")
            else:
                wake = min(wake, pending.ends)
        return wake

    def _accept(self) -> list:
        started = []
        while True:
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return started
            except OSError as exc:  # out of descriptors, say: this connection only
                self._refuse("?", f"could not be accepted: {exc!r}")
                return started
            peer = _name(address)
            if not self._make_room():
                _close(sock)
                self._refuse(peer, f"past {MAX_PENDING} handshakes at once, all of them proved")
                continue
            pending = _Pending(sock, min(time.monotonic() + HANDSHAKE_SECONDS, self.deadline))
            thread = threading.Thread(target=self._admit, args=(pending, peer), daemon=True,
                                      name=f"ppt-links-{self.slot}-admit")
            with self._lock:
                self._pending[thread] = pending
            thread.start()
            started.append(thread)

    def _make_room(self) -> bool:
        """Room for one more handshake: past :data:`MAX_PENDING`, the oldest that has not
        proved itself is shut (a stranger that came first goes, not the newcomer). False if
        every one has proved itself (their answers being sent)."""
        with self._lock:
            if len(self._pending) < MAX_PENDING:
                return True
            oldest = next((t for t, p in self._pending.items() if not p.proved), None)
            if oldest is None:
                return False
            pending = self._pending.pop(oldest)
        pending.shut(f"shut for a newcomer: {MAX_PENDING} handshakes at once, this one the oldest")
        return True

    def _admit(self, pending: _Pending, peer: str) -> None:
        sock = pending.sock
        try:
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # each read waits no longer than the whole handshake may; the accepts shut it at its deadline
            sock.settimeout(max(pending.ends - time.monotonic(), 0.001))
            if self.tls is not None:  # wrapped first, then the handshake: the end can shut it meanwhile
                sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                pending.sock = sock
                sock.do_handshake()
            self._challenge(sock, pending)
        except BaseException as exc:  # noqa: BLE001  # whatever it was, this connection is refused
            _close(sock)
            with self._lock:
                self._pending.pop(threading.current_thread(), None)
            self._refuse(peer, pending.why or describe(exc))
            return
        try:
            self._wake_w.send(b"!")
        except OSError:  # the accepts ended meanwhile
            pass

    def _challenge(self, sock, pending: _Pending) -> int:
        """Steps 1-3 of the module's handshake; the slot admitted (registered in ``linked``)."""
        challenge = os.urandom(NONCE)
        sock.sendall(challenge)
        slot, theirs, claimed = HELLO.unpack(read_exactly(sock, HELLO.size))
        with self._lock:
            why = self._unwanted(slot)
        if why:
            raise Refused(why)
        if not hmac.compare_digest(claimed, proof(self.secret, b"open", challenge, slot, self.slot)):
            raise Refused(f"named slot {slot} without the generation's secret")
        with self._lock:  # checked again: two connections may have named the slot at once
            why = self._unwanted(slot) or pending.why
            if not why:
                self._claimed.add(slot)
                pending.proved = True  # no newcomer nor deadline shuts it now
        if why:
            raise Refused(why)
        try:
            sock.sendall(proof(self.secret, b"accept", theirs, self.slot, slot))
        except BaseException:
            with self._lock:
                self._claimed.discard(slot)
            raise
        with self._lock:  # linked, and no longer a pending handshake that the end would shut
            self.linked[slot] = sock
            self._pending.pop(threading.current_thread(), None)
        return slot

    def _unwanted(self, slot: int) -> str | None:
        if slot not in self.peers:
            return f"named slot {slot}, not a peer of slot {self.slot}"
        if slot in self.linked or slot in self._claimed:
            return f"named slot {slot}, already linked"
        return None

    def _refuse(self, peer: str, why: str) -> None:
        with self._lock:
            self.total += 1
            self.counts[peer.rsplit(":", 1)[0]] += 1
            if len(self.refused) < MAX_NAMED:
                self.refused.append((peer, why))

    def _log(self) -> None:
        """The refusals of this listener, in one line: how many, from where, the first reason."""
        with self._lock:
            total, counts, first = self.total, dict(self.counts), self.refused[:1]
        if total:
            where = ", ".join(f"{n} from {host}" for host, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            logger.warning("worker slot %d refused %d connection%s while linking (%s); the first: %s",
                           self.slot, total, "" if total == 1 else "s", where,
                           f"{first[0][0]}: {first[0][1]}" if first else "?")

    def _close_pending(self) -> None:
        """End the handshakes still running: a shutdown wakes a thread blocked reading."""
        with self._lock:
            pending = list(self._pending.values())
        for entry in pending:
            entry.shut("closed: still in its handshake when the link-up ended")


def _name(address) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass
