"""Synchronous SGD by small blocks from the command line, against mpi4py and PyTorch, at p = 1, 2.

    python graphs/block_race.py                     # 3 repeats, interleaved, p = 1, 2
    python graphs/block_race.py --workers 1,2,4,8   # 4 and 8 oversubscribe 2 cores (marked *)
    python graphs/block_race.py --races mnist       # one of the two races
    python graphs/block_race.py --quick             # one repeat, MNIST to 88%, 0.1 CNN epoch

Usage::

    python graphs/block_race.py [--quick] [--repeats N] [--workers 1,2] [--promises same-p,any-p]
                                [--races mnist,cnn] [--out DIR]

Two races, each contender in processes of its own, every repeat running each once in turn (the
order rotates), ratios taken repeat by repeat against the contender named, then the median:

* **MNIST, block 200** (784-64-64-10 tanh, softmax, float32, lr 0.1, momentum 0.9), time to 97%
  test accuracy: ``ppt-dask train mnist --workers P --strategy block --block 200 --lr 0.1 --momentum
  0.9 --dtype float32 --reproducible R`` (graphs/peers/ppt_dask_cli.py: its own LocalCluster, its
  stopping rule, whose checks count) against the mpi4py program (graphs/peers/mpi_allreduce.py:
  ``mpiexec -n P``, each rank the gradient sum over its 200 / P rows of a step, one ``Allreduce``,
  the same momentum step; each step the same 200 rows as ppt_dask's 8 shards give, and ppt_dask's
  stopping rule: the windowed error estimate, then a test check, again every epoch, not only at
  an epoch's end, so that both need the same epochs).
* **A small CNN, block 128** (``graphs/small_cnn.py``'s ``torch_example_cnn``, lr 0.05, momentum 0.9),
  2 epochs: ``ppt-dask train mnist --model graphs.small_cnn:torch_example_cnn --workers P --strategy
  block --block 128 --lr 0.05 --momentum 0.9 --epochs 2 --target-error 0 --reproducible R`` (a
  target of 0 is never met: the 2 epochs run whole, no check) against a plain PyTorch loop (one
  process, one thread, 128 rows a step) and DistributedDataParallel (gloo, P processes of one thread,
  128 / P rows a step each), the same module, initial weights (``torch.manual_seed(0)``) and rows
  a step as ppt_dask's 8 shards give them (each shard's next 16 rows).

Each row says the time per round (step) split into the gradient (the workers' ``gradient`` phase;
mpi4py: its ``grad_sum``; PyTorch: forward and backward) and the rest. Writes graphs/out/block_race.md,
.csv and .json (block_race_mnist.* or block_race_cnn.* for one race alone).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402

import common  # noqa: E402

# ---- defaults ----------------------------------------------------------------------------
DEFAULTS = dict(
    REPEATS=3,
    WORKERS=(1, 2),  # p; past the machine's cores the rows are marked oversubscribed
    PROMISES=("same-p", "any-p"),  # ppt-dask --reproducible
    RACES=("mnist", "cnn"),
    BLOCK=200, LR=0.1, TARGET=0.97, MAX_EPOCHS=30, N_TRAIN=60000, N_TEST=10000, MAX_SECONDS=300.0,  # MNIST
    CNN_MODULE="graphs.small_cnn:torch_example_cnn", CNN_BLOCK=128, CNN_LR=0.05, CNN_EPOCHS=2.0,
    SHARDS=8, SEED=0,
)
QUICK = dict(REPEATS=1, N_TRAIN=6000, N_TEST=2000, TARGET=0.88, MAX_EPOCHS=10, MAX_SECONDS=60.0, CNN_EPOCHS=0.1)
MOMENTUM = 0.9
SKIPPED: dict[str, str] = {}  # contender label -> why it could not run here


# ---- MNIST, block 200 ----------------------------------------------------------------------


def mnist_contenders(args) -> list[dict]:
    cli = ["--strategy", "block", "--block", str(args.block), "--lr", str(args.lr), "--momentum", str(MOMENTUM),
           "--dtype", "float32"]
    out = []
    for p in args.workers:
        out.append(dict(name=f"mpi4py-p{p}", label=f"mpi4py Allreduce, np = {p}", p=p, threads=1,
                        script="mpi_allreduce.py", launcher=("mpiexec", "-n", str(p)), needs=("mpi4py",),
                        # the rows of each step and the stopping rule of ppt_dask's run (its 8 shards,
                        # Stop's defaults): it converges as ppt_dask does, epoch for epoch
                        spec=dict(shards=args.shards)))
        for promise in args.promises:
            flags = [*cli, "--reproducible", promise]
            out.append(dict(name=f"ppt_dask-p{p}-{promise}", label=f"ppt-dask --workers {p} --reproducible {promise}",
                            p=p, threads=1, script="ppt_dask_cli.py", spec=dict(p=p, args=flags)))
    runnable = []
    for c in out:  # a peer that cannot run here is said, on stderr and under the table
        if why := peers.missing(c):
            SKIPPED[c["label"]] = why
            print(f"mnist: {c['label']} not run: {why}", file=sys.stderr, flush=True)
        else:
            runnable.append(c)
    return runnable


def mnist_run(c: dict, args, work: Path, tag: str) -> dict:
    cfg = dict(N_TRAIN=args.n_train, N_TEST=args.n_test, TARGET=args.target, MAX_EPOCHS=args.max_epochs,
               STARTUP_TIMEOUT=peers.STARTUP_TIMEOUT)
    r = peers.race(c, args.lr, args.block, cfg, work, args.max_seconds, tag)
    if r.get("phases"):  # ppt_dask: the loops' own timing of a round
        ms = {p["phase"]: p["ms_per_round"] for p in r["phases"]}
        r["round_ms"], r["gradient_ms"] = sum(ms.values()), ms.get("gradient", 0.0)
    elif "step_ms" in r:  # mpi4py: its steps, and grad_sum within them; its last check's accuracy
        r["round_ms"] = r["step_ms"]
        r.setdefault("test_accuracy", (r.get("history") or [{}])[-1].get("test_accuracy"))
    return r


# ---- the small CNN, block 128 -------------------------------------------------------------


def cnn_contenders(args) -> list[dict]:
    out = [dict(name="torch-loop", label="PyTorch loop, 1 process x 1 thread", p=1, role="loop")]
    for p in args.workers:
        if p > 1:
            out.append(dict(name=f"torch-ddp-p{p}", label=f"PyTorch DDP gloo, {p} processes x 1 thread", p=p,
                            role="ddp"))
        for promise in args.promises:
            out.append(dict(name=f"ppt_dask-p{p}-{promise}", label=f"ppt-dask --workers {p} --reproducible {promise}",
                            p=p, role="cli", promise=promise))
    return out


def cnn_command(c: dict, args) -> list[str]:
    return ["train", "mnist", "--model", args.cnn_module, "--workers", str(c["p"]), "--strategy", "block",
            "--block", str(args.cnn_block), "--lr", str(args.cnn_lr), "--momentum", str(MOMENTUM),
            "--epochs", f"{args.cnn_epochs:g}", "--target-error", "0", "--seed", str(args.seed),
            "--reproducible", c["promise"], "--quiet"]


def cnn_run(c: dict, args, work: Path, tag: str) -> dict:
    out = work / f"{tag}.json"
    if c["role"] == "cli":
        cmd = cnn_command(c, args)
        proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *cmd, "--json", str(out)], cwd=ROOT,
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            return {"reached": False, "stopped_because": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
        s = json.loads(out.read_text())
        ms = {p["phase"]: p["ms_per_round"] for p in s.get("phases") or []}
        return {"reached": True, "seconds": s["wall_seconds"], "rounds": s["rounds"],
                "test_accuracy": s["test_accuracy"], "round_ms": sum(ms.values()), "gradient_ms": ms.get("gradient"),
                "command": "ppt-dask " + " ".join(cmd)}
    spec = dict(module=args.cnn_module, p=c["p"], block=args.cnn_block, lr=args.cnn_lr, momentum=MOMENTUM,
                epochs=args.cnn_epochs, shards=args.shards, seed=args.seed, role=c["role"], out=str(out))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--role", json.dumps(spec)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode or not out.exists():
        return {"reached": False, "stopped_because": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    return {"reached": True, **json.loads(out.read_text())}


def step_rows(n_rows: int, shards: int, block: int, step: int, ranks: int, rank: int) -> np.ndarray:
    """The training rows of ``step`` that rank ``rank`` of ``ranks`` takes: the next rows of each
    of its shards (contiguous blocks of the ``shards``), as ppt_dask's ``Sync(block)`` walks them."""
    from ppt_dask.algorithms.strategies import block_rows, shard_share
    from ppt_dask.core.tree import split_rows, split_shards

    edges = split_rows(n_rows, shards)
    a, b = split_shards(shards, ranks)[rank]
    out = []
    for s in range(a, b):
        lo, hi = edges[s]
        out.append(lo + np.arange(hi - lo)[block_rows(hi - lo, shard_share(block, shards, s), step)])
    return np.concatenate(out)


