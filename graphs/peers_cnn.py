"""Race a LeNet-5 on MNIST to 99% test accuracy: ppt_dask from the command line against PyTorch.

Every contender trains the same module (``ppt_dask.nets.examples:lenet5``) from the same
initial weights (``lenet5()`` under ``torch.manual_seed(SEED)``, which is what
``ppt.TorchNet(lenet5).init_params(SEED)`` gives), with momentum SGD, on the same 2 cores,
in the same run; each of two workers (ranks) walks its contiguous half of the training rows
in order, BATCH rows a step:

* ppt_dask at p = 2 from the command line, ``ppt-dask train mnist --model ...`` with the
  module defaults (local SGD: BATCH-row steps on each worker, the weights averaged every
  STEPS steps, the average one round late), and the same on one worker (``--shards 2``: the
  same two shards, so the same arithmetic, one after the other);
* ppt_dask at p = 2 with ``--strategy block --block 2*BATCH --shards 2``: synchronous SGD,
  the same steps as DDP's;
* PyTorch DistributedDataParallel, gloo, 2 processes x 1 thread (each rank BATCH rows a step,
  the gradients averaged every step);
* PyTorch in one process of 2 threads, 2*BATCH rows a step (both halves' next BATCH rows).

Every contender checks the test accuracy after each epoch and stops at the first check at or
above TARGET (the check's time counts); the clock starts when the data is in place and the
model built (start-up is reported apart). Each ratio is taken race by race against ppt_dask
p = 2 (the module defaults) in the same repeat, then the median. The per-round breakdown of
the ppt_dask runs is printed.

Usage::

    python graphs/peers_cnn.py                  # REPEATS paired races to 99%
    python graphs/peers_cnn.py --quick          # one race each to 90%, one epoch at most
    python graphs/peers_cnn.py --only ddp,p2    # some contenders (substrings of their names)

Needs the ``[torch]`` extra. Writes graphs/out/peers_cnn.md and peers_cnn.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))
import _common as c  # noqa: E402  (graphs/peers/_common.py: the race rule, rows, results)

# ---- defaults ----------------------------------------------------------------------------
MODULE = "ppt_dask.nets.examples:lenet5"
TARGET = 0.99
BATCH = 64  # rows per step on each worker (rank)
LR, MOMENTUM = 0.02, 0.9  # constant-lr SGD: 0.02 reached 98.95% in 6 epochs on one process, 0.05 stalled at 98.7%
STEPS = 20  # local steps between averages (ppt_dask's module default: interval 1280 = 20 x 64)
MAX_EPOCHS = 20
REPEATS = 3
SEED = 0
QUICK = dict(TARGET=0.9, MAX_EPOCHS=1, REPEATS=1)
OUT = HERE / "out"

CONTENDERS = {  # name -> (label, how it runs)
    "ppt_dask-p2": ("ppt_dask p = 2, local SGD (the `--model` default strategy)", "cli"),
    "ppt_dask-p1": ("ppt_dask p = 1, the same two shards", "cli"),
    "ppt_dask-p2-sync": ("ppt_dask p = 2, `--strategy block` (DDP's steps)", "cli"),
    "torch-ddp": ("PyTorch DDP gloo, 2 processes x 1 thread", "ddp"),
    "torch": ("PyTorch, 1 process x 2 threads", "single"),
}
REFERENCE = "ppt_dask-p2"


def cli_args(name: str, cfg: dict) -> list[str]:
    """The ``ppt-dask`` command of a ppt_dask contender (as a user types it)."""
    args = ["train", "mnist", "--model", MODULE, "--workers", "1" if name == "ppt_dask-p1" else "2",
            "--shards", "2", "--lr", str(LR), "--momentum", str(MOMENTUM), "--seed", str(SEED),
            "--epochs", str(cfg["MAX_EPOCHS"]), "--target-error", f"{1 - cfg['TARGET']:.4g}",
            "--check-every", "1", "--screen", "off", "--quiet"]
    if name.endswith("-sync"):
        return args + ["--strategy", "block", "--block", str(2 * BATCH)]
    # --no-shuffle: each worker walks its half in order, as the PyTorch contenders do (the module default shuffles)
    return args + ["--block", str(BATCH), "--interval", str(STEPS * BATCH), "--no-shuffle"]


def run_cli(name: str, cfg: dict, work: Path, tag: str) -> dict:
    summary = work / f"{tag}.json"
    args = cli_args(name, cfg)
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args, "--json", str(summary)],
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        return {"reached": False, "stopped_because": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    s = json.loads(summary.read_text())
    return {"reached": bool(s["learned"]), "seconds": s["wall_seconds"], "epochs": s["epochs"],
            "rounds": s["rounds"], "startup_seconds": time.time() - t0 - s["wall_seconds"],
            "test_accuracy": s["test_accuracy"], "phases": s.get("phases"),
            "median_round_ms": 1e3 * s["median_round_seconds"], "not_gradient": s.get("percent_not_gradient"),
            "command": " ".join(["ppt-dask", *args])}


# ---- the PyTorch contenders (each in processes of its own) --------------------------------


def _model(torch):
    """The shared module and initial weights: ``lenet5()`` under ``torch.manual_seed(SEED)``."""
    from ppt_dask.nets.examples import lenet5
    torch.manual_seed(SEED)
    return lenet5()


def _images(spec, split, a=0, b=None):
    X, y = c.rows(spec, split, a, b)
    return X.reshape(len(X), 1, 28, 28), y


def single(spec: dict) -> dict:
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    halves = [tuple(map(torch.from_numpy, _images(spec, "train", a, b))) for a, b in c.split_rows(spec["n_train"], 2)]
    X_test, y_test = map(torch.from_numpy, _images(spec, "test"))
    model = _model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    steps = min(len(X) for X, _ in halves) // BATCH

    def train_epoch(e):
        model.train()
        for i in range(steps):  # both halves' next BATCH rows: the two workers' rows of a step
            rows = slice(i * BATCH, (i + 1) * BATCH)
            X = torch.cat([h[0][rows] for h in halves])
            y = torch.cat([h[1][rows] for h in halves])
            loss = F.cross_entropy(model(X), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return float(loss.detach())

    def test_accuracy():
        model.eval()
        with torch.inference_mode():
            return (model(X_test).argmax(1) == y_test).double().mean().item()
    return c.race(spec, train_epoch, test_accuracy)


def _rank(rank: int, spec: dict, port: int, out: str):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    X, y = map(torch.from_numpy, _images(spec, "train", *c.split_rows(spec["n_train"], 2)[rank]))
    X_test, y_test = map(torch.from_numpy, _images(spec, "test", *c.split_rows(spec["n_test"], 2)[rank]))
    model = DDP(_model(torch))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    steps = spec["n_train"] // 2 // BATCH

    def train_epoch(e):
        model.train()
        for i in range(steps):
            loss = F.cross_entropy(model(X[i * BATCH:(i + 1) * BATCH]), y[i * BATCH:(i + 1) * BATCH])
            opt.zero_grad(set_to_none=True)
            loss.backward()  # the gradients' all-reduce (their mean over the ranks) runs in here
            opt.step()
        return float(loss.detach())

    def test_accuracy():
        model.eval()
        with torch.inference_mode():
            counts = torch.tensor([(model(X_test).argmax(1) == y_test).sum().item(), len(y_test)], dtype=torch.float64)
        dist.all_reduce(counts)
        return (counts[0] / counts[1]).item()

    def agree(flag: bool) -> bool:
        t = torch.tensor([float(flag)])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    dist.barrier()
    run = c.race(spec, train_epoch, test_accuracy, agree)
    if rank == 0:
        Path(out).write_text(json.dumps(run))
    dist.barrier()
    dist.destroy_process_group()


def ddp(spec: dict) -> dict:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "rank0.json")
        mp.spawn(_rank, args=(spec, port, out), nprocs=2, join=True)
        return json.loads(Path(out).read_text())


def run_torch(name: str, cfg: dict, work: Path, tag: str) -> dict:
    spec = dict(data=str(work), n_train=60000, n_test=10000, target=cfg["TARGET"], max_epochs=cfg["MAX_EPOCHS"],
                max_seconds=1e9, t_launch=time.time(), role=CONTENDERS[name][1])
    spec_path, out = work / f"{tag}.spec.json", work / f"{tag}.result.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": "2" if name == "torch" else "1"}
    proc = subprocess.run([sys.executable, __file__, "--role", str(spec_path), str(out)], env=env,
                          capture_output=True, text=True, timeout=3600)
    if proc.returncode or not out.exists():
        return {"reached": False, "stopped_because": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    run = json.loads(out.read_text())
    return {**run, "startup_seconds": run["t_ready"] - spec["t_launch"]}


# ---- the driver ----------------------------------------------------------------------------


def prepare(work: Path) -> None:
    from ppt_dask.data import datasets

    d = datasets.mnist(dtype="float32")
    for name, a in (("X_train", d.X), ("y_train", d.y), ("X_test", d.X_test), ("y_test", d.y_test)):
        np.save(work / f"{name}.npy", a)


def table(runs: dict, cfg: dict) -> str:
    ref = {i: r for i, r in enumerate(runs.get(REFERENCE, [])) if r.get("reached")}
    lines = [f"Time to {cfg['TARGET']:.0%} MNIST test accuracy, {MODULE}, batch {BATCH} per worker, lr {LR}, "
             f"momentum {MOMENTUM}; median of {cfg['REPEATS']} race(s); ratio = time / ppt_dask p = 2's in the same "
             "repeat, median.", "",
             "| contender | time (s) | ratio to ppt_dask p = 2 | epochs | start-up (s) | reached |",
             "|---|---|---|---|---|---|"]
    for name, rs in runs.items():
        ok = [(i, r) for i, r in enumerate(rs) if r.get("reached")]
        med = lambda key, ok=ok: statistics.median(r[key] for _, r in ok) if ok else None  # noqa: E731
        ratios = [r["seconds"] / ref[i]["seconds"] for i, r in ok if i in ref]
        cells = [f"{v:.2f}" if v is not None else "-" for v in (med("seconds"), statistics.median(ratios) if ratios
                                                                 else None, med("epochs"), med("startup_seconds"))]
        lines.append(f"| {CONTENDERS[name][0]} | " + " | ".join(cells) + f" | {len(ok)}/{len(rs)} |")
    for name in ("ppt_dask-p2", "ppt_dask-p2-sync", "ppt_dask-p1"):
        done = [r for r in runs.get(name, []) if r.get("phases")]
        if done:
            r = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
            lines += ["", f"{CONTENDERS[name][0]}: {r['rounds']} rounds, median round {r['median_round_ms']:.1f} ms, "
                      f"{r['not_gradient'] or 0:.1f} % of the workers' time not gradient; per round (ms): "
                      + ", ".join(f"{p['phase']} {p['ms_per_round']:.1f}" for p in r["phases"] if p["seconds"] > 0),
                      f"`{r['command']}`"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one race each to 90%%, one epoch at most")
    parser.add_argument("--only", default=None, help="contenders whose names contain one of these (comma-separated)")
    parser.add_argument("--out", default=str(OUT), help="folder for peers_cnn.md and peers_cnn.json")
    parser.add_argument("--role", nargs=2, default=None, help=argparse.SUPPRESS)  # a PyTorch contender's process
    args = parser.parse_args()
    if args.role:
        spec = json.loads(Path(args.role[0]).read_text())
        Path(args.role[1]).write_text(json.dumps(single(spec) if spec["role"] == "single" else ddp(spec)))
        return 0
    cfg = {**dict(TARGET=TARGET, MAX_EPOCHS=MAX_EPOCHS, REPEATS=REPEATS), **(QUICK if args.quick else {})}
    names = [n for n in CONTENDERS if not args.only or any(s in n for s in args.only.split(","))]
    runs = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prepare(work)
        for rep in range(cfg["REPEATS"]):
            for name in names[rep % len(names):] + names[:rep % len(names)]:  # the order rotates
                how = run_cli if CONTENDERS[name][1] == "cli" else run_torch
                r = how(name, cfg, work, f"{name}-{rep}")
                runs[name].append(r)
                shown = (f"{r['seconds']:.1f} s, {r['epochs']:.3g} epochs" if r.get("reached")
                         else r.get("stopped_because"))
                print(f"race {rep} {name:18s} {shown}", file=sys.stderr, flush=True)
    text = table(runs, cfg) + f"\n\nCommand: `python graphs/peers_cnn.py{' --quick' if args.quick else ''}`; " \
        f"load average {os.getloadavg()[0]:.1f} at the end."
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers_cnn.md").write_text(text + "\n")
    (out / "peers_cnn.json").write_text(json.dumps({"config": cfg, "runs": runs}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
