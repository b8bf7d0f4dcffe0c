"""The streamed allreduce's two algorithms side by side: whole sums to every worker, or a
reduce-scatter and an all-gather, by vector size and workers.

Usage::

    python graphs/allreduce_floor.py                 # p = 2, 3, 4, 8; 3 trials of 200 rounds
    python graphs/allreduce_floor.py --quick         # p = 2, 4; 1 trial of 40 rounds

Each cell is the links floor of :mod:`ppt_dask.perf.loops` (``ppt.train`` with a strategy whose
gradient and update do nothing: the loops' own timing of sending, waiting, adding and leaving
the round for the head) with ``allreduce="direct"`` and ``allreduce="scatter"``, trials
interleaved, on ``ppt.connect``'s LocalCluster of this machine (a p above its cores is
oversubscribed: the loops time-slice, as they would not on p cores). It prints the median
milliseconds a round, the ratio scatter / direct, and the bytes a worker sent a round over the
vector's bytes: where "auto" should switch (:data:`ppt_dask.core.allreduce.DIRECT_BYTES`).
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import ppt_dask as ppt
from ppt_dask.perf import loops

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DEFAULTS = dict(WORKERS=(2, 3, 4, 8), SIZES=(16, 4096, 16384, 55050, 262144), TRIALS=3, ROUNDS=200)
QUICK = dict(WORKERS=(2, 4), SIZES=(16, 55050), TRIALS=1, ROUNDS=40)
WARMUP = 10
ALGORITHMS = ("direct", "scatter")


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    client = ppt.connect(n_workers=max(args.workers), dashboard_address=None)
    seen: dict = {}
    try:
        addresses = ppt.cluster.worker_addresses(client)
        for trial in range(args.trials):
            for p in args.workers:
                for size in args.sizes:
                    for algorithm in (ALGORITHMS if trial % 2 == 0 else ALGORITHMS[::-1]):
                        rows = loops.floor_rows(client, addresses, p, size, args.rounds, warmup=WARMUP,
                                                dtype="float32", allreduce=algorithm)
                        seconds = statistics.median(loops.exchange_phases(r) for r in rows)
                        sent = statistics.median(r["transfer_bytes"] for r in rows) / p / (4 * size)
                        seen.setdefault((p, size, algorithm), []).append((seconds, sent))
                        print(f"trial {trial + 1} p={p} size={size} {algorithm}: {1e3 * seconds:.3f} ms, "
                              f"{sent:.2f}x the vector a worker", flush=True)
    finally:
        ppt.cluster.close(client)
    rows = []
    for p in args.workers:
        for size in args.sizes:
            direct, scatter = seen[p, size, "direct"], seen[p, size, "scatter"]
            rows.append({"p": p, "oversubscribed": "yes" if p > (os.cpu_count() or 1) else "",
                         "float32 values": size, "kB a worker, direct": round((p - 1) * 4 * size / 1e3, 1),
                         "direct ms": 1e3 * statistics.median(s for s, _ in direct),
                         "scatter ms": 1e3 * statistics.median(s for s, _ in scatter),
                         "scatter / direct": statistics.median(a[0] / b[0] for a, b in zip(scatter, direct)),
                         "sent direct (x vector)": statistics.median(s for _, s in direct),
                         "sent scatter (x vector)": statistics.median(s for _, s in scatter)})
    path = common.write_table(args.out, "allreduce_floor", rows, title="The streamed allreduce: direct and scatter",
                              notes=[f"Medians of {args.rounds} rounds after {WARMUP}, then of {args.trials} "
                                     "trial(s); ratios trial by trial."])
    print(path.read_text())


if __name__ == "__main__":
    main()
