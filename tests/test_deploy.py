"""Deployment over ssh with TLS, against a real OpenSSH server on 127.0.0.1.

Each test starts its own sshd (tests/sshd.py) on a free high port with generated keys, starts
a cluster through it (SSHCluster via ppt_dask.deploy.ssh, the ``dask ssh`` command line, the
``ppt-dask cluster ssh`` command), trains, stops, and checks that no process started through
the server is left (every session carries a token in its environment) and that sshd is gone.

``.ci/run`` installs openssh-server when sshd is missing; without it these tests are skipped
with the reason, and fail when the environment variable CI is set (tests/system.py).
"""

from __future__ import annotations

import importlib.util
import os
import queue
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from distributed import Client, Security

import ppt_dask as ppt
from ppt_dask.deploy import ssh as sshcluster
from ppt_dask.engine.placement.cluster import DASHBOARD_PRELOAD, preloads

import system
from sshd import INSTALL_HINT, SSHServer, find_sshd, free_port

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
EXAMPLE_CERTS = "/opt/ppt-dask/certs"  # the placeholder path of deploy/dask-config*.yaml
HAS_DASHBOARD = importlib.util.find_spec(DASHBOARD_PRELOAD) is not None


def _say(text: str) -> None:
    print(f"[deploy] {text}", flush=True)


