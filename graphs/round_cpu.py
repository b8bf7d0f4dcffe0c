"""CPU a round of every process of a synchronous run, beside an mpi4py program's CPU a step.

Usage::

    python graphs/round_cpu.py                      # p = 1, 2, 4, 8, 16; 3 repeats
    python graphs/round_cpu.py --workers 1,2 --repeats 5
    python graphs/round_cpu.py --quick              # p = 1, 2, one repeat, short runs

The run is the seeds' synchronous SGD by block as a user types it: ``ppt-dask train mnist
--workers P --scheduler ADDRESS --strategy block --block 200 --lr 0.1 --momentum 0.9 --dtype
float32 --epochs E --target-error 0`` (a target of 0 is never met: no test check, E epochs
whole), on a plain cluster a user starts (``dask scheduler`` + ``dask worker ADDRESS --nworkers
P --nthreads 1``, distributed's defaults), so that each process's CPU is its own: the head
(the command, a child of this script: ``getrusage``), the scheduler, the nannies (the ``dask
worker`` process) and each worker (``/proc/PID/stat``, read before and after).

A process's CPU a round is the difference between a run of ``LONG`` epochs and one of
``SHORT`` epochs over the difference in rounds: start-up, data placement and the end cancel
out. The mpi4py program (graphs/peers/mpi_allreduce.py, ``mpiexec -n P``, the same network,
block, learning rate and momentum, no test checks) gives each rank's CPU the same way. With
P past the machine's cores the processes share them: the CPU is still each one's own (marked
*), their wall time is not shown.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import own_cluster  # noqa: E402
import peers  # noqa: E402

import common  # noqa: E402

DEFAULTS = dict(WORKERS=(1, 2, 4, 8, 16), REPEATS=3, SHORT=1.0, LONG=8.0, BLOCK=200, LR=0.1, MPI=True)
QUICK = dict(WORKERS=(1, 2), REPEATS=1, SHORT=0.5, LONG=2.0)
FLAGS = ("--strategy", "block", "--lr", "0.1", "--momentum", "0.9", "--dtype", "float32", "--target-error", "0")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (from any of its threads)."""
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return sorted(set(out))


def cluster_pids(procs: list, workers: int, timeout: float = 120.0) -> dict:
    """The scheduler's, the nannies' (the ``dask worker`` process) and the worker processes' ids."""
    scheduler, nannies = procs[0].pid, procs[1].pid
    deadline = time.monotonic() + timeout
    while len(kids := children(nannies)) < workers:  # the nannies' worker processes (and maybe a tracker)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workers} worker processes did not start within {timeout} s")
        time.sleep(0.2)
    kids = [k for k in kids if "spawn_main" in Path(f"/proc/{k}/cmdline").read_text(errors="replace")]  # not a tracker
    return {"scheduler": [scheduler], "nannies": [nannies], "workers": kids}


