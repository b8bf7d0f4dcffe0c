"""Race one worker's step of a PyTorch module against a plain PyTorch loop: an epoch of MNIST.

The module is a small CNN a user would bring, ``graphs/small_cnn.py``'s ``torch_example_cnn`` (2 convolutions, 2 dense
layers, 26,474 parameters), given on the command line as a user gives it. At each thread count t
of THREADS, in processes of their own, in turn (the order rotates each repeat):

* **PyTorch**: a plain loop, ``torch.set_num_threads(t)``, the module built under
  ``torch.manual_seed(SEED)``, ``torch.optim.SGD(lr=LR, momentum=MOMENTUM)``, BATCH rows a step
  walked through a new order each pass over the rows: the order ``ppt.LocalSGD(shuffle=True)``
  walks on one shard (``np.random.default_rng([SEED, 0, pass]).permutation``), for as many steps as
  ppt_dask takes (whole rounds: 47 rounds of 20 steps, 1.003 epochs);
* **ppt_dask**: ``ppt-dask train mnist --model graphs.small_cnn:torch_example_cnn --workers 1 --epochs EPOCHS
  --threads-per-worker t`` (the module defaults: local SGD, 64-row steps, lr 0.05, momentum 0.9, each
  pass in a new order), the same initial weights and rows.

The epoch's time is the clock from the first step to the last: the plain loop's once its data is
in memory and its module built, ppt_dask's run wall time (from once the data is on the worker and
the module built there to the last round read). The step time is the median over chunks of 20
steps (ppt_dask: its median round over 20). Ratios are taken repeat by repeat (ppt_dask over the
plain loop at the same threads; 2 threads over 1 for each), then the median. Test accuracy after
the epoch is printed beside.

Usage::

    python graphs/torch_step.py                 # REPEATS (3) interleaved repeats at 1 and 2 threads
    python graphs/torch_step.py --quick         # one repeat of 0.1 epoch
    python graphs/torch_step.py --threads 1     # one thread count
    python graphs/torch_step.py --quiet-cores 0.3   # on a shared machine: runs again while others were busy

Needs the ``[torch]`` extra. Writes graphs/out/torch_step.md, .csv and .json.
"""

from __future__ import annotations

import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common as g

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# ---- defaults ----------------------------------------------------------------------------
DEFAULTS = dict(
    MODULE="graphs.small_cnn:torch_example_cnn",
    THREADS=(1, 2),
    EPOCHS=1.0,
    REPEATS=3,
    BATCH=64, LR=0.05, MOMENTUM=0.9, STEPS=20,  # the module defaults of ppt-dask train mnist --model
    SEED=0,
    # on a shared machine: run a contender again (at most TRIES times) while other processes used
    # more than QUIET_CORES cores on average during its run (0: keep every run); each run's share is printed
    QUIET_CORES=0.0, TRIES=10,
)
QUICK = dict(EPOCHS=0.1, REPEATS=1)
N_TRAIN = 60000


def ppt_run(args, threads: int, work: Path, tag: str) -> dict:
    """``ppt-dask train mnist --model ...`` as a user types it, its summary read back."""
    summary = work / f"{tag}.json"
    cmd = ["train", "mnist", "--model", args.module, "--workers", "1", "--epochs", f"{args.epochs:g}",
           "--threads-per-worker", str(threads), "--seed", str(args.seed), "--quiet"]
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *cmd, "--json", str(summary)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"ppt-dask {' '.join(cmd)}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    s = json.loads(summary.read_text())
    steps = s["rounds"] * args.steps
    return {"epoch_seconds": s["wall_seconds"], "step_ms": 1e3 * s["median_round_seconds"] / args.steps,
            "steps": steps, "test_accuracy": s["test_accuracy"], "command": "ppt-dask " + " ".join(cmd)}


