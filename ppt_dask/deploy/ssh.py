"""Start a ppt_dask cluster on machines reached over ssh, with TLS.

    from ppt_dask.deploy import ssh as sshcluster
    cluster, client = sshcluster.start(["node1", "node2", "node3"], certs_dir="~/ppt-certs")
    ...                                   # ppt.enter_data(client, ...), ppt.train(...)
    sshcluster.stop(cluster, client)

or from a shell (the same, in the foreground until Ctrl-C):

    ppt-dask cluster ssh hosts.txt --certs ~/ppt-certs

The first host runs the scheduler (with the ppt_dask dashboard page preloaded when
:data:`ppt_dask.engine.placement.cluster.DASHBOARD_PRELOAD` is installed); every host runs ``n_workers`` single-threaded
worker processes (``workers_on_scheduler=False`` keeps the first host for the scheduler).
It builds on :func:`distributed.deploy.ssh.SSHCluster` (``asyncssh``, from the ``deploy``
extra), which starts each remote process with the client's dask configuration. That is how
the remote processes get their settings here:

* TLS on every connection (``distributed.comm.require-encryption``), with the certificate
  *paths* of a directory made by ``deploy/make_certs.py``. Key material never goes into the
  configuration, which travels in the remote processes' environment: the files must already
  be on the hosts, at ``remote_certs_dir`` (by default the same path as ``certs_dir``).
* Worker processes with BLAS limited to their threads and a large malloc trim threshold
  (:data:`ppt_dask.engine.placement.cluster.WORKER_ENV`), set before the worker process spawns.
* Safety nets: the scheduler and the nannies close when their ssh session ends (the
  machine that started them died or lost the network), a worker whose scheduler is gone
  for ``death_timeout`` exits, and the scheduler exits after ``idle_timeout`` without any
  task.

The dashboard listens on 127.0.0.1 of the scheduler host unless ``dashboard_address`` says
otherwise: reach it through ``ssh -L 8787:127.0.0.1:8787 SCHEDULER_HOST``.
"""

from __future__ import annotations

import collections
import copy
import logging
import os
import threading
from pathlib import Path

import dask

from ppt_dask.core.validation import check_int_at_least
from ppt_dask.deploy.preflight import read_hostfile as read_hostfile  # the hosts named in a file
from ppt_dask.engine.placement.addresses import DEFAULT_DASHBOARD_ADDRESS, DEFAULT_SCHEDULER_PORT, LOOPBACK
from ppt_dask.engine.placement.cluster import CERT_FILES, NO_WORKERS_TIMEOUT, WORKER_ENV, preloads, tls_security

logger = logging.getLogger(__name__)


def _path_only(value, what: str) -> str:
    if not value:
        raise ValueError(f"the TLS settings have no {what}: give certs_dir (made by deploy/make_certs.py)")
    if "\n" in str(value):
        raise ValueError(f"{what} is given as PEM text: SSHCluster would put it in the remote "
                         "processes' environment; give file paths instead (certs_dir=...)")
    return str(value)


def remote_tls_config(security, remote_certs_dir=None) -> dict:
    """The ``distributed.comm`` settings the remote processes start with (paths only).

    With ``remote_certs_dir`` the files are those of ``deploy/make_certs.py`` in that folder
    on the hosts; otherwise the scheduler and worker paths of ``security``. Code that opens a
    client on a worker uses the worker's certificate (the client key stays with the user).
    """
    if remote_certs_dir is not None:
        base = str(remote_certs_dir).rstrip("/")
        ca = f"{base}/{CERT_FILES['ca']}"
        sched = tuple(f"{base}/{n}" for n in CERT_FILES["scheduler"])
        work = tuple(f"{base}/{n}" for n in CERT_FILES["worker"])
    else:
        ca = _path_only(security.tls_ca_file, "CA file")
        sched = (_path_only(security.tls_scheduler_cert, "scheduler certificate"),
                 _path_only(security.tls_scheduler_key or security.tls_scheduler_cert, "scheduler key"))
        work = (_path_only(security.tls_worker_cert, "worker certificate"),
                _path_only(security.tls_worker_key or security.tls_worker_cert, "worker key"))
    return {
        "distributed.comm.require-encryption": True,
        "distributed.comm.default-scheme": "tls",
        "distributed.comm.tls.ca-file": ca,
        "distributed.comm.tls.scheduler.cert": sched[0],
        "distributed.comm.tls.scheduler.key": sched[1],
        "distributed.comm.tls.worker.cert": work[0],
        "distributed.comm.tls.worker.key": work[1],
        "distributed.comm.tls.client.cert": work[0],
        "distributed.comm.tls.client.key": work[1],
    }


