"""The head's BLAS and OpenMP threads while a run trains on workers of the head's own machine.

The head's own arithmetic during a run (the test-set checks of the stopping rule, a state
built from the workers' parts) runs beside the workers' loops. NumPy's OpenBLAS would use a
thread per core for it, and where the workers run on those cores, its threads wait for cores
the workers hold (OpenBLAS's threads spin while they wait): on 2 cores, `ppt-dask train mnist
--workers 2 --strategy block` spent 27-34 ms on each 10,000-row test check (10-12 ms on the
idle machine), and the run took 1.2x the time it takes with the head on one thread
(graphs/README.md, "Synchronous rounds without the scheduler"). Dask's nanny gives each
worker process one BLAS thread (``distributed.nanny.pre-spawn-environ``), and a run keeps one
loop busy per worker; for the run's duration the head takes the cores its machine's workers
leave (at least one), when a worker of the run shares its machine. The same holds for OpenMP's
threads, on which PyTorch runs a module's checks (a worker's are one as well: the nanny sets
``OMP_NUM_THREADS``). threadpoolctl sets both, as scikit-learn does, and puts them back after.
"""

from __future__ import annotations

import contextlib
import os
import socket

import psutil
from distributed.comm import get_address_host
from threadpoolctl import threadpool_info, threadpool_limits

from ppt_dask.engine.placement.addresses import LOOPBACK


def local_hosts() -> set[str]:
    """The addresses of this machine's network interfaces, and the loopback names."""
    hosts = set(LOOPBACK)
    for addresses in psutil.net_if_addrs().values():
        hosts.update(a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return hosts


def local_workers(worker_addresses) -> int:
    """How many of these workers run on the head's machine (or in its process)."""
    hosts = local_hosts()
    return sum(1 for a in worker_addresses if a.startswith("inproc://") or get_address_host(a) in hosts)


def head_threads(cores: int, n_local: int) -> int | None:
    """The head's BLAS threads beside ``n_local`` busy workers on ``cores`` cores: the cores they
    leave, at least one; None (no limit) when no worker shares the machine."""
    return None if n_local == 0 else max(1, cores - n_local)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


APIS = ("blas", "openmp")  # NumPy's BLAS; OpenMP, whose threads PyTorch's CPU operators run on


@contextlib.contextmanager
def beside(worker_addresses):
    """While the block runs, as many BLAS and OpenMP threads in this process as the run's
    workers on this machine leave cores (at least one, never more than it had); the previous
    settings after."""
    limit = head_threads(cores(), local_workers(worker_addresses))
    over = {pool["user_api"]: limit for pool in threadpool_info()
            if limit is not None and pool["user_api"] in APIS and pool["num_threads"] > limit}
    if not over:
        yield
        return
    with threadpool_limits(limits=over):
        yield
