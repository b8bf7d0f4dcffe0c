"""The ``ppt-dask`` command line.

    ppt-dask train parity8 --workers 2 --json out.json
    ppt-dask train mnist --workers 2 --strategy block --block 1000 --epochs 5

Runs on a LocalCluster it starts (one single-threaded worker process per core) unless
``--scheduler ADDRESS`` names an existing one. Everything is checked before the cluster
starts; a bad value exits with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import numpy as np

from ppt_dask import __version__
from ppt_dask.cli import errors as clierrors
from ppt_dask.cli import flags as cliflags
from ppt_dask.cli import owndata, paths, runmodel, textout, usermodel
from ppt_dask.cli.presets import MODULE_PRESETS, PRESETS, STRATEGY_PRESETS
from ppt_dask.core import applicability
from ppt_dask.data import datasets

SPLIT_EPOCHS = "100,200,250,500"  # --splits: where test accuracy is measured (004)
STRATEGY_KEYS = ("lr", "momentum", "l2", "block", "local_epoch", "interval", "local_epochs",
                 "sample_fraction", "momentum_policy", "staleness", "pull", "ema", "solver", "shuffle")


def _checkpoints(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise ValueError(f"--split-epochs takes epochs like 100,200; got {text!r}") from None
    if not values or min(values) <= 0:
        raise ValueError(f"--split-epochs must be positive epochs; got {text!r}")
    return values


def _splits(args, client, net, data, strategy, stop, n_shards, addresses, checkpoints) -> int:
    """004's repeated experiment: mean and spread of test accuracy over random splits."""
    from ppt_dask.engine.experiments import repeated_splits

    def show(record):
        if not args.quiet:
            print("split {split}: ".format(**record) + "  ".join(
                f"{k}={v:.4f}" for k, v in record.items() if k != "split"), file=sys.stderr)
    X = data.X if data.X_test is None else np.concatenate([data.X, data.X_test])
    y = data.y if data.y_test is None else np.concatenate([data.y, data.y_test])
    out = repeated_splits(client, net, X, y, strategy, stop, args.splits, checkpoints=checkpoints,
                          seed=args.seed, n_shards=n_shards, workers=addresses, fan_in=args.fan_in,
                          progress=show)
    print(f"test accuracy over {args.splits} random 70/30 splits (mean ± std):")
    for epoch, mean, std in zip(out["checkpoints"], out["mean"], out["std"]):
        print(f"  epoch {epoch:6g}: {100 * mean:6.2f}% ± {100 * std:.2f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"dataset": args.dataset, "strategy": strategy.name, "splits": args.splits,
                       "checkpoints": list(out["checkpoints"]), "mean": out["mean"].tolist(),
                       "std": out["std"].tolist(), "wall_seconds": out["wall_seconds"]}, fh, indent=2)
    return 0


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def _number(holds, words: str):
    """An argparse type: a float for which ``holds(value)``, else an error that says ``words``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not holds(value):
            raise argparse.ArgumentTypeError(f"{words}, got {text}")
        return value
    return parse


_positive_float = _number(lambda v: 0 < v < float("inf"), "must be a positive number")
_fraction = _number(lambda v: 0 <= v < 1, "must be in [0, 1)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppt-dask", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"ppt-dask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a network on a data set")
    t.add_argument("dataset", nargs="?", default=None, metavar="DATA",
                   help=f"a built-in set ({', '.join(sorted(PRESETS))}), or your own: a table (.csv, "
                        ".parquet file or folder of parts) or an .npz with X and y; a path or any URL "
                        "fsspec reads")
    t.add_argument("--workers", type=_int_at_least(1), default=None, help="worker processes (default: one per core)")
    t.add_argument("--threads-per-worker", type=_int_at_least(1), default=None,
                   help="threads of each worker process ppt-dask starts (default: 1)")
    t.add_argument("--shards", type=_int_at_least(1), default=None,
                   help="logical shards (default: 8, or the workers if more)")
    for add in (owndata.add_data_flags, _strategy_flags, _stop_flags, _network_flags, _cluster_flags,
                _output_flags):
        add(t)
    from ppt_dask.cli.cluster import add_cluster_parser
    add_cluster_parser(sub)  # ppt-dask cluster ssh HOSTFILE --certs DIR | slurm --jobs N ...
    from ppt_dask.cli.model import add_model_parser  # ppt-dask model calibrate|predict|recommend
    add_model_parser(sub)
    from ppt_dask.cli.predict import add_predict_parser  # ppt-dask predict MODEL DATASET
    add_predict_parser(sub)
    return parser


def _strategy_flags(t) -> None:
    """``train``: the strategy and its own settings."""
    t.add_argument("--strategy", choices=["epoch", "block", "ppt", "average", "local", "async"], default=None,
                   help="epoch: full batch; block: --block patterns per update (001); ppt: random "
                        "local epochs (000); average: weight averaging (001, 004); local: local SGD, "
                        "the average applied one round late (overlapped); async: a replica per worker, "
                        "no barrier, bounded staleness")
    t.add_argument("--block", type=_int_at_least(1), default=None,
                   help="patterns per update (block; async: per worker's update), or the local mini-batch "
                        "(average, local)")
    t.add_argument("--local-epoch", type=_int_at_least(1), default=None,
                   help="ppt: patterns each shard draws per round (000's local epoch size)")
    t.add_argument("--replicate", action=argparse.BooleanOptionalAction, default=None,
                   help="ppt: every worker holds the whole set and draws from all of it (000)")
    t.add_argument("--interval", type=_int_at_least(1), default=None,
                   help="average, local: patterns per shard between averages (001's a)")
    t.add_argument("--pull", type=_positive_float, default=None,
                   help="local: the share of the gap to the (one round late) average a shard closes, in (0, 1]")
    t.add_argument("--ema", type=_fraction, default=None,
                   help="local: report the running mean of the averages, the old mean weighted EMA "
                        "in [0, 1) (0: the last average)")
    t.add_argument("--local-epochs", type=_positive_float, default=None,
                   help="average: passes over each shard between averages (004: 5)")
    t.add_argument("--sample-fraction", type=_positive_float, default=None,
                   help="average: each local step draws this fraction of the shard with replacement (004: 0.9)")
    t.add_argument("--momentum-policy", choices=["reset", "average"], default=None,
                   help="average: the velocity across averages")
    t.add_argument("--staleness", type=_int_at_least(0), default=None,
                   help="async: the largest staleness a gradient may have (steps the other replicas took "
                        "that its maker's had not); its maker drops a staler one")
    t.add_argument("--solver", choices=["sgd", "adam"], default=None,
                   help="local: the local steps' optimizer (default sgd; a table of your own: adam when it "
                        "has fewer than 60 batches of rows, each pass in a new order)")


def _stop_flags(t) -> None:
    """``train``: when a run stops, restarts, checkpoints and 004's repeated splits."""
    t.add_argument("--restarts", type=_int_at_least(0), default=0,
                   help="tries from new random weights when one ends without learning (000)")
    t.add_argument("--window-epochs", type=_positive_float, default=None,
                   help="with a target error: the error estimate covers the last k*n patterns "
                        "(000's k; default 1; mnist: 0.4)")
    t.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="write a checkpoint (atomically) every --checkpoint-every rounds and at the end")
    t.add_argument("--checkpoint-every", type=_int_at_least(1), default=None,
                   help="rounds between checkpoints (also what a run rolls back to when a worker dies; default 25)")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint DIR")
    t.add_argument("--splits", type=_int_at_least(1), default=None,
                   help="repeat on N random 70/30 splits; report mean and spread of test accuracy (004)")
    t.add_argument("--split-epochs", default=None,
                   help="with --splits: epochs at which to measure test accuracy (default 100,200,250,500)")
    t.add_argument("--epochs", type=_positive_float, default=None)
    t.add_argument("--target-error", type=float, default=None, help="error rate to reach (verified)")
    t.add_argument("--check-every", type=_positive_float, default=None,
                   help="epochs between two verifications of the target on the test set (default: 1; mnist: 0.2)")
    t.add_argument("--screen", choices=["on", "off"], default=None,
                   help="on: verify only once the training-error estimate is at or below the target "
                        "(000's rule); off: verify every --check-every epochs (default: on)")