class _RemoteOutput(logging.Handler):
    """The last lines the remote processes wrote while starting (for error messages)."""

    def __init__(self, lines: int = 15):
        super().__init__(logging.DEBUG)
        self.lines = collections.deque(maxlen=lines)

    def emit(self, record) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # pragma: no cover - never let logging break the start
            pass

    def tail(self) -> str:
        return ("\nLast lines from the hosts:\n  " + "\n  ".join(self.lines)) if self.lines else ""


def start(
    hosts,
    *,
    certs_dir=None,
    security=None,
    remote_certs_dir=None,
    python: str | list[str] | None = None,
    n_workers: int = 1,
    threads_per_worker: int = 1,
    workers_on_scheduler: bool = True,
    scheduler_port: int = DEFAULT_SCHEDULER_PORT,
    dashboard_address: str | None = DEFAULT_DASHBOARD_ADDRESS,
    preload=True,
    listen_host: str | None = None,
    interface: str | None = None,
    worker_port: int | str | None = None,
    nanny_port: int | str | None = None,
    memory_limit: str | float | int = "auto",
    connect_options: dict | list[dict] | None = None,
    death_timeout: str | float | None = "60s",
    idle_timeout: str | float | None = "1h",
    watch_session: bool = True,
    timeout: float = 120.0,
):
    """Start a scheduler and workers over ssh with TLS; return ``(cluster, client)``.

    Parameters
    ----------
    hosts : list of str, or a path to a host file
        Machines reachable by ssh (host names or ``~/.ssh/config`` aliases). The scheduler
        runs on the first; workers on every one (on all but the first with
        ``workers_on_scheduler=False``).
    certs_dir : path
        A directory made by ``deploy/make_certs.py``: this process connects with its client
        certificate. The hosts need ``ca.pem`` and the scheduler and worker certificates and
        keys at ``remote_certs_dir`` (default: the same absolute path).
    security : distributed.Security, optional
        Instead of ``certs_dir``: TLS settings with *file paths* for every role. None and no
        ``certs_dir`` means the ``distributed.comm.tls`` settings of the dask configuration.
    python : str or list of str
        The Python with ppt_dask installed on the hosts (one per host in a list); default:
        this process's interpreter path.
    n_workers, threads_per_worker : int
        Worker processes per host and threads per worker (BLAS limited to the same number).
    scheduler_port : int
        The scheduler's TLS port (0: any free port).
    dashboard_address : str or None
        Where the dashboard listens on the scheduler host (127.0.0.1:8787; ":8787" for every
        interface; None for none).
    preload : bool, str or list of str
        Scheduler preload modules; True: the ppt_dask dashboard page when it is installed.
    listen_host, interface : str, optional
        The address (or network interface) the scheduler and workers listen on. Default: all
        interfaces, or 127.0.0.1 when every host is the local machine.
    worker_port, nanny_port : int or "low:high"
        Fixed ports or port ranges for the firewall; default: any free port.
    connect_options : dict or list of dict
        Keywords of :func:`asyncssh.connect` (``port``, ``username``, ``client_keys``,
        ``known_hosts`` ...), one dict for all hosts or one per host.
    death_timeout, idle_timeout : str, float or None
        A worker exits when its scheduler is gone this long; the scheduler exits after this
        long without any task. None turns the net off.
    watch_session : bool
        The scheduler and the nannies close when their ssh session ends, so a cluster does
        not outlive the process that started it (see :func:`ppt_dask.deploy.ssh.dask_setup`).
    timeout : float
        Seconds to wait for the workers to connect.

    Returns
    -------
    (distributed.SSHCluster, distributed.Client)
        The cluster, and a client of it with the TLS settings; give both to :func:`stop`.

    Raises
    ------
    RuntimeError
        Before any process starts: one line naming each host that gives no ssh answer
        (within ``min(timeout, 30)`` s) or whose Python cannot import ppt_dask
        (:mod:`ppt_dask.deploy.preflight`). Later, when SSHCluster fails: its error and the
        hosts' last lines.

    Examples
    --------
    On machines of your own (``deploy/README.md`` has the whole walk-through; its tests
    run these calls against a real sshd):

    >>> import ppt_dask as ppt
    >>> from ppt_dask.deploy import ssh as sshcluster
    >>> cluster, client = sshcluster.start(
    ...     "hosts.txt", certs_dir="~/ppt-certs", remote_certs_dir="/opt/ppt-dask/certs",
    ...     python="/opt/ppt-dask/venv/bin/python", n_workers=4)  # doctest: +SKIP
    >>> shards = ppt.enter_data(client, X, y, n_shards=12)       # doctest: +SKIP
    >>> sshcluster.stop(cluster, client)                           # doctest: +SKIP
    """
    if isinstance(hosts, (str, os.PathLike)):
        hosts = read_hostfile(hosts)
    hosts = [str(h) for h in hosts]
    if not hosts:
        raise ValueError("give at least one host")
    n_workers = check_int_at_least("n_workers", n_workers, 1)
    threads_per_worker = check_int_at_least("threads_per_worker", threads_per_worker, 1)
    worker_hosts = hosts if workers_on_scheduler else hosts[1:]
    if not worker_hosts:
        raise ValueError("no host left for workers: give more hosts or workers_on_scheduler=True")
    security, remote = _tls(certs_dir, security, remote_certs_dir)
    if listen_host is None and interface is None and set(hosts) <= LOOPBACK:
        listen_host = "127.0.0.1"
    where = {"host": listen_host} if listen_host else {"interface": interface} if interface else {}
    env = dict(WORKER_ENV)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads_per_worker)
    config = {**remote, "distributed.nanny.pre-spawn-environ": env,
              "distributed.scheduler.no-workers-timeout": NO_WORKERS_TIMEOUT}
    scheduler_options = {"port": int(scheduler_port), "protocol": "tls", **where,
                         "dashboard_address": dashboard_address, "dashboard": dashboard_address is not None,
                         "preload": [*preloads(preload), *([SESSION_WATCH] if watch_session else [])],
                         **({"idle_timeout": idle_timeout} if idle_timeout is not None else {})}
    worker_options = {"n_workers": n_workers, "nthreads": threads_per_worker, "protocol": "tls",
                      "memory_limit": memory_limit, **where}
    for name, value in (("preload_nanny", [SESSION_WATCH] if watch_session else None),
                        ("death_timeout", death_timeout), ("worker_port", worker_port), ("port", nanny_port)):
        if value is not None:
            worker_options[name] = value
    each_python = _per_process("python", python, hosts, workers_on_scheduler)  # lists' lengths checked here
    each_connect = _per_process("connect_options", connect_options, hosts, workers_on_scheduler)
    _preflight(hosts, python, connect_options, timeout)  # each host answers and imports ppt_dask, or is named
    cluster = _ssh_cluster(config, hosts, worker_hosts, each_connect, worker_options, scheduler_options,
                           each_python, security, remote)
    try:
        from distributed import Client

        client = Client(cluster, security=security, timeout=f"{timeout}s")
        client.wait_for_workers(len(worker_hosts) * n_workers, timeout=timeout)
    except BaseException:
        cluster.close()
        raise
    return cluster, client


