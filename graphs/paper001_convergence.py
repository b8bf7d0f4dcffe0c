"""001 Figures 6-8 and 10: error against wall time, one process with a small block against
p workers with a larger block, and weight averaging against pure training-set parallelism.

Usage::

    python graphs/paper001_convergence.py            # Function, Encoder, Digits (60000 rows)
    python graphs/paper001_convergence.py --quick    # short runs on 2 workers, 3000 MNIST rows

Seed 001 section VI: the reference is one processor with the block that converges best
(Function and Encoder 4, Digits 16); in parallel a larger block (64; Digits 200) pays for
the communication but converges slower per pattern. Figure 6 Function (test RMSE),
Figure 7 Encoder (training RMSE), Figure 8 Digits (test errors out of 10000); Figure 10
weight averaging (local block 16, weights averaged every 300 patterns per worker) against
block 200 on Digits. Serial curves: ``train_serial`` in one process, evaluated every
EPOCHS/POINTS epochs (its momentum restarts there); parallel: ``ppt.train`` with weight
snapshots; the serial curve runs as long as the slowest parallel one. Time is training
wall time (evaluation excluded). Learning rates are ours, per block (our SGD averages the
gradient over the block); Encoder is 256-8-256 tanh/softmax.
Writes out/paper001_convergence.{md,csv} and out/paper001_convergence.html.
"""

import numpy as np

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial

import common

DEFAULTS = dict(WORKERS=(1, 2), FUNCTION_EPOCHS=60, ENCODER_EPOCHS=100, DIGITS_EPOCHS=5, DIGITS_ROWS=60000, POINTS=20)
QUICK = dict(WORKERS=(2,), FUNCTION_EPOCHS=2, ENCODER_EPOCHS=4, DIGITS_EPOCHS=1, DIGITS_ROWS=3000, POINTS=3)
SETTINGS = {  # problem: metric, serial (block, lr, momentum), parallel (block, lr, momentum)
    "function": ("test RMSE", (4, 0.05, 0.5), (64, 0.05, 0.5)),
    "encoder": ("training RMSE", (4, 0.05, 0.9), (64, 2.0, 0.9)),
    "digits": ("test errors", (16, 0.05, 0.5), (200, 0.1, 0.9)),
}
AVERAGING = dict(block=16, interval=300, lr=0.05, momentum=0.5)  # 001 Figure 10 (lr ours)
PAPER = {"function": "no speedup: 1 processor with block 4 stays ahead (Fig. 6)",
         "encoder": "8 processors (block 64) lowest error after ~1700 s (Fig. 7)",
         "digits": "parallel (block 200) drops later, ends lower: 238 vs 323 test errors (Figs. 8-9)",
         "averaging": "weight averaging descends earlier than block 200 (Fig. 10)"}


