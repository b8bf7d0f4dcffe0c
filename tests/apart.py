"""A Dask cluster started apart from the tests' process, as a user starts one by hand:
``dask scheduler`` and ``dask worker`` processes (``python -m dask ...``: this environment's),
on 127.0.0.1, each worker a single-threaded process without a nanny.

    with cluster_apart(tmp_path, workers=3) as cluster:
        ppt-dask train ... --scheduler cluster.address
        cluster.kill_scheduler()        # SIGKILL: as a host that goes down

Everything it started is killed and waited for on the way out, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

START_SECONDS = 120.0  # the scheduler and workers up: 2-5 s here, far more on a loaded machine


@dataclass
class ClusterApart:
    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen] = field(default_factory=list)

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler and wait for it: no goodbye reaches its clients."""
        os.kill(self.scheduler.pid, signal.SIGKILL)
        self.scheduler.wait(30)


def _dask(*args: str, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def cluster_apart(folder, workers: int = 2, worker_args: tuple = ()):
    """``workers`` worker processes of a scheduler process, all on 127.0.0.1 (see the module)."""
    from distributed import Client

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    info = folder / "scheduler.json"
    procs: list[subprocess.Popen] = []
    try:
        scheduler = _dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                          "--scheduler-file", str(info), log=folder / "scheduler.log")
        procs.append(scheduler)
        deadline = time.monotonic() + START_SECONDS
        while not info.exists() or not info.read_text().strip():
            assert scheduler.poll() is None, (folder / "scheduler.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"no scheduler within {START_SECONDS} s"
            time.sleep(0.05)
        address = json.loads(info.read_text())["address"]
        for i in range(workers):
            procs.append(_dask("worker", address, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                               "--name", f"apart-{i}", "--death-timeout", "60", *worker_args,
                               log=folder / f"worker-{i}.log"))
        if workers:
            with Client(address, timeout=f"{START_SECONDS}s") as client:
                client.wait_for_workers(workers, timeout=START_SECONDS)
        yield ClusterApart(address, scheduler, procs[1:])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait(30)
