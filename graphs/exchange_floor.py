"""The floor of a synchronous round's exchange, each way of exchanging measured side by side.

    python graphs/exchange_floor.py            # p = 1, 2, 4; 3 trials of 400 rounds
    python graphs/exchange_floor.py --quick    # p = 1, 2; 1 trial of 100 rounds

A synchronous round (:class:`ppt.Sync` by block) is a gradient, an exchange of the workers'
partial sums (every worker ends with their total, as an ``MPI_Allreduce`` leaves it) and an
update. What the exchange costs here, per round, with the MNIST network's 55,050 float32
parameters (and 16 floats, to see the latency alone), each measured on ``ppt.connect``'s
LocalCluster in the same run, trials interleaved:

* ``links``: the streamed rounds ppt_dask runs (:mod:`ppt_dask.engine.rounds.stream`), through
  ``ppt.train`` with a strategy whose gradient and update do nothing (zeros of the real size):
  the loops' own timing of what remains (sending, waiting for the others' sums, adding them,
  leaving the round for the head: ``transfer + idle + reduce + head``);
* ``mailbox``: the same sums sent through an actor on each worker (a method call on the other
  worker: its event loop takes it, then wakes the loop's thread), loops of this script;
* ``one-hop graph``: a chain of trivial tasks, round ``r``'s task on each worker taking every
  worker's task of round ``r - 1`` (the floor of :mod:`ppt_dask.engine.rounds.onehop`'s rounds,
  graphs/round_latency.py);
* ``mpi4py Allreduce`` of the same buffer (``mpiexec -n p``), where mpi4py and an MPI are
  installed: what a hand-written MPI program pays;
* ``sync round``: the real thing, ``ppt.Sync(block=1000)`` on MNIST through ``ppt.train`` on
  streamed rounds with 8 shards, its round beyond the compute, beside the ``links`` floor of
  the same trial over the same 8 shards (``links, 8 shards``: the exchange and the adds of the
  shard tree, as an ``MPI_Allreduce`` adds too; at p = 1 those adds are all there is): the
  ratio the engine must keep small. Beyond the slowest loop's gradient (``wall`` less the
  longest of the loops' gradient phases, less the update) is the round's exchange, what the
  floor measures; beyond their mean gradient (the breakdown's ``wall - gradient - update``) it
  also holds the wait of the faster loops for the slowest, which grows with the gradient and
  which the floor, with no compute, lacks. A last table sets each phase of that (sending,
  waiting for the others' sums, adding them, leaving the round for the head) beside the
  floor's.

Medians over rounds after a warm-up, then over trials; ratios are taken trial by trial.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ppt_dask as ppt
from ppt_dask.engine.wire import mailbox
from ppt_dask.observe import diagnostics
from ppt_dask.perf import loops

sys.path.insert(0, str(Path(__file__).resolve().parent))
import round_latency  # noqa: E402

import common  # noqa: E402

DEFAULTS = dict(WORKERS=(1, 2, 4), TRIALS=3, ROUNDS=400, SIZES=(55050, 16), SYNC_BLOCK=1000, SYNC_ROUNDS=150)
QUICK = dict(WORKERS=(1, 2), TRIALS=1, ROUNDS=100, SYNC_ROUNDS=40)
WARMUP = 20
NET = (784, 64, 64, 10)  # 55,050 parameters
SYNC_SHARDS = 8  # as `ppt-dask train` places MNIST on 1 or 2 workers


def links_floor(client, addresses, p: int, size: int, rounds: int) -> float:
    """Median seconds of a streamed round's exchange (the loops' own timing) with no compute:
    what the run-time model's calibration fits its streamed exchange to (ppt_dask.perf.loops)."""
    return loops.links_floor(client, addresses, p, size, rounds, warmup=WARMUP, dtype="float32")


def _mailbox_loop(slot: int, size: int, rounds: int, box: str, peers: dict) -> float:
    """A loop that sends ``size`` float32 to every peer's mailbox and takes theirs, each round."""
    own = mailbox.BOXES[box]
    partial = {(0, slot): (np.ones(size, np.float32), np.zeros(3))}
    stamps = []
    for r in range(rounds):
        for actor in peers.values():
            actor.put(r, slot, partial, separate_thread=False)
        own.take(r, sorted(peers), 60)
        stamps.append(time.perf_counter())
    return float(np.median(np.diff(stamps[WARMUP:])))


def mailbox_floor(client, addresses, p: int, size: int, rounds: int) -> float:
    tag = f"floor-{time.perf_counter_ns()}"
    futures = [client.submit(mailbox.Mailbox, f"{tag}-{s}", actor=True, workers=[addresses[s]]) for s in range(p)]
    actors = [f.result(timeout=60) for f in futures]
    loops = [client.submit(_mailbox_loop, s, size, rounds, f"{tag}-{s}",
                           {o: actors[o] for o in range(p) if o != s}, workers=[addresses[s]], pure=False)
             for s in range(p)]
    seconds = client.gather(loops)
    for actor in actors:
        actor.stop().result(timeout=30)
    return statistics.median(seconds)


