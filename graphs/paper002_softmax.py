"""002 Figures 5-8: softmax regression on MNIST grown to 784, 3136 and 12544 inputs.

Usage::

    python graphs/paper002_softmax.py            # 60000 rows, 10 epochs, 1/2/4 workers
    python graphs/paper002_softmax.py --quick    # 784 and 3136 inputs, 3000 rows, 2 epochs, 2 workers

Seed 002 (Sobreira & Carneiro): softmax regression (no hidden layer), learning by epoch,
100 epochs, images grown to raise the work per sample (002 labels the 56x56 set "3248";
it has 3136 inputs); total duration and speedup vs node count for OpenMP, MPI+OpenMP and
OmpCluster (head-worker), 1-4 nodes. Here: ``ppt.MLP((n, 10), output="softmax")`` in
float32, ``Sync()`` (full batch), one shard per worker built *on the worker* from the
files (``enter_source`` with ``mnist_rows(grow=n)``: the head never holds the grown set),
fewer epochs than 002 (durations for 100 epochs are scaled from them). Head-worker
overhead: the percent of the workers' time not computing gradients and the head's time
to build and submit a round (``result.diagnostics``). The serial program
(``train_serial``, one process) times one epoch for the speedup against serial; the
model (``ppt_dask.perf.model``, constants measured here) predicts 002's 4 nodes and more
real cores. 4 workers oversubscribe the 2 cores.
Writes out/paper002_softmax.{md,csv} and out/paper002_softmax.html.
"""

import functools

import numpy as np

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.perf import model as perfmodel

import common

DEFAULTS = dict(SIZES=(784, 3136, 12544), ROWS=60000, EPOCHS=10, WORKERS=(1, 2, 4), LR=0.5, MOMENTUM=0.9,
                PAPER_EPOCHS=100, MODEL_WORKERS=(1, 2, 4, 8, 16))
QUICK = dict(SIZES=(784, 3136), ROWS=3000, EPOCHS=2, WORKERS=(2,), MODEL_WORKERS=(1, 2, 4))
PAPER_SERIAL_EPOCH = {784: 2.14}  # seconds per epoch, 002 Table 1 (gprof, s/call of the training step)


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    rows, runs, sample, model = [], {}, {}, {}
    for size in args.sizes:  # serial program and model constants, with the data on the head
        net = ppt.MLP((size, 10), output="softmax", dtype="float32")
        data = ppt.datasets.mnist(n_train=args.rows, n_test=1, grow=size, dtype=np.float32)
        with common.one_thread():
            _, history = train_serial(net, data.X, data.y, ppt.Sync(args.lr * 784 / size, args.momentum), 2)
        runs["serial", size] = min(h["wall_seconds"] for h in history)
        sample[size] = (net, data.X[:2000].copy(), data.y[:2000].copy())
        del data
    for p in args.workers:
        client = common.start(p)
        if not model and (p >= 2 or p == max(args.workers)):  # the model's constants, on real cores
            terms = common.cluster_terms(client, args.quick)
            model = {s: common.model_constants(client, *m, 1000, terms) for s, m in sample.items()}
        for size in args.sizes:
            net = ppt.MLP((size, 10), output="softmax", dtype="float32")
            loader = functools.partial(ppt.datasets.mnist_rows, None, "train", dtype="float32", grow=size)
            shards = ppt.enter_source(client, loader, args.rows, p, dtype="float32")
            runs[p, size] = ppt.train(net, shards, ppt.Sync(args.lr * 784 / size, args.momentum),
                                      ppt.Stop(max_epochs=args.epochs))
            ppt.exit_data(shards)
        ppt.cluster.close(client)
    scale = args.paper_epochs / args.epochs
    for size in args.sizes:
        w, base = size * 10 + 10, runs[args.workers[0], size].wall_seconds
        for p in args.workers:
            r = runs[p, size]
            times = r.diagnostics.summary() if r.diagnostics is not None else {}
            rows.append({"inputs": size, "workers": f"{p}{'*' * (p > 2)}", "epochs": args.epochs,
                         "s": r.wall_seconds, f"s per {args.paper_epochs} epochs": r.wall_seconds * scale,
                         f"speedup vs {args.workers[0]} worker": base / r.wall_seconds,
                         "speedup vs serial": runs["serial", size] * args.epochs / r.wall_seconds,
                         "% not gradient": times.get("percent_not_gradient"),
                         "head ms/round": times.get("median_head_submit_ms"), "train error %": 100 * r.train_error_rate,
                         "model s/epoch": perfmodel.iteration_seconds(p, args.rows, w, model[size], n_shards=p)})
        rows.append({"inputs": size, "workers": "serial", "epochs": args.epochs,
                     "s": runs["serial", size] * args.epochs,
                     f"s per {args.paper_epochs} epochs": runs["serial", size] * args.paper_epochs,
                     "model s/epoch": perfmodel.sequential_epoch_seconds(args.rows, args.rows, model[size])})
        rows += [{"inputs": size, "workers": f"model {p}", "model s/epoch": perfmodel.iteration_seconds(
            p, args.rows, w, model[size], n_shards=p)} for p in args.model_workers if p > max(args.workers)]
    common.write_table(args.out, "paper002_softmax", rows,
                       title="002 Figures 5-8: softmax regression, duration and speedup vs workers",
                       notes=[f"{args.rows} training rows, float32, Sync(lr={args.lr} x 784/inputs, "
                              f"momentum={args.momentum}), {args.epochs} epochs measured; 002 ran 100 (its serial "
                              f"epoch at 784 inputs: {PAPER_SERIAL_EPOCH[784]} s, 002 Table 1).",
                              "* more workers than the 2 cores (oversubscribed). "
                              "'model p': predicted for p real cores.",
                              "% not gradient: share of the workers' time not computing gradients "
                              "(result.diagnostics); head ms/round: the head's median time to build and submit "
                              "a round."])
    figs = []
    for size in args.sizes:
        ours = [r for r in rows if r["inputs"] == size and "s" in r and r["workers"] != "serial"]
        fig = common.figure(f"{size} inputs (002 Figures {5 + args.sizes.index(size) + 1}a/b)", "workers",
                            f"s per {args.paper_epochs} epochs", width=480, height=320)
        common.line(fig, list(args.workers), [r[f"s per {args.paper_epochs} epochs"] for r in ours],
                    "ours, measured", 0, points=True)
        common.line(fig, list(args.model_workers), [args.paper_epochs * perfmodel.iteration_seconds(
            p, args.rows, size * 10 + 10, model[size], n_shards=p) for p in args.model_workers], "model, real cores", 0)
        figs.append(fig)
    from bokeh.layouts import row
    common.save_figure(args.out, "paper002_softmax", row(*figs), "002 softmax", args.png)


if __name__ == "__main__":
    main()
