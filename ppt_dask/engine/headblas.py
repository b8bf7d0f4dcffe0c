"""The head's BLAS threads while a run trains on workers of the head's own machine.

The head's own arithmetic during a run (the test-set checks of the stopping rule, a state
built from the workers' parts) runs beside the workers' loops. NumPy's OpenBLAS would use a
thread per core for it, and where the workers run on those cores, its threads wait for cores
the workers hold (OpenBLAS's threads spin while they wait): on 2 cores, `ppt-dask train mnist
--workers 2 --strategy block` spent 27-34 ms on each 10,000-row test check (10-12 ms on the
idle machine), and the run took 1.2x the time it takes with the head on one thread
(graphs/README.md, "Synchronous rounds without the scheduler"). Dask's nanny gives each
worker process one BLAS thread (``distributed.nanny.pre-spawn-environ``); the head takes one
too, for the run's duration, when a worker of the run shares its machine. threadpoolctl sets
it, as scikit-learn does, and puts it back after.
"""

from __future__ import annotations

import contextlib
import socket

import psutil
from distributed.comm import get_address_host
from threadpoolctl import threadpool_limits

LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def local_hosts() -> set[str]:
    """The addresses of this machine's network interfaces, and the loopback names."""
    hosts = set(LOOPBACK)
    for addresses in psutil.net_if_addrs().values():
        hosts.update(a.address.split("%")[0] for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return hosts


def shares_machine(worker_addresses) -> bool:
    """Whether any of these workers runs on the head's machine (or in its process)."""
    hosts = local_hosts()
    for address in worker_addresses:
        if address.startswith("inproc://") or get_address_host(address) in hosts:
            return True
    return False


@contextlib.contextmanager
def one_thread_beside(worker_addresses):
    """One BLAS thread in this process while the block runs, if a worker shares the machine;
    the previous setting after it."""
    if not shares_machine(worker_addresses):
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