def _network_flags(t) -> None:
    """``train``: the network, the optimizer and the round graph."""
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--momentum", type=float, default=None)
    t.add_argument("--l2", type=float, default=None)
    t.add_argument("--model", default=None, metavar="PACKAGE.MODULE:FUNCTION",
                   help="train your own PyTorch module: the import path of a function (or class) that "
                        "returns it, e.g. ppt_dask.nets.examples:lenet5 (the current folder is searched first)")
    t.add_argument("--row-shape", type=usermodel.row_shape, default=None, metavar="D,D,...",
                   help="the shape of one input row: with --model the module's (default: mnist 1,28,28, "
                        "else flat); for a table or arrays of your own, kept with the model")
    t.add_argument("--hidden", type=cliflags.hidden_widths, default=None, help="hidden widths, e.g. 64,64")
    t.add_argument("--activation", choices=["sigmoid", "tanh", "relu"], default=None)
    t.add_argument("--dtype", choices=["float64", "float32"], default=None,
                   help="default: the data set's preset (mnist: float32; the others float64)")
    t.add_argument("--exchange", choices=["auto", "all", "doubling", "tree", "stream"], default="auto",
                   help="the round graph: all (one hop, the default), doubling (log2 p hops), "
                        "tree (the papers' reduce tasks, three hops); local: stream (one long "
                        "task per worker, its default) or all")
    t.add_argument("--fan-in", type=_int_at_least(2), default=2, help="children per reduce task")
    t.add_argument("--pipeline", type=_int_at_least(0), default=1, help="rounds submitted ahead")
    t.add_argument("--seed", type=_int_at_least(0), default=0)


