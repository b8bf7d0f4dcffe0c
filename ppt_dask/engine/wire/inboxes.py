"""What the loops' message carriers share: the messages read, and ``receive``'s taking of them.

Two carriers move the streamed loops' messages, :class:`ppt_dask.engine.wire.links.Links`
(sockets of our own, read in the loop's thread) and
``graphs/commlinks.py``'s CommLinks (distributed's comms, measured there); they read
differently and keep what they read the same way (:class:`Inboxes`).
"""

from __future__ import annotations

POLL_SECONDS = 0.1  # how often a waiting loop looks whether the head stopped the run


class LinkLost(Exception):
    """A link to another loop broke (its worker left, say): the head rolls the run back."""


class Inboxes:
    """What a carrier of the loops' messages keeps of what it read, and how ``receive`` takes
    it (:class:`ppt_dask.engine.wire.links.Links`, ``graphs/commlinks.py``'s CommLinks on
    distributed's comms): per slot the whole messages not yet taken (``_inbox``), tagged ones
    by (slot, tag) (``_stash``), and the slots that closed their side (``ended``)."""

    slot: int
    ended: set
    _inbox: dict
    _stash: dict

    def _file(self) -> None:
        """Move the tagged messages read so far to the stash, by (slot, tag)."""
        for slot, inbox in self._inbox.items():
            while inbox:
                tag, payload = inbox.popleft()
                self._stash[slot, tag] = payload

    def _ready(self, waited: list, tag, writing, stopped) -> list | None:
        """The messages of the ``waited`` slots (tagged ``tag``) once all are read and nothing
        is being written (``writing()`` false), else None; :class:`LinkLost` when a waited slot
        closed its link before its message."""
        if tag is not None:
            self._file()
        have = (lambda s: bool(self._inbox[s])) if tag is None else (lambda s: (s, tag) in self._stash)
        if all(have(s) for s in waited) and not writing():
            if tag is None:
                return [self._inbox[s].popleft() for s in waited]
            return [self._stash.pop((s, tag)) for s in waited]
        gone = [s for s in self.ended if s in waited and not have(s) and not self._inbox[s]]
        if gone:
            stopped()  # a peer that ended because the run stopped: this loop stops too
            raise LinkLost(f"worker slot {self.slot}: slot {gone[0]} closed its link before its next message")
        return None

    def _look(self, now: float, next_look: float, deadline: float, timeout: float, stopped) -> float:
        """Ask ``stopped()`` every ``POLL_SECONDS``; a ``TimeoutError`` past ``deadline``. The
        next time to ask."""
        if now >= next_look:
            stopped()
            next_look = now + POLL_SECONDS
        if now > deadline:
            raise TimeoutError(f"worker slot {self.slot}: the other loops' messages did not "
                               f"arrive within {timeout} s")
        return next_look
