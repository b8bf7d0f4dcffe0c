"""Seconds per round with distributed's message batching and without it, side by side.

    python graphs/round_latency.py            # MNIST 784-64-64-10, blocks 64, 1000, 4000; 3 trials
    python graphs/round_latency.py --quick    # block 64 only, 1 trial

A round is a short chain of tasks (gradient, update, weights), and distributed batches
the messages of each hop on a timer (5 ms scheduler to worker, 2 ms back). ``ppt.connect``
sends them at once (``batch_interval=0``, :mod:`ppt_dask.messages`); ``batch_interval=None``
keeps the timers. Both clusters are started in turn, trial after trial, so a noisy minute
hits both; the script prints the median seconds per round of each and their ratio.
"""

import argparse
import time

import numpy as np

import ppt_dask as ppt

BLOCKS, WORKERS, TRIALS, ROUNDS, WARMUP, ROWS, SHARDS = (64, 1000, 4000), (1, 2), 3, 40, 8, 12000, 8


def rounds(client, data, net, p, block, n_rounds):
    addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])[:p]
    shards = ppt.enter_data(client, data.X, data.y, SHARDS, workers=addresses)
    result = ppt.train(net, shards, ppt.Sync(lr=0.05, momentum=0.9, block=block),
                       ppt.Stop(max_epochs=(n_rounds + WARMUP) * block / shards.n_rows))
    ppt.exit_data(shards)
    return float(np.median([h["wall_seconds"] for h in result.history[WARMUP:]]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    blocks, trials, n_rounds = ((64,), 1, 20) if args.quick else (BLOCKS, TRIALS, ROUNDS)
    data = ppt.datasets.mnist(n_train=ROWS, n_test=10)
    net = ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax")
    seen = {(mode, p, b): [] for mode in ("batched", "at once") for p in WORKERS for b in blocks}
    t0 = time.perf_counter()
    for _ in range(trials):
        for mode, interval in (("batched", None), ("at once", 0.0)):
            client = ppt.connect(n_workers=max(WORKERS), dashboard_address=None, batch_interval=interval)
            try:
                for p in WORKERS:
                    for b in blocks:
                        seen[mode, p, b].append(rounds(client, data, net, p, b, n_rounds))
            finally:
                ppt.cluster.close(client)
    print(f"median ms per round over {trials} trial(s), {n_rounds} rounds each "
          f"({time.perf_counter() - t0:.0f} s in all)")
    print("| p | block | batched (distributed's timers) | at once (ppt.connect) | ratio |")
    print("|---|---|---|---|---|")
    for p in WORKERS:
        for b in blocks:
            slow, fast = np.median(seen["batched", p, b]), np.median(seen["at once", p, b])
            print(f"| {p} | {b} | {1e3 * slow:.1f} | {1e3 * fast:.1f} | {slow / fast:.2f} |")


if __name__ == "__main__":
    main()
