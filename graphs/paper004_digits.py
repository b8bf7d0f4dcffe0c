"""004 Tables 1 and 2: the 5000-digit set, model averaging every 5 epochs, 10 random splits.

Usage::

    python graphs/paper004_digits.py            # 10 splits, 500 epochs, 1/2/4/8 workers
    python graphs/paper004_digits.py --quick    # 2 splits, 50 epochs, 1/2 workers

Seed 004 (Alowaisheq & Dhami): a 400-25-10 network, L2 lambda 0.6987, each epoch one
mini-batch of 90% of the training part drawn with replacement, models averaged
(Allreduce) every 5 epochs, ten random 70/30 splits seeded by their number. Table 1: mean
test accuracy at 100/200/250/500 epochs; Table 2: time to reach them on 2, 4 and 8 map
tasks (on two nodes). Here a map task is a worker process holding one shard (one model);
1 worker is the sequential program (one model, nothing to average) and 4 and 8 workers
oversubscribe the 2 cores, as 004's 8 map tasks did its two nodes. ``serial`` is the same
math in one process without Dask (``ppt_dask.algorithms.serial.train_serial``).
Writes out/paper004_table1.{md,csv}, out/paper004_table2.{md,csv}, out/paper004_digits.html.
"""

import numpy as np

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial

import common

DEFAULTS = dict(
    SPLITS=10, CHECKPOINTS=(100, 200, 250, 500), WORKERS=(1, 2, 4, 8), HIDDEN=25,
    LR=2.0, L2=0.6987, SAMPLE_FRACTION=0.9, LOCAL_EPOCHS=5,  # 004, section 5 (lr: ours)
)
QUICK = dict(SPLITS=2, CHECKPOINTS=(10, 20, 25, 50), WORKERS=(1, 2))
PAPER_ACCURACY = {100: (80.67, 84.06), 200: (86.89, 87.28), 250: (88.63, 86.45), 500: (89.9, 88.93)}
PAPER_SECONDS = {100: (244, 211, 209, 217), 200: (494, 337, 318, 345), 250: (622, 406, 398, 431),
                 500: (1225, 790, 746, 807)}  # sequential, 2, 4, 8 map tasks


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    data = ppt.datasets.digits5000()
    net = ppt.MLP((400, args.hidden, 10), hidden="sigmoid", output="softmax")
    strategy = ppt.Average(lr=args.lr, l2=args.l2, sample_fraction=args.sample_fraction,
                           local_epochs=args.local_epochs)
    cps = args.checkpoints
    acc, secs = {}, {}  # p -> (splits, checkpoints)
    splits = list(ppt.datasets.random_splits(data.X, data.y, args.splits))
    at_round = [round(c / args.local_epochs) - 1 for c in cps]  # a round is 5 epochs (004)
    secs["serial"] = np.zeros((args.splits, len(cps)))
    for i, (X_train, _, y_train, _) in enumerate(splits):
        with common.one_thread():
            _, history = train_serial(net, X_train, y_train, strategy, at_round[-1] + 1, seed=i)
        secs["serial"][i] = np.cumsum([h["wall_seconds"] for h in history])[at_round]
    for p in args.workers:
        client = common.start(p)
        acc[p], secs[p] = np.zeros((args.splits, len(cps))), np.zeros((args.splits, len(cps)))
        for i, (X_train, X_test, y_train, y_test) in enumerate(splits):
            shards = ppt.enter_data(client, X_train, y_train, p)
            result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=cps[-1]), seed=i,
                               snapshot_epochs=cps)
            ppt.exit_data(shards)
            acc[p][i] = [np.mean(net.predict(result.snapshots[c], X_test) == y_test) for c in cps]
            secs[p][i] = [result.history[r]["elapsed_seconds"] for r in at_round]
        ppt.cluster.close(client)
    over = [p for p in args.workers if p > 2]
    table1 = [{"epochs": c, "004 sequential %": PAPER_ACCURACY.get(c, (None,))[0],
               "004 parallel %": PAPER_ACCURACY.get(c, (None, None))[1],
               **{f"ours p={p} %": 100 * acc[p][:, j].mean() for p in args.workers},
               **{f"ours p={p} std": 100 * acc[p][:, j].std() for p in args.workers}}
              for j, c in enumerate(cps)]
    table2 = [{"epochs": c, **{f"004 {k} s": v for k, v in zip(("sequential", "2", "4", "8"),
                                                                  PAPER_SECONDS.get(c, (None,) * 4))},
               "ours serial s": secs["serial"][:, j].mean(),
               **{f"ours p={p}{'*' * (p in over)} s": secs[p][:, j].mean() for p in args.workers}}
              for j, c in enumerate(cps)]
    note = (f"Mean over {args.splits} random 70/30 splits (split i seeds the split and the weights). "
            f"Ours: Average(lr={args.lr}, l2={args.l2}, sample_fraction={args.sample_fraction}, "
            f"local_epochs={args.local_epochs}), momentum 0; 004 tuned its learning rate by line search.")
    common.write_table(args.out, "paper004_table1", table1, title="004 Table 1: test accuracy vs epochs",
                       notes=[note, "p workers = p shards = p averaged models; 1 worker is the sequential program."])
    common.write_table(args.out, "paper004_table2", table2, title="004 Table 2: seconds to reach the epochs",
                       notes=[note, "* more workers than the 2 cores (oversubscribed); "
                                    "004 ran 2-8 map tasks on 2 nodes.",
                              "serial: the same math in one process, no Dask (time only)."])
    fig_a = common.figure("Test accuracy (mean over splits), 004 Figure 3", "epochs", "accuracy %")
    fig_t = common.figure("Time to reach the epoch, 004 Figures 4-5", "epochs", "seconds", y_log=True)
    for k, p in enumerate(args.workers):
        common.line(fig_a, cps, 100 * acc[p].mean(axis=0), f"ours, {p} worker(s)", k)
        common.line(fig_t, cps, secs[p].mean(axis=0), f"ours, {p} worker(s)", k)
    common.line(fig_t, cps, secs["serial"].mean(axis=0), "ours, serial program", len(args.workers), dash="dashed")
    paper = [c for c in cps if c in PAPER_ACCURACY]
    for j, label in ((0, "004 sequential"), (1, "004 parallel")) if paper else ():
        common.line(fig_a, paper, [PAPER_ACCURACY[c][j] for c in paper], label, 6 + j, points=True)
        common.line(fig_t, paper, [PAPER_SECONDS[c][j] for c in paper], label + " (2)" * j, 6 + j, points=True)
    from bokeh.layouts import row
    common.save_figure(args.out, "paper004_digits", row(fig_a, fig_t), "004 digits", args.png)


if __name__ == "__main__":
    main()
