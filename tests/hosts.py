"""Test hosts: machines of our own, as Linux network namespaces on a bridge.

Each host ``ppth-<i>`` has its own address (10.77.0.1<i>; the head, in the machine's own
namespace, is 10.77.0.1 on the bridge ``ppth-br``), its own OpenSSH server on port 22 of
that address (tests/sshd.py), a link to the bridge limited by ``tc tbf`` on both ends
(1 Gbit/s unless told otherwise), and its own mount namespace in which the data folder
(PPT_DASK_DATA) and ``~/.cache`` are empty tmpfs: a worker there has no data of its own.
Everything a session on a host starts is a child of its sshd, in its namespaces.

All hosts share one host key and one client key, so one ``known_hosts`` file and one
``--ssh-key`` reach them all (what ``ppt-dask cluster ssh`` takes): ``DIR/known_hosts``,
``DIR/id_ed25519`` and the host file ``DIR/hosts``, in the folder given.

As a script (root; iproute2 and openssh-server)::

    python tests/hosts.py up /tmp/ppth           # 3 hosts at 1 Gbit/s until Ctrl-C; prints the ssh flags
    python tests/hosts.py up /tmp/ppth --rate 100mbit --hosts 4
    python tests/hosts.py down                   # removes every ppth-* namespace, link and process

``up`` removes its hosts on Ctrl-C or SIGTERM; ``down`` is for a run killed harder than that.

The names (prefix ``ppth``) and addresses are fixed, so one set of test hosts exists at a time:
:func:`hosts` holds the lock file ``LOCK`` while its hosts exist, and a second run waits for it
(up to ``LOCK_SECONDS``) instead of taking the first run's hosts away. Holding it, :func:`hosts`
removes what a run killed before it could clean up left (the kernel drops a dead run's lock),
and its own hosts on the way out; ``down`` refuses while a live run holds the lock.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sshd import SSHServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "graphs"))
from netns import qdisc, sh, why_not  # noqa: E402

PREFIX = "ppth"
BRIDGE = f"{PREFIX}-br"
HEAD = "10.77.0.1"  # the bridge's address: where the head is seen from the hosts
NET = "10.77.0.0/24"  # a private test range, not routed anywhere else
RATE = "1gbit"
DATA_DIR = Path(os.environ.get("PPT_DASK_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
LOCK = Path("/tmp") / f"{PREFIX}.lock"  # held by the run whose hosts exist
LOCK_SECONDS = 1800.0  # how long a second run waits for the first one's hosts to go


def address(i: int) -> str:
    return f"10.77.0.{10 + i}"


@dataclass
class Host:
    name: str  # the network namespace
    address: str
    link: str  # the bridge end of its veth pair, in the head's namespace
    server: SSHServer


@dataclass
class Hosts:
    hosts: list[Host]
    client_key: Path
    known_hosts: Path
    user: str
    left_behind: list[str] = field(default_factory=list)  # leftovers() once they were removed

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hosts]

    def ssh_flags(self) -> list[str]:
        """The ``ppt-dask cluster ssh`` flags that reach every host."""
        return ["--ssh-user", self.user, "--ssh-key", str(self.client_key), "--known-hosts", str(self.known_hosts)]

    def set_rate(self, rate: str) -> None:
        """Every link at ``rate`` (``1gbit``, ``100mbit``), both ends, as ``--rate`` sets them."""
        for host in self.hosts:
            sh("tc", "qdisc", "replace", "dev", host.link, "root", *qdisc(rate))
            sh("tc", "qdisc", "replace", "dev", "eth0", "root", *qdisc(rate), ns=host.name)

    def stop(self) -> list[str]:
        """Stop every sshd and what it started; return what had to be killed."""
        killed = []
        for host in self.hosts:
            killed += host.server.stop()
        return killed


def _hidden(paths: list[Path]) -> tuple[str, ...]:
    """The command prefix that runs sshd in its namespace with ``paths`` empty: ``ip netns exec``
    gives each command a mount namespace of its own, so the tmpfs mounts are seen by sshd and
    its sessions only, and go with them."""
    mounts = "".join(f"mount -t tmpfs {PREFIX}-empty {p} && " for p in paths)
    return ("sh", "-c", f'{mounts}exec "$@"', "sh")


def leftovers() -> list[str]:
    """Namespaces, links and processes of test hosts still there: the processes in a ``ppth-*``
    namespace, and any other that names the test network's addresses or a host's sshd files
    (a namespace deleted while a process still ran in it is no longer listed by name)."""
    import psutil

    found = [f"netns {n}" for n in _namespaces()]
    found += [f"link {n}" for n in _links()]
    pids = {int(p) for ns in _namespaces() for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        words = " ".join(proc.info["cmdline"] or ())
        if proc.info["pid"] in pids or NET.rsplit(".", 1)[0] + "." in words or f"/{PREFIX}-" in words:
            found.append(f"process {proc.info['pid']}: {words[:120]}")
    return found


@contextlib.contextmanager
def _lock(wait: float):
    """Hold ``LOCK`` (waiting up to ``wait`` seconds for another run to let it go)."""
    with open(LOCK, "a+") as fh:
        deadline = time.monotonic() + wait
        said = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"another run's test hosts still exist after {wait:g} s "
                                       f"({LOCK} is held)") from None
                if not said:
                    print(f"waiting for another run's test hosts to go ({LOCK} is held)", file=sys.stderr)
                    said = True
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _namespaces() -> list[str]:
    return [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines()
            if line.startswith(f"{PREFIX}-")]


def _links() -> list[str]:
    names = [line.split(":")[1].strip().split("@")[0] for line in sh("ip", "-o", "link").stdout.splitlines()]
    return [n for n in names if n.startswith(PREFIX)]


def down() -> list[str]:
    """Kill every process in a ``ppth-*`` namespace, delete the namespaces (their veth pairs go
    with them) and the bridge; return what was removed. Call it holding ``LOCK`` (:func:`hosts`
    does; ``python tests/hosts.py down`` takes it, and refuses while a live run holds it)."""
    removed = []
    for ns in _namespaces():
        for attempt in (signal.SIGTERM, signal.SIGKILL):
            pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, attempt)
            deadline = time.monotonic() + 5
            while pids and time.monotonic() < deadline:
                pids = [int(p) for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]
                time.sleep(0.1)
            if not pids:
                break
        sh("ip", "netns", "del", ns, check=False)
        removed.append(f"netns {ns}")
    for link in _links():
        sh("ip", "link", "del", link, check=False)
        removed.append(f"link {link}")
    return removed


def _up_host(i: int, rate: str, directory: Path, keys_from: SSHServer | None) -> Host:
    ns, ip = f"{PREFIX}-{i}", address(i)
    outer, inner = f"{PREFIX}{i}b", f"{PREFIX}{i}h"
    sh("ip", "netns", "add", ns)
    sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
    sh("ip", "link", "set", inner, "netns", ns)
    sh("ip", "link", "set", outer, "master", BRIDGE)
    sh("ip", "link", "set", outer, "up")
    sh("ip", "link", "set", "lo", "up", ns=ns)
    sh("ip", "link", "set", inner, "name", "eth0", ns=ns)
    sh("ip", "addr", "add", f"{ip}/24", "dev", "eth0", ns=ns)
    sh("ip", "link", "set", "eth0", "up", ns=ns)
    sh("ip", "route", "add", "default", "via", HEAD, ns=ns)  # dask finds its own address by the route
    if rate != "none":  # both ends: a byte from one host to another crosses two limited links
        sh("tc", "qdisc", "add", "dev", outer, "root", *qdisc(rate))
        sh("tc", "qdisc", "add", "dev", "eth0", "root", *qdisc(rate), ns=ns)
    folder = directory / ns
    folder.mkdir(parents=True, exist_ok=True)
    if keys_from is not None:  # one host key and one client key for all hosts
        for key in (keys_from.host_key, keys_from.client_key):
            for path in (key, Path(f"{key}.pub")):
                shutil.copy(path, folder / path.name)
        shutil.copy(keys_from.dir / "authorized_keys", folder / "authorized_keys")
    hidden = [DATA_DIR, Path.home() / ".cache"]
    server = SSHServer(folder, host=ip, port=22,
                       prefix=("ip", "netns", "exec", ns, *_hidden([p for p in hidden if p.is_dir()])))
    server.start()
    return Host(ns, ip, outer, server)


@contextlib.contextmanager
def hosts(directory, n: int = 3, rate: str = RATE):
    """``with hosts(tmp_path) as h:`` ... ``h.addresses``, ``h.ssh_flags()``: ``n`` test hosts,
    all removed on the way out, whatever happened (and any a killed run left, on the way in);
    ``h.left_behind`` then lists what was still there after (:func:`leftovers`, read before
    another run may start its hosts). A concurrent run's hosts are waited for, never removed."""
    reason = why_not()
    if reason:
        raise RuntimeError(reason)
    with _lock(LOCK_SECONDS):
        with _each_host(directory, n, rate) as made:
            yield made
        made.left_behind = leftovers()  # still holding the lock: no other run's hosts yet


