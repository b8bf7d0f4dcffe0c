"""Direct links between the loops of streamed rounds: sockets from loop thread to loop thread.

A streamed synchronous round waits for the other workers' partial sums of the same round, so
the exchange is on its critical path. Sent through an actor (a method call on another
worker), a message goes from the loop's thread to its worker's event loop, over the wire,
into the other worker's event loop, and from there to the other loop's thread: four
hand-overs, each waiting for a busy event loop. Through Dask's comms on an event loop of the
loop's own (``distributed.comm.connect``), one hop: but a Python event loop, tornado's
streams and the comm's framing still cost 0.5 ms a message between two processes of this
2-core machine, where the bytes of a socket take 0.01 ms (graphs/README, "Synchronous rounds
without the scheduler"). So each loop holds plain sockets of its own (Python's ``socket``,
``selectors`` and, for TLS, ``ssl`` with the worker's own TLS settings), written and read
in the loop's thread with no event loop and no other thread in between, as an MPI rank
would. graphs/exchange_floor.py measures it beside the actor, the round graph and MPI.

Each pair of loops has one socket per direction: slot ``a`` writes to ``b`` on the socket it
opened and reads what ``b`` sends on the socket ``b`` opened. A socket delivers in order, so
the next message read from a slot is its next one. A message is pickled (protocol 5: arrays
travel as their own buffers, no copy before the socket) behind a header of frame lengths.
:meth:`Links.send` writes what the sockets take at once and leaves the rest for the next
wait; :meth:`Links.receive` (synchronous rounds) waits for the next message of every other
loop and for its own writes to end, reading and writing as the sockets allow, so two loops
that send each other large messages at once never wait on each other; :meth:`Links.poll`
(asynchronous loops) takes what has arrived without waiting.

Nothing is read from a connection as a message before it proved, by a challenge-response over
the generation's secret, that it is one of the generation's loops
(:mod:`ppt_dask.engine.wire.handshake`); a stray connection is refused and named in
:attr:`Links.refused`, and the loop goes on linking. A message's header is checked against the
most a peer may send (:meth:`Links.expect`): a larger one is a lost link at once, not a wait
for bytes that never come. The links carry the worker's own scheme: TLS for ``tls://`` and
``wss://`` workers (a TLS context that cannot be made is an error, never plaintext), the
worker's host for ``tcp://`` and ``ws://``, the loopback for a threads cluster
(``inproc://``); a scheme they cannot carry (``ucx://``) is refused by the head before any
round (:func:`ppt_dask.engine.wire.schemes.check_scheme`).

The module stays whole for now, over 400 lines: it is being reworked, and it splits along its
concepts (listening and linking, a message's framing) once that work has landed.
"""

from __future__ import annotations

import itertools
import pickle
import selectors
import socket
import ssl
import struct
import threading
import time
from collections import Counter, deque

from ppt_dask.engine.wire import handshake
from ppt_dask.engine.wire.inboxes import POLL_SECONDS, Inboxes, LinkLost  # noqa: F401  (links.LinkLost)
from ppt_dask.engine.wire.schemes import listen_host, tls_contexts

CONNECT_SECONDS = 30.0  # the longest a loop waits for the others to connect
CHUNK = 1 << 20  # bytes read from a socket at a time
# Frames under this many bytes are joined before they are written, and up to GATHER frames go
# in one sendmsg: a message of 4 frames took 4 send calls, 70 of its 77 microseconds of CPU
# between two processes here (2026-11-28, a round trip of 16 floats), where the copies cost less
JOIN_BYTES = 64 * 2**10
GATHER = 64
_COUNT = struct.Struct("!Q")
MAX_FRAMES = 1 << 16  # frames a message may have (a pickle and an array's buffer each)
class Garbled(ConnectionError):
    """A message header past what a peer may send: the link is lost, not waited on."""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.partition("://")[2].rpartition(":")
    return host.strip("[]"), int(port)


def frames_of(message) -> list:
    """``message`` as the bytes that go on a socket: a header (the number of frames and their
    lengths), the pickle, the out-of-band buffers of its arrays. Neighbouring frames under
    ``JOIN_BYTES`` go joined (a copy of a few kB costs less than a system call each: the
    header, the pickle and a stats vector are one write, not three); the reader splits them
    by the header's lengths all the same."""
    buffers: list = []
    body = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    frames = [memoryview(body)] + [b.raw() for b in buffers]
    header = struct.pack(f"!{len(frames) + 1}Q", len(frames), *(f.nbytes for f in frames))
    out, run = [], []
    for frame in [memoryview(header), *frames]:
        if frame.nbytes < JOIN_BYTES:
            run.append(frame)
            continue
        if run:
            out.append(_joined(run))
            run = []
        out.append(frame)
    return [*out, _joined(run)] if run else out


