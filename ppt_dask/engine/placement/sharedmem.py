"""Memory the loops of one host share: a file in ``/dev/shm`` that each loop maps.

Loops on the same host need not push their partial sums through sockets: a loop writes its
sums into a segment of its own, and the loop that adds them reads them there, as MPICH's
shared-memory channel does for ranks of one node (its ``nemesis`` queues). Only a few bytes a
round go over the links (:mod:`ppt_dask.engine.placement.links`), to say that a round's sums
are in place, so a loop still waits in one place, with its timeout, and a lost peer still
shows as a broken link.

A segment is a plain file in ``/dev/shm`` (a tmpfs), created by its one writer with
``O_EXCL`` and mode 0600 and mapped with :mod:`mmap`; readers map it by name. It is unlinked
as soon as every reader holds its mapping (the mapping outlives the name), so a process that
is killed after its first rounds leaves nothing behind. :func:`identity` tells whether two
processes map the same ``/dev/shm``: the same boot, the same tmpfs (two containers of one
machine have a ``/dev/shm`` each) and the same user.
"""

from __future__ import annotations

import mmap
import os
import uuid

import numpy as np
from distributed.comm import get_address_host

SHM_DIR = "/dev/shm"
ALIGN = 64  # bytes: each array of a segment starts on a cache line


def identity() -> tuple | None:
    """This process's view of shared memory: the boot's id, ``/dev/shm``'s device and inode and
    the user; equal for two processes that map the same files there. None where there is no
    ``/dev/shm`` (not Linux) or it cannot be written."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        st = os.stat(SHM_DIR)
    except OSError:
        return None
    if not os.access(SHM_DIR, os.W_OK | os.X_OK):
        return None
    return (boot, st.st_dev, st.st_ino, os.getuid())


def shared(identities: list) -> bool:
    """Whether processes with these :func:`identity` values all map the same ``/dev/shm``."""
    return bool(identities) and identities[0] is not None and all(i == identities[0] for i in identities)


def free_bytes() -> int:
    """The bytes ``/dev/shm`` has free (0 where it cannot say)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def _seen() -> tuple:
    return identity(), free_bytes()


def colocated(client, addresses: list, need: int = 0) -> bool:
    """Whether the workers at ``addresses`` all run on one host and share its ``/dev/shm``, with
    ``need`` bytes free there: one address host (so hosts told apart by address, network
    namespaces of one machine among them, stay apart), one :func:`identity` and room (asked of
    each worker, ``Client.run``; a container's ``/dev/shm`` is 64 MiB unless set otherwise)."""
    addresses = list(dict.fromkeys(addresses))
    if len(addresses) < 2:
        return True
    if len({get_address_host(a) for a in addresses}) > 1:
        return False
    found = client.run(_seen, workers=addresses)
    seen = [found.get(a, (None, 0)) for a in addresses]
    return shared([i for i, _free in seen]) and min(free for _i, free in seen) >= need


class Segment:
    """A mapped file of ``/dev/shm``: ``Segment(nbytes=n)`` creates one (a new name),
    ``Segment(name)`` maps another process's. ``array(offset, shape, dtype)`` is a view of it."""

    def __init__(self, name: str | None = None, nbytes: int | None = None):
        create = name is None
        self.name = f"ppt_dask-{uuid.uuid4().hex}" if create else name
        self.path = os.path.join(SHM_DIR, self.name)
        self.owner = create
        if create:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        else:
            fd = os.open(self.path, os.O_RDWR)
        try:
            if create:  # the pages taken now: a full /dev/shm says so here, not with a SIGBUS at a write
                os.posix_fallocate(fd, 0, max(int(nbytes), 1))
            self._map = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            if create:
                self.unlink()
            raise
        os.close(fd)
        self.nbytes = len(self._map)

    def array(self, offset: int, shape: tuple, dtype) -> np.ndarray:
        """A view of the segment's bytes from ``offset`` as an array of ``shape`` and ``dtype``."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def unlink(self) -> None:
        """Take the name away (the mappings stay); a name already gone is no error."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def close(self) -> None:
        """Unlink (the writer) and unmap. Views of it must be gone: an unmapped view would crash,
        so a segment a view still holds stays mapped until the view goes."""
        if self.owner:
            self.unlink()
        try:
            self._map.close()
        except BufferError:  # a view is still held: the mapping ends with it
            pass


def aligned(n: int) -> int:
    """``n`` bytes rounded up to whole cache lines."""
    return -(-int(n) // ALIGN) * ALIGN
