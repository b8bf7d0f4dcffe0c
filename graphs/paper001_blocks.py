"""001 Figures 2-5, Tables VI and VII: time per weight update vs block size and workers,
measured beside the run-time model, and the speedup the model predicts for 001's clusters.

Usage::

    python graphs/paper001_blocks.py            # Function, Encoder, Digits; p = 1, 2, 4
    python graphs/paper001_blocks.py --quick    # fewer blocks and rounds, p = 2

Seed 001 (Moerchen): learning by block, block b split over p workers; run-time model eq.
(3)-(8) from time constants measured on the real code. Per problem (001 Table IV; Digits
on a subset of MNIST rows: a round's time depends on b, not on n) ``Sync(block=b)`` runs
ROUNDS rounds on p workers holding one shard each; the median seconds per round after
WARMUP is set beside ``perfmodel.iteration_seconds`` with constants measured on this
cluster (``calibrate.measure_constants`` on a worker plus probe rounds for the head and
the reduce). ``serial`` is the same math in one process (``train_serial``, eq. (3) per
block). Table VII: 001's printed predicted speedups (Function, Bat Cave), the same from
``perfmodel`` with 001's constants, and with ours for p real cores of this machine's kind.
4 workers oversubscribe the 2 cores (shown, not in the error).
Writes out/paper001_blocks, out/paper001_table7 and out/paper001_smallest_block (.md, .csv), and
out/paper001_blocks.html.
"""

import numpy as np

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.perf import fit as modelfit
from ppt_dask.perf import model as perfmodel
from ppt_dask.perf import paper001, planning

import common

DEFAULTS = dict(
    FUNCTION_BLOCKS=(16, 64, 256, 1024), ENCODER_BLOCKS=(8, 32, 128, 256),
    DIGITS_BLOCKS=(16, 64, 256, 1024, 4096), DIGITS_ROWS=12000,
    WORKERS=(1, 2, 4), ROUNDS=30, WARMUP=8, SPEEDUP_P=(2, 4, 8, 16, 32),
)
QUICK = dict(FUNCTION_BLOCKS=(16, 256), ENCODER_BLOCKS=(32, 256), DIGITS_BLOCKS=(64, 1024),
             DIGITS_ROWS=3000, WORKERS=(2,), ROUNDS=10, WARMUP=3)
PAPER_TABLE7 = {16: (0.57, 0.36, 0.26), 32: (0.87, 0.64, 0.48), 64: (1.20, 1.09, 0.88), 128: (1.48, 1.67, 1.54)}


