"""``ppt-dask model``: calibrate the run-time model of Mörchen (2004), predict speedup, recommend a layout.

    ppt-dask model calibrate mnist --workers 2 --block 1000 --out calib.json
    ppt-dask model predict --calibration calib.json --p 1,2,4,8,16,32,64 --block 100,1000,10000
    ppt-dask model recommend --calibration calib.json --p-max 64
    ppt-dask model recommend --constants mycluster.json --n-patterns 60000 --network 784,64,64,10

``calibrate`` measures the constants on the cluster (a LocalCluster it starts, or
``--scheduler``) and writes them with the sizes they hold for; ``predict`` prints
speedups like Mörchen (2004)'s Table VII; ``recommend`` prints the block size and number of workers
of least time per epoch and the smallest block that gives any speedup, and the workers x
threads per worker the calibrated machine's cores hold (:mod:`ppt_dask.perf.threads`). ``--constants``
takes a JSON object of :class:`ppt_dask.perf.model.Constants` fields (seconds) for a
cluster you do not have yet. Only ``calibrate`` needs a cluster (and imports dask).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from ppt_dask.cli import flags as cliflags
from ppt_dask.cli import paths, runmodel, textout, usermodel
from ppt_dask.cli.modeltext import constants_table, grid_table, model_kw, problem, problem_line, rounds_line, write_json
from ppt_dask.cli.presets import PRESETS, STRATEGY_PRESETS
from ppt_dask.perf import model as perfmodel
from ppt_dask.perf import planning
from ppt_dask.perf.tasks import ROUND_EXCHANGES

DEFAULT_P = (1, 2, 4, 8, 16, 32, 64)
_CALIBRATED = -1  # --shards not given: the calibration's layout


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,4; got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1 like 1,2,4; got {text!r}")
    return values


def _positive(text: str) -> int:
    value = _int_list(text)
    if len(value) != 1:
        raise argparse.ArgumentTypeError(f"expected one integer >= 1, got {text!r}")
    return value[0]


def _shards(text: str):
    return None if text.lower() in ("none", "p") else _positive(text)


def _cores(text: str):
    return None if text.lower() == "none" else _positive(text)


def add_model_parser(subparsers) -> None:
    """Add ``model calibrate | predict | recommend`` to the ``ppt-dask`` subcommands."""
    m = subparsers.add_parser("model", help="run-time model (Mörchen 2004): calibrate, predict, recommend")
    msub = m.add_subparsers(dest="model_command", required=True)

    c = msub.add_parser("calibrate", help="measure the constants on a cluster, write JSON")
    c.add_argument("dataset", choices=sorted(PRESETS))
    c.add_argument("--workers", type=_positive, default=None, help="worker processes (default: one per core)")
    c.add_argument("--block", type=_positive, default=None, help="block size to centre the fits on (default 1000)")
    c.add_argument("--shards", type=_shards, default=None,
                   help="shards of the layout to model (default: 8, or the workers if more)")
    c.add_argument("--hidden", type=cliflags.hidden_widths, default=None,
                   help="hidden widths (default: the data set's preset)")
    c.add_argument("--model", default=None, metavar="PACKAGE.MODULE:FUNCTION",
                   help="calibrate your own PyTorch module (as ppt-dask train --model)")
    c.add_argument("--row-shape", type=usermodel.row_shape, default=None, metavar="D,D,...",
                   help="with --model: the shape of one input row (default: mnist 1,28,28, else flat)")
    c.add_argument("--dtype", choices=["float64", "float32"], default=None,
                   help="the network's floats, as ppt-dask train --dtype (default: the data set's preset, "
                        "mnist float32)")
    c.add_argument("--fan-in", type=_positive, default=2)
    c.add_argument("--rounds", type=_positive, default=25,
                   help="probe rounds per point (at least 8: 5 warm up; the call curve runs at most 16)")
    c.add_argument("--p-values", type=_int_list, default=DEFAULT_P, help="virtual cluster sizes for Th(p)")
    c.add_argument("--scheduler", default=None, help="address of an existing scheduler")
    c.add_argument("--security", default=None, metavar="DIR",
                   help="TLS directory made by deploy/make_certs.py (default: the dask configuration)")
    c.add_argument("--data-dir", default=None)
    c.add_argument("--out", default="calibration.json", help="where to write the calibration")

    for name, text in (("predict", "predicted time and speedup over block and cluster sizes"),
                       ("recommend", "block size and workers of least time per epoch")):
        q = msub.add_parser(name, help=text)
        src = q.add_mutually_exclusive_group(required=True)
        src.add_argument("--calibration", metavar="JSON", help="from `ppt-dask model calibrate`")
        src.add_argument("--constants", metavar="JSON", help="Constants fields in seconds, by hand")
        q.add_argument("--n-patterns", type=_positive, default=None, help="training patterns n")
        q.add_argument("--n-test", type=int, default=None, help="test patterns m (the model's Ts term)")
        q.add_argument("--network", type=_int_list, default=None,
                       help="layer widths, e.g. 784,64,64,10 (sets w; time constants stay as given)")
        q.add_argument("--n-weights", type=_positive, default=None, help="w directly (instead of --network)")
        q.add_argument("--shards", type=_shards, default=_CALIBRATED,
                       help="shards of the layout (default: the calibration's; 'none': one per worker)")
        q.add_argument("--fan-in", type=_positive, default=None)
        q.add_argument("--exchange", choices=ROUND_EXCHANGES, default="auto",
                       help="the rounds to predict, as ppt-dask train --exchange (default auto: streamed "
                            "at any number of workers, as train runs them)")
        q.add_argument("--cores", type=_cores, default=_CALIBRATED,
                       help="cores the workers share in all (hosts x cores each; default: the calibrated "
                            "machine's; 'none': a core per worker, a cluster to book)")
        q.add_argument("--json", default=None, metavar="PATH", help="also write the numbers here")
        if name == "predict":
            q.add_argument("--p", type=_int_list, default=DEFAULT_P, help="cluster sizes, e.g. 1,2,4,8")
            q.add_argument("--block", type=_int_list, default=None, help="block sizes (default: powers of 4 up to n)")
        else:
            q.add_argument("--p-max", type=_positive, default=64)
            q.add_argument("--blocks", type=_int_list, default=None,
                           help="block sizes whose convergence you accept (default: powers of 2 up to n, and n)")


# ---- the three commands ----------------------------------------------------------------


def model_command(args) -> int:
    if args.model_command == "calibrate":
        return _calibrate(args)
    setting = _setting(args)
    if args.model_command == "predict":
        return _predict(args, setting)
    return _recommend(args, setting)


def _step_printer():
    """Each step of the calibration on standard error, with the time so far."""
    import time
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{textout.duration(time.perf_counter() - t0)}] {line}", file=sys.stderr, flush=True)
    return say


def _calibrate(args) -> int:
    import ppt_dask as ppt
    from ppt_dask.data import datasets
    from ppt_dask.perf import calibrate

    preset = PRESETS[args.dataset]
    security = ppt.cluster.resolve_security(  # a TLS scheduler without certificates: refused here
        args.security, ppt.cluster.check_address(args.scheduler) if args.scheduler else None)
    paths.output_file("--out", args.out, "the calibration's .json file")  # before the minutes it takes
    paths.output_folder("--data-dir", args.data_dir, "mnist/ and digits5000/")
    args.activation = None  # calibrate has no --activation: the preset's
    usermodel.refuse_flags(args)
    if args.model and args.dtype:
        raise ValueError("--dtype applies to the MLP, not with --model (the module's own floats)")
    dtype = args.dtype or preset.get("dtype", "float64")  # as ppt-dask train runs the set
    data = datasets.load(args.dataset, data_dir=args.data_dir, dtype=dtype)
    if args.model:  # the module's own dtype: the data follows it
        data = usermodel.shaped(data, args.dataset, args.row_shape)
        net = usermodel.network(args.model, data, None)
        data = dataclasses.replace(data, X=data.X.astype(net.dtype))
    else:
        n_outputs = (int(data.y.max()) + 1 if data.task == "classification"
                     else 1 if data.y.ndim == 1 else data.y.shape[1])
        net = ppt.MLP((data.X.shape[1], *(args.hidden or preset["hidden"]), n_outputs),
                      hidden=preset["activation"], output=preset["output"], dtype=dtype)
    # the model is of synchronous block rounds: the data set's block preset
    sync_block = STRATEGY_PRESETS.get((args.dataset, "block"), preset).get("block")
    block = min(args.block or sync_block or 1000, len(data.X))
    calibrate.check_rounds(args.rounds, flag="--rounds")  # before the cluster: a median needs rounds
    client = ppt.connect(args.scheduler, n_workers=args.workers, security=security)
    try:
        workers = ppt.cluster.worker_addresses(client)[: args.workers or None]
        shards = args.shards if args.shards is not None else max(8, len(workers))
        n_test = 0 if data.X_test is None else len(data.X_test)
        result = calibrate.calibrate(client, net, data.X, data.y, block=block, workers=workers,
                                     n_shards=shards, fan_in=args.fan_in, n_test=n_test,
                                     rounds=args.rounds, p_values=args.p_values,
                                     progress=_step_printer())
    finally:
        ppt.cluster.close(client)
    result.save(args.out)
    kept = runmodel.keep(result)  # ppt-dask train of this network prints the model beside its rounds
    print(constants_table(result.constants))
    print("\nhead/scheduler cost per round against tasks per round (probe rounds; p above the "
          "real workers are virtual)")
    print("| p | tasks | spin ms | round ms | fitted Th ms |\n|---:|---:|---:|---:|---:|")
    for p, tasks, spin, seconds in result.measurements["head"]:
        fitted = perfmodel.head_seconds(p, result.constants, result.fan_in)
        print(f"| {p} | {tasks} | {spin * 1e3:.0f} | {seconds * 1e3:.2f} | {fitted * 1e3:.2f} |")
    shown = result.network if isinstance(result.network, str) else "-".join(map(str, result.network))
    print(f"\nnetwork {shown} (w = {result.n_weights}), n = "
          f"{result.n_patterns}, m = {result.n_test}, {result.workers} workers; written to {args.out}"
          + ("" if kept is None else f" and kept in {kept} (ppt-dask train of this network prints its "
             "predicted round beside the measured one)"))
    return 0


def _setting(args) -> dict:
    """Constants and sizes from the file, overridden by the flags; checked here."""
    from ppt_dask.perf.calibrate import Calibration

    path = args.calibration or args.constants
    flag = "--calibration" if args.calibration else "--constants"
    paths.input_file(flag, path, "a .json file" + (" written by `ppt-dask model calibrate`" if args.calibration
                                                   else " of Constants fields in seconds"))
    paths.output_file("--json", args.json, "a .json file for the numbers")
    cal = Calibration.load(path)
    n = args.n_patterns or cal.n_patterns
    w = (args.n_weights or (perfmodel.count_weights(args.network) if args.network else None)
         or cal.n_weights)
    if n is None or w is None:
        raise ValueError("constants alone do not say the problem size: pass --n-patterns and "
                         "--network (or --n-weights)")
    m = cal.n_test if args.n_test is None else args.n_test
    if m < 0:
        raise ValueError(f"--n-test must be >= 0, got {m}")
    shards = cal.n_shards if args.shards == _CALIBRATED else args.shards
    cores = cal.cores if args.cores == _CALIBRATED else args.cores
    return dict(c=cal.constants, n=int(n), w=int(w), m=int(m), n_shards=shards,
                fan_in=args.fan_in or cal.fan_in, exchange=args.exchange, cores=cores,
                cores_given=args.cores != _CALIBRATED, threads=cal.threads)


def _predict(args, s: dict) -> int:
    n = s["n"]
    blocks = np.array(args.block or sorted({min(4**j, n) for j in range(1, 12)} | {n}))
    if blocks.max() > n:
        raise ValueError(f"--block must be <= n_patterns = {n}, got {int(blocks.max())}")
    ps = np.array(args.p)
    kw = model_kw(s)
    speed = np.asarray(perfmodel.speedup(ps[None, :], blocks[:, None], n, s["w"], s["c"], **kw))
    rnd = np.asarray(perfmodel.iteration_seconds(ps[None, :], blocks[:, None], s["w"], s["c"],
                                                 s["fan_in"], n_shards=s["n_shards"], exchange=s["exchange"],
                                                 cores=s["cores"]))
    epoch = np.asarray(perfmodel.epoch_seconds(ps[None, :], blocks[:, None], n, s["w"], s["c"], **kw))
    print(problem_line(s))
    print(rounds_line(s, ps, blocks))
    print("\nPredicted speedup S(p), eq. (7) of Mörchen (2004) (like its Table VII)")
    print(grid_table(blocks, ps, speed, "{:.2f}"))
    print("\nPredicted efficiency E(p) = S(p)/p, eq. (8) of Mörchen (2004)")
    print(grid_table(blocks, ps, speed / ps[None, :], "{:.2f}"))
    print("\nPredicted seconds per round (one weight update)")
    print(grid_table(blocks, ps, rnd, "{:.4g}"))
    print("\nPredicted seconds per epoch (an iteration of Mörchen (2004))")
    print(grid_table(blocks, ps, epoch, "{:.4g}"))
    write_json(args.json, {"problem": problem(s), "p": ps.tolist(), "block": blocks.tolist(),
                       "speedup": speed.tolist(), "round_seconds": rnd.tolist(),
                       "epoch_seconds": epoch.tolist()})
    return 0


def _recommend(args, s: dict) -> int:
    n, w, c = s["n"], s["w"], s["c"]
    kw = model_kw(s)
    blocks = np.array(args.blocks) if args.blocks else planning.default_blocks(n)
    if blocks.max() > n:
        raise ValueError(f"--blocks must be <= n_patterns = {n}, got {int(blocks.max())}")
    best = planning.recommend(n, w, c, args.p_max, blocks, **kw)
    p_best, t_best, s_best = planning.best_workers(blocks, n, w, c, args.p_max, **kw)
    ps = [p for p in (2, 4, 8, 16, 32, 64, 128, 256) if p <= args.p_max] or [1]
    smallest = {p: planning.min_block_for_speedup(p, n, w, c, **kw) for p in ps}
    print(problem_line(s))
    print(rounds_line(s, np.arange(1, args.p_max + 1), blocks))
    print(f"\nrecommended: block {best.block} on {best.p} workers: {best.epoch_seconds:.4g} s per epoch, "
          f"speedup {best.speedup:.2f}, efficiency {best.efficiency:.2f}")
    print("(larger blocks always cost less per epoch but converge slower, Mörchen (2004) sec. VI: "
          "pass --blocks to limit the choice)")
    print(f"\nbest number of workers for each block (p <= {args.p_max})")
    print("| block | workers | s/epoch | speedup |\n|---:|---:|---:|---:|")
    for b, p, t, sp in zip(blocks, p_best, t_best, s_best):
        print(f"| {b} | {p} | {t:.4g} | {sp:.2f} |")
    print("\nsmallest block with any speedup (S > 1), like Mörchen (2004)'s 'no speedup below block 50'")
    print("| workers | smallest block |\n|---:|---:|")
    for p, b in smallest.items():
        print(f"| {p} | {'none up to n' if b is None else b} |")
    hybrid = _workers_by_threads(s, blocks)
    write_json(args.json, {"problem": problem(s), "recommended": dataclasses.asdict(best), "blocks": blocks.tolist(),
                       "best_p": p_best.tolist(),
                       "best_epoch_seconds": t_best.tolist(), "best_speedup": s_best.tolist(),
                       "smallest_block_for_speedup": {str(k): v for k, v in smallest.items()},
                       "workers_by_threads": hybrid})
    return 0


def _workers_by_threads(s: dict, blocks) -> dict | None:
    """Print the workers x threads the cores hold (the hybrid of Sobreira and Carneiro (2024)), the best and why; the
    numbers for --json (None where the calibration cannot say)."""
    from ppt_dask.perf import threads as perfthreads

    cores, timed = s["cores"], s.get("threads") or {}
    if not timed or cores is None:
        missing = "thread timings (calibrate again)" if not timed else "a core count (--cores)"
        print(f"\nworkers x threads: not proposed, the calibration has no {missing}")
        return None
    kw = {k: v for k, v in model_kw(s).items() if k != "cores"}
    options = perfthreads.layouts(s["n"], s["w"], s["c"], cores, timed, blocks, **kw)
    best = options[0]
    print(f"\nworkers x threads on {cores} cores (the hybrid of Sobreira and Carneiro (2024): threads inside "
          f"each worker), block {best.block}")
    print("| threads per worker | workers | s/epoch | gradient call x 1 thread |\n|---:|---:|---:|---:|")
    for t in sorted({o.threads for o in options}):
        o = min((o for o in options if o.threads == t and o.block == best.block), key=lambda o: o.epoch_seconds)
        print(f"| {t} | {o.p} | {o.epoch_seconds:.4g} | {o.thread_speedup:.2f} |")
    reason = perfthreads.why(best, options, timed, cores)
    print(f"recommended: --workers {best.p} --threads-per-worker {best.threads}: {reason}")
    return {"recommended": dataclasses.asdict(best), "why": reason, "cores": cores, "timed": timed,
            "options": [dataclasses.asdict(o) for o in options if o.block == best.block]}


if __name__ == "__main__":  # for a quick look without the integrated CLI
    parser = argparse.ArgumentParser(prog="ppt-dask")
    add_model_parser(parser.add_subparsers(dest="command", required=True))
    sys.exit(model_command(parser.parse_args()))
