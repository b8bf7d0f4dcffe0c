"""Memory the loops of one host share: a file in ``/dev/shm`` that each loop maps.

Loops on the same host need not push their partial sums through sockets: a loop writes its
sums into a segment of its own, and the loops that add them read them there, as MPICH's
shared-memory channel does for ranks of one node (its ``nemesis`` queues). Only a few bytes a
round go over the links (:mod:`ppt_dask.engine.wire.links`), to say that a round's sums
are in place, so a loop still waits in one place, with its timeout, and a lost peer still
shows as a broken link.

A segment is a plain file in ``/dev/shm`` (a tmpfs), created by its one writer with
``O_EXCL``, ``O_NOFOLLOW`` and mode 0600, its pages taken at once (``posix_fallocate``: a full
``/dev/shm`` says so then, as :class:`SharedMemoryFull`, not with a SIGBUS at a later write),
and mapped with :mod:`mmap`. Its name (:func:`new_name`) carries the project's prefix, the
user, the creator's pid namespace and pid: a segment whose creator died before it was
unlinked (a SIGKILL, an OOM kill) is known as stale, and :func:`sweep` removes those at the
next generation. A name from another loop is validated before it is opened (the pattern, no
symbolic link, a regular file of this user, mode 0600, at least the size expected: a
:class:`BadSegment` otherwise). Readers unlink nothing.

The loops' segments have no name in ``/dev/shm`` past the moment they are made
(``Segment(nbytes=n, hidden=True)``): the writer unlinks the file right after creating it,
before its pages are taken, and keeps it open; the others open it through the writer's
descriptor (``/proc/<pid>/fd/<fd>``, the :attr:`Segment.handle` they are sent: the same user's
processes only, and only while the writer holds it), checked to be that segment, and map it.
The writer closes its descriptor once every reader has mapped it (the mappings outlive it).
So whatever is killed, a worker or the head, at any round, nothing of a run stays in
``/dev/shm``: the kernel frees the memory with the last mapping. A segment left named by a
creator killed in the two system calls between creation and unlink is swept as before.
:func:`identity` tells whether two processes map the same ``/dev/shm``: the same boot, the
same tmpfs (two containers of one machine have a ``/dev/shm`` each) and the same user.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import secrets
import stat

import numpy as np
from distributed.comm import get_address_host

from ppt_dask.engine.waits import Unanswered

SHM_DIR = "/dev/shm"
ALIGN = 64  # bytes: each array of a segment starts on a cache line
PREFIX = "ppt_dask"
# the user, the creator's pid namespace (its inode) and pid, 16 random hex digits
NAME = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-(\d+)-[0-9a-f]{{16}}$")


class BadSegment(OSError):
    """A segment named by another loop that is not one of this user's, whole: not mapped."""


class SharedMemoryFull(OSError):
    """``/dev/shm`` has no room for a new segment."""


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def new_name() -> str:
    """A new segment's name: ``ppt_dask-<uid>-<pid namespace>-<pid>-<random>``."""
    return f"{PREFIX}-{os.getuid()}-{_pid_namespace()}-{os.getpid()}-{secrets.token_hex(8)}"