def _preflight(hosts: list[str], python, connect_options, timeout: float) -> None:
    """Ask every host over ssh to import ppt_dask before any cluster process starts; one
    line names each host that does not answer or cannot (:mod:`ppt_dask.deploy.preflight`),
    and a warning each host whose ppt_dask is another version than this process's."""
    import sys
    import warnings

    from ppt_dask import __version__
    from ppt_dask.deploy.preflight import check_hosts

    try:
        versions = check_hosts(hosts, python or sys.executable, connect_options or {}, timeout=min(timeout, 30.0))
    except RuntimeError as exc:
        raise RuntimeError(f"the ssh cluster was not started: {exc}") from None
    other = {host: v for host, v in versions.items() if v != __version__}
    if other:
        warnings.warn("ppt_dask differs on the hosts: " + ", ".join(f"{h} has {v}" for h, v in other.items())
                      + f", this process {__version__}", RuntimeWarning, stacklevel=3)


def _tls(certs_dir, security, remote_certs_dir):
    """The head's TLS settings (encryption required) and the configuration the hosts get."""
    if certs_dir is not None and security is not None:
        raise ValueError("give certs_dir or security, not both")
    if certs_dir is not None:
        certs_dir = Path(certs_dir).expanduser().resolve()
        security = tls_security(certs_dir)
        if remote_certs_dir is None:
            remote_certs_dir = certs_dir
    elif security is None:
        from distributed import Security

        security = Security(require_encryption=True)
    if not security.tls_client_cert or not security.tls_ca_file:
        raise ValueError("TLS is on for ssh clusters: give certs_dir (made by deploy/make_certs.py), "
                         "security=Security(...) or distributed.comm.tls.* in the dask configuration")
    if not security.require_encryption:
        security = copy.copy(security)  # the caller's object stays as it was
        security.require_encryption = True
    return security, remote_tls_config(security, remote_certs_dir)


