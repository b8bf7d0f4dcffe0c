"""Ctrl-C: stop in one line that says where the run was and how to go on.

The worker processes that ppt_dask starts ignore SIGINT (they inherit it ignored while the
LocalCluster spawns them), so a Ctrl-C at the terminal, which reaches the whole process
group, interrupts the head alone; the head then closes the cluster with its log quiet and
further Ctrl-C held off, and names the round its checkpoint holds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path

import numpy as np

EXIT_STATUS = 130  # 128 + SIGINT, what shells report for a run stopped by Ctrl-C


class Interrupted(Exception):
    """The run was stopped by Ctrl-C; the message is the line to print."""


@contextlib.contextmanager
def _sigint_handled_by(handler):
    """``handler`` for SIGINT in this block, the previous one after it; nothing changes
    outside the main thread (only it can set signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def sigint_ignored():
    """SIGINT ignored in this block (only the main thread can change signal handlers).

    Processes spawned inside inherit the ignored signal: Python installs its
    KeyboardInterrupt handler only where SIGINT starts at its default."""
    return _sigint_handled_by(signal.SIG_IGN)


def _in_finalizer(frame) -> bool:
    """Is ``frame`` (or a caller) a ``__del__`` or a weakref finalizer? An exception raised
    there is printed as "Exception ignored" and dropped, so a Ctrl-C would be lost."""
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename.endswith("weakref.py"):
            return True
        frame = frame.f_back
    return False


RESEND_SECONDS = 0.05  # a Ctrl-C that lands in a finalizer comes again this much later


# What the event loop's thread logs when a callback fails: a wait of the main thread that a
# Ctrl-C cut short leaves callbacks that may fail there (distributed's sync() cancels a future
# it may not have made yet: "NameError: cannot access free variable 'future'", seen once in a
# CI run, a traceback after the one line a Ctrl-C prints)
EVENT_LOOP_LOGGERS = ("tornado.application", "asyncio")


# What Python warns of when a wait that a Ctrl-C cut short leaves its coroutine unawaited (an
# actor's answer the head was waiting for: "RuntimeWarning: coroutine 'ActorFuture._result' was
# never awaited", seen in a CI run after the one line a Ctrl-C prints)
UNAWAITED = r"coroutine .* was never awaited"


def sigint_never_dropped(quiet: bool = True):
    """Ctrl-C raises KeyboardInterrupt as Python's own handler does, except while the main
    thread runs a finalizer (a released Future's ``__del__``, say), where Python would drop
    the exception and the run would go on to its end: there the signal is sent again a
    moment later, once the finalizer has returned. For the whole of a command (a download,
    the cluster's start, the rounds, the end). Only the main thread can install it. With
    ``quiet`` (the command line without ``--debug``), the event loop's errors are not logged
    from the Ctrl-C on, nor the coroutines its cut waits leave unawaited: the command ends in
    its one line."""
    def handler(signum, frame):
        if not _in_finalizer(frame):
            if quiet:
                for name in EVENT_LOOP_LOGGERS:
                    logging.getLogger(name).setLevel(logging.CRITICAL + 1)
                warnings.filterwarnings("ignore", message=UNAWAITED, category=RuntimeWarning)
            raise KeyboardInterrupt
        again = threading.Timer(RESEND_SECONDS, os.kill, (os.getpid(), signal.SIGINT))
        again.daemon = True
        again.start()

    return _sigint_handled_by(handler)


@contextlib.contextmanager
def stop_signals():
    """For a command that serves a cluster until Ctrl-C: SIGINT and SIGTERM set the Event
    this yields instead of raising; the previous handlers come back after the block."""
    stopping = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stopping.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_stopped(stopping: threading.Event, went_away) -> bool:
    """Wait for ``stopping`` (True), looking every second whether ``went_away()`` says the
    scheduler is gone (False, said in one line on standard error)."""
    while not stopping.wait(1.0):
        if went_away():
            print("ppt-dask: the scheduler went away", file=sys.stderr)
            return False
    return True


class LastRound:
    """A progress callback that remembers the last round it saw and passes records on, so
    that a Ctrl-C can say where the run was."""

    def __init__(self, inner=None):
        self.inner, self.last = inner, None

    def __call__(self, record: dict) -> None:
        self.last = record
        if self.inner is not None:
            self.inner(record)

    def line(self, checkpoint_dir) -> str:
        where = ("before the first round" if self.last is None else
                 f"at epoch {self.last['epoch']:.2f}, round {self.last['round']}")
        if not checkpoint_dir:
            return f"interrupted {where} (no checkpoint; --checkpoint DIR keeps one to resume from)"
        saved = saved_round(checkpoint_dir)
        if saved is None:
            return f"interrupted {where}; checkpoint {checkpoint_dir} holds none yet (start again without --resume)"
        return f"interrupted {where}; checkpoint {checkpoint_dir} holds round {saved} (go on with --resume)"


def saved_round(directory) -> int | None:
    """The round of the checkpoint in ``directory`` (None when there is no readable one)."""
    from ppt_dask.engine.saving.checkpoint import FILE

    try:
        with np.load(Path(directory) / FILE, allow_pickle=False) as archive:
            return int(json.loads(archive["header"].tobytes().decode())["round"])
    except Exception:  # missing or unreadable: the line says there is none
        return None


QUIET_LOGGERS = ("distributed", "tornado", "asyncio")
QUIET_SECONDS = 5.0  # how long the workers may take to quiet their logs before the close goes on


def _quiet_logs() -> None:
    """On a worker: no warnings about the tasks the close cancels."""
    for logger in _quiet_loggers():
        logger.setLevel(logging.CRITICAL + 1)


def _quiet_workers(client) -> None:
    """:func:`_quiet_logs` on every worker of ``client``, waiting at most ``QUIET_SECONDS``
    (a stuck worker must not hold up the close: it is closed with the rest)."""
    def run():
        try:
            client.run(_quiet_logs)
        except Exception:  # a worker already gone: nothing to quiet there
            pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(QUIET_SECONDS)


RECONNECTS = ("_reconnect", "_ensure_connected")  # distributed.Client's, where it logs a lost scheduler


class _NotReconnects(logging.Filter):
    """Keeps every record but the traceback of the client's failed reconnection to a
    scheduler that went away (the run then stops with :class:`ppt_dask.engine.waits.SchedulerLost`,
    whose one line says it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName in RECONNECTS:  # "Failed to reconnect to scheduler after 10.00 seconds"
            return False
        if not record.exc_info or record.exc_info[2] is None:
            return True
        return not any(frame.name in RECONNECTS for frame in traceback.extract_tb(record.exc_info[2]))


@contextlib.contextmanager
def reconnects_unlogged(quiet: bool = True):
    """With ``quiet`` (the command line without ``--debug``): for the block, the client's log
    keeps no traceback of a failed reconnection to the scheduler."""
    logger, quieter = logging.getLogger("distributed.client"), _NotReconnects()
    if quiet:
        logger.addFilter(quieter)
    try:
        yield
    finally:
        logger.removeFilter(quieter)


class _NotHeartbeats(logging.Filter):
    """Keeps every record but those of the worker's heartbeat."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.funcName != "heartbeat"


def quiet_heartbeats() -> None:
    """On a worker of a cluster this run started: drop what its heartbeat logs.

    The scheduler of such a cluster lives in the head's process, so a heartbeat fails only
    while the head closes the cluster (a worker still closing when the scheduler has gone);
    its traceback would otherwise end the run's output, however late the close's own quieting
    (:func:`_quiet_workers`) reached a busy worker."""
    logger = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _NotHeartbeats) for f in logger.filters):
        logger.addFilter(_NotHeartbeats())


def _quiet_loggers() -> list[logging.Logger]:
    """The loggers of :data:`QUIET_LOGGERS` and every one below them that exists: a child
    with its own level (distributed's configuration gives ``distributed.client`` one) does
    not follow its parent's."""
    names = {name for name in logging.root.manager.loggerDict
             if any(name == top or name.startswith(top + ".") for top in QUIET_LOGGERS)}
    return [logging.getLogger(name) for name in sorted(names | set(QUIET_LOGGERS))]


def close_quietly(close, client, workers_too: bool = True) -> None:
    """``close(client)`` with distributed's shutdown log silenced (here and, when
    ``workers_too``, on the workers) and Ctrl-C held off."""
    loggers = _quiet_loggers()
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        with sigint_ignored():
            if workers_too and getattr(client, "_ppt_owns_cluster", False):
                _quiet_workers(client)  # only the workers of a cluster this run started
            close(client)
    except Exception:  # the cluster may already be half gone; its processes end with us
        pass
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