@pytest.fixture(scope="module")
def openssh():
    try:
        find_sshd()
    except RuntimeError:
        system.missing(INSTALL_HINT)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """Two TLS directories made by deploy/make_certs.py: the cluster's, and another CA's."""
    base = tmp_path_factory.mktemp("tls")
    dirs = {}
    for name in ("cluster", "other"):
        out = base / name
        run = subprocess.run([sys.executable, str(DEPLOY / "make_certs.py"), str(out), "--hosts", "127.0.0.1"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        dirs[name] = out
    return dirs


@pytest.fixture
def sshd(tmp_path, openssh):
    """``sshd(env=None) -> SSHServer`` started; every server is stopped (and its sessions
    killed) at the end even when the test failed."""
    servers = []

    def start(env=None):
        server = SSHServer(tmp_path / f"sshd{len(servers)}", env=env)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        killed = server.stop()
        if killed:
            _say(f"teardown had to kill: {killed}")


def _assert_clean(server: SSHServer, timeout: float = 30.0) -> float:
    """No process started through ``server`` is left; then the server stops and is gone."""
    t0 = time.monotonic()
    left = server.wait_no_sessions(timeout)
    waited = time.monotonic() - t0
    assert not left, "left running after shutdown: " + "; ".join(
        f"{p.pid} {' '.join(p.cmdline())[:120]}" for p in left if p.is_running())
    killed = server.stop()
    assert not killed, f"sshd sessions still open: {killed}"
    assert not server.server_processes(), "sshd still running"
    return waited


def _host_config(directory: Path, certs_dir: Path, template: str) -> Path:
    """deploy/<template> with the certificate paths of ``certs_dir``, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    text = (DEPLOY / template).read_text().replace(EXAMPLE_CERTS, str(certs_dir))
    assert str(certs_dir) in text
    if not HAS_DASHBOARD:
        assert "preload: [ppt_dask.observe.dashboard]" in text or template.endswith("client.yaml")
        text = text.replace("preload: [ppt_dask.observe.dashboard]", "preload: []")
    (directory / "ppt-dask.yaml").write_text(text)
    return directory


def _train_parity8(client, workers) -> ppt.Result:
    data = ppt.datasets.parity(8)
    shards = ppt.enter_data(client, data.X, data.y, n_shards=8, workers=workers)
    try:
        net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
        return ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9),
                         ppt.Stop(max_epochs=2000, target_error=0.0))
    finally:
        ppt.exit_data(shards)


def _refused(call) -> tuple[type, str, float]:
    """The client's error, refused by the other side: not let in, and not left waiting until
    its own timeout (an error that says it timed out). The refusals came in 0.02-0.03 s with
    a busy core and others' runs (load average 10-16); the test bounded them by 10 s."""
    t0 = time.monotonic()
    with pytest.raises((OSError, ValueError)) as info:
        client = call()
        client.close()  # pragma: no cover - only reached when the connection was let in
    took = time.monotonic() - t0
    assert not issubclass(info.type, TimeoutError) and "timed out" not in str(info.value).lower(), info.value
    return info.type, str(info.value), took


def _raw_tls(address: str, ca: Path, cert: Path | None, key: Path | None) -> bytes:
    """A TLS handshake and one read: what any program, not only dask, can try."""
    host, port = address.split("://", 1)[1].rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    if cert is not None:
        ctx.load_cert_chain(str(cert), str(key))
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        with ctx.wrap_socket(sock) as tls:
            tls.sendall(b"\0" * 8)
            return tls.recv(16)


def _assert_only_cluster_certificates(address: str, worker: str, certs: dict) -> None:
    """The scheduler and a worker refuse clients without a certificate of the cluster's CA."""
    good, other = certs["cluster"], certs["other"]
    plain = address.replace("tls://", "tcp://")
    # plain TCP to the TLS port
    kind, message, took = _refused(lambda: Client(plain, timeout="5s"))
    _say(f"tcp:// client refused in {took:.2f} s: {kind.__name__}")
    kind, message, _ = _refused(lambda: ppt.connect(plain, timeout=5))
    assert address.replace("tls://", "tcp://") in message and "tls://" in message
    # no certificate at all: ppt says so before any network work
    kind, message, _ = _refused(lambda: ppt.connect(address, timeout=5))
    assert kind is ValueError and "certificate" in message
    # a client trusting the cluster's CA but holding a certificate of another CA
    foreign = Security(require_encryption=True, tls_ca_file=str(good / "ca.pem"),
                       tls_client_cert=str(other / "client.pem"), tls_client_key=str(other / "client-key.pem"))
    kind, message, took = _refused(lambda: Client(address, security=foreign, timeout="5s"))
    _say(f"client with another CA's certificate refused in {took:.2f} s: {kind.__name__}: {message[:100]}")
    kind, message, _ = _refused(lambda: ppt.connect(address, security=foreign, timeout=5))
    assert "certificate" in message and address in message
    # everything from the other CA: the client does not trust the scheduler either
    _refused(lambda: ppt.connect(address, security=other, timeout=5))
    # raw TLS: with no client certificate, and with the other CA's, scheduler and worker refuse
    for target in (address, worker):
        for cert in (None, other / "client.pem"):
            key = None if cert is None else other / "client-key.pem"
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                _raw_tls(target, good / "ca.pem", cert, key)
    # and the right certificate gets in
    assert _raw_tls(address, good / "ca.pem", good / "client.pem", good / "client-key.pem") is not None


def _scheduler_state(client) -> dict:
    def probe(dask_scheduler):
        sockets = [s.getsockname()[0] for s in dask_scheduler.http_server._sockets.values()]
        return {"preloads": [p.name for p in dask_scheduler.preloads], "dashboard_hosts": sockets,
                "require_encryption": dask_scheduler.security.require_encryption}
    return client.run_on_scheduler(probe)


@pytest.fixture
def no_tls_config():
    """A dask configuration without any TLS setting, whatever the environment holds."""
    import dask

    blank = {"distributed.comm.require-encryption": None, "distributed.comm.tls.ca-file": None,
             "distributed.client.security-loader": None,
             **{f"distributed.comm.tls.{role}.{part}": None
                for role in ("client", "scheduler", "worker") for part in ("cert", "key")}}
    with dask.config.set(blank):
        yield


@pytest.fixture
def listener():
    """A port that listens and counts who connected: ``(address, connections)``. A refusal
    "before network" is one that leaves it untouched (the kernel queues a connection even
    before it is accepted, so none is missed)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)

    def connections() -> int:
        n = 0
        while True:
            try:
                sock.accept()[0].close()
            except BlockingIOError:
                return n
            n += 1
    yield f"tls://127.0.0.1:{sock.getsockname()[1]}", connections
    sock.close()


def test_tls_address_without_certificate_is_refused_before_network(no_tls_config, tmp_path, listener):
    address, connections = listener
    with pytest.raises(ValueError, match="no client certificate.*make_certs"):
        ppt.connect(address, timeout=30)
    with pytest.raises(FileNotFoundError, match="make_certs"):
        ppt.connect(address, security=tmp_path / "missing", timeout=30)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "ca.pem").write_text("")
    with pytest.raises(FileNotFoundError, match="client.pem"):
        ppt.connect(address, security=tmp_path / "half", timeout=30)
    with pytest.raises(TypeError, match="security"):
        ppt.connect(address, security=42, timeout=30)
    assert connections() == 0  # refused before any connection (was: in under 5 s)


def test_security_from_a_certs_directory(certs, no_tls_config):
    d = certs["cluster"]
    sec = ppt.cluster.resolve_security(str(d), "tls://node1:8786")
    assert sec.require_encryption
    assert sec.tls_ca_file == str(d / "ca.pem")
    assert (sec.tls_client_cert, sec.tls_client_key) == (str(d / "client.pem"), str(d / "client-key.pem"))
    assert sec.tls_scheduler_cert == str(d / "scheduler.pem")  # for a LocalCluster with TLS
    with pytest.raises(ValueError, match="tls://node1:8786"):
        ppt.cluster.resolve_security(sec, "tcp://node1:8786")
    # the configuration route: what deploy/dask-config-client.yaml sets
    import dask

    with dask.config.set({"distributed.comm.tls.ca-file": str(d / "ca.pem"),
                          "distributed.comm.tls.client.cert": str(d / "client.pem"),
                          "distributed.comm.tls.client.key": str(d / "client-key.pem")}):
        assert ppt.cluster.resolve_security(None, "tls://node1:8786") is None  # Client reads it


def test_cli_train_and_calibrate_check_security_first(no_tls_config, tmp_path, capsys, listener):
    from ppt_dask.cli import commands as cli

    address, connections = listener
    assert cli.main(["train", "parity8", "--scheduler", address, "--quiet"]) == 2
    assert "certificate" in capsys.readouterr().err
    assert cli.main(["train", "parity8", "--scheduler", address, "--security",
                     str(tmp_path / "missing"), "--quiet"]) == 2
    assert "make_certs" in capsys.readouterr().err
    # the calibration of a TLS cluster: the same flag, the same checks first
    assert cli.main(["model", "calibrate", "parity8", "--scheduler", address, "--out",
                     str(tmp_path / "c.json")]) == 2
    assert "certificate" in capsys.readouterr().err
    assert cli.main(["model", "calibrate", "parity8", "--scheduler", address, "--security",
                     str(tmp_path / "missing"), "--out", str(tmp_path / "c.json")]) == 2
    assert "make_certs" in capsys.readouterr().err
    assert connections() == 0  # checked before any connection (was: in under 10 s)


def test_host_files_and_remote_settings(tmp_path, certs, no_tls_config):
    example = sshcluster.read_hostfile(DEPLOY / "hosts.example")
    assert example == (DEPLOY / "hosts.example").read_text().split()  # what `dask ssh --hostfile` reads
    hosts = tmp_path / "hosts"
    hosts.write_text("# scheduler first\nnode1\n\nnode2  # a comment\n")
    assert sshcluster.read_hostfile(hosts) == ["node1", "node2"]
    hosts.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no host"):
        sshcluster.read_hostfile(hosts)
    remote = sshcluster.remote_tls_config(None, "/opt/ppt-dask/certs")
    assert remote["distributed.comm.tls.worker.key"] == "/opt/ppt-dask/certs/worker-key.pem"
    assert remote["distributed.comm.require-encryption"] is True
    pem = Security(tls_ca_file="-----BEGIN CERTIFICATE-----\nMII\n", tls_scheduler_cert="x",
                   tls_worker_cert="y", tls_client_cert="z")
    with pytest.raises(ValueError, match="PEM"):
        sshcluster.remote_tls_config(pem)
    with pytest.raises(ValueError, match="certs_dir"):  # TLS is not optional
        sshcluster.start(["node1"])
    with pytest.raises(ValueError, match="n_workers"):
        sshcluster.start(["node1"], certs_dir=certs["cluster"], n_workers=0)
    assert preloads(False) == [] and preloads("a.b") == ["a.b"]
    assert preloads(True) == ([DASHBOARD_PRELOAD] if HAS_DASHBOARD else [])


def test_example_dask_configs_give_tls(certs):
    import dask
    import yaml

    for name in ("dask-config.yaml", "dask-config-client.yaml"):
        text = (DEPLOY / name).read_text().replace(EXAMPLE_CERTS, str(certs["cluster"]))
        loaded = yaml.safe_load(text)
        with dask.config.set(dask.config.merge(dask.config.config, loaded)):  # as a config file would
            sec = Security()
            assert sec.tls_ca_file == str(certs["cluster"] / "ca.pem")
            assert sec.tls_client_cert and Path(sec.tls_client_cert).is_file()
            if name == "dask-config.yaml":
                assert sec.require_encryption is True
                assert dask.config.get("distributed.comm.default-scheme") == "tls"
                assert DASHBOARD_PRELOAD in dask.config.get("distributed.scheduler.preload")
                env = dask.config.get("distributed.nanny.pre-spawn-environ")
                assert str(env["MALLOC_TRIM_THRESHOLD_"]) == ppt.cluster.WORKER_ENV["MALLOC_TRIM_THRESHOLD_"]
                for role in ("scheduler", "worker"):
                    assert Path(getattr(sec, f"tls_{role}_key")).is_file()


def test_make_certs_files_and_usages(certs):
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    d = certs["cluster"]
    assert (d.stat().st_mode & 0o777) == 0o700
    for name in ("ca", "scheduler", "worker", "client"):
        assert ((d / f"{name}-key.pem").stat().st_mode & 0o777) == 0o600
        assert ((d / f"{name}.pem").stat().st_mode & 0o777) == 0o644
    ca = x509.load_pem_x509_certificate((d / "ca.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    for role, server in (("scheduler", True), ("worker", True), ("client", False)):
        cert = x509.load_pem_x509_certificate((d / f"{role}.pem").read_bytes())
        assert cert.issuer == ca.subject
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.CLIENT_AUTH in eku
        assert (ExtendedKeyUsageOID.SERVER_AUTH in eku) is server
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in san.get_values_for_type(x509.DNSName)
        assert "127.0.0.1" in [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    # the chain verifies with the standard library, the way dask loads it
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(d / "ca.pem"))
    ctx.load_cert_chain(str(d / "scheduler.pem"), str(d / "scheduler-key.pem"))
    # run again: the CA and the certificates are kept
    before = (d / "ca.pem").read_bytes(), (d / "worker.pem").read_bytes()
    subprocess.run([sys.executable, str(DEPLOY / "make_certs.py"), str(d)], check=True,
                   capture_output=True, timeout=60)
    assert ((d / "ca.pem").read_bytes(), (d / "worker.pem").read_bytes()) == before


@pytest.mark.ssh
@pytest.mark.timeout(240)
def test_sshcluster_tls_trains_parity8_and_refuses_strangers(certs, sshd):
    server = sshd()
    t0 = time.monotonic()
    cluster, client = sshcluster.start(
        ["127.0.0.1"], certs_dir=certs["cluster"], n_workers=2, scheduler_port=0,
        dashboard_address="127.0.0.1:0", connect_options=server.connect_options(),
        death_timeout="30s", idle_timeout="10 minutes", timeout=60)
    try:
        started = time.monotonic() - t0
        address = cluster.scheduler_address
        workers = ppt.cluster.worker_addresses(client)
        _say(f"SSHCluster over sshd 127.0.0.1:{server.port} up in {started:.1f} s: {address}, workers {workers}")
        assert address.startswith("tls://127.0.0.1:")
        assert len(workers) == 2 and all(w.startswith("tls://127.0.0.1:") for w in workers)
        names = [" ".join(p.cmdline()) for p in server.session_processes()]
        assert any("distributed.Scheduler" in n for n in names), names  # really started over ssh
        assert sum("distributed.Nanny" in n for n in names) >= 1, names
        state = _scheduler_state(client)
        assert state["require_encryption"] is True
        assert set(state["dashboard_hosts"]) == {"127.0.0.1"}, state
        if HAS_DASHBOARD:
            assert DASHBOARD_PRELOAD in state["preloads"], state
        for settings in ppt.cluster.worker_report(client).values():
            assert settings["MALLOC_TRIM_THRESHOLD_"] == ppt.cluster.WORKER_ENV["MALLOC_TRIM_THRESHOLD_"]
            assert all(b["threads"] == 1 for b in settings["blas"])

        t1 = time.monotonic()
        result = _train_parity8(client, workers)
        _say(f"parity8 over TLS: learned={result.learned} in {result.rounds} rounds, {time.monotonic() - t1:.1f} s")
        assert result.learned, result.stopped_because

        _assert_only_cluster_certificates(address, workers[0], certs)
    finally:
        t2 = time.monotonic()
        sshcluster.stop(cluster, client)
        closed = time.monotonic() - t2
    waited = _assert_clean(server)
    _say(f"closed in {closed:.1f} s; remote processes gone {waited:.1f} s later; sshd stopped")


@pytest.mark.ssh
@pytest.mark.timeout(120)
def test_cluster_leaves_with_its_ssh_session(certs, sshd):
    """The machine that started the cluster vanishes (its ssh connections drop): the scheduler
    and the workers go too, long before ``idle_timeout`` or ``death_timeout``."""
    server = sshd()
    cluster, client = sshcluster.start(
        ["127.0.0.1"], certs_dir=certs["cluster"], n_workers=1, scheduler_port=0,
        dashboard_address="127.0.0.1:0", connect_options=server.connect_options(),
        death_timeout="120s", idle_timeout="1h", timeout=60)
    try:
        assert len(server.session_processes()) >= 3
        connections = server.connection_servers()
        assert connections, server.server_processes()
        t0 = time.monotonic()
        for proc in connections:
            proc.kill()
        left = server.wait_no_sessions(30)
        gone = time.monotonic() - t0
        assert not left, [" ".join(p.cmdline())[:120] for p in left]
        _say(f"ssh connections cut: scheduler and workers gone in {gone:.1f} s")
    finally:
        sshcluster.stop(cluster, client, timeout=5)
    _assert_clean(server)


def _lines(stream, sink: queue.Queue, log: list):
    for line in iter(stream.readline, ""):
        log.append(line)
        sink.put(line)
    sink.put(None)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)


def _connect_when_up(address: str, security, proc: subprocess.Popen, log_path: Path, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the launcher exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
        try:
            return ppt.connect(address, security=security, timeout=2)
        except OSError:
            if time.monotonic() > deadline:
                pytest.fail(f"no scheduler at {address} after {timeout} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.3)


def _ppt_dask(*args, env_extra=None, timeout=150) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.ssh
@pytest.mark.timeout(240)
def test_dask_ssh_command_line_with_host_config(certs, sshd, tmp_path):
    good = certs["cluster"]
    host_config = _host_config(tmp_path / "host-dask", good, "dask-config.yaml")
    client_config = _host_config(tmp_path / "client-dask", good, "dask-config-client.yaml")
    server = sshd(env={"DASK_CONFIG": str(host_config)})  # the hosts' dask configuration
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    log_path = tmp_path / "dask-ssh.log"
    command = [sys.executable, "-m", "dask", "ssh", "127.0.0.1", "--scheduler-port", str(port),
               "--nworkers", "2", "--nthreads", "1", "--ssh-port", str(server.port),
               "--ssh-username", server.user, "--ssh-private-key", str(server.client_key),
               "--remote-python", sys.executable]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    try:
        client = _connect_when_up(address, good, proc, log_path)
        try:
            client.wait_for_workers(2, timeout=60)
            workers = ppt.cluster.worker_addresses(client)
            _say(f"dask ssh over sshd 127.0.0.1:{server.port} up in {time.monotonic() - t0:.1f} s: {address}, "
                 f"workers {workers}")
            assert len(workers) == 2 and all(w.startswith("tls://") for w in workers)
            state = _scheduler_state(client)
            assert state["require_encryption"] is True
            if HAS_DASHBOARD:
                assert DASHBOARD_PRELOAD in state["preloads"], state
            for settings in ppt.cluster.worker_report(client).values():  # from the hosts' YAML
                assert settings["MALLOC_TRIM_THRESHOLD_"] == "1073741824", settings
            _refused(lambda: Client(address.replace("tls://", "tcp://"), timeout="5s"))
        finally:
            client.close()

        # the command line, with its TLS from the dask configuration only
        refused = _ppt_dask("train", "parity8", "--scheduler", address, "--quiet")
        assert refused.returncode == 2 and "certificate" in refused.stderr, refused.stderr
        t1 = time.monotonic()
        run = _ppt_dask("train", "parity8", "--scheduler", address, "--workers", "2", "--quiet",
                        env_extra={"DASK_CONFIG": str(client_config)})
        _say(f"ppt-dask train parity8 --scheduler {address} (DASK_CONFIG): {run.stdout.strip()} "
             f"[{time.monotonic() - t1:.1f} s]")
        assert run.returncode == 0, run.stderr[-3000:]
        assert "target reached" in run.stdout and "2 workers" in run.stdout, run.stdout
    finally:
        t2 = time.monotonic()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
        closed = time.monotonic() - t2
        _kill_group(proc)
    waited = _assert_clean(server)
    _say(f"dask ssh stopped by Ctrl-C in {closed:.1f} s; remote processes gone {waited:.1f} s later; sshd stopped")


@pytest.mark.ssh
@pytest.mark.timeout(240)
def test_ppt_dask_cluster_ssh_command(certs, sshd, tmp_path):
    good = certs["cluster"]
    server = sshd()
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the scheduler's machine first\n127.0.0.1\n")
    command = [sys.executable, "-m", "ppt_dask.cli", "cluster", "ssh", str(hostfile), "--certs", str(good),
               "--workers-per-host", "2", "--scheduler-port", "0", "--dashboard-address", "127.0.0.1:0",
               "--ssh-port", str(server.port), "--ssh-user", server.user, "--ssh-key", str(server.client_key),
               "--known-hosts", str(server.known_hosts), "--idle-timeout", "10m", "--death-timeout", "30s"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    t0 = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, env=env, start_new_session=True)
    lines: queue.Queue = queue.Queue()
    log: list[str] = []
    threading.Thread(target=_lines, args=(proc.stdout, lines, log), daemon=True).start()
    try:
        address = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if line.startswith("scheduler "):
                address = line.split()[1]
            if line.startswith("Ctrl-C"):
                break
        assert address and address.startswith("tls://127.0.0.1:"), "".join(log)[-3000:]
        _say(f"ppt-dask cluster ssh up in {time.monotonic() - t0:.1f} s: "
             + " | ".join(line.strip() for line in log if line.split(" ", 1)[0] in ("scheduler", "workers", "preload")))
        t1 = time.monotonic()
        run = _ppt_dask("train", "parity8", "--scheduler", address, "--security", str(good),
                        "--workers", "2", "--epochs", "60", "--quiet")
        _say(f"ppt-dask train parity8 --scheduler {address} --security DIR: {run.stdout.strip()} "
             f"[{time.monotonic() - t1:.1f} s]")
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.startswith("parity8: strategy epoch, 2 workers,"), run.stdout
    finally:
        t2 = time.monotonic()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
        closed = time.monotonic() - t2
        _kill_group(proc)
    assert proc.returncode == 0, "".join(log)[-3000:]
    assert any(line.startswith("stopped") for line in log), "".join(log)[-3000:]
    waited = _assert_clean(server)
    _say(f"ppt-dask cluster ssh stopped by Ctrl-C in {closed:.1f} s; remote processes gone {waited:.1f} s later")


@pytest.mark.ssh
@pytest.mark.timeout(120)
def test_a_host_that_refuses_ssh_or_lacks_ppt_dask_is_named_before_anything_starts(certs, sshd, tmp_path):
    """Every host is asked over ssh to import ppt_dask before a process of the cluster starts:
    ``ppt-dask cluster ssh`` on a host where nothing listens on the ssh port ends in one line
    naming it; ``start()`` on two hosts, one refusing and one whose Python has no ppt_dask (a
    bare virtual environment), names both, each with its reason, and starts nothing on the
    host that answered."""
    good = certs["cluster"]
    server = sshd()
    refused = free_port()
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.1\n")
    run = _ppt_dask("cluster", "ssh", str(hostfile), "--certs", str(good), "--ssh-port", str(refused),
                    "--ssh-user", server.user, "--ssh-key", str(server.client_key),
                    "--known-hosts", str(server.known_hosts), timeout=90)
    assert run.returncode == 1 and run.stdout == "", run
    assert run.stderr == (f"ppt-dask: error: the ssh cluster was not started: 127.0.0.1: ssh: connection refused "
                          f"on port {refused}\n"), run.stderr

    bare = tmp_path / "bare"  # a Python without ppt_dask (nor dask): the venv of a fresh host
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=60)
    bare_python = str(bare / "bin" / "python")
    options = server.connect_options()
    with pytest.raises(RuntimeError) as err:
        sshcluster.start(["localhost", "127.0.0.1"], certs_dir=good, python=[sys.executable, bare_python],
                         connect_options=[{**options, "port": refused}, options], timeout=60)
    said = str(err.value)
    assert "\n" not in said and said.startswith("the ssh cluster was not started: "), said
    assert f"localhost: ssh: connection refused on port {refused}" in said, said
    assert f"127.0.0.1: {bare_python} has no ppt_dask (install it there" in said, said
    assert not server.wait_no_sessions(20), "a session outlived the check"
    assert not any("distributed" in " ".join(p.cmdline()) for p in server.session_processes())
    _say(f"refused and bare hosts named before any start: {said}")