def graph_floor(client, addresses, p: int, size: int, rounds: int) -> float:
    X = np.zeros((8 * p, 1), dtype=np.float32)
    shards = ppt.enter_data(client, X, np.zeros(8 * p, dtype=np.int64), n_shards=p, workers=addresses[:p])
    try:
        return round_latency.floor(client, shards, size, rounds)
    finally:
        ppt.exit_data(shards)


MPI_PROGRAM = """
import sys, time
import numpy as np
from mpi4py import MPI
size, rounds, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
comm = MPI.COMM_WORLD
send, total = np.ones(size + 3, np.float32), np.empty(size + 3, np.float32)
stamps = []
for r in range(rounds):
    comm.Allreduce(send, total, op=MPI.SUM)
    stamps.append(time.perf_counter())
if comm.Get_rank() == 0:
    print(float(np.median(np.diff(stamps[warmup:]))))
"""


def mpi_floor(p: int, size: int, rounds: int) -> float | None:
    """Median seconds of an Allreduce of ``size`` float32 on ``p`` MPI ranks (None without MPI)."""
    mpiexec = shutil.which("mpiexec")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    if mpiexec is None:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
        fh.write(MPI_PROGRAM)
    try:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        oversubscribe = ["-oversubscribe"] if p > (os.cpu_count() or 1) and "openmpi" in mpiexec else []
        out = subprocess.run([mpiexec, *oversubscribe, "-n", str(p), sys.executable, fh.name, str(size), str(rounds),
                              str(WARMUP)], capture_output=True, text=True, timeout=300, env=env)
        return float(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
    finally:
        os.unlink(fh.name)


def sync_round(client, addresses, p: int, data, rounds: int, block: int) -> tuple:
    """Median seconds of a streamed Sync(block) MNIST round: (beyond the compute, gradient,
    beyond the slowest loop's gradient, {phase: median} of the phases beyond the compute). The
    breakdown's phases are means over the loops, so ``wall - gradient`` also holds the wait for
    the slowest loop's gradient; a synchronous round's gradient ends with the slowest loop's,
    read from each loop's own timing."""
    shards = ppt.enter_data(client, data.X, data.y, n_shards=SYNC_SHARDS, workers=addresses[:p], dtype="float32")
    net = ppt.MLP(NET, hidden="tanh", output="softmax", dtype="float32")
    try:
        result = ppt.train(net, shards, ppt.Sync(lr=0.1, momentum=0.9, block=block),
                           ppt.Stop(max_epochs=rounds * block / shards.n_rows), exchange="stream")
    finally:
        ppt.exit_data(shards)
    rows = result.breakdown()[WARMUP:]
    loops_of = {(h["gen"], h["round"]): h["loops"] for h in diagnostics.records_of(result).heads if h.get("loops")}
    slowest = [max(loop["phases"]["gradient"] for loop in loops_of[r["gen"], r["round"]]) for r in rows]
    return (statistics.median(r["wall"] - r["gradient"] - r["update"] for r in rows),
            statistics.median(r["gradient"] for r in rows),
            statistics.median(r["wall"] - g - r["update"] for r, g in zip(rows, slowest)),
            phase_medians(rows))


def phase_medians(rows: list) -> dict:
    """Each phase beyond the compute (``loops.EXCHANGE_PHASES``): its median over the rows."""
    return {phase: statistics.median(r[phase] for r in rows) for phase in loops.EXCHANGE_PHASES}


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    data = ppt.datasets.mnist(n_train=24000, n_test=10, dtype="float32")
    seen: dict = {}
    t_start = time.perf_counter()
    client = ppt.connect(n_workers=max(args.workers), dashboard_address=None)
    try:
        addresses = ppt.cluster.worker_addresses(client)
        for trial in range(args.trials):
            for p in args.workers:
                for size in args.sizes:
                    ways = {"links": lambda p=p, size=size: links_floor(client, addresses, p, size, args.rounds),
                            "mailbox": lambda p=p, size=size: mailbox_floor(client, addresses, p, size, args.rounds),
                            "one-hop graph": lambda p=p, size=size: graph_floor(client, addresses, p, size,
                                                                                args.rounds),
                            "mpi4py Allreduce": lambda p=p, size=size: mpi_floor(p, size, args.rounds)}
                    order = list(ways) if trial % 2 == 0 else list(reversed(ways))
                    for name in order:
                        if p == 1 and name == "mailbox":
                            continue  # nothing to send
                        value = ways[name]()
                        if value is not None:
                            seen.setdefault((p, size, name), []).append(value)
                            print(f"trial {trial + 1} p={p} {size} floats {name}: {1e3 * value:.3f} ms", flush=True)
                rows = loops.floor_rows(client, addresses, p, max(args.sizes), args.rounds, warmup=WARMUP,
                                        dtype="float32", n_shards=SYNC_SHARDS)
                seen.setdefault((p, "tree floor"), []).append(statistics.median(map(loops.exchange_phases, rows)))
                seen.setdefault((p, "tree floor phases"), []).append(phase_medians(rows))
                beyond, gradient, critical, phases = sync_round(client, addresses, p, data, args.sync_rounds,
                                                                args.sync_block)
                seen.setdefault((p, "sync phases"), []).append(phases)
                seen.setdefault((p, "sync"), []).append(beyond)
                seen.setdefault((p, "gradient"), []).append(gradient)
                seen.setdefault((p, "sync slowest"), []).append(critical)
                print(f"trial {trial + 1} p={p} sync block {args.sync_block}: {1e3 * beyond:.3f} ms beyond the "
                      f"compute ({1e3 * gradient:.2f} ms gradient), {1e3 * critical:.3f} ms beyond the slowest "
                      f"loop's", flush=True)
    finally:
        ppt.cluster.close(client)
    print(report(seen, args, time.perf_counter() - t_start))


def _us(values) -> str:
    return f"{1e6 * statistics.median(values):.1f}"


def _ms(values) -> str:
    return f"{1e3 * statistics.median(values):.3f}" if values else "n/a"


def report(seen: dict, args, seconds: float) -> str:
    big = max(args.sizes)
    lines = [f"Median ms per round of the exchange alone ({args.trials} trial(s) of {args.rounds} rounds, "
             f"{seconds:.0f} s in all; {common.machine()}).", "",
             "| p | floats | links (streamed rounds) | mailbox (actor) | one-hop graph | mpi4py Allreduce |",
             "|---|---|---|---|---|---|"]
    for p in args.workers:
        for size in args.sizes:
            cells = [_ms(seen.get((p, size, name), [])) for name in ("links", "mailbox", "one-hop graph",
                                                                      "mpi4py Allreduce")]
            lines.append(f"| {p} | {size:,} | " + " | ".join(cells) + " |")
    lines += ["", f"Streamed Sync(block={args.sync_block}) on MNIST {NET}, float32, {SYNC_SHARDS} shards, through "
              f"ppt.train: the round beyond its compute against the links floor of {big:,} floats over the same "
              f"{SYNC_SHARDS} shards (the exchange and the shard tree's adds) of the same trial. Two ways: beyond the "
              "slowest loop's gradient (wall - the slowest loop's gradient - update: the round's exchange once every "
              "gradient is done, what the floor measures) and beyond the loops' mean gradient (wall - gradient - "
              "update, the breakdown's means: it also holds the faster loops' wait for the slowest, which the floor "
              "without compute does not have and an MPI program pays as well).", "",
              "| p | gradient ms (mean of loops) | beyond the slowest loop's gradient ms | beyond the mean gradient "
              f"ms | links floor, {SYNC_SHARDS} shards, ms | ratio, slowest (median of trials) | ratio, mean |",
              "|---|---|---|---|---|---|---|"]
    for p in args.workers:
        beyond, floor = seen[(p, "sync")], seen[(p, "tree floor")]
        critical = seen.get((p, "sync slowest"), [])
        ratios = [b / f for b, f in zip(beyond, floor)]
        slowest = f"{statistics.median(c / f for c, f in zip(critical, floor)):.2f}" if critical else "n/a"
        lines.append(f"| {p} | {_ms(seen[(p, 'gradient')])} | {_ms(critical)} | {_ms(beyond)} | {_ms(floor)} | "
                     f"{slowest} | {statistics.median(ratios):.2f} |")
    lines += ["", "The same, phase by phase (the loops' own timing, median over the rounds of the mean over the loops, "
              "then over the trials; microseconds): the real round's against the floor's. At p = 1 there is no "
              "exchange and the phases are the loop's own statements between two gradients.", "",
              "| p | " + " | ".join(f"{phase}: round / floor" for phase in loops.EXCHANGE_PHASES) + " |",
              "|---|" + "---|" * len(loops.EXCHANGE_PHASES)]
    for p in args.workers:
        real, floor = seen[(p, "sync phases")], seen[(p, "tree floor phases")]
        cells = [f"{_us([t[phase] for t in real])} / {_us([t[phase] for t in floor])}"
                 for phase in loops.EXCHANGE_PHASES]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    if not args.quick:
        (args.out / "exchange_floor.md").write_text(text + "\n")
        (args.out / "exchange_floor.json").write_text(json.dumps({f"{k}": v for k, v in seen.items()}, indent=1))
    return text


if __name__ == "__main__":
    main()
