"""The streamed rounds' allreduce over each transport: our sockets beside maintained ones.

Usage::

    python graphs/transports.py            # p = 2, 4; 3 trials of 200 rounds (about 45 min here)
    python graphs/transports.py --workers 8 --trials 1 --rounds 100   # p = 8 oversubscribes 2 cores
    python graphs/transports.py --quick    # p = 2; 1 trial of 40 rounds, the TCP transports only

Our allreduce (:class:`ppt_dask.engine.rounds.allreduce.Allreduce`: a reduce-scatter then an
all-gather, or whole partial sums to every loop, added along the fixed shard tree, bitwise
the serial tree's) runs over a transport with :class:`ppt_dask.engine.wire.links.Links`'s small
interface. ``engine/wire/links.py`` is a transport of our own (sockets, and ssl for TLS); this
script runs the same algorithm, the same tagged messages, over each transport that is
maintained elsewhere, p loops a round, each with partial sums of 55,050 float32 values
(MNIST's 784-64-64-10) or 16 (latency alone) and three float64 statistics:

* ``links``: ours, between plain processes (the reference of the ratios), and over TLS;
* ``links in ppt.train``: ours where the engine runs it, loops in Dask worker tasks through
  ``ppt.train`` with a strategy that computes nothing (:func:`ppt_dask.perf.loops.floor_rows`:
  the loops' own timing of a round's exchange phases);
* ``links in Dask tasks`` and ``comm tcp in Dask tasks``: this script's loop in Dask worker tasks
  (a LocalCluster of single-threaded workers), over ours and over distributed's comms;
* ``comm tcp`` / ``comm tls``: distributed's comms (``distributed.comm.connect``/``listen``,
  ``graphs/commlinks.py``, not part of the package: distributed unpickles during its
  comm handshake, before a stranger could be refused), TLS with ``Security.temporary()``; UCX where
  distributed-ucxx is installed;
* ``gloo send/recv``: torch.distributed's gloo, ``isend``/``irecv`` of flat uint8 tensors
  carrying the messages (``graphs/carriers.py``, as MPI's), and gloo's own ``all_reduce`` beside, for reference;
* ``mpi Send/Recv``: mpi4py under ``mpiexec -n p``, ``Isend``/``Probe``/``Recv`` of the same
  bytes, and MPI's own ``Allreduce`` beside, for reference; ``mpi tcp``: the same with the
  ranks on TCP (``UCX_TLS=tcp,self``: Debian's MPICH runs over UCX, which uses shared memory
  between ranks of one host unless told otherwise). Plain MPI processes;
* ``mpi in dask-mpi tasks``: the same, the loops in Dask worker tasks of a cluster that
  dask-mpi starts (``mpiexec -n p+2``: the scheduler, the client, p workers), over a
  communicator of the workers' ranks (where dask-mpi is installed).

A transport's own allreduce adds in its own order (gloo's ring, MPICH's recursive doubling),
so it cannot give our bitwise guarantee: those rows are references, not candidates.
Medians over a loop's rounds after a warm-up, over the loops, then over the trials; the
ratio is to ``links`` (plain processes) of the same trial, p, size and algorithm (for the
native rows, to ours' faster algorithm), the median of the trials' ratios and their range.
What is not installed is skipped, with a line that says why.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from ppt_dask.engine.wire.handshake import new_secret

sys.path.insert(0, str(Path(__file__).resolve().parent))
from carriers import GlooLinks, MpiLinks  # noqa: E402

import common  # noqa: E402

ALL = ("links", "links tls", "links in ppt.train", "links in Dask tasks", "comm tcp", "comm tls", "comm ucx",
       "comm tcp in Dask tasks", "gloo send/recv", "mpi Send/Recv", "mpi tcp Send/Recv", "mpi in dask-mpi tasks")
DEFAULTS = dict(WORKERS=(2, 4), TRIALS=3, ROUNDS=200, SIZES=(55050, 16), ALGORITHMS=("scatter", "direct"),
                TRANSPORTS=ALL)
QUICK = dict(WORKERS=(2,), TRIALS=1, ROUNDS=40,
             TRANSPORTS=("links", "links in ppt.train", "comm tcp", "gloo send/recv", "mpi Send/Recv"))
WARMUP = 20  # rounds of each run left out (links open, caches warm)
FAN_IN = 2
WAIT = 300.0  # seconds a loop waits for one phase's messages before it gives up
LAUNCH_SECONDS = 600  # the longest one launch of p processes may take
NATIVE = {"gloo send/recv": "gloo all_reduce", "mpi Send/Recv": "mpi Allreduce",  # the references beside
          "mpi tcp Send/Recv": "mpi tcp Allreduce", "mpi in dask-mpi tasks": "mpi Allreduce in dask-mpi tasks"}
MPI_TCP = {"UCX_TLS": "tcp,self"}  # this MPICH runs over UCX: TCP between ranks, no shared memory


# ---- the loop each transport runs --------------------------------------------------------

def bench(links, slot: int, p: int, plan: dict) -> dict:
    """This loop's median seconds a round of our allreduce over ``links``, for each
    ``(algorithm, size)`` of ``plan``; the total is checked at the end of each run."""
    from ppt_dask.engine.rounds.allreduce import Allreduce

    out = {}
    for i, (algorithm, size) in enumerate((a, s) for s in plan["sizes"] for a in plan["algorithms"]):
        partial = {(0, slot): (np.full(size, slot + 1, np.float32), np.array([0.0, 0.0, 1.0]))}
        exchange = Allreduce(links, slot, p, FAN_IN, p, algorithm, wait=WAIT)
        base = 1_000_000 * i  # rounds of different runs never share a tag
        stamps = [time.perf_counter()]
        for r in range(base, base + plan["warmup"] + plan["rounds"]):
            exchange.start(r, partial)
            total, _ = exchange.finish(r, {})
            stamps.append(time.perf_counter())
        assert total[0][0] == total[0][-1] == p * (p + 1) / 2 and total[1][2] == p, (slot, total)
        out[algorithm, size] = float(np.median(np.diff(stamps[plan["warmup"]:])))
    return out


def bench_native(all_reduce, slot: int, plan: dict) -> dict:
    """The same sizes through a transport's own allreduce of ``size + 3`` float32 (reference)."""
    out = {}
    for size in plan["sizes"]:
        send = np.full(size + 3, slot + 1, np.float32)
        total = np.empty_like(send)
        stamps = [time.perf_counter()]
        for _ in range(plan["warmup"] + plan["rounds"]):
            all_reduce(send, total)
            stamps.append(time.perf_counter())
        out["native", size] = float(np.median(np.diff(stamps[plan["warmup"]:])))
    return out