def torch_role(spec: dict) -> None:
    """A PyTorch contender's process (its rank 0 writes the result): the plain loop, or DDP's ranks."""
    if spec["role"] == "ddp":
        import torch.multiprocessing as mp

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mp.spawn(_rank, args=(spec, port), nprocs=spec["p"], join=True)
    else:
        _rank(0, spec, None)


def _rank(rank: int, spec: dict, port) -> None:
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT))  # the module's package, as `ppt-dask --model` finds it in the current folder
    from ppt_dask.data import datasets
    from ppt_dask.nets.building import load_builder

    torch.set_num_threads(1)
    ranks = spec["p"] if spec["role"] == "ddp" else 1
    if ranks > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    data = datasets.mnist(dtype="float32")
    X, y = torch.from_numpy(data.X.reshape(-1, 1, 28, 28)), torch.from_numpy(data.y)
    torch.manual_seed(spec["seed"])
    model = load_builder(spec["module"])()
    if ranks > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    steps = int(np.ceil(spec["epochs"] * len(X) / spec["block"] - 1e-9))
    rows = [torch.from_numpy(step_rows(len(X), spec["shards"], spec["block"], i, ranks, rank)) for i in range(steps)]
    if ranks > 1:
        dist.barrier()
    model.train()
    gradient, t0 = 0.0, time.perf_counter()
    for i in range(steps):
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(X[rows[i]]), y[rows[i]])  # the mean over the rank's rows, as DDP averages
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP: the gradients' all-reduce runs in here, overlapped
        gradient += time.perf_counter() - t1
        opt.step()
    seconds = time.perf_counter() - t0
    if rank == 0:
        module = model.module if ranks > 1 else model
        module.eval()
        with torch.no_grad():
            accuracy = (module(torch.from_numpy(data.X_test.reshape(-1, 1, 28, 28))).argmax(1)
                        == torch.from_numpy(data.y_test)).double().mean().item()
        Path(spec["out"]).write_text(json.dumps({
            "seconds": seconds, "rounds": steps, "test_accuracy": accuracy, "round_ms": 1e3 * seconds / steps,
            "gradient_ms": None if ranks > 1 else 1e3 * gradient / steps,  # DDP's all-reduce hides in its backward
            "command": f"PyTorch {'DDP gloo ' if ranks > 1 else ''}loop, {ranks} process(es) x 1 thread, "
                       f"{spec['block'] // ranks} rows a step each, SGD lr {spec['lr']} momentum {spec['momentum']}"}))
    if ranks > 1:
        dist.barrier()
        dist.destroy_process_group()


