"""Carriers of whole byte messages behind :class:`ppt_dask.engine.wire.links.Links`'s interface,
for ``graphs/transports.py``: torch.distributed's gloo and mpi4py, point to point.

Each carries the tagged messages of :class:`ppt_dask.engine.rounds.allreduce.Allreduce` as our links
frame them (:func:`ppt_dask.engine.wire.links.frames_of`), so the algorithm, its adds and its bits
stay ours and only the carrier changes. Benchmark carriers: the synchronous interface only,
waits without a limit, no lost-peer handling.
"""

from __future__ import annotations

import struct


class Framed:
    """:class:`ppt_dask.engine.wire.links.Links`'s interface over a carrier of whole byte messages
    between ranks (gloo, MPI): a message is framed as Links frames it
    (:func:`ppt_dask.engine.wire.links.frames_of`), joined into one buffer; subclasses post a
    buffer to a slot (without waiting), take a slot's next buffer (waiting) and wait for
    their posts to end. The carriers' calls wait without a limit (``timeout`` unused)."""

    def __init__(self, slot: int, p: int):
        self.slot = slot
        self.outgoing = {s: s for s in range(p) if s != slot}
        self.incoming = dict(self.outgoing)
        self._stash: dict = {}

    def send(self, message, slots=None) -> int:
        from ppt_dask.engine.wire.links import frames_of
        buffer = bytearray().join(frames_of(message))
        slots = list(self.outgoing if slots is None else slots)
        for slot in slots:
            self._post(slot, buffer)
        return len(buffer) * len(slots)

    def send_each(self, messages: dict, tag) -> int:
        return sum(self.send((tag, message), [slot]) for slot, message in messages.items())

    def receive(self, timeout: float, stopped=lambda: None, tag=None, slots=None) -> list:
        from ppt_dask.engine.wire.links import message_of
        out = []
        for slot in sorted(self.incoming if slots is None else slots):
            while (slot, tag) not in self._stash:
                (got, payload), _ = message_of(self._take(slot))
                self._stash[slot, got] = payload
            out.append(self._stash.pop((slot, tag)))
        self._flush()
        return out

    def close(self, linger: float = 0.0) -> None:
        self._flush()

    def _post(self, slot: int, buffer: bytearray) -> None:
        raise NotImplementedError

    def _take(self, slot: int) -> bytearray:
        raise NotImplementedError

    def _flush(self) -> None:
        raise NotImplementedError


class GlooLinks(Framed):
    """Messages as torch.distributed gloo ``isend``/``irecv`` of flat uint8 tensors.

    Gloo's TCP transport sends a message once the receiver has posted its receive (a
    rendezvous): a receive posted after the message came costs a round trip through both
    sides' gloo threads, 4-8 ms a message on this loaded machine against 0.2-0.3 ms with
    the receive posted first (a ping-pong of 32 bytes, 2026-11-28). So each peer always has a
    receive posted, into one of two buffers of :attr:`CAPACITY` bytes (gloo fills a larger
    buffer with a shorter message; the framing's header says where it ends); a longer
    message goes in pieces of that size. :meth:`close` sends an end marker to every peer so
    the last posted receives end."""

    CAPACITY = 1 << 20
    END = b"\xff" * 8  # a frame count no message has

    def __init__(self, slot: int, p: int):
        import torch
        import torch.distributed as dist
        super().__init__(slot, p)
        self._posted: list = []  # (work, what it sends, kept alive until it ends)
        self._buffers = {s: [torch.empty(self.CAPACITY, dtype=torch.uint8) for _ in range(2)] for s in self.incoming}
        self._which = {s: 0 for s in self.incoming}
        self._recv: dict = {s: dist.irecv(self._buffers[s][0], s) for s in self.incoming}

    def _post(self, slot: int, buffer) -> None:
        import torch
        import torch.distributed as dist
        for at in range(0, len(buffer), self.CAPACITY):
            piece = torch.frombuffer(buffer, dtype=torch.uint8, offset=at, count=min(self.CAPACITY, len(buffer) - at))
            self._posted.append((dist.isend(piece, slot), piece))

    def _piece(self, slot: int, repost: bool = True):
        """The next piece from ``slot`` (valid until the next call), the next receive posted."""
        import torch.distributed as dist
        self._recv[slot].wait()
        got = self._buffers[slot][self._which[slot]].numpy()
        self._which[slot] ^= 1
        if repost:
            self._recv[slot] = dist.irecv(self._buffers[slot][self._which[slot]], slot)
        return got

    def _take(self, slot: int) -> bytearray:
        first = self._piece(slot)
        (n,) = struct.unpack_from("!Q", first)
        total = 8 * (n + 1) + sum(struct.unpack_from(f"!{n}Q", first, 8))
        buffer = bytearray(first[:min(total, self.CAPACITY)])
        while len(buffer) < total:
            buffer += self._piece(slot)[:min(total - len(buffer), self.CAPACITY)]
        return buffer

    def _flush(self) -> None:
        for work, _ in self._posted:
            work.wait()
        self._posted.clear()

    def close(self, linger: float = 0.0) -> None:
        for slot in self.outgoing:
            self._post(slot, bytearray(self.END))
        for slot in self.incoming:
            assert bytes(self._piece(slot, repost=False)[:8]) == self.END, f"slot {slot} sent more than was read"
        self._flush()


class MpiLinks(Framed):
    """Messages as MPI ``Isend`` of the bytes; the receiver ``Probe``s for the length."""

    TAG = 7

    def __init__(self, comm):
        super().__init__(comm.Get_rank(), comm.Get_size())
        self.comm = comm
        self._posted: list = []

    def _post(self, slot: int, buffer: bytearray) -> None:
        from mpi4py import MPI
        self._posted.append((self.comm.Isend([buffer, MPI.BYTE], dest=slot, tag=self.TAG), buffer))

    def _take(self, slot: int) -> bytearray:
        from mpi4py import MPI
        status = MPI.Status()
        self.comm.Probe(source=slot, tag=self.TAG, status=status)
        buffer = bytearray(status.Get_count(MPI.BYTE))
        self.comm.Recv([buffer, MPI.BYTE], source=slot, tag=self.TAG)
        return buffer

    def _flush(self) -> None:
        from mpi4py import MPI
        MPI.Request.Waitall([request for request, _ in self._posted])
        self._posted.clear()