# ---- plain processes ---------------------------------------------------------------------

def _process(kind: str, slot: int, p: int, plan: dict, up, down, security) -> None:
    """One loop in a process of its own: make the transport, meet the others, run, report."""
    try:
        if kind.startswith("gloo"):
            import torch
            import torch.distributed as dist
            torch.set_num_threads(1)
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{plan['port']}", rank=slot, world_size=p)
            links = GlooLinks(slot, p)

            def all_reduce(send, total):
                buffer = torch.from_numpy(total)
                buffer.copy_(torch.from_numpy(send))
                dist.all_reduce(buffer)

            results = bench(links, slot, p, plan)
            links.close()
            results.update(bench_native(all_reduce, slot, plan))
            dist.destroy_process_group()
        else:
            links = _made(kind, slot, security, plan["secret"])
            up.put(("address", slot, links.address))
            links.connect(down.get(timeout=LAUNCH_SECONDS))
            try:
                results = bench(links, slot, p, plan)
            finally:
                links.close(1.0)
        up.put(("done", slot, results))
    except BaseException:
        up.put(("failed", slot, traceback.format_exc()))


def _made(kind: str, slot: int, security, secret: bytes):
    """A transport of ``kind`` for a loop in a process on this host, not yet linked (``secret``:
    what every connection to it proves, the same for every loop of a run)."""
    if kind.startswith("links"):
        from ppt_dask.engine.wire.links import Links
        return Links(slot, "tls://127.0.0.1:1" if "tls" in kind else "tcp://127.0.0.1:1", security, secret=secret)
    from commlinks import CommLinks  # graphs/commlinks.py: this script's, not the package's
    scheme = {"ucx": "ucxx"}.get(kind.split()[1], kind.split()[1])
    return CommLinks(slot, f"{scheme}://127.0.0.1:1", security, secret=secret)


