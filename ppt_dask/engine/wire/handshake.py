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
in a short-lived thread of its own with its own timeout (:data:`HANDSHAKE_SECONDS`), beside
the accepts, so one idle or slow connection holds up no other.
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

KEY_BYTES = 32  # a generation's secret
NONCE = 32  # bytes of a challenge
DIGEST = 32  # bytes of a proof (SHA-256)
HELLO = struct.Struct(f"!q{NONCE}s{DIGEST}s")  # the opener's slot, its nonce, its proof
# A loop answers a challenge within milliseconds; a handshake gets this long all the same (8
# loops on this project's 2 cores, with other processes about, wait their turn for a core)
HANDSHAKE_SECONDS = 10.0
MAX_PENDING = 32  # handshakes at once: a connection past them is closed (the opener tries again)
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


class Gate:
    """The listening side of one loop's links for one generation: accept on ``listener``
    until every slot of ``peers`` has linked (or ``deadline``, a ``time.monotonic()`` time),
    each connection admitted by the challenge-response in a thread of its own.

    ``linked`` maps each admitted slot to its socket (TLS-wrapped with ``tls``, a server-side
    context); ``refused`` lists every connection closed, as ``(peer address, why)``."""

    def __init__(self, listener, secret: bytes, slot: int, peers, deadline: float, tls=None):
        self.listener, self.secret, self.slot = listener, secret, slot
        self.peers, self.deadline, self.tls = set(peers), deadline, tls
        self.linked: dict = {}
        self.refused: list = []
        self._claimed: set = set()  # slots whose proof checked, the answer being sent
        self._lock = threading.Lock()
        self._pending: dict = {}  # thread -> the socket it is admitting (raw, then wrapped)
        self._wake_r, self._wake_w = socket.socketpair()  # a handshake that linked wakes the accepts

    def run(self) -> dict:
        """Accept and admit until every peer has linked or the deadline; the slots linked.
        Connections still in their handshake then are closed (and refused)."""
        self.listener.setblocking(False)
        threads: list = []
        try:
            while True:
                with self._lock:
                    if set(self.linked) == self.peers:
                        break
                left = self.deadline - time.monotonic()
                if left <= 0:
                    break
                ready, _, _ = select.select([self.listener, self._wake_r], [], [], left)
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
        return dict(self.linked)

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
            with self._lock:
                crowded = len(self._pending) >= MAX_PENDING
            if crowded:
                _close(sock)
                self._refuse(peer, f"past {MAX_PENDING} handshakes at once")
                continue
            thread = threading.Thread(target=self._admit, args=(sock, peer), daemon=True,
                                      name=f"ppt-links-{self.slot}-admit")
            with self._lock:
                self._pending[thread] = sock
            thread.start()
            started.append(thread)

    def _admit(self, sock, peer: str) -> None:
        me = threading.current_thread()
        try:
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(max(min(HANDSHAKE_SECONDS, self.deadline - time.monotonic()), 0.001))
            if self.tls is not None:  # wrapped first, then the handshake: the end can shut it meanwhile
                sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                with self._lock:
                    self._pending[me] = sock
                sock.do_handshake()
            self._challenge(sock)
        except BaseException as exc:  # noqa: BLE001  # whatever it was, this connection is refused
            _close(sock)
            with self._lock:
                self._pending.pop(me, None)
            self._refuse(peer, describe(exc))
            return
        try:
            self._wake_w.send(b"!")
        except OSError:  # the accepts ended meanwhile
            pass

    def _challenge(self, sock) -> int:
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
            why = self._unwanted(slot)
            if not why:
                self._claimed.add(slot)
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
        logger.warning("worker slot %d refused a connection from %s: %s", self.slot, peer, why)
        with self._lock:
            self.refused.append((peer, why))

    def _close_pending(self) -> None:
        """End the handshakes still running: a shutdown wakes a thread blocked reading."""
        with self._lock:
            pending = list(self._pending.values())
        for sock in pending:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass


def _name(address) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _close(sock) -> None:
    try:
        sock.close()
    except OSError:
        pass
