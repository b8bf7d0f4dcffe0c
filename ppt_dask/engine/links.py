"""Direct links between the loops of streamed rounds: distributed's comms, no event-loop hop.

A streamed synchronous round waits for the other workers' partial sums of the same round, so
the exchange is on its critical path. Sent through an actor (a method call on another
worker), a message goes from the loop's thread to its worker's event loop, over the wire,
into the other worker's event loop, and from there to the other loop's thread: four
hand-overs, each waiting for a busy event loop. Here every loop opens links of its own to
the others with :func:`distributed.comm.connect` and :func:`distributed.comm.listen` (Dask's
documented communication layer: its TCP or TLS transport, framing and serialization, with
the worker's security settings), on a private event loop that runs only while the loop
sends or waits, so a message goes from one loop's thread to the other's with no other thread
in between. graphs/exchange_floor.py measures both ways side by side.

Each pair of loops has one comm per direction: slot ``a`` writes to ``b`` on the comm it
opened and reads what ``b`` sends on the comm ``b`` opened. A comm delivers in order (writes
to one comm are queued behind each other), so the next message read from a slot is its next
round's. Writes are started by :meth:`Links.send` and finish while the loop next waits
(:meth:`Links.receive`), so two loops that send to each other at once never wait on each
other's reads.
"""

from __future__ import annotations

import asyncio
import time

from distributed.comm import CommClosedError, connect, get_address_host, listen, unparse_host_port

CONNECT_SECONDS = 30.0  # the longest a loop waits for the others to connect
POLL_SECONDS = 0.1  # how often a waiting loop looks whether the head stopped the run


def listen_address(worker_address: str) -> str:
    """Where a loop's links listen: the worker's host and protocol, any free port (TLS stays
    TLS); tcp on the loopback for a worker of a threads cluster (``inproc://``: one process)."""
    scheme = worker_address.partition("://")[0]
    if scheme not in ("tcp", "tls"):
        return "tcp://127.0.0.1:0"
    return f"{scheme}://{unparse_host_port(get_address_host(worker_address), 0)}"


class LinkLost(Exception):
    """A link to another loop broke (its worker left, say): the head rolls the run back."""


class Links:
    """One loop's comms to the other loops of a generation, made and used in the loop's thread.

    Parameters
    ----------
    slot : int
        This loop's worker slot.
    address : str
        The address of the worker it runs on (``tcp://host:port`` or ``tls://...``): the links
        listen on the same host with the same protocol.
    security : distributed.security.Security, optional
        The worker's security settings: its listen arguments for the listener (a server-side
        TLS context) and its connection arguments for the comms it opens (a client-side one);
        none without TLS.
    """

    def __init__(self, slot: int, address: str, security=None):
        self.slot = slot
        self.loop = asyncio.new_event_loop()
        self.listen_args = security.get_listen_args("worker") if security is not None else {}
        self.args = security.get_connection_args("worker") if security is not None else {}
        self.incoming: dict = {}  # slot -> the comm that slot writes to us on
        self.outgoing: dict = {}  # slot -> the comm we write to that slot on
        self._order: dict = {}  # slot -> a lock that keeps our writes to it in order
        self._writes: list = []  # writes started and not yet seen to end
        self._reads: list = []  # the reads of the last wait (pending ones if it was cut short)
        self._arrived = asyncio.Event()
        self.listener = self._run(self._listen(listen_address(address)))
        self.address = self.listener.contact_address

    def _run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    async def _listen(self, where: str):
        listener = listen(where, self._accept, deserialize=True, **self.listen_args)
        await listener.start()
        return listener

    async def _accept(self, comm) -> None:
        """A peer connected: its first message says which slot it is."""
        self.incoming[await comm.read()] = comm
        self._arrived.set()
        # the listener closes a comm when its handler returns: hold it open until close()
        while not comm.closed():
            await asyncio.sleep(POLL_SECONDS)

    def connect(self, peers: dict, timeout: float = CONNECT_SECONDS) -> None:
        """Open a comm to every other loop (``peers``: slot -> its links' address) and wait
        until every other loop has opened one to this one."""
        async def both():
            async def out(slot, address):
                comm = await connect(address, timeout=timeout, deserialize=True, **self.args)
                await comm.write(self.slot)
                self.outgoing[slot] = comm
                self._order[slot] = asyncio.Lock()

            await asyncio.gather(*(out(s, a) for s, a in peers.items()))
            while set(self.incoming) != set(peers):
                self._arrived.clear()
                await self._arrived.wait()
        try:
            self._run(asyncio.wait_for(both(), timeout))
        except (TimeoutError, OSError) as exc:
            raise LinkLost(f"worker slot {self.slot} could not link to the others: {exc!r}") from exc

    async def _write(self, slot: int, message) -> None:
        async with self._order[slot]:
            await self.outgoing[slot].write(message)

    def send(self, message) -> None:
        """Start writing ``message`` to every other loop; the bytes the system does not take at
        once go while the loop next waits in :meth:`receive`."""
        self._writes += [self.loop.create_task(self._write(s, message)) for s in self.outgoing]
        self._run(asyncio.sleep(0))  # the writes start now: serialized, handed to the sockets

    def receive(self, timeout: float, stopped=lambda: False) -> list:
        """The next message of every other loop (in slot order), waiting at most ``timeout``
        seconds; raises ``stopped()``'s error (when it gives one) if the run stops meanwhile."""
        if not self.incoming:
            return []

        async def wait():
            self._reads = reads = [asyncio.ensure_future(self.incoming[s].read()) for s in sorted(self.incoming)]
            deadline = time.monotonic() + timeout
            while True:
                self._check_writes()
                done, pending = await asyncio.wait(reads, timeout=POLL_SECONDS)
                if not pending:
                    return [r.result() for r in reads]
                if any(r.exception() is not None for r in done):
                    raise next(r.exception() for r in done if r.exception() is not None)
                stopped()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"worker slot {self.slot}: the other loops' messages did not "
                                       f"arrive within {timeout} s")
        try:
            return self._run(wait())
        except (CommClosedError, OSError) as exc:
            raise LinkLost(f"worker slot {self.slot} lost a link: {exc!r}") from exc

    def _check_writes(self) -> None:
        """Drop the writes that ended; raise if one failed."""
        for task in [t for t in self._writes if t.done()]:
            self._writes.remove(task)
            if task.exception() is not None:
                raise task.exception()

    def close(self) -> None:
        """Close every comm and the listener (pending writes are dropped)."""
        async def shut():
            for comm in [*self.outgoing.values(), *self.incoming.values()]:
                comm.abort()
            self.listener.stop()
            for task in [*self._writes, *self._reads]:
                task.cancel()
            await asyncio.sleep(0)
        try:
            self._run(shut())
        finally:
            self.loop.close()
