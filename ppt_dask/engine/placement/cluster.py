"""Connect to a Dask cluster, or start a local one laid out for training.

The layout: one single-threaded worker process per core, BLAS limited
to that thread, so workers do not fight over cores. Workers that ppt_dask starts also get
glibc malloc settings that keep the hot loop from returning memory to the system after
every mini-batch (the nanny's default ``MALLOC_TRIM_THRESHOLD_=65536`` made mini-batch
numpy training about 2.5x slower when measured). On clusters that ppt_dask does not start
the round loops set what they need themselves, for their duration
(:mod:`ppt_dask.engine.loopenv`); :func:`worker_report` shows each worker's settings.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re

import dask
from distributed import Client, LocalCluster, WorkerPlugin

from ppt_dask.core.validation import check_int_at_least
from ppt_dask.engine import interrupt, loopenv
from ppt_dask.engine.placement.security import CERT_FILES as CERT_FILES  # noqa: F401 (named here before)
from ppt_dask.engine.placement.security import TLS_SCHEMES, local_security, resolve_security
from ppt_dask.engine.placement.security import tls_security as tls_security
from ppt_dask.engine.wire import messages, probe

logger = logging.getLogger(__name__)

# The scheduler preload that adds the ppt_dask page to the dashboard.
DASHBOARD_PRELOAD = "ppt_dask.observe.dashboard"


def preloads(preload=True) -> list[str]:
    """The scheduler preload modules: ``True`` means the dashboard page when it is installed."""
    if preload is True:
        try:
            found = importlib.util.find_spec(DASHBOARD_PRELOAD) is not None
        except ImportError:
            found = False
        if not found:
            logger.info("%s is not installed: the scheduler starts without the ppt_dask page",
                        DASHBOARD_PRELOAD)
        return [DASHBOARD_PRELOAD] if found else []
    if not preload:
        return []
    return [preload] if isinstance(preload, str) else list(preload)


# Environment of the worker processes ppt_dask starts (set before the process spawns).
WORKER_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    # A large trim threshold and a fixed mmap threshold (the largest glibc accepts) keep
    # freed mini-batch buffers in the heap for reuse instead of unmapping them each time.
    "MALLOC_TRIM_THRESHOLD_": str(loopenv.LOOP_MALLOC["trim_threshold"]),
    "MALLOC_MMAP_THRESHOLD_": str(loopenv.LOOP_MALLOC["mmap_threshold"]),
}

# The variables that set a worker's BLAS and OpenMP (PyTorch's) threads: threads_per_worker.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# Tasks pinned to a worker that is gone fail after this long instead of waiting forever.
NO_WORKERS_TIMEOUT = "60s"

# The timers of the processes a LocalCluster of ppt_dask's runs. Distributed's defaults sample
# every running task's stack every 10 ms for the dashboard's Profile page and tick each event
# loop every 20 ms: with a streamed round's loop running in every worker, that cost each worker
# 0.6-0.8 ms of CPU a round at 8 workers on 2 cores (a round of MNIST block 1000 is 12-14 ms
# there), where the loops need the cores. A 100 ms sample still fills the Profile page (ten
# samples a cycle, not a hundred). Every server (the scheduler, each nanny, each worker) also
# ticks its event loop, samples its process (the system monitor) and its memory on timers of
# its own: an idle LocalCluster cost the head's process (scheduler, nannies, client) 22 ms of
# CPU a second at 2 workers and 84 ms at 16 with distributed's timers, 8 and 28 ms with these
# (graphs/round_cpu.py measures the CPU a round). A tick a second still catches a stalled event
# loop (tick.limit, 3 s, is as it was); the dashboard's System page samples every 2 s.
QUIET_TIMERS = {  # key: (ours, distributed's default)
    "distributed.worker.profile.interval": ("100ms", "10ms"),
    "distributed.admin.tick.interval": ("1s", "20ms"),
    "distributed.admin.system-monitor.interval": ("2s", "500ms"),
    "distributed.worker.memory.monitor-interval": ("1s", "100ms"),
}


def quiet_timers() -> dict:
    """:data:`ppt_dask.engine.placement.cluster.QUIET_TIMERS` where the configuration holds
    distributed's default (a value the user set stays)."""
    return {key: ours for key, (ours, default) in QUIET_TIMERS.items() if dask.config.get(key, default) == default}

_ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx|ws|wss)://[^/\s]+$")

def check_address(address: str) -> str:
    """Reject what is not a Dask scheduler address, before any network work."""
    if not isinstance(address, str) or not address:
        raise ValueError(f"scheduler address must be a non-empty string, got {address!r}")
    if "://" not in address:
        address = "tcp://" + address
    if not _ADDRESS.match(address):
        raise ValueError(
            f"bad scheduler address {address!r}: expected PROTOCOL://HOST:PORT with "
            "PROTOCOL one of tcp, tls, inproc, ucx, ws, wss (for example tls://host:8786)"
        )
    return address