def _per_process(name: str, value, hosts: list, workers_on_scheduler: bool):
    """A per-host list (one per host) as SSHCluster takes it: the scheduler's, then one per
    worker host; anything else as it is."""
    if not isinstance(value, (list, tuple)):
        return value
    if len(value) != len(hosts):
        raise ValueError(f"{name}: one {'path' if name == 'python' else 'dict'} per host ({len(hosts)}), "
                         f"got {len(value)}")
    return [value[0], *(value if workers_on_scheduler else value[1:])]


def _ssh_cluster(config, hosts, worker_hosts, connect_options, worker_options, scheduler_options, python,
                 security, remote):
    """SSHCluster started with ``config``; its failure says what to check, with the hosts' stderr."""
    from distributed.deploy.ssh import SSHCluster

    from ppt_dask.deploy.preflight import import_asyncssh

    import_asyncssh()  # imported here first, its known warnings silenced; SSHCluster then finds it imported

    remote_output = _RemoteOutput()
    ssh_logger = logging.getLogger("distributed.deploy.ssh")  # where SSHCluster logs remote stderr
    ssh_logger.addHandler(remote_output)
    try:
        with dask.config.set(config):  # SSHCluster hands the configuration to the remote processes
            return SSHCluster([hosts[0], *worker_hosts], connect_options=connect_options or {},
                              worker_options=worker_options, scheduler_options=scheduler_options,
                              remote_python=python, security=security)
    except Exception as exc:
        raise RuntimeError(
            f"the ssh cluster on {hosts} did not start: {exc}. Check that ssh to each host works "
            "without a password, that the Python given (python=...) exists there with ppt_dask "
            f"installed, and that the certificates are at {remote['distributed.comm.tls.ca-file']!r} "
            "and beside it on every host." + remote_output.tail()) from exc
    finally:
        ssh_logger.removeHandler(remote_output)


def stop(cluster, client=None, timeout: float = 30.0) -> None:
    """Close the client, then the scheduler and the workers (each within ``timeout`` s).

    A scheduler that is already gone is not an error: there is nothing left to close.

    Parameters
    ----------
    cluster : distributed.SSHCluster
        From :func:`start`.
    client : distributed.Client, optional
        From :func:`start`.
    timeout : float
        Seconds to wait for each to close.
    """
    scheduler_gone = client is not None and client.status != "running"
    for what, thing in (("client", client), ("cluster", cluster)):
        if thing is None:
            continue
        try:
            thing.close(timeout=min(timeout, 3.0) if scheduler_gone and what == "cluster" else timeout)
        except (OSError, TimeoutError, RuntimeError) as exc:
            logger.warning("closing the %s: %s (the scheduler is probably gone already)", what, exc)


# -- the scheduler and the nannies leave with their ssh session -------------------------------

SESSION_WATCH = __name__  # preloaded on the scheduler and the nannies that start() launches


async def dask_setup(server) -> None:
    """Preload: close ``server`` when the ssh session that started it is gone.

    SSHCluster starts each remote process with the ssh channel as its standard input and
    never writes to it; the input ends when the session does (the cluster closed, or the
    machine that started it died or lost the network), and then the process closes. Nothing
    is armed when the standard input is not a pipe or a socket (a terminal, /dev/null).
    """
    import asyncio
    import stat

    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return
    loop = asyncio.get_running_loop()

    def close() -> None:
        logger.warning("the ssh session that started %s is gone: closing", type(server).__name__)
        asyncio.ensure_future(server.close(reason="ssh-session-closed"))

    def watch() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        try:
            loop.call_soon_threadsafe(close)
        except RuntimeError:  # the loop is already closed: the process is leaving anyway
            pass

    threading.Thread(target=watch, name="ppt-dask-ssh-session", daemon=True).start()