def plain_run(args, threads: int, work: Path, tag: str) -> dict:
    """The plain PyTorch loop in a process of its own (this file with ``--plain``)."""
    out = work / f"{tag}.json"
    steps = math.ceil(args.epochs * N_TRAIN / (args.steps * args.batch) - 1e-9) * args.steps
    spec = dict(module=args.module, threads=threads, steps=steps, batch=args.batch, lr=args.lr,
                momentum=args.momentum, seed=args.seed, chunk=args.steps, out=str(out))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run([sys.executable, __file__, "--plain", json.dumps(spec)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"the plain loop: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return json.loads(out.read_text())


def plain(spec: dict) -> None:
    """A plain PyTorch loop over the rows LocalSGD(shuffle=True) walks; writes its timings."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT))  # the module's package, as `ppt-dask --model` finds it in the current folder
    from ppt_dask.data import datasets
    from ppt_dask.nets.building import load_builder

    torch.set_num_threads(spec["threads"])
    data = datasets.mnist(dtype="float32")
    X, y = torch.from_numpy(data.X.reshape(-1, 1, 28, 28)), torch.from_numpy(data.y)
    X_test, y_test = torch.from_numpy(data.X_test.reshape(-1, 1, 28, 28)), torch.from_numpy(data.y_test)
    torch.manual_seed(spec["seed"])
    model = load_builder(spec["module"])()
    opt = torch.optim.SGD(model.parameters(), lr=spec["lr"], momentum=spec["momentum"])
    batch, n = spec["batch"], len(X)
    orders: dict = {}

    def rows(step: int):
        p, offset = divmod(step * batch, n)
        if p not in orders:
            orders[p] = torch.from_numpy(np.random.default_rng([spec["seed"], 0, p]).permutation(n))
        if offset + batch > n:
            if p + 1 not in orders:
                orders[p + 1] = torch.from_numpy(np.random.default_rng([spec["seed"], 0, p + 1]).permutation(n))
            return torch.cat([orders[p][offset:], orders[p + 1][:offset + batch - n]])
        return orders[p][offset:offset + batch]

    model.train()
    chunks = []
    for first in range(0, spec["steps"], spec["chunk"]):
        t0 = time.perf_counter()
        for step in range(first, min(first + spec["chunk"], spec["steps"])):
            i = rows(step)
            loss = F.cross_entropy(model(X[i]), y[i])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        chunks.append(time.perf_counter() - t0)
    model.eval()
    with torch.no_grad():
        accuracy = (model(X_test).argmax(1) == y_test).double().mean().item()
    Path(spec["out"]).write_text(json.dumps({
        "epoch_seconds": sum(chunks), "step_ms": 1e3 * statistics.median(chunks) / spec["chunk"],
        "steps": spec["steps"], "test_accuracy": accuracy,
        "command": f"PyTorch loop, {spec['threads']} thread(s), batch {batch}, SGD lr {spec['lr']} "
                   f"momentum {spec['momentum']}"}))


def _busy_seconds() -> float:
    """CPU seconds all processes of the machine have used (Linux /proc/stat)."""
    with open("/proc/stat") as fh:
        fields = [int(v) for v in fh.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def wait_quiet(cores: float, longest: float = 900.0) -> None:
    """Wait (at most ``longest`` seconds) until the machine's other processes use at most
    ``cores`` cores over two seconds (nothing of this script runs meanwhile)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < longest:
        busy = _busy_seconds()
        time.sleep(2.0)
        if (_busy_seconds() - busy) / 2.0 <= cores:
            return


def measured(run, *args) -> dict:
    """``run(*args)`` with the cores other processes used on average while it ran (its own
    processes' CPU time taken from the machine's)."""
    busy, ours, t0 = _busy_seconds(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = run(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = (after.ru_utime - ours.ru_utime) + (after.ru_stime - ours.ru_stime)
    out["others_cores"] = max(0.0, (_busy_seconds() - busy - mine) / (time.perf_counter() - t0))
    return out


def table(runs: dict, threads: tuple) -> list[dict]:
    """One row per contender: medians, and the medians of the pairwise ratios."""
    rows = []
    for (who, t), rs in runs.items():
        row = {"contender": f"{'ppt_dask --workers 1' if who == 'ppt' else 'PyTorch loop'}, {t} thread(s)",
               "epoch s": statistics.median(r["epoch_seconds"] for r in rs),
               "step ms": statistics.median(r["step_ms"] for r in rs),
               "steps": rs[0]["steps"],
               "test accuracy %": 100 * statistics.median(r["test_accuracy"] for r in rs),
               "others' cores": statistics.median(r["others_cores"] for r in rs),
               "runs": len(rs)}
        if who == "ppt":
            pairs = list(zip(rs, runs[("plain", t)]))
            row["epoch x PyTorch"] = statistics.median(a["epoch_seconds"] / b["epoch_seconds"] for a, b in pairs)
            row["step x PyTorch"] = statistics.median(a["step_ms"] / b["step_ms"] for a, b in pairs)
        if t != threads[0]:
            pairs = list(zip(rs, runs[(who, threads[0])]))
            row[f"epoch x {threads[0]} thread(s)"] = statistics.median(a["epoch_seconds"] / b["epoch_seconds"]
                                                                       for a, b in pairs)
        rows.append(row)
    return rows


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--plain":
        plain(json.loads(sys.argv[2]))
        return 0
    args = g.arguments(__doc__, DEFAULTS, QUICK)
    contenders = [(who, t) for t in args.threads for who in ("plain", "ppt")]
    runs: dict = {c: [] for c in contenders}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for rep in range(args.repeats):
            shift = rep % len(contenders)
            for who, t in contenders[shift:] + contenders[:shift]:  # the order rotates
                for attempt in range(args.tries):
                    if args.quiet_cores:
                        wait_quiet(args.quiet_cores)
                    run = measured(ppt_run if who == "ppt" else plain_run, args, t, work, f"{who}-{t}-{rep}")
                    print(f"repeat {rep} {who:5s} {t} thread(s): epoch {run['epoch_seconds']:.2f} s, step "
                          f"{run['step_ms']:.2f} ms, test accuracy {run['test_accuracy']:.4f} (others used "
                          f"{run['others_cores']:.2f} cores, load {os.getloadavg()[0]:.1f})", file=sys.stderr,
                          flush=True)
                    loads.append(os.getloadavg()[0])
                    if not args.quiet_cores or run["others_cores"] <= args.quiet_cores or attempt == args.tries - 1:
                        break
                runs[(who, t)].append(run)
    rows = table(runs, tuple(args.threads))
    commands = sorted({r["command"] for rs in runs.values() for r in rs})
    columns = list(dict.fromkeys(k for r in rows for k in r))
    g.write_table(args.out, "torch_step", rows, columns=columns,
                  title=f"{args.epochs:g} epoch of MNIST, {args.module}: one ppt_dask worker against a plain "
                        f"PyTorch loop, medians of {args.repeats}",
                  notes=[f"load average (1 min) during the runs: {min(loads):.1f}-{max(loads):.1f}; others' cores: "
                         "what other processes used on average during a run (median), the machine's CPU time "
                         "less the run's own"
                         + (f"; a run was made again while above {args.quiet_cores:g}" if args.quiet_cores else ""),
                         "ratios repeat by repeat, then the median", *[f"`{c}`" for c in commands]])
    (args.out / "torch_step.json").write_text(json.dumps(
        {"runs": {f"{who}-{t}": rs for (who, t), rs in runs.items()}, "loads": loads}, indent=1))
    print(g.markdown(rows, columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