def connect(
    address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    processes: bool = True,
    dashboard_address: str | None = "127.0.0.1:0",
    security=None,
    timeout: float = 10.0,
    batch_interval: float | None = messages.INTERVAL,
    set_as_default: bool = True,
    **cluster_kwargs,
) -> Client:
    """A Dask client: to the scheduler at ``address``, or to a new LocalCluster.

    Parameters
    ----------
    address : str, optional
        ``tcp://host:8786``, ``tls://host:8786`` ... When None, start a LocalCluster of
        ``n_workers`` worker processes. Its workers sample running tasks for the
        dashboard's Profile page every 100 ms and tick their event loops every 100 ms
        (distributed: 10 and 20 ms; :data:`ppt_dask.engine.placement.cluster.QUIET_TIMERS`); a ``dask.config`` value the
        caller sets for either wins.
    n_workers : int, optional
        The LocalCluster's workers (default: one per core). Not with ``address``.
    threads_per_worker : int
        Threads of each of the LocalCluster's workers, and as many BLAS and OpenMP threads
        (``OMP_NUM_THREADS`` and the like, set in this process too, where Dask's nanny
        would otherwise take them from): a :class:`ppt_dask.TorchNet` there computes with
        them.
    processes : bool
        Workers as processes (the default, what ppt_dask is measured with), or as threads
        of this process.
    dashboard_address : str or None
        Where the LocalCluster's dashboard listens (None: a free port on 127.0.0.1);
        localhost unless asked otherwise.
    security : distributed.Security, path or bool, optional
        TLS settings: a ``Security``, or a directory made by ``deploy/make_certs.py`` (its CA
        and client certificate); None uses the dask configuration (``distributed.comm.tls``).
        A LocalCluster of worker processes started here uses TLS by default, with credentials
        made for it alone (``placement.security.local_security``: another local user's client
        is refused);
        ``security=False`` starts it on plain tcp, open to every local process.
    set_as_default : bool
        Whether the client becomes the default one (Dask's computations without a client
        named go to it); False for a client kept apart, as the estimator's shared cluster is.
    timeout : float
        Seconds to wait for the scheduler before raising ``OSError`` (a ``tcp://`` address
        that does not answer like a Dask scheduler, an HTTP port for one, is named as such).
    batch_interval : float or None
        Seconds between the batches of small messages of scheduler, workers and this
        client (:func:`ppt_dask.engine.wire.messages.fast_messages`; default 0, send
        at once: a round of tiny compute takes about half the time); None keeps
        distributed's timers.
    **cluster_kwargs
        Further arguments of ``distributed.LocalCluster`` (``memory_limit=`` ...).

    Returns
    -------
    distributed.Client
        The client closes the LocalCluster it started when the client is closed.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)        # a LocalCluster on this machine
    >>> len(ppt.cluster.worker_addresses(client))
    2
    >>> client.close()                           # the LocalCluster closes with it

    A cluster started elsewhere, with TLS (``deploy/make_certs.py`` made the folder):

    >>> client = ppt.connect("tls://node1:8786", security="~/ppt-certs")  # doctest: +SKIP
    """
    if address is not None:
        address = check_address(address)
        security = resolve_security(security, address)
        probe.check_scheduler(address, timeout)  # an HTTP port would keep the Client waiting in silence
        try:
            client = Client(address, timeout=f"{timeout}s", security=security, set_as_default=set_as_default)
        except (OSError, TimeoutError) as exc:
            hint = ""  # say what to check when TLS is involved
            if address.split("://", 1)[0] in TLS_SCHEMES:
                hint = (" (TLS: is the client certificate signed by the cluster's CA, and the CA file "
                        "the one that signed the scheduler's? see deploy/make_certs.py)")
            elif address.startswith("tcp://"):
                hint = " (if the scheduler uses TLS, connect to tls://... with its certificates)"
            raise OSError(f"cannot reach the Dask scheduler at {address!r} within {timeout} s: {exc}{hint}") from exc
        if batch_interval is not None:
            messages.fast_messages(client, batch_interval)
        return client
    if batch_interval is not None:  # checked before a cluster starts
        messages.check_interval(batch_interval)
    security = local_security(resolve_security(security), processes, cluster_kwargs)
    n_workers = n_workers or os.cpu_count() or 1
    n_workers = check_int_at_least("n_workers", n_workers, 1)
    threads_per_worker = check_int_at_least("threads_per_worker", threads_per_worker, 1)
    env = dict(WORKER_ENV)
    for var in THREAD_VARS:
        env[var] = str(threads_per_worker)
    # Dask's nanny takes a variable this process already has over the configured one (and writes
    # its own values here when it starts a worker): after a first cluster of other threads, or
    # with OMP_NUM_THREADS in the shell, the workers got that count instead of threads_per_worker
    os.environ.update({var: env[var] for var in THREAD_VARS})
    config = {
        "distributed.scheduler.no-workers-timeout": NO_WORKERS_TIMEOUT,
        "distributed.nanny.pre-spawn-environ": env,
        **quiet_timers(),
    }
    # the scheduler preloads the /ppt page and its collector
    scheduler_kwargs = dict(cluster_kwargs.pop("scheduler_kwargs", None) or {})
    scheduler_kwargs["preload"] = [*scheduler_kwargs.get("preload", ()), "ppt_dask.observe.dashboard"]
    # the workers ignore Ctrl-C: it stops the head, which closes them (ppt_dask.engine.interrupt)
    with dask.config.set(config), interrupt.sigint_ignored():
        cluster = LocalCluster(
            n_workers=int(n_workers),
            threads_per_worker=int(threads_per_worker),
            processes=processes,
            # None would mean distributed's default, port 8787 on every interface: keep it local
            dashboard_address=dashboard_address or "127.0.0.1:0",
            security=security,
            **({"host": "127.0.0.1"} if processes else {}),  # threads talk in-process
            scheduler_kwargs=scheduler_kwargs,
            **cluster_kwargs,
        )
    client = OwnClient(cluster, security=security, set_as_default=set_as_default)
    client._ppt_owns_cluster = True  # close() of the client also closes the cluster
    if processes:  # their scheduler is in this process: a failed heartbeat means we are closing
        client.register_plugin(_QuietHeartbeats())
    if batch_interval is not None:
        messages.fast_messages(client, batch_interval)
    return client