def _cluster_flags(t) -> None:
    """``train``: the cluster a run uses."""
    t.add_argument("--scheduler", default=None, help="address of an existing scheduler")
    t.add_argument("--connect-timeout", type=_positive_float, default=None, metavar="SECONDS",
                   help="with --scheduler: seconds to wait for it to answer (default 10)")
    t.add_argument("--security", default=None, metavar="DIR",
                   help="TLS directory made by deploy/make_certs.py (default: the dask configuration)")


def _output_flags(t) -> None:
    """``train``: the data folder and what a run writes."""
    t.add_argument("--data-dir", default=None, help="folder holding mnist/ and digits5000/")
    t.add_argument("--json", default=None, metavar="PATH", help="write a summary here")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    t.add_argument("--report", default=None, metavar="PATH",
                   help="write a standalone HTML report of the run (time breakdown, curves, settings)")
    t.add_argument("--trace", default=None, metavar="PATH",
                   help="write the run as a Chrome trace (one track per worker plus the head)")
    t.add_argument("--save", default=None, metavar="PATH",
                   help="write the trained model here (.npz; read by `ppt-dask predict` and ppt.load_model)")
    t.add_argument("--calibration", default=None, metavar="JSON",
                   help="print the run-time model's predicted round beside the measured one (a file of "
                        "`ppt-dask model calibrate`; default: the one it kept for this network, if any)")


def _settings(args, kind: str = "preset") -> dict:
    if kind != "preset":  # a table or arrays of one's own
        s = owndata.settings(args)
    else:
        s = dict(PRESETS[args.dataset])
        if args.model:  # a module of the user's: its own defaults; the MLP's strategy presets do not apply
            s.update(MODULE_PRESETS.get(args.dataset, {}))
        strategy = args.strategy or s["strategy"]
        if not args.model:
            s.update(STRATEGY_PRESETS.get((args.dataset, strategy), {}))
        for name in [k for k in s if k in applicability.TABLE]:  # the preset's values for another strategy
            if not applicability.applies(name, strategy):
                del s[name]
    for name in ("strategy", "block", "lr", "momentum", "l2", "epochs", "target_error",
                 "hidden", "activation", "local_epoch", "replicate", "interval", "local_epochs",
                 "sample_fraction", "momentum_policy", "staleness", "pull", "ema", "dtype", "check_every", "screen",
                 "window_epochs", "solver"):
        value = getattr(args, name)
        if value is not None:
            s[name] = value
    return s