@contextlib.contextmanager
def _each_host(directory, n: int, rate: str):
    """The hosts of :func:`hosts`, made and removed; ``LOCK`` is held."""
    stale = down()
    if stale:
        print(f"removed what an earlier run left: {', '.join(stale)}", file=sys.stderr)
    directory = Path(directory)
    made: list[Host] = []
    try:
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{HEAD}/24", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for i in range(1, n + 1):
            made.append(_up_host(i, rate, directory, made[0].server if made else None))
        first = made[0].server
        pub = Path(f"{first.host_key}.pub").read_text().split()
        known = directory / "known_hosts"
        known.write_text(f"{','.join(h.address for h in made)} {pub[0]} {pub[1]}\n")
        key = directory / first.client_key.name
        shutil.copy(first.client_key, key)
        (directory / "hosts").write_text("".join(f"{h.address}\n" for h in made))  # the first runs the scheduler
        yield Hosts(made, key, known, first.user)
    finally:
        for host in made:
            host.server.stop()
        down()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("directory", nargs="?", default="/tmp/ppth", help="keys and sshd files (up)")
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--rate", default=RATE, help="each link's rate: 1gbit, 100mbit, or none")
    args = parser.parse_args(argv)
    if args.action == "down":
        try:
            with _lock(0.0):
                removed = down()
        except RuntimeError as exc:
            print(f"{exc}: not removed (stop that run first)", file=sys.stderr)
            return 1
        print("removed: " + (", ".join(removed) or "nothing"))
        return 0
    with contextlib.ExitStack() as stack:
        h = stack.enter_context(hosts(args.directory, args.hosts, args.rate))
        for host in h.hosts:
            print(f"{host.name}  {host.address}  sshd pid {host.server.proc.pid}")
        print(f"head       {HEAD}")
        print("ssh flags  " + " ".join(h.ssh_flags()))
        print("Ctrl-C removes them.", flush=True)
        try:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