def problems(args):
    f, e = ppt.datasets.function(), ppt.datasets.encoder(256)
    d = ppt.datasets.mnist(n_train=args.digits_rows)
    return {"function": (ppt.MLP((2, 128, 128, 1), hidden="tanh", output="linear"), f, args.function_epochs),
            "encoder": (ppt.MLP((256, 8, 256), hidden="tanh", output="softmax"), e, args.encoder_epochs),
            "digits": (ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax"), d, args.digits_epochs)}


def score(name, net, data):
    if name == "digits":
        return lambda w: float(np.sum(net.predict(w, data.X_test) != data.y_test))
    X, y = (data.X, data.y) if data.X_test is None else (data.X_test, data.y_test)
    return lambda w: float(np.sqrt(np.mean((net.forward(w, X) - y) ** 2)))


def serial_curve(net, data, strategy, block, epochs, points, measure, budget):
    """Chunks of epochs/points epochs until ``budget`` seconds of training (at most 10x points)."""
    params, seconds, xs, ys = None, 0.0, [], []
    while seconds < budget and len(xs) < 10 * points:
        with common.one_thread():
            params, history = train_serial(net, data.X, data.y, strategy,
                                           max(1, round(epochs / points * len(data.X) / block)), params=params)
        seconds += sum(h["wall_seconds"] for h in history)
        xs.append(seconds)
        ys.append(measure(params))
    return xs, ys


def dask_curve(client, p, net, data, strategy, epochs, points, measure):
    shards = ppt.enter_data(client, data.X, data.y, p)
    marks = [epochs * (i + 1) / points for i in range(points)]
    result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=epochs), snapshot_epochs=marks)
    ppt.exit_data(shards)
    per_epoch = result.strategy.rounds_per_epoch(len(data.X))
    xs = [result.history[min(len(result.history), max(1, round(e * per_epoch))) - 1]["elapsed_seconds"] for e in marks]
    return xs, [measure(result.snapshots.get(e, result.params)) for e in marks]


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    probs, curves = problems(args), {}
    for p in args.workers:
        client = common.start(p)
        for name, (net, data, epochs) in probs.items():
            _, _, (b, lr, mom) = SETTINGS[name]
            curves[name, p, b] = dask_curve(client, p, net, data, ppt.Sync(lr, mom, block=b), epochs, args.points,
                                            score(name, net, data))
        if p == max(args.workers):
            net, data, epochs = probs["digits"]
            a = AVERAGING
            strategy = ppt.Average(a["lr"], a["momentum"], block=a["block"], interval=a["interval"])
            curves["averaging", p, a["block"]] = dask_curve(client, p, net, data, strategy, epochs, args.points,
                                                            score("digits", net, data))
        ppt.cluster.close(client)
    for name, (net, data, epochs) in probs.items():  # the serial reference, for as long as the longest
        _, (b, lr, mom), _ = SETTINGS[name]
        budget = max(xs[-1] for k, (xs, _) in curves.items()
                     if k[0] == name or (name == "digits" and k[0] == "averaging"))
        curves[name, "serial", b] = serial_curve(net, data, ppt.Sync(lr, mom, block=b), b, epochs, args.points,
                                                 score(name, net, data), budget)
    rows, top = [], max(args.workers)
    for name in probs:
        keys = [k for k in curves if k[0] == name or (name == "digits" and k[0] == "averaging")]
        at = min(curves[k][0][-1] for k in keys)  # every curve of the problem reaches this time
        for key in keys:
            xs, ys = curves[key]
            rows.append({"problem": key[0], "p": key[1], "block": key[2], "metric": SETTINGS[name][0],
                         "seconds": xs[-1], "final": ys[-1], "best": min(ys), "T s": at,
                         "at T": ([y for x, y in zip(xs, ys) if x <= at] or ys[:1])[-1], "001 found": PAPER[key[0]]})
    common.write_table(args.out, "paper001_convergence", rows, title="001 Figures 6-8, 10: error against wall time",
                       notes=[f"Epochs: Function {args.function_epochs}, Encoder {args.encoder_epochs}, Digits "
                              f"{args.digits_epochs} on {args.digits_rows} rows; 'averaging': Average(block 16, "
                              "interval 300, momentum reset at each average).",
                              "The serial reference trains for as long as the slowest parallel curve; 'at T': the "
                              "value at the time T every curve of the problem reaches (last evaluation before T)."])
    panels = [(name, 6 + i, [k for k in curves if k[0] == name]) for i, name in enumerate(probs)]
    panels.append(("averaging", 10, [("digits", "serial", 16), ("digits", top, 200), ("averaging", top, 16)]))
    figs = []
    for name, number, keys in panels:
        metric = SETTINGS["digits" if name == "averaging" else name][0]
        fig = common.figure(f"{name}: {metric} (001 Fig. {number})", "seconds", metric, width=540)
        for i, key in enumerate(keys):
            common.line(fig, *curves[key], f"{'averaging ' * (key[0] == 'averaging')}p={key[1]} b={key[2]}", i)
        figs.append(fig)
    from bokeh.layouts import gridplot
    common.save_figure(args.out, "paper001_convergence", gridplot(figs, ncols=2), "001 convergence", args.png)


if __name__ == "__main__":
    main()