def train_command(args) -> int:
    import ppt_dask as ppt
    from ppt_dask.algorithms import choose
    from ppt_dask.engine.result import Outcome  # loads dask: after the arguments are read

    kind = owndata.source_kind(args)  # a built-in set, a table or arrays
    owndata.refuse_flags(args, kind)
    s = _settings(args, kind)
    cliflags.refuse_flags(args, s["strategy"], s["target_error"])  # refused, never ignored
    usermodel.refuse_flags(args, kind)
    security = _checked_cluster_and_outputs(args, ppt)
    strategy = choose.make(s["strategy"], **{k: s.get(k) for k in STRATEGY_KEYS})  # its values checked
    beside = runmodel.given(args, s["strategy"])  # --calibration: checked before any cluster work
    dtype = s.get("dtype", "float64")
    if kind == "preset":
        data = datasets.load(args.dataset, data_dir=args.data_dir, seed=args.seed, dtype=dtype)
        data, net, stop = _network_and_stop(args, s, data, dtype)
        n_shards = _n_shards(args, s, len(data.X))
        beside = None if args.splits else runmodel.for_network(beside, net, s["strategy"])
    else:  # the metadata checked here; the rows are read on the workers
        reading = owndata.open_data(args, dtype)
    checkpoints = _checkpoints(args.split_epochs or SPLIT_EPOCHS) if args.splits else None
    client = ppt.connect(args.scheduler, n_workers=args.workers, threads_per_worker=args.threads_per_worker or 1,
                         security=security, timeout=args.connect_timeout or 10.0)
    if kind != "preset":
        data, net, stop, n_shards, strategy = _own_data_on(client, args, s, reading, dtype)
        try:
            beside = None if args.splits else runmodel.for_network(beside, net, s["strategy"])
        except ValueError:
            ppt.cluster.close(client)
            raise
    url = None if args.quiet else ppt.cluster.page_url(client)
    if url:
        print(f"time breakdown, live: {url}", file=sys.stderr)
    result = _run_on(client, args, s, net, data, strategy, stop, n_shards, checkpoints, beside)
    if isinstance(result, int):  # --splits printed its own table
        return result
    summary = _summary(args, s, net, result)
    print(textout.result_lines(summary))  # rounded, with units; --json keeps every digit
    if beside is not None:  # the model beside the run: predicted and measured median round
        summary["run_time_model"] = entry = runmodel.summary(beside, runmodel.measured_round(result.breakdown()))
        result.settings.update(runmodel.settings(beside))
        if entry["measured_round_seconds"] is not None:
            result.settings["measured_round_ms"] = 1e3 * entry["measured_round_seconds"]
        print(runmodel.line(entry))
    _write_outputs(args, result, summary, data)
    if result.outcome is Outcome.DIVERGED:
        print(f"ppt-dask: {result.stopped_because}; kept the last good weights", file=sys.stderr)
        return 3
    return 0


def _own_data_on(client, args, s: dict, reading, dtype: str):
    """A table or arrays surveyed and checked on the workers (the cluster closed on an
    error): the data, network, stop, shard count and the strategy for its size."""
    import ppt_dask as ppt
    from ppt_dask.algorithms import choose

    try:
        known = ppt.cluster.worker_addresses(client)
        addresses = known[:args.workers] if args.workers and args.workers < len(known) else None
        table, test_shards = owndata.read_on(client, args, s, reading, dtype, addresses)
        n_shards = owndata.fill_sizes(args, s, table.n_rows, len(addresses or known))
        strategy = choose.make(s["strategy"], **{k: s.get(k) for k in STRATEGY_KEYS})
        net, stop = owndata.network_and_stop(ppt, s, table, test_shards, dtype, args.restarts)
        s["on_round"] = owndata.tolerance_rule(s, s["strategy"])
    except BaseException:
        ppt.cluster.close(client)
        raise
    return table, net, stop, n_shards, strategy


