"""``ppt-dask cluster ssh|slurm``: start a cluster from the command line and keep it until
Ctrl-C or SIGTERM (:mod:`ppt_dask.deploy.ssh`, :mod:`ppt_dask.deploy.slurm` do the work)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from ppt_dask.cli import paths
from ppt_dask.engine.placement.addresses import DEFAULT_DASHBOARD_ADDRESS, DEFAULT_SCHEDULER_PORT


def add_cluster_parser(subparsers) -> None:
    """Register ``ppt-dask cluster ssh`` and ``ppt-dask cluster slurm``."""
    c = subparsers.add_parser("cluster", help="start a cluster (over ssh or on Slurm, with TLS)")
    kinds = c.add_subparsers(dest="cluster_kind", required=True)
    add_ssh_parser(kinds)
    add_slurm_parser(kinds)


def cluster_command(args) -> int:
    return slurm_command(args) if args.cluster_kind == "slurm" else ssh_command(args)


def add_ssh_parser(kinds) -> None:
    """Register ``ppt-dask cluster ssh`` under ``ppt-dask cluster``."""
    s = kinds.add_parser("ssh", help="scheduler and workers over ssh, TLS on; runs until Ctrl-C",
                         description="Start a scheduler on the first host of HOSTFILE and workers on "
                                     "every host, with TLS, and keep them until Ctrl-C or SIGTERM.")
    s.add_argument("hostfile", help="host names, one per line (the first runs the scheduler)")
    s.add_argument("--certs", required=True, metavar="DIR", help="TLS directory made by deploy/make_certs.py")
    s.add_argument("--remote-certs", default=None, metavar="DIR",
                   help="where the same files are on the hosts (default: the --certs path)")
    s.add_argument("--workers-per-host", type=int, default=1, help="worker processes per host (default 1)")
    s.add_argument("--threads-per-worker", type=int, default=1)
    s.add_argument("--no-workers-on-scheduler", action="store_true", help="keep the first host for the scheduler")
    s.add_argument("--python", default=None, help="Python on the hosts (default: this interpreter's path)")
    s.add_argument("--scheduler-port", type=int, default=DEFAULT_SCHEDULER_PORT)
    s.add_argument("--dashboard-address", default=DEFAULT_DASHBOARD_ADDRESS,
                   help="on the scheduler host (default 127.0.0.1:8787; ':8787' for every interface)")
    s.add_argument("--no-preload", action="store_true", help="start the scheduler without the ppt_dask page")
    s.add_argument("--listen-host", default=None, help="address the scheduler and workers listen on")
    s.add_argument("--interface", default=None, help="network interface to listen on (e.g. eth1)")
    s.add_argument("--worker-port", default=None, help="port or range low:high for workers (firewalls)")
    s.add_argument("--nanny-port", default=None, help="port or range low:high for nannies (firewalls)")
    s.add_argument("--ssh-port", type=int, default=None)
    s.add_argument("--ssh-user", default=None)
    s.add_argument("--ssh-key", default=None, help="private key for ssh (default: ssh agent and ~/.ssh)")
    s.add_argument("--known-hosts", default=None, help="known_hosts file (default: ~/.ssh/known_hosts)")
    s.add_argument("--idle-timeout", default="1h", help="scheduler exits after this long without tasks ('none': never)")
    s.add_argument("--death-timeout", default="60s", help="workers exit when the scheduler is gone this long")
    s.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the workers")
    s.add_argument("--verbose", action="store_true", help="show what the remote processes print while starting")


def _none(text):
    return None if text is None or str(text).lower() in ("none", "0", "") else text


def ssh_command(args) -> int:
    from ppt_dask.deploy import ssh  # dask: only when a cluster starts
    from ppt_dask.engine import interrupt
    from ppt_dask.engine.placement.cluster import preloads, scheduler_identity

    connect = {}
    if args.ssh_port is not None:
        connect["port"] = args.ssh_port
    if args.ssh_user is not None:
        connect["username"] = args.ssh_user
    if args.ssh_key is not None:
        connect["client_keys"] = [str(Path(args.ssh_key).expanduser())]
    if args.known_hosts is not None:
        connect["known_hosts"] = str(Path(args.known_hosts).expanduser())
    paths.input_file("HOSTFILE", args.hostfile, "a file of host names, one per line")
    paths.input_folder("--certs", args.certs, "the TLS folder made by deploy/make_certs.py")
    certs = Path(args.certs).expanduser().resolve()
    hosts = ssh.read_hostfile(args.hostfile)
    if not args.verbose:  # the remote start-up lines; an error message repeats the last ones
        logging.getLogger("distributed.deploy.ssh").propagate = False
    try:
        cluster, client = ssh.start(
            hosts, certs_dir=certs, remote_certs_dir=args.remote_certs, python=args.python,
            n_workers=args.workers_per_host, threads_per_worker=args.threads_per_worker,
            workers_on_scheduler=not args.no_workers_on_scheduler, scheduler_port=args.scheduler_port,
            dashboard_address=_none(args.dashboard_address), preload=not args.no_preload,
            listen_host=args.listen_host, interface=args.interface, worker_port=args.worker_port,
            nanny_port=args.nanny_port, connect_options=connect, death_timeout=_none(args.death_timeout),
            idle_timeout=_none(args.idle_timeout), timeout=args.timeout)
    except RuntimeError as exc:
        print(f"ppt-dask: error: {exc}", file=sys.stderr)
        return 1
    try:
        with interrupt.stop_signals() as stopping:
            address = cluster.scheduler_address
            info = scheduler_identity(client)
            dashboard = info.get("services", {}).get("dashboard")
            print(f"scheduler  {address}", flush=True)
            if dashboard:
                print(f"dashboard  port {dashboard} on {hosts[0]} "
                      f"(ssh -L {dashboard}:127.0.0.1:{dashboard} {hosts[0]}, then http://127.0.0.1:{dashboard}/status)")
            on = hosts if not args.no_workers_on_scheduler else hosts[1:]
            print(f"workers    {len(info['workers'])} on {len(on)} hosts")
            print(f"preload    {', '.join(preloads(not args.no_preload)) or 'none'}")
            print(f"train      ppt-dask train parity8 --scheduler {address} --security {certs}")
            print("Ctrl-C stops the cluster.", flush=True)
            if not interrupt.serve_until_stopped(stopping, lambda: (client.status in ("closed", "closing")
                                                               or cluster.status.name in ("closed", "failed"))):
                return 1
            print("stopping the cluster ...", flush=True)
    finally:
        ssh.stop(cluster, client)
    return _stopped()


def add_slurm_parser(kinds) -> None:
    """Register ``ppt-dask cluster slurm`` under ``ppt-dask cluster``."""
    s = kinds.add_parser("slurm", help="scheduler here, workers as Slurm jobs (dask-jobqueue); until Ctrl-C",
                         description="Start a scheduler in this process and submit worker jobs to "
                                     "Slurm, with TLS, and keep them until Ctrl-C or SIGTERM.")
    s.add_argument("--jobs", type=int, required=True, help="worker jobs to submit")
    s.add_argument("--cores", type=int, required=True, help="cores per job")
    s.add_argument("--memory", required=True, help="memory per job, e.g. 4GB")
    s.add_argument("--processes", type=int, default=None, help="worker processes per job (default: --cores)")
    s.add_argument("--certs", required=True, metavar="DIR",
                   help="TLS directory made by deploy/make_certs.py, on a file system the nodes share")
    s.add_argument("--partition", default=None, help="the jobs' partition (default: the site's)")
    s.add_argument("--account", default=None)
    s.add_argument("--walltime", default=None,
                   help="the jobs' time limit, [D-]HH:MM:SS (default: dask-jobqueue's, 00:30:00)")
    s.add_argument("--interface", default=None, help="network interface to listen on (e.g. ib0)")
    s.add_argument("--python", default=None, help="Python on the nodes (default: this interpreter's path)")
    s.add_argument("--job-directive", action="append", default=[], metavar="FLAG",
                   help="one more #SBATCH line, e.g. --job-directive=--qos=short (repeatable)")
    s.add_argument("--log-directory", default=None, metavar="DIR", help="where the jobs' output goes")
    s.add_argument("--scheduler-port", type=int, default=DEFAULT_SCHEDULER_PORT, help="(0: any free port)")
    s.add_argument("--dashboard-address", default=DEFAULT_DASHBOARD_ADDRESS,
                   help="default 127.0.0.1:8787; ':8787' for every interface; 'none'")
    s.add_argument("--no-preload", action="store_true", help="start the scheduler without the ppt_dask page")
    s.add_argument("--death-timeout", default="60s", help="workers exit when the scheduler is gone this long")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the workers")


def slurm_command(args) -> int:
    from ppt_dask.deploy import slurm  # dask: only when a cluster starts
    from ppt_dask.engine import interrupt

    paths.input_folder("--certs", args.certs, "the TLS folder made by deploy/make_certs.py")
    paths.input_folder("--log-directory", args.log_directory, "an existing folder for the jobs' output")
    certs = Path(args.certs).expanduser().resolve()
    t0 = time.perf_counter()
    dashboard = None if str(args.dashboard_address).lower() == "none" else args.dashboard_address
    try:
        cluster, client = slurm.start(
            args.jobs, cores=args.cores, memory=args.memory, processes=args.processes, certs_dir=certs,
            partition=args.partition, account=args.account, walltime=args.walltime,
            interface=args.interface, python=args.python, job_directives=args.job_directive,
            log_directory=args.log_directory, scheduler_port=args.scheduler_port,
            dashboard_address=dashboard, preload=not args.no_preload,
            death_timeout=args.death_timeout, timeout=args.timeout)
    except RuntimeError as exc:
        print(f"ppt-dask: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # start() has cancelled the jobs it submitted
        print("ppt-dask: interrupted while the workers started; their jobs are cancelled", file=sys.stderr)
        return 130
    try:
        with interrupt.stop_signals() as stopping:
            address = cluster.scheduler_address
            info = client.scheduler_info(n_workers=-1)
            jobs = sorted({j for j in (getattr(job, "job_id", None) for job in cluster.workers.values()) if j})
            print(f"scheduler  {address}", flush=True)
            if dashboard is not None:
                print(f"dashboard  {cluster.dashboard_link}")
            print(f"workers    {len(info['workers'])} in {len(jobs)} jobs ({' '.join(jobs)}), "
                  f"up in {time.perf_counter() - t0:.1f} s")
            print(f"train      ppt-dask train parity8 --scheduler {address} --security {certs}")
            print("Ctrl-C cancels the jobs and stops the scheduler.", flush=True)
            if not interrupt.serve_until_stopped(stopping, lambda: client.status in ("closed", "closing")):
                return 1
            print("stopping: cancelling the jobs ...", flush=True)
    finally:
        slurm.stop(cluster, client)
    return _stopped()


def _stopped() -> int:
    print("stopped", flush=True)
    return 0
