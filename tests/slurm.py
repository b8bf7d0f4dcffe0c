"""A throwaway one-node Slurm on this machine for the Slurm deployment tests.

Debian's ``slurm-wlm`` and ``munge`` packages, started by hand as root: a ``munged`` with its
own key and socket, then ``slurmctld`` and ``slurmd`` with a ``slurm.conf`` in a temporary
directory (free ports, no accounting, process tracking by ``/proc``, one partition). The
clients find it through ``SLURM_CONF`` (:attr:`LocalSlurm.env`). Nothing outside the
directory is touched; :meth:`LocalSlurm.stop` cancels every job and ends the daemons.

``.ci/run`` installs the packages (``apt-get install slurm-wlm munge``); without them, or
without root, :func:`missing` says why.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

INSTALL_HINT = ("the Slurm tests need Debian's slurm-wlm and munge and root (to start slurmd): "
                ".ci/run installs them (apt-get install -y slurm-wlm munge)")
DAEMONS = ("munged", "slurmctld", "slurmd")
START_TIMEOUT = 60.0


def _which(name: str) -> str | None:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def missing() -> str | None:
    """Why a local Slurm cannot start here, or None."""
    absent = [n for n in (*DAEMONS, "sbatch", "squeue", "scancel", "srun") if _which(n) is None]
    if absent:
        return f"{', '.join(absent)} not found; {INSTALL_HINT}"
    if os.geteuid() != 0:
        return f"not root; {INSTALL_HINT}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """\
ClusterName=ppttest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
KillWait=5
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=batch Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class LocalSlurm:
    """``with LocalSlurm(directory) as slurm:`` ... ``slurm.env`` for sbatch, squeue, dask-jobqueue.

    Parameters
    ----------
    directory : path
        Holds the configuration, the munge key and socket, the state and the logs.
    cpus : int
        CPUs the node offers (more than the machine's cores is allowed: jobs then share them).
    memory_mb : int
        Memory the node offers to jobs (``--mem`` of a job must fit in it).
    """

    def __init__(self, directory, cpus: int = 4, memory_mb: int = 8000):
        self.dir = Path(directory)
        self.cpus, self.memory_mb = cpus, memory_mb
        self.procs: dict[str, subprocess.Popen] = {}
        self.host = socket.gethostname().split(".")[0]
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- start --

    def start(self) -> LocalSlurm:
        why = missing()
        if why:
            raise RuntimeError(why)
        for sub in ("state", "spool", "munge"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        munge_dir = self.dir / "munge"
        key, self.munge_socket = munge_dir / "munge.key", munge_dir / "munge.socket"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self.conf.write_text(CONF.format(host=self.host, ctld_port=_free_port(), slurmd_port=_free_port(),
                                         munge_socket=self.munge_socket, dir=self.dir, cpus=self.cpus,
                                         memory=self.memory_mb))
        try:
            # munged runs as root here (--force): its key and socket are this test's own
            self._spawn("munged", [_which("munged"), "--foreground", "--force", f"--key-file={key}",
                                   f"--socket={self.munge_socket}", f"--pid-file={munge_dir}/munged.pid",
                                   f"--log-file={munge_dir}/munged.log", f"--seed-file={munge_dir}/munged.seed"])
            self._wait(lambda: self.munge_socket.exists(), "munged's socket")
            self._spawn("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
            self._wait(lambda: self._run("scontrol", "ping").returncode == 0, "slurmctld to answer")
            self._spawn("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.host])
            self._wait(self._node_idle, f"node {self.host} to be idle")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.dir / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        log.close()

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for {what}: "
                                       f"{self.tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {START_TIMEOUT:g} s waiting for {what}: {self.tail('slurmctld')}")

    def _node_idle(self) -> bool:
        out = self._run("sinfo", "-h", "-N", "-o", "%T").stdout.strip()
        return out in ("idle", "mixed", "allocated")

    def _run(self, name: str, *args, timeout: float = 20.0) -> subprocess.CompletedProcess:
        return subprocess.run([_which(name), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)

    def tail(self, name: str, lines: int = 8) -> str:
        """The last lines a daemon wrote (its log file, else its output)."""
        for path in (self.dir / f"{name}.log", self.dir / "munge" / f"{name}.log", self.dir / f"{name}.out"):
            if path.exists() and path.stat().st_size:
                return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
        return "(no output)"

    # -- use --

    def jobs(self) -> list[tuple[str, str, str]]:
        """``(job id, name, state)`` of every job Slurm still knows as pending or running."""
        out = self._run("squeue", "-h", "-o", "%i %j %T").stdout
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]

    def scancel(self, *job_ids: str) -> None:
        run = self._run("scancel", *job_ids)
        if run.returncode != 0:
            raise RuntimeError(f"scancel {' '.join(job_ids)}: {run.stderr.strip()}")

    def job_processes(self) -> list[int]:
        """Pids of processes started for jobs (they carry SLURM_JOB_ID in their environment)."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if b"SLURM_JOB_ID=" in environ and f"SLURM_CONF={self.conf}".encode() in environ:
                found.append(int(entry.name))
        return found

    # -- stop --

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel every job, wait for the job processes to end, then stop the daemons."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            try:
                self._run("scancel", "--full", "-u", "root")
                deadline = time.monotonic() + timeout
                while (self.jobs() or self.job_processes()) and time.monotonic() < deadline:
                    time.sleep(0.3)
            except (subprocess.TimeoutExpired, OSError):
                pass
        for pid in self.job_processes():  # a job that outlived scancel: not left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
