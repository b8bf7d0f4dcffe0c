"""The process a round loop runs in: made right from inside the loop's task, for its duration.

A streamed loop (:mod:`ppt_dask.engine.rounds.streamloops`) runs thousands of short steps in
one worker process. Two settings of that process decide its speed, and a cluster that users
start themselves (``dask worker``, ``dask ssh``, dask-jobqueue: distributed's defaults) may
have either wrong; the loop checks both when it starts, sets what is wrong for its own
duration, puts back what it found when it ends, and says what it did (:func:`describe`; the
head logs it once per run, ``Result.settings["worker_settings"]``, and
:func:`ppt_dask.cluster.worker_report` shows each worker's last loop).

**glibc's malloc thresholds.** Left alone, glibc adapts its mmap threshold to the largest
block freed (up to 32 MiB) and its trim threshold to twice that, so a step's arrays come back
from the heap at the next step. Setting *any* of them (``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_MAX_`` or their
``GLIBC_TUNABLES``) turns that off (glibc's malloc.c, ``mp_.no_dyn_threshold``) and fixes both,
at 128 KiB where not given. Distributed's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``
(``distributed.nanny.pre-spawn-environ``): every array over 128 KiB (a 784 x 64 float32
gradient is 196 KiB) was then mmapped and unmapped at every step, 666 page faults a round of
MNIST block 100 on one worker against 0.1 with either default or ours, and sync block 200 to
97% took 2.2x as long as on ppt_dask's own LocalCluster. Where the environment fixed them
below :data:`LOOP_MALLOC`, the loop raises them (``mallopt``) and sets the environment's values
back when it ends (then ``malloc_trim``: the memory goes back to the system as the nanny
meant). Where the environment fixed none, nothing is set: glibc adapts, and a ``mallopt``
could not give the adapting back. Buffers allocated once and reused would need every
network's step (a user's PyTorch module too) written for them; these two calls cover any.

**BLAS and OpenMP threads.** The loop computes with :func:`loop_threads` threads: the
worker's ``OMP_NUM_THREADS`` where its environment sets one (distributed's nanny sets 1, as
ppt_dask's clusters set each worker's threads), else the worker's thread count; never more
than the cores the process may use. A worker started without a nanny has OpenBLAS at one
thread per core: two such workers on two cores fought over them. Pools that differ are set
(threadpoolctl, as scikit-learn does) for the loop's duration. A
:class:`ppt_dask.TorchNet` sets torch's threads itself at each pass (its ``threads``); the
report says how many it computes with.

Only glibc has these thresholds: elsewhere the loop says it cannot check them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import platform
import threading

from threadpoolctl import ThreadpoolController

logger = logging.getLogger(__name__)

# glibc's defaults for both thresholds when they are fixed (DEFAULT_MMAP_THRESHOLD_MIN,
# DEFAULT_TRIM_THRESHOLD in malloc.c)
GLIBC_DEFAULT = 128 * 1024
# What a loop needs at least: an array up to 32 MiB (the largest mmap threshold glibc takes on
# 64 bits, HEAP_MAX_SIZE / 2) comes from the heap, and the heap's top is returned to the system
# only past 1 GiB. ppt_dask's own clusters start their workers with these (cluster.WORKER_ENV).
LOOP_MALLOC = {"trim_threshold": 1 << 30, "mmap_threshold": 1 << 25}
_MALLOPT = {"trim_threshold": -1, "mmap_threshold": -3}  # malloc.h: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
# the environment variables (and GLIBC_TUNABLES names) that fix glibc's thresholds
MALLOC_VARS = {"MALLOC_TRIM_THRESHOLD_": "trim_threshold", "MALLOC_MMAP_THRESHOLD_": "mmap_threshold",
               "MALLOC_TOP_PAD_": "top_pad", "MALLOC_MMAP_MAX_": "mmap_max"}
THREAD_APIS = ("blas", "openmp")  # NumPy's BLAS; OpenMP (PyTorch's CPU operators)


# ---- what the loop finds (pure) -------------------------------------------------------

def _count(text) -> int | None:
    """A count as glibc reads one (strtoul's base 0: decimal, ``0x`` hex, ``0`` octal); None
    where it is not one."""
    text = str(text).strip()
    base = 16 if text[:2].lower() == "0x" else 8 if len(text) > 1 and text[0] == "0" else 10
    try:
        value = int(text, base)
    except ValueError:
        return None
    return value if value >= 0 else None


def malloc_found(environ) -> dict | None:
    """The malloc settings this process's environment fixed at its start (variable -> text),
    or None where it fixed none (glibc then adapts both thresholds)."""
    found = {var: environ[var] for var in MALLOC_VARS if var in environ}
    for item in environ.get("GLIBC_TUNABLES", "").split(":"):
        name, _, value = item.partition("=")
        if name.startswith("glibc.malloc.") and name[len("glibc.malloc."):] in MALLOC_VARS.values():
            found[name] = value
    return found or None


def malloc_thresholds(found: dict | None) -> dict | None:
    """The trim and mmap thresholds glibc holds with the settings ``found``
    (:func:`malloc_found`); None where they adapt."""
    if found is None:
        return None
    given = {}
    for key, text in found.items():
        name = MALLOC_VARS.get(key, key.rpartition(".")[2])
        value = _count(text)
        if value is not None:
            given[name] = value
    return {name: given.get(name, GLIBC_DEFAULT) for name in LOOP_MALLOC}


def malloc_changes(found: dict | None) -> dict:
    """The thresholds the loop raises (name -> (found, set)): those fixed below
    :data:`LOOP_MALLOC`; none where glibc adapts."""
    held = malloc_thresholds(found)
    if held is None:
        return {}
    return {name: (held[name], want) for name, want in LOOP_MALLOC.items() if held[name] < want}


def loop_threads(environ, worker_threads: int, cores: int) -> int:
    """The BLAS and OpenMP threads a loop computes with: ``OMP_NUM_THREADS`` where set (a
    count >= 1), else the worker's threads; at most ``cores``, at least one."""
    wanted = _count(environ.get("OMP_NUM_THREADS", ""))
    wanted = wanted if wanted else worker_threads
    return max(1, min(int(wanted), int(cores)))


def thread_changes(pools: list[dict], threads: int) -> dict:
    """The thread pools (threadpoolctl's ``info()``) the loop sets: api -> (found, set)."""
    out = {}
    for pool in pools:
        api = pool.get("user_api")
        if api in THREAD_APIS and pool.get("num_threads") != threads:
            out[api] = (pool.get("num_threads"), threads)
    return out


def describe(report: dict | None) -> str | None:
    """One line on what a loop changed in its worker or could not check; None when it found
    everything right."""
    if not report:
        return None
    parts = []
    malloc = report.get("malloc") or {}
    if malloc.get("set"):
        found = ", ".join(f"{k}={v}" for k, v in (malloc.get("found") or {}).items())
        raised = ", ".join(f"{name.replace('_', ' ')} {_size(old)} -> {_size(new)}"
                           for name, (old, new) in malloc["set"].items())
        parts.append(f"glibc malloc {raised} for the loop (the worker's environment had {found})")
    if report.get("threads", {}).get("set"):
        parts.append(", ".join(f"{api} threads {old} -> {new}" for api, (old, new) in report["threads"]["set"].items()))
    parts += report.get("failed") or []
    return "; ".join(parts) or None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


# ---- setting them (one process) --------------------------------------------------------

def _libc():
    """glibc's ``mallopt`` and ``malloc_trim``, or None where the C library is not glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


PROBE_BYTES = 1 << 20  # over glibc's fixed default thresholds, under LOOP_MALLOC's mmap threshold


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def probe_mmapped() -> bool | None:
    """Whether glibc serves a block of :data:`PROBE_BYTES` (a step's array) by its own mmap,
    to be unmapped again when freed, as it does under a small fixed threshold: the thresholds
    in force, observed (``mallinfo2``'s count of mmapped blocks). None where not glibc."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    before = libc.mallinfo2().hblks
    block = libc.malloc(PROBE_BYTES)
    try:
        return libc.mallinfo2().hblks > before
    finally:
        libc.free(block)


class _Process:
    """The settings of this process while loops run in it. malloc's thresholds and OpenBLAS's
    threads are the process's: the first loop sets them, the last one to end puts them back
    (a LocalCluster of threads runs every loop in one process). OpenMP's count is per thread:
    each loop sets its own."""

    def __init__(self):
        self.lock = threading.Lock()
        self.users = 0
        self.malloc: dict = {}  # name -> (found, set) while loops run
        self.blas = None  # threadpoolctl's limiter to put BLAS back
        self.last: dict | None = None  # the last loop's report, for worker_report

    def enter(self, threads: int, torch_threads: int | None) -> tuple[dict, object]:
        report: dict = {"malloc": {}, "threads": {"loop": threads, "set": {}}, "failed": []}
        found = malloc_found(os.environ)
        controller = ThreadpoolController()
        pools = controller.info()
        changes = thread_changes(pools, threads)
        with self.lock:
            self.users += 1
            if self.users == 1:
                self.malloc = self._set_malloc(malloc_changes(found), report)
                self.blas = _limit(controller, "blas", threads, changes, report)
            report["malloc"] = {"found": found, "set": dict(self.malloc), "probe_mmapped": probe_mmapped()}
        omp = _limit(controller, "openmp", threads, changes, report)
        report["threads"]["set"] = changes
        if torch_threads is not None:
            report["threads"]["torch"] = torch_threads
        if found is not None and _libc() is None:
            report["failed"].append(f"malloc settings {found} not checked: the C library is not glibc")
        self.last = report
        return report, omp

    def _set_malloc(self, changes: dict, report: dict) -> dict:
        libc = _libc() if changes else None
        done = {}
        for name, (old, new) in changes.items():
            if libc is not None and libc.mallopt(_MALLOPT[name], new) == 1:
                done[name] = (old, new)
            elif libc is not None:
                report["failed"].append(f"mallopt({name}, {new}) was refused")
        return done

    def leave(self, omp) -> None:
        if omp is not None:
            omp.restore_original_limits()
        with self.lock:
            self.users -= 1
            if self.users:
                return
            if self.blas is not None:
                self.blas.restore_original_limits()
                self.blas = None
            if self.malloc:
                libc = _libc()
                for name, (old, _new) in self.malloc.items():
                    libc.mallopt(_MALLOPT[name], old)
                libc.malloc_trim(0)  # what the loop's heap holds goes back, as the environment meant
                self.malloc = {}


def _limit(controller, api: str, threads: int, changes: dict, report: dict):
    """threadpoolctl's limiter of ``api``'s pools at ``threads`` where ``changes`` has it (None
    otherwise, or where it failed: said in the report, and taken out of ``changes``)."""
    if api not in changes:
        return None
    try:
        return controller.select(user_api=api).limit(limits=threads)
    except Exception as exc:  # a pool threadpoolctl cannot set: the loop runs as found
        report["failed"].append(f"{api} threads {changes.pop(api)[0]} not set to {threads} ({exc!r})")
        return None


PROCESS = _Process()


@contextlib.contextmanager
def for_loop(worker_threads: int, torch_threads: int | None = None):
    """While the block runs (a loop's rounds): malloc's thresholds and the BLAS and OpenMP
    threads of this process as a loop needs them (the module docstring); what was found after.
    Yields the report (:func:`describe` puts it in words)."""
    threads = loop_threads(os.environ, worker_threads, _cores())
    report, omp = PROCESS.enter(threads, torch_threads)
    try:
        yield report
    finally:
        PROCESS.leave(omp)


def last_report() -> dict | None:
    """The report of the last loop that ran in this process (None before any)."""
    return PROCESS.last


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def log_once(reports: dict, seen: set) -> None:
    """Log what the loops of a run changed in their workers (info) or could not check
    (warning), each line once a run: ``reports`` maps each worker to its loop's report,
    ``seen`` holds what was said."""
    by_text: dict = {}
    for report in reports.values():
        text = describe(report)
        if text:
            by_text.setdefault(text, []).append(bool(report.get("failed")))
    for text, failed in by_text.items():
        if text not in seen:
            seen.add(text)
            logger.log(logging.WARNING if any(failed) else logging.INFO, "the round loops set on %d worker%s: %s",
                       len(failed), "s" if len(failed) != 1 else "", text)


def summary(reports: dict) -> str | None:
    """What a run's loops changed in their workers or could not check, in one line (each
    distinct line once, with its number of workers); "as found" when they changed nothing;
    None when no loop reported (rounds that ran as task graphs)."""
    if not reports:
        return None
    by_text: dict = {}
    for report in reports.values():
        text = describe(report) or "as found"
        by_text[text] = by_text.get(text, 0) + 1
    if list(by_text) == ["as found"]:
        return "as found"
    return "; ".join(f"on {n} worker{'s' if n != 1 else ''}: {text}" for text, n in by_text.items())