def _checked_cluster_and_outputs(args, ppt):
    """The scheduler address, the TLS files and the output folders, checked before any work;
    the security to connect with."""
    if args.scheduler:
        ppt.cluster.check_address(args.scheduler)
    security = ppt.cluster.resolve_security(
        args.security, ppt.cluster.check_address(args.scheduler) if args.scheduler else None)
    if args.save and args.splits:  # --splits trains one model per split
        raise ValueError("--save applies to one run, not to --splits")
    for flag, path, what in (("--json", args.json, "the summary's .json file"),
                             ("--report", args.report, "the report's .html file"),
                             ("--trace", args.trace, "the trace's .json file"),
                             ("--save", args.save, "the model's .npz file")):
        paths.output_file(flag, path, what)  # a missing folder must not cost the run
    paths.output_folder("--checkpoint", args.checkpoint, "checkpoint.npz")
    paths.output_folder("--data-dir", args.data_dir, "mnist/ and digits5000/")
    return security


def _network_and_stop(args, s: dict, data, dtype: str):
    """The data (rows shaped for a module), the network (the preset's MLP, or --model's) and
    the stopping rule."""
    import ppt_dask as ppt

    if args.model:
        data = usermodel.shaped(data, args.dataset, args.row_shape)
        net = usermodel.network(args.model, data, args.dtype)
        if net.dtype != dtype:  # the module's dtype: the data follows it
            data = dataclasses.replace(data, X=data.X.astype(net.dtype), X_test=None if data.X_test is None
                                       else data.X_test.astype(net.dtype))
            s["dtype"] = net.dtype
    else:
        n_outputs = (int(data.y.max()) + 1 if data.task == "classification"
                     else 1 if data.y.ndim == 1 else data.y.shape[1])
        net = ppt.MLP((data.X.shape[1], *s["hidden"], n_outputs), hidden=s["activation"],
                      output=s["output"], dtype=dtype)
    test = (data.X_test, data.y_test) if data.X_test is not None else None
    stop = ppt.Stop(max_epochs=s["epochs"], target_error=s["target_error"], test=test,
                    window_epochs=s.get("window_epochs", 1.0), restarts=args.restarts,
                    check_every=s.get("check_every", 1.0), screen=s.get("screen", "on") == "on")
    return data, net, stop


def _n_shards(args, s: dict, n_rows: int) -> int:
    """ppt, average and local: one shard per worker, as in 000 (local epoch per node) and
    001/004 (one model per processor); otherwise 8 logical shards (aligned for 1, 2, 4, 8
    workers)."""
    from ppt_dask.core import validation

    workers = args.workers
    per_worker = s["strategy"] in ("ppt", "average", "local")
    n_shards = args.shards or ((workers or os.cpu_count() or 1) if per_worker else max(8, workers or 0))
    try:
        validation.check_n_shards(n_shards, n_rows)
    except ValueError as exc:  # name the flag when the count is the user's
        raise ValueError(f"--shards: {exc}" if args.shards else str(exc)) from None
    return n_shards


