"""An address that does not answer like a Dask scheduler fails fast, naming the likely mistake."""

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import ppt_dask as ppt
from ppt_dask.engine.wire import probe


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list = []  # the paths asked for, in order (reset by the fixture)

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def http_port():
    """A real HTTP server (the kind of thing on a dashboard port); ``_Handler.requests`` holds
    what it was asked."""
    _Handler.requests = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_port():
    """A TCP server that accepts and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in held:
        conn.close()
    listener.close()


def _cli(*args, timeout=60):
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ})
    return out, time.monotonic() - t0


def test_an_http_port_is_named_within_the_connect_timeout(http_port):
    """760b1fe: no output at all for 60 s and more. Now: one line, status 2, once the probe
    has asked the port what it is (an HTTP request the server saw); a command that waited
    in silence instead would run into the 60 s limit here (TimeoutExpired)."""
    address = f"tcp://127.0.0.1:{http_port}"
    out, _ = _cli("train", "parity8", "--scheduler", address, "--connect-timeout", "5", timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and address in lines[0] and "HTTP server, not a Dask scheduler" in lines[0]
    assert "8787" in lines[0] and "8786" in lines[0]
    assert _Handler.requests == ["/"]  # the probe's one request named it (was: in under 5 + 15 s)


def test_a_silent_port_fails_within_the_timeout(silent_port):
    address = f"tcp://127.0.0.1:{silent_port}"
    t0 = time.monotonic()
    with pytest.raises(OSError, match="does not answer like a Dask scheduler"):
        ppt.connect(address, timeout=4)
    # The probe's reads end at its deadline (probe.check_scheduler), so it gives up at the
    # timeout plus a connect and a thread's wake-up: 4.00-4.02 s measured with a busy core and
    # others' runs (load average 9-10, 10 runs; 5.7 s in a fresh process, which imported on
    # the way). Three times the timeout leaves the load 8 s; what this guards against, a
    # client waiting in silence, took 60 s and more (760b1fe).
    assert time.monotonic() - t0 < 3 * 4


def test_a_real_scheduler_passes_the_probe(client4):
    probe.check_scheduler(client4.scheduler.address, timeout=5)  # no error


def test_connect_timeout_is_refused_without_a_scheduler():
    out, _ = _cli("train", "parity8", "--connect-timeout", "3")
    assert out.returncode == 2 and "--connect-timeout applies with --scheduler" in out.stderr


GATES: dict = {}  # name -> threading.Event: tasks on the threads client wait for the test


def _gated(name: str) -> str:
    assert GATES[name].wait(120), "the test never opened the gate"
    return name


def test_a_wait_that_times_out_says_what_it_waited_for(threads_client):
    from ppt_dask.engine import waits

    GATES["slow"] = threading.Event()
    slow = threads_client.submit(_gated, "slow", pure=False)  # it cannot end before the gate opens
    try:
        with pytest.raises(TimeoutError, match=r"^waited 0.5 s for the test's slow task; it did not come"):
            waits.result(slow, 0.5, "the test's slow task")
        # the wait gave up while the task still ran: causally, not by a clock (was: in under 2.5 s)
        assert not slow.done()
    finally:
        GATES["slow"].set()
    assert waits.result(slow, 60, "the test's slow task") == "slow"  # it does come in the end


def test_a_local_clusters_workers_get_the_threads_asked_whatever_this_process_holds(monkeypatch):
    """Dask's nanny takes OMP_NUM_THREADS and the like from the starting process's environment
    over its configuration (where a first cluster, or the shell, left another count): the
    workers still get threads_per_worker BLAS and OpenMP threads."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    client = ppt.connect(n_workers=1, threads_per_worker=2, dashboard_address=None)
    try:
        (settings,) = ppt.cluster.worker_report(client).values()
    finally:
        ppt.cluster.close(client)
    assert settings["OMP_NUM_THREADS"] == "2" and {b["threads"] for b in settings["blas"]} == {2}, settings


def _timers() -> tuple:
    import dask

    return tuple(dask.config.get(key) for key in ppt.cluster.QUIET_TIMERS)


def test_a_local_clusters_timers_are_quieter_unless_the_user_set_them():
    """The workers ppt.connect starts sample running tasks and tick their event loops every
    100 ms (distributed: 10 and 20 ms), and a value the user configured is kept."""
    import dask

    client = ppt.connect(n_workers=1, dashboard_address=None)
    try:
        assert set(client.run(_timers).values()) == {("100ms", "100ms")}
    finally:
        ppt.cluster.close(client)
    with dask.config.set({"distributed.worker.profile.interval": "5ms"}):
        client = ppt.connect(n_workers=1, dashboard_address=None)
        try:
            assert set(client.run(_timers).values()) == {("5ms", "100ms")}
        finally:
            ppt.cluster.close(client)
