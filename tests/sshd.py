"""A throwaway OpenSSH server on 127.0.0.1 for the deployment tests (or on a test host's
address, in its namespaces: tests/hosts.py).

It listens on a free high port with a host key and a client key generated for it, accepts
only that client key, and tags every session it starts with an environment variable
(``PPT_DASK_TEST_SSHD=<token>``) so that the tests can find every process started through
it (schedulers, nannies, workers and their children) and check that none is left.

Debian's ``openssh-server`` provides ``/usr/sbin/sshd``; ``.ci/run`` installs it when it is
missing.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

TOKEN_VAR = "PPT_DASK_TEST_SSHD"
INSTALL_HINT = (
    "the ssh deployment tests need OpenSSH (sshd and ssh-keygen): .ci/run installs them "
    "(apt-get install -y openssh-server openssh-client)"
)


def find_sshd() -> str:
    """Absolute path of sshd (it refuses to start from a relative one)."""
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd", "/usr/local/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.abspath(candidate)
    raise RuntimeError(INSTALL_HINT)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class SSHServer:
    """``with SSHServer(directory, env={...}) as server:`` ... ``server.port``, ``server.client_key``.

    ``env`` is set in every session the server starts (sshd's ``SetEnv``): the tests use it to
    point ``DASK_CONFIG`` at the dask configuration of the "host".
    """

    def __init__(self, directory, env: dict | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 prefix: tuple[str, ...] = ()):
        """``host``, ``port``: where it listens (default 127.0.0.1 and a free high port); ``prefix``:
        the command sshd runs under (tests/hosts.py: in a network namespace, its data folders
        hidden). A host key and client key already in ``directory`` are kept."""
        self.host = host
        self.fixed_port = port
        self.prefix = tuple(prefix)
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(env or {})
        self.token = secrets.token_hex(8)
        self.user = getpass.getuser()
        self.sshd = find_sshd()
        self.keygen = shutil.which("ssh-keygen")
        if self.keygen is None:
            raise RuntimeError(INSTALL_HINT)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.log = self.dir / "sshd.log"
        self.host_key = self.dir / "ssh_host_ed25519_key"
        self.client_key = self.dir / "id_ed25519"
        self.known_hosts = self.dir / "known_hosts"

    # -- keys and configuration ------------------------------------------------------------
    def _keygen(self, path: Path, comment: str) -> None:
        subprocess.run([self.keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                       check=True, timeout=30, stdin=subprocess.DEVNULL)

    def _write_config(self) -> Path:
        if not self.host_key.exists():
            self._keygen(self.host_key, "ppt-dask-test-host")
            self._keygen(self.client_key, "ppt-dask-test-client")
            (self.dir / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())
        host_pub = Path(f"{self.host_key}.pub").read_text().split()
        names = [self.host if self.port == 22 else f"[{self.host}]:{self.port}"]
        if self.host == "127.0.0.1":
            names.append(f"[localhost]:{self.port}")
        self.known_hosts.write_text(f"{','.join(names)} {host_pub[0]} {host_pub[1]}\n")
        env = {TOKEN_VAR: self.token, **self.env}
        for key, value in env.items():
            if any(c.isspace() or c == '"' for c in f"{key}{value}"):
                raise ValueError(f"no spaces or quotes in session variables: {key}={value!r}")
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "HostbasedAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            f"AllowUsers {self.user}",
            "PrintMotd no",
            "PrintLastLog no",
            "MaxStartups 64",
            "MaxSessions 64",
            "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
            "LogLevel VERBOSE",
            "",
        ]))
        return config

    # -- life cycle -------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> SSHServer:
        if os.geteuid() == 0:  # privilege separation directory, made by the init scripts otherwise
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        last_error = ""
        for _ in range(3):  # another process may take the free port first
            self.port = self.fixed_port or free_port(self.host)
            config = self._write_config()
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen([*self.prefix, self.sshd, "-D", "-e", "-f", str(config)],
                                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                             start_new_session=True)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with socket.create_connection((self.host, self.port), timeout=1.0) as s:
                        if s.recv(64).startswith(b"SSH-2.0"):
                            return self
                except OSError:
                    pass
                time.sleep(0.05)
            last_error = self.log.read_text(errors="replace")[-2000:]
            self._kill_listener()
        raise RuntimeError(f"sshd did not start on {self.host}:{self.port}:\n{last_error}")

    def connect_options(self) -> dict:
        """Keywords for ``asyncssh.connect`` (SSHCluster's ``connect_options``)."""
        return {"port": self.port, "username": self.user, "client_keys": [str(self.client_key)],
                "known_hosts": str(self.known_hosts), "config": [], "agent_path": None}

    def session_processes(self) -> list[psutil.Process]:
        """Every live process started through this server (it carries the token)."""
        found = []
        for proc in psutil.process_iter(["pid"]):
            try:
                if proc.environ().get(TOKEN_VAR) == self.token and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        return found

    def server_processes(self) -> list[psutil.Process]:
        """The listening sshd and its per-connection children."""
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)] if root.is_running() and self.proc.poll() is None else []
        except psutil.NoSuchProcess:
            return []

    def connection_servers(self) -> list[psutil.Process]:
        """The per-connection sshd processes (``sshd`` or ``sshd-session``): killing them is what
        the sessions see when the machine at the other end vanishes."""
        found = []
        for proc in self.server_processes()[1:]:
            try:
                if proc.name().startswith("sshd"):
                    found.append(proc)
            except psutil.NoSuchProcess:
                pass
        return found

    def wait_no_sessions(self, timeout: float = 20.0) -> list[psutil.Process]:
        """Wait until no process started through the server is left; return the leftovers."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.session_processes()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def _kill_listener(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def stop(self, timeout: float = 10.0) -> list[str]:
        """Stop the server and kill whatever it started; return what had to be killed."""
        victims = {p.pid: p for p in self.server_processes() + self.session_processes()}
        described = []
        for proc in victims.values():
            try:
                described.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
            except psutil.Error:
                pass
        self._kill_listener()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in victims.values() if p.is_running()]
            for proc in alive:
                try:
                    proc.send_signal(sig)
                except psutil.NoSuchProcess:
                    pass
            _, alive = psutil.wait_procs(alive, timeout=timeout / 2)
            if not alive:
                break
        return [d for d in described if not d.split()[0] == str(self.proc.pid)] if self.proc else described

    def __enter__(self) -> SSHServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