def problems(args):
    """name -> (net, X, y, blocks, n, m) with 001's n and m (Table IV)."""
    f, e = ppt.datasets.function(), ppt.datasets.encoder(256)
    d = ppt.datasets.mnist(n_train=args.digits_rows, n_test=1)
    return {"function": (ppt.MLP((2, 128, 128, 1), hidden="tanh", output="linear"), f.X, f.y,
                         args.function_blocks, 1024, 128),
            "encoder": (ppt.MLP((256, 8, 256), hidden="tanh", output="softmax"), e.X, e.y, args.encoder_blocks, 256, 0),
            "digits": (ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax"), d.X, d.y,
                       args.digits_blocks, 60000, 10000)}


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    probs, measured, constants = problems(args), {}, {}
    for name, (net, X, y, blocks, _n, _m) in probs.items():
        for b in blocks:
            with common.one_thread():
                _, history = train_serial(net, X, y, ppt.Sync(lr=0.01, momentum=0.9, block=b), args.rounds)
            measured[name, "serial", b] = np.median([h["wall_seconds"] for h in history[args.warmup:]])
    for p in args.workers:
        client = common.start(p)
        if not constants and (p >= 2 or p == max(args.workers)):
            terms = common.cluster_terms(client, args.quick)
            constants = {k: common.model_constants(client, v[0], v[1], v[2], min(256, len(v[1])), terms)
                         for k, v in probs.items()}
        for name, (net, X, y, blocks, _n, _m) in probs.items():
            shards = ppt.enter_data(client, X, y, p)
            for b in blocks:
                result = ppt.train(net, shards, ppt.Sync(lr=0.01, momentum=0.9, block=b),
                                   ppt.Stop(max_epochs=args.rounds * b / len(X)))
                measured[name, p, b] = np.median([h["wall_seconds"] for h in result.history[args.warmup:]])
            ppt.exit_data(shards)
        ppt.cluster.close(client)

    def predict(name, p, b):
        net, c = probs[name][0], constants[name]
        if p == "serial":  # eq. (3) per block: b (Tf + Tb) + Tu + Tm, plus one gradient call
            return b * (c.tf_seconds + c.tb_seconds) + c.tu_seconds + c.tm_seconds + c.tc_seconds
        return perfmodel.iteration_seconds(p, b, net.n_params, c)
    rows = [{"problem": name, "p": f"{p}{'*' * (p not in ('serial', 1, 2))}", "block": b, "measured ms": 1e3 * s,
             "model ms": 1e3 * predict(name, p, b), "error %": 100 * (predict(name, p, b) / s - 1)}
            for (name, p, b), s in measured.items()]
    errors = {name: 100 * modelfit.prediction_error(
        [predict(name, p, b) for (k, p, b) in measured if k == name and p in ("serial", 1, 2)],
        [s for (k, p, b), s in measured.items() if k == name and p in ("serial", 1, 2)]) for name in probs}
    common.write_table(args.out, "paper001_blocks", rows,
                       title="001 Figures 2-5 / Table VI: seconds per weight update, measured and modelled",
                       notes=["Sync(block=b), one shard per worker, median of rounds after the warm-up; "
                              "* oversubscribed.",
                              "Mean prediction error (serial, p = 1, 2; 001 Table VI reports 2.87-5.94%): "
                              + ", ".join(f"{k} {v:.1f}%" for k, v in errors.items()) + ".",
                              f"Digits timed on {args.digits_rows} MNIST rows; Encoder uses tanh/softmax (ours)."])
    fn, paper_c = probs["function"], paper001.CONSTANTS["bat_cave", "function"]
    table7 = [{"block": b, **{f"001 p={p}": v for p, v in zip((2, 4, 8), PAPER_TABLE7[b])},
               **{f"model+001 constants p={p}": perfmodel.speedup(p, b, 1024, 16768, paper_c, n_test=128)
                  for p in (2, 4, 8)},
               **{f"model+ours p={p}": perfmodel.speedup(p, b, 1024, fn[0].n_params, constants["function"], n_test=128)
                  for p in (2, 4, 8)}} for b in PAPER_TABLE7]
    smallest = [{"problem": name, "p": p,  # 001 sec. V-C: no speedup below a block of about 50
                 "001 constants (Bat Cave)": planning.min_block_for_speedup(
                     p, n, paper001.PROBLEMS[name].n_weights, paper001.CONSTANTS["bat_cave", name], n_test=m),
                 "ours": planning.min_block_for_speedup(p, n, net.n_params, constants[name], n_test=m)}
                for name, (net, X, y, blocks, n, m) in probs.items() for p in (2, 8, 32)]
    common.write_table(args.out, "paper001_table7", table7, title="001 Table VII: predicted speedups, Function",
                       notes=["001: Bat Cave (PIII, 100 MBit). 'model+001 constants': ppt_dask.perf.model with 001's "
                              "Tables II and V; 'model+ours': constants measured on this machine, p real cores."])
    common.write_table(args.out, "paper001_smallest_block", smallest, title="001 section V-C: smallest block with a "
                       "predicted speedup above 1", notes=["Blank: no block up to the whole training set gives one."])
    figs = []
    for name, (net, _X, _y, blocks, n, m) in probs.items():
        fig = common.figure(f"{name}: seconds per update", "block size", "seconds", x_log=True, y_log=True, width=540)
        for i, p in enumerate(["serial", *args.workers]):
            common.line(fig, blocks, [measured[name, p, b] for b in blocks], f"p={p} measured", i, points=True)
            common.line(fig, blocks, [predict(name, p, b) for b in blocks], f"p={p} model", i)
        grid = np.unique(np.geomspace(max(2, min(blocks)), n, 40).astype(int))
        sp = common.figure(f"{name}: predicted speedup (001 Fig. 2/4/5)", "block size", "speedup", x_log=True,
                           width=540)
        for i, p in enumerate(args.speedup_p):
            common.line(sp, grid, perfmodel.speedup(p, grid, n, net.n_params, constants[name], n_test=m),
                        f"{p} workers", i)
        figs.append([fig, sp])
    from bokeh.layouts import gridplot
    common.save_figure(args.out, "paper001_blocks", gridplot(figs), "001 blocks", args.png)


if __name__ == "__main__":
    main()