def _run_on(client, args, s: dict, net, data, strategy, stop, n_shards: int, checkpoints, beside=None):
    """Place the data, train (or run --splits), close the cluster: the Result (or the
    splits' exit status). A Ctrl-C ends in one line that says where the run was. With a
    calibration (``beside``) the run's round is predicted once its workers are known, and the
    prediction rides in the run's settings (the live page draws it over the bars)."""
    import ppt_dask as ppt
    from ppt_dask.engine import interrupt
    from ppt_dask.progress import Training

    progress = None if args.quiet or args.splits else Training(s["epochs"])  # a bar, or lines in a log
    watch = interrupt.LastRound(progress)
    workers = args.workers
    try:  # a Ctrl-C in a finalizer comes again (errors.run): never lost
        known = ppt.cluster.worker_addresses(client)
        # all workers (None: the shards may spread to workers that join), or the first N
        addresses = known[:workers] if workers and workers < len(known) else None
        if args.splits:
            return _splits(args, client, net, data, strategy, stop, n_shards, addresses, checkpoints)
        shards = ppt.enter_data(client, data.X, data.y, n_shards, dtype=s.get("dtype", "float64"),
                                workers=addresses, replicate=bool(s.get("replicate")))
        from ppt_dask.api import RECORDER

        recorder = RECORDER
        if beside is not None:
            runmodel.predict(beside, workers=len(shards.worker_blocks()),
                             block=getattr(strategy, "block", None) or shards.n_rows, n_shards=shards.n_shards,
                             fan_in=args.fan_in, exchange=args.exchange, local=not args.scheduler)
            recorder = _recorder_with(runmodel.settings(beside))
        result = ppt.train(net, shards, strategy, stop, seed=args.seed, fan_in=args.fan_in,
                           checkpoint_dir=args.checkpoint, checkpoint_every=args.checkpoint_every or 25,
                           resume=args.resume, exchange=args.exchange, recorder=recorder,
                           pipeline=args.pipeline, progress=watch, on_round=s.get("on_round"))
        if isinstance(stop.test, ppt.ShardSet):  # a table's test rows, placed on the workers
            s["test_r2"] = owndata.test_r2(net, stop.test, result.params, data)
            ppt.exit_data(stop.test)
        if progress is not None:
            progress.close(result)  # the last state, and why it stopped
        ppt.exit_data(shards)
    except KeyboardInterrupt:
        if progress is not None:
            progress.close()
        interrupt.close_quietly(ppt.cluster.close, client)
        client = None
        raise interrupt.Interrupted(watch.line(args.checkpoint)) from None
    finally:
        if progress is not None:
            progress.close()
        if client is not None:
            ppt.cluster.close(client)
    return result


def _recorder_with(more: dict):
    """ppt.train's recorder with ``more`` in the run's settings (what the page and report show)."""
    from ppt_dask.api import RECORDER

    def recorder(client, run_id, settings):
        return RECORDER(client, run_id, {**settings, **more})
    return recorder


def _summary(args, s: dict, net, result) -> dict:
    """The run's summary: what the command prints and --json writes."""
    from ppt_dask.core.model import describe
    from ppt_dask.observe.breakdown import phase_table

    summary = {"dataset": args.dataset or f"{args.x} and {args.y}", "network": describe(net)["network"],
               **result.summary(),
               "lr": s["lr"], "momentum": s["momentum"], "l2": s.get("l2", 0.0), "block": s.get("block"),
               "median_round_seconds": float(np.median([r["wall_seconds"] for r in result.history]))}
    times = result.diagnostics.summary() if result.diagnostics is not None else {}
    summary["percent_not_gradient"] = times.get("percent_not_gradient")
    rows = result.breakdown()  # where a round's time goes, per phase
    summary["phases"] = phase_table(rows) if rows else None
    summary["median_head_submit_ms"] = times.get("median_head_submit_ms")
    if s.get("test_r2") is not None:  # a regression on a table: R^2, not the share within tolerance
        summary["test_r2"], summary["test_accuracy"] = s["test_r2"], None
    return summary


def _write_outputs(args, result, summary: dict, data=None) -> None:
    """--report, --trace, --json and --save."""
    if args.report:  # the report names the data set too
        result.settings["dataset"] = summary["dataset"]
        result.report(args.report)
    if args.trace:
        result.trace(args.trace)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if args.save:  # the dataset's name and the network go into the file's summary
        from ppt_dask.engine.modelfile import save_result
        # a table's classes, columns and scaling go with the model (prediction applies them)
        saved = save_result(result, args.save, classes=getattr(data, "classes", None), summary=summary,
                            preprocessing=getattr(data, "preprocessing", None))
        print(f"saved the model to {saved}")


def _command(args) -> int:
    if args.command == "train":
        return train_command(args)
    if args.command == "cluster":
        from ppt_dask.cli.cluster import cluster_command
        return cluster_command(args)
    if args.command == "model":
        from ppt_dask.cli.model import model_command
        return model_command(args)
    if args.command == "predict":
        from ppt_dask.cli.predict import predict_command
        return predict_command(args)
    return 1


def main(argv=None) -> int:
    parser = build_parser()
    clierrors.add_debug_flag(parser)
    args = parser.parse_args(argv)
    return clierrors.run(_command, args, parser)


if __name__ == "__main__":
    sys.exit(main())