def _joined(frames: list) -> memoryview:
    return frames[0] if len(frames) == 1 else memoryview(b"".join(frames))


def message_of(buffer: bytearray, limit: int | None = None):
    """The first whole message at the start of ``buffer`` and its length in bytes, or
    ``(None, 0)`` while its bytes have not all arrived. Arrays come back writable. A header
    of more than :data:`MAX_FRAMES` frames or more than ``limit`` bytes raises
    :class:`Garbled` as soon as it is read."""
    if len(buffer) < _COUNT.size:
        return None, 0
    (n,) = _COUNT.unpack_from(buffer)
    start = _COUNT.size * (n + 1)
    if n > MAX_FRAMES or (limit is not None and start > limit):
        raise Garbled(f"a message header of {n} frames")
    if len(buffer) < start:
        return None, 0
    lengths = struct.unpack_from(f"!{n}Q", buffer, _COUNT.size)
    end = start + sum(lengths)
    if limit is not None and end > limit:
        raise Garbled(f"a message of {end} bytes, past the {limit} a peer sends at most")
    if len(buffer) < end:
        return None, 0
    frames, at = [], start
    for length in lengths:
        frames.append(buffer[at:at + length])  # a bytearray of its own: writable arrays
        at += length
    return pickle.loads(frames[0], buffers=frames[1:]), end


class _Out:
    """What is still to be written to one peer: the frames of whole messages, in order."""

    def __init__(self):
        self.frames: deque = deque()  # memoryviews; None marks the end of a message
        self.messages = 0  # messages not yet wholly written

    def add(self, frames: list) -> None:
        self.frames.extend(frames)
        self.frames.append(None)
        self.messages += 1

    def write(self, sock) -> bool:
        """Write what the socket takes now; True once everything queued is written. Up to
        ``GATHER`` frames go in one system call (``sendmsg``; TLS sockets have none: one each)."""
        gather = not isinstance(sock, ssl.SSLSocket)
        while self.frames:
            if self.frames[0] is None:
                self.frames.popleft()
                self.messages -= 1
                continue
            if not self.frames[0].nbytes:  # an empty array's buffer: a write of it takes nothing
                self.frames.popleft()
                continue
            batch = list(itertools.islice((f for f in self.frames if f is not None), GATHER if gather else 1))
            try:
                n = sock.sendmsg(batch) if len(batch) > 1 else sock.send(batch[0])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                return False
            whole = n == sum(f.nbytes for f in batch)
            while n:
                frame = self.frames[0]
                if frame is None:
                    self.frames.popleft()
                    self.messages -= 1
                elif n >= frame.nbytes:
                    n -= frame.nbytes
                    self.frames.popleft()
                else:
                    self.frames[0], n = frame[n:], 0
            if not whole:
                return False
        return True


