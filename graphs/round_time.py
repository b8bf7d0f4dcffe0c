"""Seconds per synchronous round, serial vs ppt_dask on p workers, side by side in one run.

    python graphs/round_time.py                 # MNIST 784-64-64-10, full batch, p = 1, 2
    python graphs/round_time.py --quick         # 6000 rows, a few rounds

Writes graphs/out/round_time.md (``--out`` another folder) besides printing the table.

Prints the median seconds per round of the serial program (same math, one process, one
BLAS thread) and of ``ppt.train`` with ``Sync()`` (learning by epoch) on p single-threaded
worker processes, the head's build-and-submit time per round, the speedup
S = T_serial / T_p and the efficiency E = S / p (seed 001, eqs. (7)-(8)).
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial

ROWS, ROUNDS, WARMUP, WORKERS, SHARDS = None, 12, 2, (1, 2), 8


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=ROWS)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--workers", type=lambda t: tuple(int(v) for v in t.split(",")), default=WORKERS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = []

    def show(line: str) -> None:
        print(line, flush=True)
        lines.append(line)
    rows, rounds = (6000, 5) if args.quick else (args.rows, args.rounds)
    data = ppt.datasets.mnist(n_train=rows, n_test=100)
    net = ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax")
    strategy = ppt.Sync(lr=0.5, momentum=0.9)
    with threadpool_limits(1):
        _, hist = train_serial(net, data.X, data.y, strategy, rounds, n_shards=1)
    serial = float(np.median([h["wall_seconds"] for h in hist[WARMUP:]]))
    show("| p | median s/round | head ms/round | speedup | efficiency |\n|---|---|---|---|---|")
    show(f"| serial | {serial:.4f} | - | 1 | 1 |")
    for p in args.workers:
        print(f"p = {p}: {rounds} rounds ...", file=sys.stderr, flush=True)
        client = ppt.connect(n_workers=p)
        shards = ppt.enter_data(client, data.X, data.y, n_shards=SHARDS)
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=rounds))
        ppt.exit_data(shards)
        ppt.cluster.close(client)
        per_round = float(np.median([h["wall_seconds"] for h in result.history[WARMUP:]]))
        head = float(np.median([h["head_seconds"] for h in result.history[WARMUP:]]))
        s = serial / per_round
        show(f"| {p} | {per_round:.4f} | {1e3 * head:.2f} | {s:.2f} | {s / p:.2f} |")
    import common  # graphs/common.py: the machine line
    text = ["### Seconds per full-batch MNIST round (784-64-64-10), serial and on p workers", "", *lines, "",
            f"Machine: {common.machine()}.  ", f"Command: `{common.command()}`"]
    (args.out / "round_time.md").write_text("\n".join(text) + "\n")
    print(f"wrote {args.out / 'round_time.md'}", file=sys.stderr)


if __name__ == "__main__":
    main()