def head_run(env: dict, address: str, workers: int, epochs: float, block: int, folder: Path) -> tuple[float, dict]:
    """One head (``ppt-dask train``) on the plain cluster: its CPU seconds and its summary."""
    out = folder / "summary.json"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--workers", str(workers),
                           "--scheduler", address, *FLAGS, "--block", str(block), "--epochs", f"{epochs:g}",
                           "--quiet", "--json", str(out)], env=env, capture_output=True, text=True, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise RuntimeError(f"ppt-dask train: {proc.stderr.strip()[-600:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), json.loads(out.read_text())


def ppt_cpu(args, folder: Path, env: dict, p: int) -> dict:
    """Per process kind, the CPU a round (ms): medians over the repeats."""
    address, procs = own_cluster.start_plain(folder, env, p)
    per: dict = {"head": [], "scheduler": [], "nannies": [], "worker": [], "worker max": []}
    try:
        pids = cluster_pids(procs, p)
        head_run(env, address, p, args.short, args.block, folder)  # warm: the caches a first run fills
        for repeat in range(args.repeats):
            seen = {}
            for epochs in (args.short, args.long):
                start = {k: [cpu_of(pid) for pid in v] for k, v in pids.items()}
                head, summary = head_run(env, address, p, epochs, args.block, folder)
                end = {k: [cpu_of(pid) for pid in v] for k, v in pids.items()}
                used = {k: [b - a for a, b in zip(start[k], end[k])] for k in pids}
                seen[epochs] = (summary["rounds"], head, used)
            (r1, h1, u1), (r2, h2, u2) = seen[args.short], seen[args.long]
            rounds = r2 - r1
            ms = lambda a, b, n=rounds: 1e3 * (b - a) / n  # noqa: E731
            per["head"].append(ms(h1, h2))
            per["scheduler"].append(ms(sum(u1["scheduler"]), sum(u2["scheduler"])))
            per["nannies"].append(ms(sum(u1["nannies"]), sum(u2["nannies"])))
            workers = [ms(a, b) for a, b in zip(u1["workers"], u2["workers"])]
            per["worker"].append(statistics.median(workers))
            per["worker max"].append(max(workers))
            print(f"p={p} repeat {repeat}: {rounds} rounds; head {per['head'][-1]:.3f}, scheduler "
                  f"{per['scheduler'][-1]:.3f}, nannies {per['nannies'][-1]:.3f}, workers "
                  f"{', '.join(f'{w:.3f}' for w in workers)} ms a round", file=sys.stderr, flush=True)
    finally:
        own_cluster.stop(procs)
    return {k: statistics.median(v) for k, v in per.items()}


def mpi_cpu(args, work: Path, p: int) -> float | None:
    """An mpi4py rank's CPU a step (ms, the median rank; medians over the repeats), or None."""
    c = dict(name=f"mpi4py-p{p}", p=p, threads=1, script="mpi_allreduce.py", launcher=("mpiexec", "-n", str(p)),
             needs=("mpi4py",), spec=dict(checks=False))
    if why := peers.missing(c):
        print(f"mpi4py not run: {why}", file=sys.stderr)
        return None
    per = []
    for repeat in range(args.repeats):
        seen = {}
        for epochs in (args.short, args.long):
            cfg = dict(N_TRAIN=60000, N_TEST=10000, TARGET=2.0, MAX_EPOCHS=epochs,
                       STARTUP_TIMEOUT=peers.STARTUP_TIMEOUT)
            r = peers.race(c, args.lr, args.block, cfg, work, 1800.0, f"cpu-p{p}-{repeat}-{epochs:g}")
            if "cpu_seconds" not in r:
                print(f"mpi4py np = {p} failed: {r.get('stopped_because')}", file=sys.stderr)
                return None
            seen[epochs] = (r["steps"], r["cpu_seconds"])
        (s1, c1), (s2, c2) = seen[args.short], seen[args.long]
        per.append(statistics.median(1e3 * (b - a) / (s2 - s1) for a, b in zip(c1, c2)))
        print(f"mpi4py np={p} repeat {repeat}: {per[-1]:.3f} ms a step a rank", file=sys.stderr, flush=True)
    return statistics.median(per)


def main() -> None:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = own_cluster.plain_env(folder)
        if args.mpi:
            peers.prepare(dict(N_TRAIN=60000, N_TEST=10000), folder)
        for p in args.workers:
            # past the cores MPI's ranks poll against each other (np = 4 on 2 cores: 12 ms a step): not run
            mpi = mpi_cpu(args, folder, p) if args.mpi and p <= cores else None
            got = ppt_cpu(args, folder, env, p)
            base = rows[0] if rows else None
            rows.append({"p": f"{p}{'*' if p > cores else ''}", "worker CPU ms": got["worker"],
                         "busiest worker CPU ms": got["worker max"], "mpi4py rank CPU ms": mpi,
                         "worker / mpi4py": got["worker"] / mpi if mpi else None,
                         "worker / own p = 1": got["worker"] / base["worker CPU ms"] if base else 1.0,
                         "head CPU ms": got["head"], "scheduler CPU ms": got["scheduler"],
                         "nannies CPU ms": got["nannies"],
                         "head + scheduler + nannies CPU ms": got["head"] + got["scheduler"] + got["nannies"],
                         "repeats": args.repeats})
    common.write_table(args.out, "round_cpu", rows, title="CPU a round of each process, synchronous SGD block 200 "
                       "(MNIST 784-64-64-10, float32), beside an mpi4py rank's CPU a step",
                       notes=["ms: CPU milliseconds a round (user + system), the difference between runs of "
                              f"{args.long:g} and {args.short:g} epochs over the difference in rounds; medians of "
                              "the repeats (worker: the median worker process; worker max: the busiest)",
                              "head: `ppt-dask train mnist --scheduler ADDRESS --workers P --strategy block --block "
                              f"{args.block} --lr 0.1 --momentum 0.9 --dtype float32 --target-error 0 --epochs E`; "
                              "scheduler: `dask scheduler`; nannies: the `dask worker --nworkers P --nthreads 1` "
                              "process; workers: its worker processes (distributed's default configuration)",
                              "mpi4py rank: graphs/peers/mpi_allreduce.py under `mpiexec -n P`, the same steps, no "
                              "test checks (it polls while it waits for the Allreduce: that CPU counts); not run "
                              "past the machine's cores, where its ranks poll against each other",
                              f"* more processes than the machine's {cores} cores: each one's CPU, not a wall time"])


if __name__ == "__main__":
    main()