def in_processes(kind: str, p: int, plan: dict, security=None) -> dict:
    """Run ``p`` loops of ``kind`` in spawned processes; their results by slot."""
    context = multiprocessing.get_context("spawn")
    up = context.Queue()
    downs = [context.Queue() for _ in range(p)]
    plan = {**plan, "port": _free_port(), "secret": new_secret()}
    procs = [context.Process(target=_process, args=(kind, s, p, plan, up, downs[s], security), daemon=True)
             for s in range(p)]
    for proc in procs:
        proc.start()
    addresses: dict = {}
    results: dict = {}
    try:
        deadline = time.monotonic() + LAUNCH_SECONDS
        while len(results) < p:
            what, slot, value = up.get(timeout=max(deadline - time.monotonic(), 1))
            if what == "failed":
                raise RuntimeError(f"{kind} p={p} slot {slot} failed:\n{value}")
            if what == "address":
                addresses[slot] = value
                if len(addresses) == p:
                    for s in range(p):
                        downs[s].put({j: a for j, a in addresses.items() if j != s})
            else:
                results[slot] = value
    finally:
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return results


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ---- MPI ---------------------------------------------------------------------------------

MPI_MAIN = "import sys; sys.path.insert(0, {here!r}); import transports; transports.mpi_main()"


def mpi_main() -> None:
    """The loops of ``mpiexec -n p python -c MPI_MAIN plan``: rank 0 prints every rank's results."""
    from mpi4py import MPI
    plan = json.loads(sys.argv[1])
    comm = MPI.COMM_WORLD
    links = MpiLinks(comm)
    results = {**bench(links, links.slot, comm.Get_size(), plan),
               **bench_native(lambda send, total: comm.Allreduce(send, total, op=MPI.SUM), links.slot, plan)}
    gathered = comm.gather([[list(k), v] for k, v in results.items()], root=0)
    if comm.Get_rank() == 0:
        print("RESULTS " + json.dumps(gathered), flush=True)