def creator(name: str) -> tuple[int, int, int] | None:
    """The user, pid namespace and pid a segment's name carries (None: not one of ours)."""
    match = NAME.match(name)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep() -> list[str]:
    """Unlink this user's segments (of this pid namespace) whose creator has died; their names.
    A live creator's are left alone (a loop of another run may be using it)."""
    me, namespace, removed = os.getuid(), _pid_namespace(), []
    try:
        entries = os.listdir(SHM_DIR)
    except OSError:
        return removed
    for name in entries:
        who = creator(name)
        if who is None or who[:2] != (me, namespace) or _alive(who[2]):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, name))
            removed.append(name)
        except OSError:  # gone meanwhile, or not ours to remove
            pass
    return removed


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
    each worker, ``Client.run``; a container's ``/dev/shm`` is 64 MiB unless set otherwise).
    :class:`Unanswered` when a worker cannot be asked."""
    addresses = list(dict.fromkeys(addresses))
    if len(addresses) < 2:
        return True
    if len({get_address_host(a) for a in addresses}) > 1:
        return False
    found = client.run(_seen, workers=addresses, on_error="return")
    silent = sorted(a for a, answer in found.items() if isinstance(answer, BaseException))
    if silent:  # a worker that died a moment ago, still listed by the scheduler
        raise Unanswered(silent, [found[a] for a in silent])
    seen = [found.get(a, (None, 0)) for a in addresses]
    return shared([i for i, _free in seen]) and min(free for _i, free in seen) >= need


class Segment:
    """A mapped file of ``/dev/shm``: ``Segment(nbytes=n)`` creates one (a new name; with
    ``hidden=True`` unlinked at once and held open, see the module's notes),
    ``Segment(name, nbytes=n)`` maps another process's, by its name or its :attr:`handle`,
    validated and of at least ``n`` bytes (:class:`BadSegment` otherwise).
    ``array(offset, shape, dtype)`` is a view of it."""

    def __init__(self, name: str | None = None, nbytes: int | None = None, *, hidden: bool = False):
        create = name is None
        held = None
        if not create and "@" in name:  # a handle: the name and the writer's descriptor
            name, _, held = name.rpartition("@")
        self.name = new_name() if create else name
        if not create and (creator(self.name) is None or (held is not None and not held.isdigit())):
            raise BadSegment(f"{name!r} is not the name of a ppt_dask segment")
        self.path = os.path.join(SHM_DIR, self.name)
        self.owner = create
        self._fd: int | None = None  # the writer's descriptor of a hidden segment, until its readers mapped it
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        if create:
            fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            if hidden:  # no name from now on: nothing is left in /dev/shm whoever is killed
                self.unlink()
        elif held is not None:
            fd = _open_held(self.name, int(held))
        else:
            fd = os.open(self.path, flags)
        try:
            if create:
                _take_pages(fd, max(int(nbytes or 0), 1))
            else:
                _check(fd, self.name, int(nbytes or 0))
            self._map = mmap.mmap(fd, 0)
        except BaseException:
            os.close(fd)
            if create:
                self.unlink()
            raise
        if create and hidden:
            self._fd = fd
        else:
            os.close(fd)
        self.nbytes = len(self._map)

    @property
    def handle(self) -> str:
        """What another process of this user maps the segment by: its name, and for a hidden
        segment the writer's descriptor (``name@fd``)."""
        return self.name if self._fd is None else f"{self.name}@{self._fd}"

    def array(self, offset: int, shape: tuple, dtype) -> np.ndarray:
        """A view of the segment's bytes from ``offset`` as an array of ``shape`` and ``dtype``."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def unlink(self) -> None:
        """Take the name away, and a hidden segment's descriptor (the mappings stay); a name
        already gone is no error."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
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


def _open_held(name: str, fd: int) -> int:
    """The hidden segment ``name`` through its writer's descriptor ``fd``: opened only if that
    descriptor is the segment of that name (:class:`BadSegment` otherwise; ``OSError`` when
    the writer or its descriptor is gone)."""
    who = creator(name)
    if who is None or who[:2] != (os.getuid(), _pid_namespace()):
        raise BadSegment(f"{name} is not a segment of this user and pid namespace")
    link = f"/proc/{who[2]}/fd/{fd}"
    expected = os.path.join(SHM_DIR, name)
    if os.readlink(link) not in (f"{expected} (deleted)", expected):
        raise BadSegment(f"{name}@{fd} is not that segment's descriptor")
    return os.open(link, os.O_RDWR | os.O_CLOEXEC)


def _take_pages(fd: int, nbytes: int) -> None:
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):  # EFBIG: past the process's RLIMIT_FSIZE
            raise SharedMemoryFull(exc.errno, f"{SHM_DIR} has no room for a segment of {nbytes} bytes "
                                              f"({errno.errorcode[exc.errno]})") from exc
        raise


def _check(fd: int, name: str, nbytes: int) -> None:
    """A peer's segment, opened: a regular file of this user only, at least ``nbytes`` long."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise BadSegment(f"{name} is not a regular file")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise BadSegment(f"{name} is not this user's alone (uid {st.st_uid}, mode {oct(st.st_mode & 0o777)})")
    if st.st_size < nbytes:
        raise BadSegment(f"{name} has {st.st_size} bytes, short of the {nbytes} expected")


def aligned(n: int) -> int:
    """``n`` bytes rounded up to whole cache lines."""
    return -(-int(n) // ALIGN) * ALIGN
