"""A measurement transport of graphs/transports.py, not part of ppt_dask (see below): the loops'
links over distributed's comms, :class:`ppt_dask.engine.wire.links.Links`'s interface on
``distributed.comm.connect`` and ``listen`` (TCP, TLS, and UCX where it is installed).

:mod:`ppt_dask.engine.wire.links` is a transport of our own: plain sockets written and read in the
loop's thread. This is the maintained alternative, measured beside it by
``graphs/transports.py`` (graphs/README, "Transports for the allreduce"): the same tagged
messages of :class:`ppt_dask.engine.rounds.allreduce.Allreduce`, carried by the comms Dask's own
workers talk over, so a cluster's ``tls://`` settings (``distributed.security.Security``)
and, with distributed-ucxx, ``ucxx://`` (InfiniBand on an HPC cluster) come with them.

The comms are asyncio coroutines. The loop's thread drives an event loop of its own
(``run_until_complete``), as :class:`Links` drives its selector: :meth:`CommLinks.send`
starts the writes and runs the event loop one turn, so the comm writes what the socket takes
at once; :meth:`CommLinks.receive` runs it until every other loop's message has arrived and
the writes have ended. No other thread touches the comms, and between calls nothing runs:
as with :class:`Links`, a loop that computes leaves its sends queued until it next waits.
Each pair of loops has one comm per direction (the one a loop opened is written, the one it
accepted is read), so messages from a slot arrive in order. A message goes as
``distributed.protocol.to_serialize(message)``: pickled, its arrays as out-of-band frames.

Every comm a loop accepts answers the generation's secret before a message of it is taken
(:mod:`ppt_dask.engine.wire.handshake`'s challenge-response, in msgpack messages read with
``deserialize=False``); a stray comm is closed and named in :attr:`CommLinks.refused`. **That is
not enough against a local stranger**: distributed unpickles ``__Pickled__`` frames during its
own comm handshake and in the reads before ours, ``deserialize=False`` notwithstanding (a local
process created a file through it). So this module is not part of ppt_dask: it lives here, a
transport this script measures between processes of its own, and the package's loops talk
over :mod:`ppt_dask.engine.wire.links` alone, whose handshake comes before any read.

Carries the synchronous rounds' interface (``connect``, ``send``, ``send_each``,
``receive``, ``close``); the asynchronous loops' ``poll`` and ``backlog`` are not here.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import os
import time
from collections import deque

from distributed.comm import connect as comm_connect
from distributed.comm import get_address_host
from distributed.comm import listen as comm_listen
from distributed.comm.core import CommClosedError
from distributed.protocol import to_serialize
from distributed.protocol.serialize import Serialized, deserialize

from ppt_dask.engine.wire import handshake
from ppt_dask.engine.wire.handshake import HANDSHAKE_SECONDS, NONCE, Refused, proof
from ppt_dask.engine.wire.inboxes import POLL_SECONDS, Inboxes, LinkLost
from ppt_dask.engine.wire.links import CONNECT_SECONDS

SCHEMES = ("tcp", "tls", "ucxx")  # a worker's scheme kept (ucxx://: distributed-ucxx); inproc:// listens on tcp


def listen_address(worker_address: str) -> str:
    """Where a loop's comms listen: the worker's scheme and host, any free port (tcp on the
    loopback for a worker of a threads cluster)."""
    scheme = worker_address.partition("://")[0]
    if scheme not in SCHEMES:
        return "tcp://127.0.0.1:0"
    host = get_address_host(worker_address)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:0"


def payload_bytes(message) -> int:
    """The bytes of the arrays in ``message`` (tuples, lists and dict values walked), what a
    send reports: the framing and the pickle around them are the comm's."""
    if hasattr(message, "nbytes"):
        return int(message.nbytes)
    if isinstance(message, dict):
        return sum(payload_bytes(v) for v in message.values())
    if isinstance(message, (tuple, list)):
        return sum(payload_bytes(v) for v in message)
    return 0


