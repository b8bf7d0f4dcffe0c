"""The shared-memory exchange's memory and adds spread over the loops: no worker grows with p.

    python graphs/shared_spread.py                     # p = 8, MNIST 784-2048-2048-10 float32 (5.8M), 3 trials
    python graphs/shared_spread.py --quick             # p = 4, 784-512-512-10, 1 trial
    python graphs/shared_spread.py --trees ../base,.   # an older tree beside this one, trials interleaved

Each trial is a process of its own (``PYTHONPATH`` at one of ``--trees``, trials of the trees
interleaved) that starts ``ppt.connect(n_workers=p)`` and trains ``ppt.Sync`` by block on
MNIST rows through ``ppt.train`` with ``allreduce="shared"`` (what "auto" takes on one host) for
``--rounds`` rounds, then reads every worker's peak RSS (``ru_maxrss``: the worker's whole
life, a fresh cluster each trial) and every loop's ``reduce`` seconds a round (its adds and the
copy of the total, from the loops' own timing of each round, after ``--warmup`` rounds), and
compares the weights with :func:`ppt_dask.algorithms.serial.train_serial`'s. It prints per
tree the medians over trials of: the largest and smallest worker's peak RSS and their ratio,
the largest and smallest loop's median ``reduce`` and their ratio, the round's median wall
time, and whether every trial's weights were bitwise the serial path's.

Oversubscribed where p is past the cores (8 loops on this project's 2 cores): the wall times
are the machine's, the memory and the split of the adds are not.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DEFAULTS = {
    "WORKERS": 8,
    "HIDDEN": (2048, 2048),
    "ROWS": 4000,  # MNIST training rows (the first ones)
    "BLOCK": 400,  # rows a round (Sync by block)
    "ROUNDS": 12,
    "WARMUP": 2,
    "TRIALS": 3,
    "TREES": (".",),  # repositories whose ppt_dask to run (PYTHONPATH), trials interleaved
}
QUICK = {"WORKERS": 4, "HIDDEN": (512, 512), "ROUNDS": 6, "TRIALS": 1}


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def trial(args) -> dict:
    """One trial in this process: the run, every worker's peak RSS, every loop's reduce."""
    import numpy as np

    import ppt_dask as ppt
    from ppt_dask.algorithms.serial import train_serial
    from ppt_dask.data import datasets, files

    X, y = datasets.mnist_rows(str(files.find_data_dir()), "train", 0, args.rows, dtype=np.float32)
    net = ppt.MLP((784, *args.hidden, 10), dtype="float32")
    strategy = ppt.Sync(lr=0.1, momentum=0.9, block=args.block)
    client = common.start(args.workers)
    try:
        shards = ppt.enter_data(client, X, y, n_shards=args.workers, dtype="float32")
        try:
            stop = ppt.Stop(max_epochs=args.rounds / strategy.rounds_per_epoch(len(X)))
            result = ppt.train(net, shards, strategy, stop, seed=1, allreduce="shared")
        finally:
            ppt.exit_data(shards)
        rss = sorted(client.run(_peak_rss).values())
        per_loop: dict = {}
        walls = []
        for head in list(result.diagnostics.heads)[args.warmup:]:
            walls.append(head.get("wall_seconds", 0.0))
            for loop in head.get("loops") or ():
                per_loop.setdefault(loop["worker"], []).append(loop["phases"].get("reduce", 0.0))
    finally:
        ppt.cluster.close(client)
    with common.one_thread():
        expected, _ = train_serial(net, X, y, strategy, rounds=args.rounds, n_shards=args.workers, seed=1)
    reduce = sorted(statistics.median(v) for v in per_loop.values())
    return {"rss_max_mb": rss[-1] / 2**20, "rss_min_mb": rss[0] / 2**20, "reduce_max_ms": 1e3 * reduce[-1],
            "reduce_min_ms": 1e3 * reduce[0], "round_ms": 1e3 * statistics.median(walls),
            "bitwise": bool(result.params.tobytes() == expected.tobytes()), "allreduce": result.settings["allreduce"],
            "params": int(net.n_params)}


def _head(tree: str) -> str:
    """The commit a tree was taken from (its git HEAD, or its own folder's name)."""
    out = subprocess.run(["git", "-C", tree, "log", "-1", "--format=%h %s"], capture_output=True, text=True)
    return out.stdout.strip()[:72] if out.returncode == 0 else "(not a git tree)"


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    if os.environ.get("PPT_SPREAD_TRIAL"):
        print("RESULT " + json.dumps(trial(args)), flush=True)
        return
    trees = [str(Path(t).resolve()) for t in args.trees]
    seen: dict = {t: [] for t in trees}
    for i in range(args.trials):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            env = {**os.environ, "PYTHONPATH": tree, "PPT_SPREAD_TRIAL": "1"}
            out = subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, capture_output=True, text=True,
                                 timeout=1800)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not lines:
                raise SystemExit(f"trial {i} of {tree} failed:\n{out.stderr[-3000:]}")
            seen[tree].append(json.loads(lines[-1][7:]))
            print(tree, seen[tree][-1], flush=True)
    rows = []
    for tree, trials in seen.items():
        med = {k: statistics.median(t[k] for t in trials) for k in trials[0] if isinstance(trials[0][k], float)}
        rows.append({"tree": tree, "p": args.workers, "params": trials[0]["params"],
                     "allreduce": trials[0]["allreduce"], "trials": len(trials),
                     "rss max MB": med["rss_max_mb"], "rss min MB": med["rss_min_mb"],
                     "rss max/min": statistics.median(t["rss_max_mb"] / t["rss_min_mb"] for t in trials),
                     "reduce max ms": med["reduce_max_ms"], "reduce min ms": med["reduce_min_ms"],
                     "reduce max/min": statistics.median(t["reduce_max_ms"] / max(t["reduce_min_ms"], 1e-9)
                                                         for t in trials),
                     "round ms": med["round_ms"], "bitwise serial": all(t["bitwise"] for t in trials)})
    notes = [f"{tree}: git {_head(tree)}" for tree in trees]
    path = common.write_table(args.out, "shared_spread", rows, title="The shared exchange's memory and adds per worker",
                              notes=notes)
    print(common.markdown(rows))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