class OwnClient(Client):
    """The client of a LocalCluster that :func:`connect` started: its :meth:`close` closes
    that cluster too (its scheduler and worker processes), as a client started without an
    address does. ``Client(cluster).close()`` leaves the cluster running; in a notebook,
    each ``connect`` then left its worker processes behind."""

    def close(self, *args, **kwargs):
        """Close this client, then the LocalCluster it was started with (its arguments are
        ``distributed.Client.close``'s)."""
        cluster = self.cluster
        try:
            return super().close(*args, **kwargs)
        finally:
            status = getattr(getattr(cluster, "status", None), "name", "")
            if cluster is not None and status not in ("closed", "closing"):
                cluster.close()


def scheduler_identity(client: Client) -> dict:
    """The scheduler's identity with every worker's entry, asked of the scheduler now.

    ``Client.scheduler_info()`` returns the client's cached identity: it refreshes the
    cache with every worker and then reads it, but the client's periodic refresh
    (``distributed.client.scheduler-info-interval``) stores identities *without*
    per-worker entries, and when it lands between that refresh and the read the caller
    sees ``"workers": {}`` while every worker is alive. This call returns the
    scheduler's answer itself and never touches the cache.
    """
    return client.sync(client.scheduler.identity, n_workers=-1)


def workers(client: Client) -> dict[str, dict]:
    """Per worker address, the scheduler's record of it (name, resources, status ...)."""
    return dict(scheduler_identity(client)["workers"])


def worker_addresses(client: Client) -> list[str]:
    """The addresses of the workers the scheduler knows now, sorted."""
    return sorted(workers(client))


def page_url(client: Client) -> str | None:
    """Where the ppt_dask page of the client's dashboard is (None without a dashboard).

    Schedulers that ppt_dask starts have it; start others with
    ``dask scheduler --preload ppt_dask.observe.dashboard`` (diagnostics).
    """
    services = scheduler_identity(client).get("services", {})
    link = client.dashboard_link if services.get("dashboard") else None
    return link.rsplit("/", 1)[0] + "/ppt" if link else None


class _QuietHeartbeats(WorkerPlugin):
    """:func:`ppt_dask.engine.interrupt.quiet_heartbeats` on every worker, now and after a restart."""

    name = "ppt-quiet-heartbeats"

    def setup(self, worker) -> None:
        interrupt.quiet_heartbeats()


def close(client: Client) -> None:
    """Close the client, and the LocalCluster too when :func:`connect` started it."""
    cluster = client.cluster if getattr(client, "_ppt_owns_cluster", False) else None
    client.close()
    if cluster is not None:
        cluster.close()


def _worker_settings() -> dict:
    from threadpoolctl import threadpool_info

    blas = [
        {"api": p.get("internal_api"), "threads": p.get("num_threads")}
        for p in threadpool_info()
        if p.get("user_api") == "blas"
    ]
    found = loopenv.malloc_found(os.environ)
    return {
        "blas": blas,
        "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "malloc": found,  # every variable that fixes glibc's thresholds, as found
        "loop_malloc": {name: new for name, (_old, new) in loopenv.malloc_changes(found).items()},
        "probe_mmapped": loopenv.probe_mmapped(),  # a step's array mmapped (and unmapped) now?
        "last_loop": loopenv.last_report(),
    }


def worker_report(client: Client) -> dict:
    """Per worker: BLAS thread pools (threadpoolctl), the malloc and OMP settings of its
    environment, the malloc thresholds a round loop raises there for its duration
    (``loop_malloc``, :mod:`ppt_dask.engine.loopenv`; empty where nothing needs it), and what
    the last loop that ran there found and set (``last_loop``; None before any)."""
    return client.run(_worker_settings)