def in_mpi(p: int, plan: dict, tcp: bool = False, dask: bool = False) -> dict:
    """``mpiexec -n p``; with ``tcp``, the ranks talk over TCP only (:data:`MPI_TCP`); with
    ``dask``, ``mpiexec -n p+2`` under dask-mpi (:func:`dask_mpi_main`)."""
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", **(MPI_TCP if tcp else {})}
    program = (DASK_MPI_MAIN if dask else MPI_MAIN).format(here=here)
    command = [shutil.which("mpiexec") or "mpiexec", "-n", str(p + 2 if dask else p), sys.executable, "-c", program,
               json.dumps(plan), str(p)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=LAUNCH_SECONDS, env=env)
    line = [t for t in run.stdout.splitlines() if t.startswith("RESULTS ")]
    if not line or (run.returncode != 0 and not dask):  # dask-mpi's workers may exit noisily once the client ends
        raise RuntimeError(f"mpiexec -n {p} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    ranks = json.loads(line[0][len("RESULTS "):])
    return {slot: {tuple(k): v for k, v in pairs} for slot, pairs in enumerate(ranks)}


DASK_MPI_MAIN = "import sys; sys.path.insert(0, {here!r}); import transports; transports.dask_mpi_main()"


def _mpi_task(plan: dict, ranks: list) -> list:
    """One loop in a dask-mpi worker's task: MPI between the workers' ranks (``ranks``)."""
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    comm = world.Create_group(world.Get_group().Incl(ranks))  # collective over the workers only
    try:
        links = MpiLinks(comm)
        results = {**bench(links, links.slot, comm.Get_size(), plan),
                   **bench_native(lambda send, total: comm.Allreduce(send, total, op=MPI.SUM), links.slot, plan)}
    finally:
        comm.Free()
    return [[list(k), v] for k, v in results.items()]


def dask_mpi_main() -> None:
    """``mpiexec -n p+2 python -c DASK_MPI_MAIN plan p``: dask-mpi makes rank 0 the scheduler
    and ranks 2.. workers (named by their rank); rank 1 runs one loop task on each worker."""
    from dask_mpi import initialize
    from distributed import Client
    initialize(nanny=False, dashboard=False)
    plan, p = json.loads(sys.argv[1]), int(sys.argv[2])
    with Client() as client:
        client.wait_for_workers(p, timeout=120)
        workers = {w["name"]: a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        ranks = sorted(workers)
        results = client.gather([client.submit(_mpi_task, plan, ranks, workers=[workers[r]], pure=False)
                                 for r in ranks])
    print("RESULTS " + json.dumps(results), flush=True)


# ---- Dask worker tasks -------------------------------------------------------------------

def _task(kind: str, slot: int, p: int, plan: dict, tag: str) -> dict:
    """One loop in a Dask worker task: the transport listens on the worker's host, the loops
    meet through Variables (the scheduler), then run as in a process of their own."""
    from distributed import Variable, get_worker
    worker = get_worker()
    from commlinks import CommLinks  # graphs/commlinks.py: this script's, not the package's

    from ppt_dask.engine.wire.links import Links
    if kind.startswith("links"):
        links = Links(slot, worker.address, worker.security, secret=plan["secret"])
    else:
        links = CommLinks(slot, worker.address, worker.security, secret=plan["secret"])
    Variable(f"{tag}-{slot}").set(links.address)
    links.connect({j: Variable(f"{tag}-{j}").get(timeout=120) for j in range(p) if j != slot})
    try:
        return bench(links, slot, p, plan)
    finally:
        links.close(1.0)


def in_tasks(client, addresses, kind: str, p: int, plan: dict) -> dict:
    tag = f"ppt-transports-{time.perf_counter_ns()}"
    plan = {**plan, "secret": new_secret()}  # in the tasks' arguments, as the engine's loops have it
    futures = [client.submit(_task, kind, s, p, plan, tag, workers=[addresses[s]], pure=False,
                             key=f"ppt-transport-{tag}-{s}") for s in range(p)]
    return dict(enumerate(client.gather(futures)))


def in_train(client, addresses, p: int, plan: dict) -> dict:
    """The engine's streamed rounds (ppt.train): the median of a round's exchange phases."""
    from ppt_dask.perf import loops
    out = {}
    for size in plan["sizes"]:
        for algorithm in plan["algorithms"]:
            rows = loops.floor_rows(client, addresses, p, size, plan["rounds"], warmup=plan["warmup"],
                                    dtype="float32", allreduce=algorithm)
            out[algorithm, size] = statistics.median(map(loops.exchange_phases, rows))
    return {0: out}


# ---- what is installed -------------------------------------------------------------------

def missing(kind: str) -> str | None:
    """Why ``kind`` cannot run here, or None."""
    if "tls" in kind:
        try:
            import cryptography  # noqa: F401  (Security.temporary makes its certificates with it)
        except ImportError:
            return "the cryptography package is not installed (Security.temporary needs it)"
    if kind == "comm ucx":
        try:
            import distributed_ucxx  # noqa: F401  (distributed's own ucx:// was removed in 2025)
        except ImportError:
            return "distributed-ucxx is not installed (distributed's UCX comm, ucxx://)"
    if kind.startswith("gloo"):
        try:
            import torch.distributed as dist
        except ImportError:
            return "torch is not installed (the [torch] extra)"
        if not (dist.is_available() and dist.is_gloo_available()):
            return "this torch has no torch.distributed with gloo"
    if kind.startswith("mpi"):
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            return "mpi4py is not installed"
        if shutil.which("mpiexec") is None:
            return "no mpiexec on the PATH"
    if "dask-mpi" in kind:
        try:
            import dask_mpi  # noqa: F401
        except ImportError:
            return "dask-mpi is not installed: the MPI rows are plain MPI processes, not Dask workers"
    return None


# ---- the run and the table ---------------------------------------------------------------

def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")  # one thread a loop, as a Dask worker started by ppt_dask has
    unknown = set(args.transports) - set(ALL)
    if unknown:
        raise ValueError(f"unknown transports {sorted(unknown)}; known: {ALL}")
    kinds = [k for k in ALL if k in args.transports]
    for kind in list(kinds):
        why = missing(kind)
        if why:
            print(f"skipped {kind}: {why}", flush=True)
            kinds.remove(kind)
    plan = dict(sizes=list(args.sizes), algorithms=list(args.algorithms), rounds=args.rounds, warmup=WARMUP)
    security = None
    if any("tls" in k for k in kinds):
        from distributed.security import Security
        security = Security.temporary()
    seen: dict = {}  # (kind, p, algorithm, size) -> [seconds, one per trial]
    t_start, load_start = time.perf_counter(), os.getloadavg()
    client = addresses = None
    if any("ppt.train" in k or "Dask" in k for k in kinds):
        client = common.start(max(args.workers))
        addresses = common.addresses(client, max(args.workers))
    try:
        for trial in range(args.trials):
            for p in args.workers:
                for kind in kinds if trial % 2 == 0 else kinds[::-1]:
                    t0 = time.perf_counter()
                    try:
                        if kind == "links in ppt.train":
                            results = in_train(client, addresses, p, plan)
                        elif "Dask" in kind:
                            results = in_tasks(client, addresses, kind, p, plan)
                        elif kind.startswith("mpi"):
                            results = in_mpi(p, plan, tcp="tcp" in kind, dask="dask-mpi" in kind)
                        else:
                            results = in_processes(kind, p, plan, security if "tls" in kind else None)
                    except Exception as exc:  # one launch that fails leaves a hole, not the whole run
                        print(f"trial {trial + 1} p={p} {kind}: FAILED {exc}", flush=True)
                        continue
                    for key in results[0]:
                        algorithm, size = key
                        name = NATIVE[kind] if algorithm == "native" else kind
                        value = statistics.median(r[key] for r in results.values())
                        seen.setdefault((name, p, algorithm, size), []).append((trial, value))
                    cells = ", ".join(f"{a} {s}: {1e3 * statistics.median(r[(a, s)] for r in results.values()):.3f}"
                                      for a, s in results[0])
                    print(f"trial {trial + 1} p={p} {kind} ({time.perf_counter() - t0:.0f} s): {cells} ms",
                          flush=True)
    finally:
        if client is not None:
            from ppt_dask import cluster
            cluster.close(client)
    rows = table(seen, args)
    load_end = os.getloadavg()
    notes = [f"{args.trials} trial(s) of {args.rounds} rounds after {WARMUP} of warm-up, "
             f"{time.perf_counter() - t_start:.0f} s in all; load average (1, 5, 15 min) {_load(load_start)} at the "
             f"start, {_load(load_end)} at the end.",
             f"Sizes: float32 values a loop's partial sums hold (and 3 float64 statistics); {os.cpu_count()} cores: "
             "p above that oversubscribes them (marked *).",
             "ratio: this row's median over ours (links, plain processes) of the same trial, p, size and algorithm, "
             "the median of the trials' ratios [their range]; for a native allreduce, over ours' faster algorithm.",
             "Native allreduces (gloo all_reduce, mpi Allreduce) add in their own order: references, not candidates.",
             "Dask rows: a LocalCluster of single-threaded worker processes; `links in ppt.train` is the engine's "
             "round (the loops' exchange phases, including leaving the round for the head)."]
    common.write_table(args.out, "transports", rows, title="The streamed rounds' allreduce over each transport",
                       notes=notes)
    print(common.markdown(rows))
    for note in notes:
        print(f"- {note}")


def _load(load) -> str:
    return ", ".join(f"{x:.1f}" for x in load)


def table(seen: dict, args) -> list[dict]:
    ours = {(p, a, s): dict(v) for (k, p, a, s), v in seen.items() if k == "links"}
    names = [x for k in ALL for x in ((k, NATIVE[k]) if k in NATIVE else (k,))]
    rows = []
    for p in args.workers:
        for size in args.sizes:
            for name in names:
                for algorithm in [*args.algorithms, "native"]:
                    values = seen.get((name, p, algorithm, size))
                    if not values:
                        continue
                    ratios = []
                    for trial, value in values:
                        if algorithm == "native":
                            bases = [ours.get((p, a, size), {}).get(trial) for a in args.algorithms]
                            base = min((b for b in bases if b), default=None)
                        else:
                            base = ours.get((p, algorithm, size), {}).get(trial)
                        if base:
                            ratios.append(value / base)
                    ratio = (f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"
                             if len(ratios) > 1 else f"{ratios[0]:.2f}" if ratios else "")
                    rows.append({"transport": name, "p": f"{p}{'*' if p > (os.cpu_count() or 1) else ''}",
                                 "size": size, "algorithm": algorithm,
                                 "median ms a round": 1e3 * statistics.median(v for _, v in values),
                                 "ratio to ours": ratio})
    return rows


if __name__ == "__main__":
    main()