class CommLinks(Inboxes):
    """One loop's comms to the other loops of a generation, made and used in the loop's thread.

    Parameters
    ----------
    slot : int
        This loop's worker slot.
    address : str
        The address of the worker it runs on: the comms listen on its host with its scheme.
    security : distributed.security.Security, optional
        The worker's security settings (required for ``tls://``): the comms' TLS contexts are
        the worker's own, as :class:`ppt_dask.engine.wire.links.Links` takes them.
    secret : bytes
        The generation's secret, what every comm proves before it is read.
    """

    def __init__(self, slot: int, address: str, security=None, *, secret: bytes):
        if len(secret) < handshake.KEY_BYTES:
            raise ValueError(f"worker slot {slot}: a links secret of {len(secret)} bytes "
                             f"(at least {handshake.KEY_BYTES})")
        self.slot, self.secret = slot, secret
        where = listen_address(address)
        if where.startswith("tls://") and security is None:
            raise ValueError(f"worker slot {slot}: a tls:// worker ({address}) without its security settings")
        self._listen_args = security.get_listen_args("worker") if security is not None else {}
        self._connect_args = security.get_connection_args("worker") if security is not None else {}
        self.incoming: dict = {}  # slot -> the comm that slot writes to us on
        self.outgoing: dict = {}  # slot -> the comm we write to that slot on
        self.lost: set = set()  # slots whose link broke
        self.ended: set = set()  # slots that closed their side
        self.refused: list = []  # (peer address, why) of each comm refused
        self._peers: set = set()  # the slots whose comms it admits (connect's)
        self._claimed: set = set()  # slots admitted, or being admitted
        self._inbox: dict = {}  # slot -> whole messages read, not yet taken
        self._stash: dict = {}  # (slot, tag) -> a tagged message's payload read, not yet taken
        self._writes: set = set()  # write tasks not yet done
        self._failed: list = []  # errors of writes and reads, raised in the loop's thread
        self._waiter: asyncio.Future | None = None  # woken by an arrival or a finished write
        self._readers: list = []
        self._loop = asyncio.new_event_loop()
        self.listener = self._run(comm_listen(where, self._accept, deserialize=False, **self._listen_args))
        self._run(self.listener.start())
        self.address = self.listener.contact_address

    def _run(self, awaitable):
        return self._loop.run_until_complete(awaitable)

    # -- connecting -------------------------------------------------------------------------
    async def _accept(self, comm) -> None:
        """A comm another loop opened: admitted by the secret, then its messages."""
        try:
            slot = await asyncio.wait_for(self._admit(comm), HANDSHAKE_SECONDS)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001  # whatever it was, this comm is refused
            self.refused.append((comm.peer_address, handshake.describe(exc)))
            comm.abort()
            return
        self.incoming[slot] = comm
        self._inbox.setdefault(slot, deque())
        self._readers.append(asyncio.current_task())
        self._wake()
        try:
            while True:
                message = await comm.read()
                if not isinstance(message, Serialized):
                    raise ValueError(f"a message that is not one of the loops' ({type(message).__name__})")
                self._inbox[slot].append(deserialize(message.header, message.frames))
                self._wake()
        except (CommClosedError, OSError):
            self.ended.add(slot)
            self._wake()
        except BaseException as exc:  # noqa: BLE001  # a bad message: the loop's thread raises it
            self._failed.append((slot, exc))
            self._wake()

    async def _admit(self, comm) -> int:
        """The listening side of the handshake, in plain msgpack messages: the slot admitted."""
        challenge = os.urandom(NONCE)
        await comm.write({"challenge": challenge})
        hello = await comm.read()
        if not (isinstance(hello, dict) and type(hello.get("slot")) is int
                and isinstance(hello.get("nonce"), bytes) and isinstance(hello.get("proof"), bytes)):
            raise Refused("sent no hello")
        slot = hello["slot"]
        if slot not in self._peers:
            raise Refused(f"named slot {slot}, not a peer of slot {self.slot}")
        if slot in self._claimed:
            raise Refused(f"named slot {slot}, already linked")
        if not hmac.compare_digest(hello["proof"], proof(self.secret, b"open", challenge, slot, self.slot)):
            raise Refused(f"named slot {slot} without the generation's secret")
        self._claimed.add(slot)  # one event loop: no other admission ran since the check
        await comm.write({"proof": proof(self.secret, b"accept", hello["nonce"], self.slot, slot)})
        return slot

    def connect(self, peers: dict, timeout: float = CONNECT_SECONDS) -> None:
        """Open a comm to every other loop (``peers``: slot -> its links' address) and wait
        until every other loop has opened one to this one."""
        deadline = time.monotonic() + timeout
        self._peers = set(peers)

        async def link(slot, address):
            comm = await comm_connect(address, timeout=max(deadline - time.monotonic(), 0.001), deserialize=False,
                                      **self._connect_args)
            challenge = await comm.read()
            if not isinstance(challenge, dict) or not isinstance(challenge.get("challenge"), bytes):
                raise Refused(f"worker slot {self.slot}: slot {slot}'s address sent no challenge")
            mine = os.urandom(NONCE)
            await comm.write({"slot": self.slot, "nonce": mine,
                              "proof": proof(self.secret, b"open", challenge["challenge"], self.slot, slot)})
            answer = await comm.read()
            if not (isinstance(answer, dict) and isinstance(answer.get("proof"), bytes) and hmac.compare_digest(
                    answer["proof"], proof(self.secret, b"accept", mine, slot, self.slot))):
                raise Refused(f"worker slot {self.slot}: the loop at slot {slot}'s address did not prove the secret")
            self.outgoing[slot] = comm

        async def everything():
            await asyncio.gather(*(link(s, a) for s, a in peers.items()))
            while set(self.incoming) != set(peers):
                await asyncio.sleep(0.001)

        try:
            self._run(asyncio.wait_for(everything(), max(deadline - time.monotonic(), 0.001)))
        except (TimeoutError, OSError, CommClosedError) as exc:
            raise LinkLost(f"worker slot {self.slot} could not link to the others: {exc!r}") from exc

    # -- sending and receiving --------------------------------------------------------------
    def send(self, message, slots=None) -> int:
        """Start writing ``message`` to every other loop (or those of ``slots``) and run the
        event loop one turn; the rest goes while the loop next waits. The arrays in
        ``message`` must not change until :meth:`receive` returned. Returns the bytes of
        its arrays (every copy)."""
        slots = list(self.outgoing if slots is None else slots)
        for slot in slots:
            self._write(slot, message)
        self._turn()
        return payload_bytes(message) * len(slots)

    def send_each(self, messages: dict, tag) -> int:
        """Start writing ``(tag, messages[slot])`` to each other loop ``slot`` and run the event
        loop one turn; the bytes of the arrays."""
        for slot, message in messages.items():
            self._write(slot, (tag, message))
        self._turn()
        return sum(payload_bytes(m) for m in messages.values())

    def _write(self, slot: int, message) -> None:
        task = self._loop.create_task(self.outgoing[slot].write(to_serialize(message)))
        self._writes.add(task)
        task.add_done_callback(functools.partial(self._written, slot))

    def _written(self, slot: int, task) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._failed.append((slot, task.exception()))
        self._wake()

    def _turn(self) -> None:
        self._run(asyncio.sleep(0))

    def receive(self, timeout: float, stopped=lambda: False, tag=None, slots=None) -> list:
        """The next message of every other loop (in slot order), once this loop's own writes
        have ended too, waiting at most ``timeout`` seconds; raises ``stopped()``'s error (when
        it gives one) if the run stops meanwhile, :class:`LinkLost` if a link breaks. With
        ``tag``: the payload tagged ``tag`` of every other loop, or of those in ``slots``
        (messages are ``(tag, payload)`` pairs; what came before it on the link is kept for its
        own call)."""
        if not self.incoming:
            return []
        waited = sorted(self.incoming if slots is None else slots)
        deadline = time.monotonic() + timeout
        next_look = time.monotonic() + POLL_SECONDS
        while True:
            if self._failed:
                slot, exc = self._failed[0]
                raise LinkLost(f"worker slot {self.slot} lost its link to slot {slot}: {exc!r}") from exc
            ready = self._ready(waited, tag, lambda: bool(self._writes), stopped)
            if ready is not None:
                return ready
            now = time.monotonic()
            next_look = self._look(now, next_look, deadline, timeout, stopped)
            self._wait(min(next_look, deadline) - now)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _wait(self, seconds: float) -> None:
        """Run the event loop until a message arrives, a write ends, or ``seconds`` pass."""
        self._waiter = waiter = self._loop.create_future()
        later = self._loop.call_later(max(seconds, 0.0), self._wake)
        try:
            self._run(waiter)
        finally:
            later.cancel()
            self._waiter = None

    async def _close_outgoing(self) -> None:
        # inside a coroutine: a comm's close() is a tornado coroutine of the running loop
        await asyncio.gather(*(comm.close() for comm in self.outgoing.values()))

    def close(self, linger: float = 0.0) -> None:
        """Close every comm and the listener. With ``linger`` seconds, first end the writes
        queued, close the comms this loop writes on, and wait (reading and dropping) until the
        others have closed theirs; past ``linger``, what is queued is dropped."""
        deadline = time.monotonic() + linger
        try:
            if linger > 0:
                while self._writes and time.monotonic() < deadline and not self._failed:
                    self._wait(min(POLL_SECONDS, deadline - time.monotonic()))
                self._run(asyncio.wait_for(self._close_outgoing(), max(deadline - time.monotonic(), 0.001)))
                while (set(self.incoming) - self.ended - self.lost) and time.monotonic() < deadline:
                    for inbox in self._inbox.values():
                        inbox.clear()
                    self._wait(min(POLL_SECONDS, deadline - time.monotonic()))
        except (TimeoutError, OSError, CommClosedError):
            pass
        finally:
            for comm in [*self.outgoing.values(), *self.incoming.values()]:
                comm.abort()
            self.listener.stop()
            pending = [t for t in asyncio.all_tasks(self._loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self._run(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()