# ---- the driver ----------------------------------------------------------------------------


def rows_of(race: str, cs: list[dict], runs: dict, args) -> list[dict]:
    """One row per contender: medians over the repeats, and ratios repeat by repeat."""
    def med(rs, key):
        values = [r[key] for r in rs if r.get("reached") and r.get(key) is not None]
        return statistics.median(values) if values else None

    def ratio(rs, others):
        pairs = [a["seconds"] / b["seconds"] for a, b in zip(rs, others) if a.get("reached") and b.get("reached")]
        return statistics.median(pairs) if pairs else None

    out = []
    for c in cs:
        rs = runs[c["name"]]
        star = "*" if c["p"] > (os.cpu_count() or 1) else ""
        row = {"race": race, "contender": c["label"] + star, "p": c["p"], "seconds": med(rs, "seconds"),
               "epochs": med(rs, "epochs") if race == "mnist" else None,
               "test accuracy %": None if med(rs, "test_accuracy") is None else 100 * med(rs, "test_accuracy"),
               "ms a round": med(rs, "round_ms"), "gradient ms": med(rs, "gradient_ms")}
        if row["ms a round"] is not None and row["gradient ms"] is not None:
            row["rest ms"] = row["ms a round"] - row["gradient ms"]
        if c["name"].startswith("ppt_dask"):
            peer = f"mpi4py-p{c['p']}" if race == "mnist" else ("torch-loop" if c["p"] == 1 else f"torch-ddp-p{c['p']}")
            row["x peer"] = ratio(rs, runs.get(peer, []))
            row["peer"] = peer
            one = runs.get(c["name"].replace(f"-p{c['p']}-", "-p1-"), [])
            row["x own p = 1"] = ratio(rs, one) if c["p"] > 1 else None
        row["reached"] = f"{sum(1 for r in rs if r.get('reached'))}/{len(rs)}"
        out.append(row)
    return out


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--role":
        torch_role(json.loads(sys.argv[2]))
        return 0
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    loads, rows, everything = [os.getloadavg()[0]], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if "mnist" in args.races:
            peers.prepare(dict(N_TRAIN=args.n_train, N_TEST=args.n_test), work)
        for race in args.races:
            cs, run = (mnist_contenders(args), mnist_run) if race == "mnist" else (cnn_contenders(args), cnn_run)
            runs: dict = {c["name"]: [] for c in cs}
            for repeat in range(args.repeats):
                for c in cs[repeat % len(cs):] + cs[:repeat % len(cs)]:  # the order rotates
                    r = run(c, args, work, f"{race}-{c['name']}-{repeat}")
                    runs[c["name"]].append(r)
                    loads.append(os.getloadavg()[0])
                    shown = (f"{r['seconds']:.2f} s, {r.get('round_ms') or 0:.2f} ms a round"
                             if r.get("reached") else f"not reached ({r.get('stopped_because')})")
                    print(f"{race} repeat {repeat + 1} {c['name']}: {shown} (load {loads[-1]:.1f})", file=sys.stderr,
                          flush=True)
            rows += rows_of(race, cs, runs, args)
            everything[race] = runs
    columns = ["race", "contender", "p", "seconds", "x peer", "x own p = 1", "epochs", "test accuracy %", "ms a round",
               "gradient ms", "rest ms", "reached"]
    # one race alone (--races mnist) writes block_race_mnist.*: the file the Benchmarks page shows
    # under that command; both races, block_race.*
    name = "block_race" if len(args.races) != 1 else f"block_race_{args.races[0]}"
    common.write_table(args.out, name, rows, columns=columns,
                       title=f"Synchronous SGD by small blocks: MNIST block {args.block} to {args.target:.0%}, a small "
                             f"CNN block {args.cnn_block} for {args.cnn_epochs:g} epochs; medians of {args.repeats}",
                       notes=[f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}",
                              "x peer: seconds over the peer's at the same p in the same repeat (MNIST: mpi4py at "
                              "np = p; CNN: the plain PyTorch loop at p = 1, DDP at p > 1), median; x own p = 1: "
                              "over the same contender at p = 1",
                              "ms a round: per round (ppt_dask: the workers' phases; mpi4py and PyTorch: per step, "
                              "checks apart); gradient ms: the gradient phase (PyTorch: forward and backward; DDP's "
                              "all-reduce runs inside its backward, so none is given)",
                              "* more workers than cores: oversubscribed",
                              *(f"not run: {label} ({why}); x peer is empty" for label, why in SKIPPED.items()),
                              *sorted({f"`{r['command']}`" for runs in everything.values() for rs in runs.values()
                                       for r in rs if r.get("command")})])
    (args.out / f"{name}.json").write_text(json.dumps({"runs": everything, "loads": loads}, indent=1, default=str))
    print(common.markdown(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