class Links(Inboxes):
    """One loop's sockets to the other loops of a generation, made and used in the loop's thread.

    Parameters
    ----------
    slot : int
        This loop's worker slot.
    address : str
        The address of the worker it runs on (``tcp://host:port``, ``tls://...``, ...): the
        links listen on the same host, with TLS where the worker has it (:func:`listen_host`).
    security : distributed.security.Security, optional
        The worker's security settings: with TLS, its server-side context for the sockets the
        others open to this loop and its client-side one for those it opens (both verify the
        cluster's certificates, as the worker's own comms do).
    secret : bytes
        The generation's secret (:func:`ppt_dask.engine.wire.handshake.new_secret`), the
        same for every loop of the generation: what a connection proves before it is read.
    """

    def __init__(self, slot: int, address: str, security=None, *, secret: bytes):
        if len(secret) < handshake.KEY_BYTES:
            raise ValueError(f"worker slot {slot}: a links secret of {len(secret)} bytes "
                             f"(at least {handshake.KEY_BYTES})")
        self.slot, self.secret = slot, secret
        scheme, host = listen_host(address)
        self._server_tls = self._client_tls = None
        if scheme == "tls":
            self._server_tls, self._client_tls = tls_contexts(slot, address, security)
        self.incoming: dict = {}  # slot -> the socket that slot writes to us on
        self.outgoing: dict = {}  # slot -> the socket we write to that slot on
        self.lost: set = set()  # slots whose link broke (the asynchronous loops go on without them)
        self.ended: set = set()  # slots that closed their side: what they sent is all read
        self.refused: list = []  # (peer address, why) of the connections refused while linking (bounded)
        self.refused_counts: Counter = Counter()  # source host -> connections refused while linking
        self.refused_total = 0
        self.limit: int | None = None  # the most bytes a peer's message may take (expect)
        self._out: dict = {}  # slot -> _Out
        self._in: dict = {}  # slot -> bytes read and not yet a whole message
        self._inbox: dict = {}  # slot -> whole messages read, not yet taken
        self._stash: dict = {}  # (slot, tag) -> a tagged message's payload read, not yet taken
        self._chunk = memoryview(bytearray(CHUNK))  # what a read lands in before its link's buffer
        self._draining = False  # closing: what still arrives is read and dropped, never parsed
        self._selector = selectors.DefaultSelector()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.listener = socket.create_server((host, 0), family=family, backlog=128)
        port = self.listener.getsockname()[1]
        self.address = f"{scheme}://{f'[{host}]' if family == socket.AF_INET6 else host}:{port}"

    def expect(self, nbytes: int) -> None:
        """A peer's message takes at most ``nbytes`` (header and pickle included): a header
        that says more is a lost link as soon as it is read (:class:`Garbled`)."""
        self.limit = int(nbytes)

    # -- connecting -------------------------------------------------------------------------
    def connect(self, peers: dict, timeout: float = CONNECT_SECONDS) -> None:
        """Open a socket to every other loop (``peers``: slot -> its links' address) and wait
        until every other loop has opened one to this one, each connection admitted by the
        generation's secret (:mod:`ppt_dask.engine.wire.handshake`): a stray one is
        closed and named in :attr:`refused`, and the accepts go on until ``timeout``."""
        deadline = time.monotonic() + timeout
        failed: list = []

        def out():  # beside the accepts: a TLS handshake needs the other side's accept
            try:
                for slot, address in peers.items():
                    self.outgoing[slot] = self._open(slot, address, deadline)
            except BaseException as exc:  # handed to the loop's thread below
                failed.append(exc)

        opener = threading.Thread(target=out, name=f"ppt-links-{self.slot}", daemon=True)
        opener.start()
        gate = handshake.Gate(self.listener, self.secret, self.slot, peers, deadline, self._server_tls)
        try:
            self.incoming = gate.run()
        finally:
            self._count_refused(gate)
            opener.join(max(deadline - time.monotonic(), 0.001))
            self.listener.close()
        missing = sorted(set(peers) - set(self.incoming))
        if opener.is_alive() or failed or missing:
            why = repr(failed[0]) if failed else f"slots {missing or sorted(set(peers) - set(self.outgoing))} " \
                                                 f"did not link within {timeout} s"
            # the count first: what reaches the run's events of a failed link-up is this line, cut short
            refused = f" (refused {self.refused_total}: {self.refused[0][1]})" if self.refused else ""
            raise LinkLost(f"worker slot {self.slot} could not link to the others{refused}: {why}")
        for slot, sock in self.incoming.items():
            sock.setblocking(False)
            self._in[slot], self._inbox[slot] = bytearray(), deque()
            self._selector.register(sock, selectors.EVENT_READ, ("in", slot))
        for slot, sock in self.outgoing.items():
            sock.setblocking(False)
            self._out[slot] = _Out()

    def _count_refused(self, gate) -> None:
        """What ``gate`` refused: named one by one up to :data:`handshake.MAX_NAMED`, then one
        entry more that counts the rest (:attr:`refused`, the run's events); every one counted
        per source host in :attr:`refused_counts`."""
        self.refused_counts.update(gate.counts)
        self.refused_total += gate.total
        self.refused.extend(gate.refused)
        rest = gate.total - len(gate.refused)
        if rest > 0:
            hosts = ", ".join(f"{n} from {host}" for host, n in gate.counts.most_common())
            self.refused.append((",".join(sorted(gate.counts)), f"{rest} more refused, not named "
                                 f"({gate.total} in all: {hosts})"))

    def refused_events(self) -> list:
        """The refusals as the run's events take them: ``{"from", "why", "count"}`` per source
        host, with the first reason named there (bounded, however many connected)."""
        first: dict = {}
        for peer, why in self.refused:
            first.setdefault(peer.rsplit(":", 1)[0], (peer, why))
        return [{"from": first.get(host, (host, "?"))[0], "why": first.get(host, (host, "?"))[1], "count": n}
                for host, n in self.refused_counts.most_common()]

    def _open(self, slot: int, address: str, deadline: float):
        """A socket to ``slot``'s loop, admitted there: tried again while the listener turns it
        away (it may be busy with strays' handshakes) until ``deadline``. The peer's loop may
        reach its accepts late (a busy worker): the whole deadline is this side's to wait."""
        host, port = _split(address)
        while True:
            sock = None
            try:
                sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.001))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                if self._client_tls is not None:
                    sock = self._client_tls.wrap_socket(sock, server_side=False)
                handshake.answer(sock, self.secret, self.slot, slot)
                return sock
            except (OSError, EOFError):
                if sock is not None:
                    _close(sock, None)
                if time.monotonic() + handshake.RETRY_SECONDS >= deadline:
                    raise
                time.sleep(handshake.RETRY_SECONDS)

    # -- sending and receiving --------------------------------------------------------------
    def send(self, message, slots=None, *, lose: bool = False) -> int:
        """Queue ``message`` for every other loop (or those of ``slots``) still linked and write
        what the sockets take at once; the rest goes while the loop next waits or polls. The
        arrays in ``message`` must not change until then (:meth:`receive` returns after every
        write ended). A link that broke raises :class:`LinkLost`, or with ``lose`` joins
        :attr:`lost`. Returns the bytes queued (every copy)."""
        frames = frames_of(message)
        size, sent = sum(f.nbytes for f in frames), 0
        for slot in self.outgoing if slots is None else slots:
            if slot not in self.lost:
                self._out[slot].add(frames)
                sent += size
                self._guard(slot, not lose, self._write, slot)
        return sent

    def send_each(self, messages: dict, tag) -> int:
        """Queue ``(tag, messages[slot])`` for each other loop ``slot`` (a message of its own
        to each, as a reduce-scatter sends) and write what the sockets take at once; the
        bytes queued. A link that broke raises :class:`LinkLost`."""
        sent = 0
        for slot, message in messages.items():
            frames = frames_of((tag, message))
            sent += sum(f.nbytes for f in frames)
            self._out[slot].add(frames)
            self._guard(slot, True, self._write, slot)
        return sent

    def backlog(self, slot: int) -> int:
        """Messages queued for ``slot`` and not yet wholly written."""
        return self._out[slot].messages

    def receive(self, timeout: float, stopped=lambda: False, tag=None, slots=None) -> list:
        """The next message of every other loop (in slot order), once this loop's own writes
        have ended too, waiting at most ``timeout`` seconds; raises ``stopped()``'s error (when
        it gives one) if the run stops meanwhile, :class:`LinkLost` if a link breaks.

        With ``tag``, the messages are ``(tag, payload)`` pairs (see :meth:`send_each`): the
        payload tagged ``tag`` of every other loop (or of those in ``slots``), whatever came
        before it on the link (kept for a later call with its own tag)."""
        if not self.incoming:
            return []
        waited = sorted(self.incoming if slots is None else slots)
        deadline = time.monotonic() + timeout
        next_look = time.monotonic() + POLL_SECONDS
        readable = self._wait(0.0)  # the sockets with bytes to read (one call, not one read each)
        while True:
            self._pump(strict=True, readable=readable)
            ready = self._ready(waited, tag, lambda: any(o.frames for o in self._out.values()), stopped)
            if ready is not None:
                return ready
            now = time.monotonic()
            next_look = self._look(now, next_look, deadline, timeout, stopped)
            readable = self._wait(min(next_look, deadline) - now)

    def poll(self) -> list:
        """The messages that have arrived, as ``(slot, message)`` in slot order, without waiting;
        the queued writes go on as far as the sockets take them. A slot whose link broke joins
        :attr:`lost` and is left out from then on."""
        self._pump(strict=False)
        arrived = []
        for slot in sorted(self._inbox):
            while self._inbox[slot]:
                arrived.append((slot, self._inbox[slot].popleft()))
        for slot in self.ended - self.lost:  # it sent all it will
            self._drop(slot)
        return arrived

    def _wait(self, seconds: float):
        """Block until a socket can be read (or one with writes queued written), or ``seconds``;
        the slots whose sockets have bytes to read (None: look at every one, as TLS keeps
        bytes of its own that the selector does not see)."""
        writing = [s for s, o in self._out.items() if o.frames and s not in self.lost]
        for slot in writing:
            self._selector.register(self.outgoing[slot], selectors.EVENT_WRITE, ("out", slot))
        try:
            events = self._selector.select(max(seconds, 0.0))
        finally:
            for slot in writing:
                self._selector.unregister(self.outgoing[slot])
        if self._server_tls is not None:
            return None
        return {key.data[1] for key, _mask in events if key.data[0] == "in"}

    def _pump(self, *, strict: bool, readable=None) -> None:
        """Read what has arrived (on the slots of ``readable``, or on every one) and write what
        the sockets take, without blocking."""
        for slot in list(self.outgoing):
            if slot not in self.lost and self._out[slot].frames:
                self._guard(slot, strict, self._write, slot)
        for slot in list(self.incoming) if readable is None else sorted(readable):
            if slot not in self.lost and slot not in self.ended:
                self._guard(slot, strict, self._read, slot)

    def _guard(self, slot: int, strict: bool, action, *args) -> None:
        try:
            action(*args)
        except OSError as exc:
            if strict:
                raise LinkLost(f"worker slot {self.slot} lost its link to slot {slot}: {exc!r}") from exc
            self._drop(slot)

    def _write(self, slot: int) -> None:
        self._out[slot].write(self.outgoing[slot])

    def _read(self, slot: int) -> None:
        sock, buffer, chunk = self.incoming[slot], self._in[slot], self._chunk
        while True:
            try:
                n = sock.recv_into(chunk)  # into one buffer of the links': no new bytes object a read
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                break
            if not n:  # the peer closed its side: keep what came before
                self.ended.add(slot)
                _unregister(sock, self._selector)
                break
            buffer += chunk[:n]
        if self._draining:  # bytes from the middle of a message are not a header
            buffer.clear()
            return
        while True:
            message, used = message_of(buffer, self.limit)
            if message is None:
                return
            del buffer[:used]
            self._inbox[slot].append(message)

    def _drop(self, slot: int) -> None:
        self.lost.add(slot)
        for sock in (self.incoming.get(slot), self.outgoing.get(slot)):
            if sock is not None:
                _close(sock, self._selector)
        if slot in self._out:
            self._out[slot] = _Out()

    def close(self, linger: float = 0.0) -> None:
        """Close every socket and the listener. With ``linger`` seconds, first as TCP closes
        gracefully: finish the writes queued, tell each peer that nothing more comes, and read
        (and drop) what the peers still send until each has said the same, so that no socket
        closes with bytes unread (the peer's writes would fail on a reset link: local SGD
        leaves its last two rounds' sums unread). Past ``linger``, what is queued is dropped."""
        try:
            if linger > 0 and self.outgoing:
                self._linger(time.monotonic() + linger)
        finally:
            for sock in [*self.outgoing.values(), *self.incoming.values(), self.listener]:
                _close(sock, self._selector)
            self._selector.close()

    def _linger(self, deadline: float) -> None:
        # each wait comes after a pump and a look at what it left: a wait before the look slept
        # a whole POLL_SECONDS once the peers had closed (the socket unregistered, nothing to
        # wake it), 0.1 s at the end of every generation
        while True:
            self._pump(strict=False)
            if not any(self._out[s].frames for s in self.outgoing if s not in self.lost) \
                    or time.monotonic() >= deadline:
                break
            self._wait(min(POLL_SECONDS, deadline - time.monotonic()))
        for slot, sock in self.outgoing.items():
            if slot not in self.lost:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    self.lost.add(slot)
        self._draining = True
        self._stash.clear()
        for slot in self.incoming:
            self._inbox[slot].clear()
            self._in[slot].clear()
        while True:
            self._pump(strict=False)
            if not any(s not in self.ended and s not in self.lost for s in self.incoming) \
                    or time.monotonic() >= deadline:
                break
            self._wait(min(POLL_SECONDS, deadline - time.monotonic()))


def _unregister(sock, selector) -> None:
    try:
        selector.unregister(sock)
    except (KeyError, ValueError):
        pass


def _close(sock, selector) -> None:
    if selector is not None:
        _unregister(sock, selector)
    try:
        sock.close()
    except OSError:
        pass
