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
    """The workers ppt.connect starts sample running tasks, tick their event loops, sample their
    process and their memory on the quieter timers of QUIET_TIMERS (each slower than
    distributed's default), and a value the user configured is kept."""
    import dask

    ours = tuple(mine for mine, _default in ppt.cluster.QUIET_TIMERS.values())
    assert all(dask.utils.parse_timedelta(mine) > dask.utils.parse_timedelta(default)
               for mine, default in ppt.cluster.QUIET_TIMERS.values())
    client = ppt.connect(n_workers=1, dashboard_address=None)
    try:
        assert set(client.run(_timers).values()) == {ours}
    finally:
        ppt.cluster.close(client)
    with dask.config.set({"distributed.worker.profile.interval": "5ms"}):
        client = ppt.connect(n_workers=1, dashboard_address=None)
        try:
            assert set(client.run(_timers).values()) == {("5ms", *ours[1:])}
        finally:
            ppt.cluster.close(client)


def test_closing_the_client_of_connect_ends_the_cluster_it_started():
    """``client.close()`` (not ``ppt.cluster.close``) on the client of ``ppt.connect()``: the
    worker processes of the LocalCluster it started (children of this process; their nannies
    live in this process) are gone within 30 s. (Before: the client closed alone, and the workers lived on:
    in a notebook, each ``connect`` left its processes behind.)"""
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        client.wait_for_workers(2, timeout=60)
        workers = set(client.run(os.getpid).values())
        started = {p.pid for p in psutil.Process().children(recursive=True)} - before
        assert len(workers) == 2 and workers <= started, (workers, started)
        processes = [psutil.Process(pid) for pid in workers]
        client.close()
        _gone, alive = psutil.wait_procs(processes, timeout=30)
        assert not alive, [" ".join(p.cmdline())[:100] for p in alive]
    finally:
        if client.cluster is not None:
            client.cluster.close()  # where close() left it (the old behaviour): not leaked by the test


STRANGER_CLIENT = r"""
import sys
from distributed import Client
address, path = sys.argv[1], sys.argv[2]
try:
    client = Client(address, timeout=5)
    client.run_on_scheduler(lambda: open(path, "w").close())
except Exception as exc:
    print(type(exc).__name__, str(exc)[:200])
    sys.exit(3)
"""


def test_the_default_cluster_refuses_a_local_strangers_client_and_its_loops_still_link(tmp_path):
    """``ppt.connect()`` starts worker processes on TLS with credentials of its own: another
    process's plain ``Client`` (as another local user would make), to the address as it is and
    to the same port over tcp, is refused and runs nothing on the scheduler; a raw tcp
    connection gets no Dask handshake. The loops of a run still link (their links take the
    workers' TLS) and learn what the serial path learns. (Before: tcp://127.0.0.1, no
    security: the stranger's client ran its code on the scheduler.)"""
    import numpy as np

    from ppt_dask.algorithms.serial import train_serial

    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        address = client.scheduler.address
        port = address.rsplit(":", 1)[1]
        for target in (address, f"tcp://127.0.0.1:{port}"):
            path = tmp_path / "created"
            run = subprocess.run([sys.executable, "-c", STRANGER_CLIENT, target, str(path)], capture_output=True,
                                 text=True, timeout=60)
            assert run.returncode == 3 and not path.exists(), (target, run.stdout, run.stderr[-500:])
        assert address.startswith("tls://127.0.0.1:"), address
        with socket.create_connection(("127.0.0.1", int(port)), timeout=10) as raw:
            raw.sendall(b"\x00" * 64)  # what a plain comm's first frame looks like to a TLS listener
            raw.settimeout(10)
            try:
                said = raw.recv(4096)
            except (ConnectionResetError, TimeoutError):
                said = b""
            assert not said.startswith(b"\x00"), said  # a TLS alert or nothing, never a Dask message
        rng = np.random.default_rng(0)
        X = rng.standard_normal((160, 6))
        y = (X[:, 0] > 0).astype(np.int64)
        net = ppt.MLP((6, 8, 2), hidden="tanh", output="softmax")
        sync = ppt.Sync(lr=0.3, block=40)
        shards = ppt.enter_data(client, X, y, n_shards=2)
        result = ppt.train(net, shards, sync, ppt.Stop(max_epochs=1), seed=1, recorder=None, progress=False)
        ppt.exit_data(shards)
        expected, _ = train_serial(net, X, y, sync, rounds=result.rounds, n_shards=2, seed=1)
        assert result.settings["exchange"] == "stream" and result.params.tobytes() == expected.tobytes()
    finally:
        client.close()
