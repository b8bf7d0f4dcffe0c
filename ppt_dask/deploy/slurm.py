"""Start a ppt_dask cluster on Slurm: the scheduler here, each worker a batch job, with TLS.

    from ppt_dask.deploy import slurm as slurmcluster
    cluster, client = slurmcluster.start(jobs=4, cores=2, memory="4GB", certs_dir="~/ppt-certs",
                                         partition="batch")
    ...                                   # ppt.enter_data(client, ...), ppt.train(...)
    slurmcluster.stop(cluster, client)

or from a shell on the login node (the same, in the foreground until Ctrl-C):

    ppt-dask cluster slurm --jobs 4 --cores 2 --memory 4GB --certs ~/ppt-certs --partition batch

It builds on ``dask_jobqueue.SLURMCluster`` (the ``slurm`` extra): the scheduler runs in this
process, and each of ``jobs`` batch jobs (``sbatch``) runs ``processes`` single-threaded
worker processes on ``cores`` cores (one per core by default, the layout the trainer wants).
The TLS story is the ssh one (:mod:`ppt_dask.deploy.ssh`): a directory made by
``deploy/make_certs.py``, on a file system the compute nodes share; the job scripts name
the *paths* of the worker certificate and key, never their contents. Workers start with
BLAS limited to one thread (:data:`ppt_dask.engine.placement.cluster.WORKER_ENV`) and exit when the scheduler
is gone for ``death_timeout``, so a lost login session leaves no job running for long;
:func:`stop` cancels the jobs (``scancel``).

A worker job that ends mid-run (``scancel``, a preemption, the wall time) is a lost worker
to the trainer: it rolls back to the last kept round and goes on with the others.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import sys

from ppt_dask.core.validation import check_int_at_least
from ppt_dask.engine.placement.addresses import DEFAULT_DASHBOARD_ADDRESS
from ppt_dask.engine.placement.cluster import WORKER_ENV, preloads, tls_security

logger = logging.getLogger(__name__)

INSTALL_HINT = "ppt-dask cluster slurm needs dask-jobqueue: pip install 'ppt_dask[slurm]'"
MEMORY = re.compile(r"^\d+(\.\d+)?\s*(B|[KMGT]i?B)$", re.IGNORECASE)
WALLTIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")


def _check(jobs, cores, memory, processes, walltime, timeout) -> None:
    """The arguments Slurm would refuse only once a job is submitted, refused here first."""
    for name, value in (("jobs", jobs), ("cores", cores), ("processes", processes)):
        check_int_at_least(name, value, 1)
    if processes > cores:
        raise ValueError(f"processes ({processes}) must not exceed cores ({cores}): one core per worker")
    if not isinstance(memory, str) or not MEMORY.match(memory.strip()):
        raise ValueError(f"memory must be a size such as 2GB or 500MiB, got {memory!r}")
    if walltime is not None and not WALLTIME.match(str(walltime)):
        raise ValueError(f"walltime must be Slurm's [D-]HH:MM:SS (e.g. 01:00:00), got {walltime!r}")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


def start(jobs: int, *, cores: int = 1, memory: str = "2GB", processes: int | None = None,
          certs_dir=None, partition: str | None = None, account: str | None = None,
          walltime: str | None = None, interface: str | None = None, python: str | None = None,
          job_directives=(), log_directory=None, scheduler_port: int = 0,
          dashboard_address: str | None = DEFAULT_DASHBOARD_ADDRESS, preload=True,
          death_timeout: str = "60s", wait: bool = True, timeout: float = 300.0):
    """Submit ``jobs`` worker jobs to Slurm and wait for their workers; return ``(cluster, client)``.

    Parameters
    ----------
    jobs : int
        Batch jobs to submit, each one allocation of ``cores`` cores and ``memory``.
    cores : int
        Cores per job (``--cpus-per-task``).
    memory : str
        Memory per job, e.g. ``"4GB"`` (``--mem``); shared by the job's workers.
    processes : int or None
        Worker processes per job, one thread each; None: ``cores`` (one per core).
    certs_dir : path
        A directory made by ``deploy/make_certs.py`` on a file system the nodes share (TLS is
        then required on every connection). None: no TLS, for a trusted network only.
    partition, account, walltime : str, optional
        ``--partition``, ``--account`` and ``--time`` of the jobs (default: the site's partition
        and account; dask-jobqueue's wall time, 00:30:00: set it for longer runs).
    interface : str, optional
        Network interface the scheduler and workers listen on (``ib0``, ``eth0``; ``lo`` on
        one machine). Default: the address the host name resolves to.
    python : str, optional
        The Python with ppt_dask on the compute nodes; default: this interpreter's path.
    job_directives : sequence of str
        More ``#SBATCH`` lines, e.g. ``["--qos=short"]``.
    log_directory : path, optional
        Where the jobs' output goes (default: the current directory's ``slurm-*.out``).
    scheduler_port : int
        The scheduler's port (0: any free one).
    dashboard_address : str or None
        Where the dashboard listens (default 127.0.0.1:8787; None for none).
    preload : bool, str or list of str
        Scheduler preload modules; True: the ppt_dask dashboard page.
    death_timeout : str
        A worker exits (and its job ends) when the scheduler is gone this long.
    wait : bool
        Wait for all ``jobs * processes`` workers (up to ``timeout`` s; a queue may hold the
        jobs for longer: then pass ``wait=False`` and ``client.wait_for_workers`` later).

    Returns
    -------
    (dask_jobqueue.SLURMCluster, distributed.Client)
        The cluster (the scheduler here, the workers in jobs) and a client of it; give both
        to :func:`stop`.

    Examples
    --------
    From a login node (``deploy/README.md``, section 9; its test runs the same on a
    one-node Slurm):

    >>> from ppt_dask.deploy import slurm as slurmcluster
    >>> cluster, client = slurmcluster.start(2, cores=1, memory="1GB", certs_dir="~/ppt-certs",
    ...                                      partition="batch")  # doctest: +SKIP
    >>> slurmcluster.stop(cluster, client)                       # doctest: +SKIP
    """
    processes = cores if processes is None else processes
    _check(jobs, cores, memory, processes, walltime, timeout)
    security = tls_security(certs_dir) if certs_dir is not None else None
    if importlib.util.find_spec("dask_jobqueue") is None:
        raise RuntimeError(INSTALL_HINT)
    from dask_jobqueue import SLURMCluster
    from distributed import Client

    prologue = [f"export {k}={v}" for k, v in WORKER_ENV.items()]
    cluster = SLURMCluster(
        cores=cores, processes=processes, memory=memory, queue=partition, account=account,
        walltime=walltime, interface=interface, python=python or sys.executable,
        job_extra_directives=list(job_directives), job_script_prologue=prologue,
        log_directory=None if log_directory is None else str(log_directory),
        security=security, protocol="tls://" if security else None, death_timeout=death_timeout,
        # without a dashboard the scheduler's HTTP server (health, metrics) takes any free port
        scheduler_options={"port": scheduler_port, "dashboard_address": dashboard_address or "127.0.0.1:0",
                           "dashboard": dashboard_address is not None, "preload": preloads(preload)},
        job_name="ppt-dask-worker")
    client = None
    try:
        client = Client(cluster, security=security)
        cluster.scale(jobs=jobs)
        if wait:
            client.wait_for_workers(jobs * processes, timeout=timeout)
    except BaseException as exc:
        stop(cluster, client)
        if isinstance(exc, TimeoutError):
            raise RuntimeError(f"{jobs * processes} workers did not all start within {timeout:g} s "
                               "(the jobs may still be queued: squeue -u $USER)") from None
        raise
    return cluster, client


def job_of(cluster, worker_name) -> str | None:
    """The Slurm job id a worker runs in (worker names are the job's, plus ``-i`` for several)."""
    for name, job in cluster.workers.items():
        if str(worker_name) == str(name) or str(worker_name).startswith(f"{name}-"):
            return getattr(job, "job_id", None)
    return None


def stop(cluster, client=None, timeout: float = 30.0) -> None:
    """Close the client, then the cluster: every worker job is cancelled (``scancel``).

    Parameters
    ----------
    cluster : dask_jobqueue.SLURMCluster
        From :func:`start`.
    client : distributed.Client, optional
        From :func:`start`.
    timeout : float
        Seconds to wait for the client to close.
    """
    for what, thing in (("client", client), ("cluster", cluster)):
        if thing is None:
            continue
        try:
            thing.close(timeout=timeout) if what == "client" else thing.close()
        except (OSError, TimeoutError, RuntimeError) as exc:
            logger.warning("closing the %s: %s", what, exc)
