"""What a synchronous round costs beyond its gradient, against the floor of a task graph.

    python graphs/round_latency.py            # p = 1, 2, 4; 3 trials of 120 rounds
    python graphs/round_latency.py --quick    # p = 1, 2; 1 trial of 30 rounds

Synchronous block-1000 MNIST (784-64-64-10, float32, 8 shards, ``ppt.Sync(block=1000)``
through ``ppt.train``) on ``ppt.connect``'s LocalCluster, with each round graph:

* ``tree``: the explicit graph of the papers (gradient tasks, tree-reduce tasks, an update,
  the weights): three scheduler hops on a round's critical path;
* ``all``: one hop (:mod:`ppt_dask.engine.rounds.onehop`): each worker's task combines every worker's
  last partial sums in the fixed tree order, updates its copy, computes its gradient;
* ``doubling`` (p = 4): the same by recursive doubling, ``log2 p`` hops.

Each is measured as the median over rounds of the round's wall time minus its gradient
time (the per-round breakdown of :meth:`ppt.Result.breakdown`, on the scheduler's clock).

The floor: a chain of trivial tasks with the same dependencies and result size (round
``r``'s task on worker ``w`` takes every worker's task of round ``r - 1`` and returns as
many float32 numbers as the network has parameters), pinned to the same workers, all
rounds submitted at once; seconds per round between the end of the warm-up and the end.
Trials interleave the graphs, so a noisy minute hits all of them; the script prints medians
and the ratio of each graph to the floor of the same trial.
"""

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

import ppt_dask as ppt
from ppt_dask.engine.rounds import graph
from ppt_dask.engine.rounds.taskspec import Task, TaskRef

WORKERS, TRIALS, ROUNDS, WARMUP, ROWS, SHARDS, BLOCK = (1, 2, 4), 3, 120, 10, 24000, 8, 1000
QUICK = dict(WORKERS=(1, 2), TRIALS=1, ROUNDS=30)
SIZES = (784, 64, 64, 10)
OUT = Path(__file__).resolve().parent / "out"


def trivial(n_params: int, *previous) -> np.ndarray:
    """A floor task: takes the last round's results, returns a partial of the real size."""
    return np.zeros(n_params, dtype=np.float32)


def floor(client, shards, n_params: int, n_rounds: int) -> float:
    """Seconds per round of the trivial chain on the shards' workers (labels as resources)."""
    plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, 2)
    labels = [label for label, *_ in plan.blocks]
    tag = f"floor-{time.perf_counter_ns()}"
    layers, keys = {}, []
    for r in range(n_rounds):
        prev = [TaskRef((f"{tag}-{r - 1}", w)) for w in range(len(labels))] if r else []
        for w, label in enumerate(labels):
            key = (f"{tag}-{r}", w)
            layers[f"{tag}-{r}-{w}"] = MaterializedLayer(
                {key: Task(key, trivial, n_params, *prev)}, annotations={"resources": {label: 1}})
        keys.append((f"{tag}-{r}", 0))
    futures = client.get(HighLevelGraph(layers, {name: set() for name in layers}), keys, sync=False)
    futures[WARMUP].result(timeout=120)
    t0 = time.perf_counter()
    futures[-1].result(timeout=600)
    return (time.perf_counter() - t0) / (n_rounds - 1 - WARMUP)


def beyond_gradient(shards, net, exchange: str, n_rounds: int) -> float:
    """Median seconds of a synchronous block-1000 round beyond its gradient."""
    stop = ppt.Stop(max_epochs=n_rounds * BLOCK / shards.n_rows)
    result = ppt.train(net, shards, ppt.Sync(lr=0.1, momentum=0.9, block=BLOCK), stop, exchange=exchange)
    rows = result.breakdown()[WARMUP:]
    return statistics.median(r["wall"] - r["gradient"] for r in rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="p = 1, 2; one trial of 30 rounds")
    parser.add_argument("--out", type=Path, default=OUT, help="where round_latency.md goes")
    args = parser.parse_args()
    cfg = dict(WORKERS=WORKERS, TRIALS=TRIALS, ROUNDS=ROUNDS)
    if args.quick:
        cfg.update(QUICK)
    data = ppt.datasets.mnist(n_train=ROWS, n_test=10, dtype="float32")
    net = ppt.MLP(SIZES, hidden="tanh", output="softmax", dtype="float32")
    graphs = lambda p: ("floor", "tree", "all") + (("doubling",) if p >= 4 else ())  # noqa: E731
    seen: dict = {}
    t_start = time.perf_counter()
    client = ppt.connect(n_workers=max(cfg["WORKERS"]), dashboard_address=None)
    try:
        addresses = ppt.cluster.worker_addresses(client)
        for trial in range(cfg["TRIALS"]):
            for p in cfg["WORKERS"]:
                shards = ppt.enter_data(client, data.X, data.y, SHARDS, workers=addresses[:p], dtype="float32")
                order = graphs(p) if trial % 2 == 0 else tuple(reversed(graphs(p)))
                for name in order:
                    if name == "floor":
                        value = floor(client, shards, net.n_params, cfg["ROUNDS"])
                    else:
                        value = beyond_gradient(shards, net, name, cfg["ROUNDS"])
                    seen.setdefault((p, name), []).append(value)
                    print(f"trial {trial + 1} p={p} {name}: {1e3 * value:.2f} ms", flush=True)
                ppt.exit_data(shards)
    finally:
        ppt.cluster.close(client)
    lines = [f"Synchronous block-{BLOCK} MNIST {SIZES}, float32, {SHARDS} shards: median ms per round "
             f"beyond the gradient; {cfg['TRIALS']} trial(s) of {cfg['ROUNDS']} rounds "
             f"({time.perf_counter() - t_start:.0f} s in all). Ratios are to the floor of the same "
             "trial, then the median over trials.", "",
             "| p | floor (trivial chain) | tree (3 hops) | ratio | all (1 hop) | ratio | doubling | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for p in cfg["WORKERS"]:
        cells = [f"{1e3 * statistics.median(seen[p, 'floor']):.1f}"]
        for name in ("tree", "all", "doubling"):
            if (p, name) not in seen:
                cells += ["", ""]
                continue
            ratios = [v / f for v, f in zip(seen[p, name], seen[p, "floor"])]
            cells += [f"{1e3 * statistics.median(seen[p, name]):.1f}", f"{statistics.median(ratios):.2f}"]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if not args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "round_latency.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
