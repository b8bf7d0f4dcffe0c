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
from ppt_dask.engine import probe


@pytest.fixture
def http_port():
    """A real HTTP server (the kind of thing on a dashboard port)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
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
    """760b1fe: no output at all for 60 s and more. Now: one line, status 2, in seconds."""
    address = f"tcp://127.0.0.1:{http_port}"
    out, seconds = _cli("train", "parity8", "--scheduler", address, "--connect-timeout", "5")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and address in lines[0] and "HTTP server, not a Dask scheduler" in lines[0]
    assert "8787" in lines[0] and "8786" in lines[0]
    assert seconds < 5 + 15  # the timeout plus the interpreter's start


def test_a_silent_port_fails_within_the_timeout(silent_port):
    address = f"tcp://127.0.0.1:{silent_port}"
    t0 = time.monotonic()
    with pytest.raises(OSError, match="does not answer like a Dask scheduler"):
        ppt.connect(address, timeout=4)
    assert time.monotonic() - t0 < 8


def test_a_real_scheduler_passes_the_probe(client4):
    probe.check_scheduler(client4.scheduler.address, timeout=5)  # no error


def test_connect_timeout_is_refused_without_a_scheduler():
    out, _ = _cli("train", "parity8", "--connect-timeout", "3")
    assert out.returncode == 2 and "--connect-timeout applies with --scheduler" in out.stderr


def test_a_wait_that_times_out_says_what_it_waited_for(threads_client):
    import time as _time

    from ppt_dask.engine import waits

    slow = threads_client.submit(_time.sleep, 3, pure=False)
    t0 = _time.monotonic()
    with pytest.raises(TimeoutError, match=r"^waited 0.5 s for the test's slow task; it did not come"):
        waits.result(slow, 0.5, "the test's slow task")
    assert _time.monotonic() - t0 < 2.5
    assert waits.result(slow, 10, "the test's slow task") is None  # it does come in the end


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
