"""The ``ppt-dask`` command line: what each command does once its arguments are read (the
parser, every command's flags, is :mod:`ppt_dask.cli.parser`).

    ppt-dask train parity8 --workers 2 --json out.json
    ppt-dask train mnist --workers 2 --strategy block --block 1000 --epochs 5

Runs on a LocalCluster it starts (one single-threaded worker process per core) unless
``--scheduler ADDRESS`` names an existing one. Everything is checked before the cluster
starts; a bad value exits with status 2 and a one-line message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import warnings

import numpy as np

from ppt_dask.cli import errors as clierrors
from ppt_dask.cli import flags as cliflags
from ppt_dask.cli import owndata, paths, presets, runmodel, textout, usermodel
from ppt_dask.cli.outputs import page_lines, recorder_with, run_summary, write_outputs
from ppt_dask.cli.parser import build_parser
from ppt_dask.cli.presets import MODULE_PRESETS, PRESETS, STRATEGY_PRESETS
from ppt_dask.core import applicability
from ppt_dask.data import datasets

SPLIT_EPOCHS = "100,200,250,500"  # --splits: where test accuracy is measured (004)
STRATEGY_KEYS = ("lr", "momentum", "l2", "block", "local_epoch", "interval", "local_epochs",
                 "sample_fraction", "momentum_policy", "staleness", "pull", "ema", "solver", "shuffle",
                 "compensate")


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
                          reproducible=args.reproducible,
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


def _settings(args, kind: str = "preset", workers: int | None = None) -> dict:
    """The run's settings: the preset's, those of its strategy and of its shard count (for
    ``workers`` workers, else :func:`_workers_known`'s), then the flags'."""
    if kind != "preset":  # a table or arrays of one's own
        s = owndata.settings(args)
    else:
        s = dict(PRESETS[args.dataset])
        if args.model:  # a module of the user's: its own defaults; the MLP's strategy presets do not apply
            s.update(MODULE_PRESETS.get(args.dataset, {}))
        strategy = args.strategy or s["strategy"]
        if not args.model:
            s.update(STRATEGY_PRESETS.get((args.dataset, strategy), {}))
        if strategy == s["strategy"]:  # the preset's own strategy: its settings for this many shards
            scaling = presets.MODULE_SCALING if args.model else presets.MLP_SCALING
            s.update(presets.for_shards(s, _shard_count(args, strategy, workers), scaling))
        for name in [k for k in s if k in applicability.TABLE]:  # the preset's values for another strategy
            if not applicability.applies(name, strategy):
                del s[name]
    for name in ("strategy", "block", "lr", "momentum", "l2", "epochs", "target_error",
                 "hidden", "activation", "local_epoch", "replicate", "interval", "local_epochs",
                 "sample_fraction", "momentum_policy", "staleness", "pull", "ema", "dtype", "check_every", "screen",
                 "window_epochs", "solver", "compensate", "shuffle"):
        value = getattr(args, name)
        if value is not None:
            s[name] = value
    return s


def train_command(args) -> int:
    import ppt_dask as ppt
    from ppt_dask.algorithms import asynchronous, choose
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
        if args.interval is None and presets.round_within_check(s, len(data.X), n_shards):
            strategy = choose.make(s["strategy"], **{k: s.get(k) for k in STRATEGY_KEYS})  # a shorter round
        beside = None if args.splits else runmodel.for_network(beside, net, s["strategy"])
    else:  # the metadata checked here; the rows are read on the workers
        reading = owndata.open_data(args, dtype)
    checkpoints = _checkpoints(args.split_epochs or SPLIT_EPOCHS) if args.splits else None
    client = ppt.connect(args.scheduler, n_workers=args.workers, threads_per_worker=args.threads_per_worker or 1,
                         security=security, timeout=args.connect_timeout or 10.0)
    try:
        if kind != "preset":
            data, net, stop, n_shards, strategy = _own_data_on(client, args, s, reading, dtype)
            beside = None if args.splits else runmodel.for_network(beside, net, s["strategy"])
        elif _workers_known(args) is None:  # --scheduler without --workers: as many as the cluster has
            s, strategy, n_shards = _on_the_clusters_workers(client, args, s, len(data.X))
        url = None if args.quiet else ppt.cluster.page_url(client)
    except BaseException as exc:
        _close_after(client, exc, args.checkpoint)
        raise
    if url:
        print("\n".join(page_lines(url)), file=sys.stderr)
    with warnings.catch_warnings():  # said below in one line, naming the flag
        warnings.simplefilter("ignore", asynchronous.StaleGradientsWarning)
        result = _run_on(client, args, s, net, data, strategy, stop, n_shards, checkpoints, beside)
    if isinstance(result, int):  # --splits printed its own table
        return result
    summary = run_summary(args, s, net, result)
    print(textout.result_lines(summary))  # rounded, with units; --json keeps every digit
    left_out = result.left_out(f"--staleness {getattr(result.strategy, 'staleness', 0)}")
    if left_out:
        print(f"ppt-dask: warning: {left_out}", file=sys.stderr)
    if beside is not None:  # the model beside the run: predicted and measured median round
        summary["run_time_model"] = entry = runmodel.summary(beside, runmodel.measured_round(result.breakdown()))
        result.settings.update(runmodel.settings(beside))
        if entry["measured_round_seconds"] is not None:
            result.settings["measured_round_ms"] = 1e3 * entry["measured_round_seconds"]
        print(runmodel.line(entry))
    write_outputs(args, result, summary, data)
    if result.outcome is Outcome.DIVERGED:
        print(f"ppt-dask: {result.stopped_because}; kept the last good weights", file=sys.stderr)
        return 3
    return 0


def _own_data_on(client, args, s: dict, reading, dtype: str):
    """A table or arrays surveyed and checked on the workers: the data, network, stop, shard
    count and the strategy for its size."""
    import ppt_dask as ppt
    from ppt_dask.algorithms import choose

    known = ppt.cluster.worker_addresses(client)
    addresses = known[:args.workers] if args.workers and args.workers < len(known) else None
    table, test_shards = owndata.read_on(client, args, s, reading, dtype, addresses)
    n_shards = owndata.fill_sizes(args, s, table.n_rows, len(addresses or known))
    strategy = choose.make(s["strategy"], **{k: s.get(k) for k in STRATEGY_KEYS})
    net, stop = owndata.network_and_stop(ppt, s, table, test_shards, dtype, args.restarts)
    s["on_round"] = owndata.tolerance_rule(s, s["strategy"])
    return table, net, stop, n_shards, strategy


def _close_after(client, exc: BaseException, checkpoint_dir) -> None:
    """The client closed after an error between the connection and the run; a lost scheduler
    raised as :class:`ppt_dask.engine.waits.SchedulerLost` (its one line), the client closed quietly."""
    import ppt_dask as ppt
    from ppt_dask.engine import interrupt, trainer

    lost = trainer.scheduler_lost(client, exc, checkpoint_dir) if isinstance(exc, Exception) else None
    if lost is None:
        ppt.cluster.close(client)
        return
    interrupt.close_quietly(ppt.cluster.close, client, workers_too=False)
    raise lost from exc


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


def _workers_known(args) -> int | None:
    """The workers the run will have, as far as the command line tells: ``--workers``, or one
    per core of the LocalCluster it starts; None with ``--scheduler`` and no ``--workers``
    (the cluster's, counted once connected: :func:`_on_the_clusters_workers`)."""
    if args.workers:
        return args.workers
    return None if args.scheduler else (os.cpu_count() or 1)


def _shard_count(args, strategy: str, workers: int | None = None) -> int:
    """ppt, average and local: one shard per worker, as in 000 (local epoch per node) and
    001/004 (one model per processor); otherwise 8 logical shards (aligned for 1, 2, 4, 8
    workers), or one per worker when there are more. ``workers``: the cluster's, else
    :func:`_workers_known`'s (1 while a scheduler's are not counted yet). ``--shards`` wins."""
    workers = workers or _workers_known(args) or 1
    per_worker = strategy in ("ppt", "average", "local")
    return args.shards or (workers if per_worker else max(8, workers))


def _on_the_clusters_workers(client, args, s: dict, n_rows: int):
    """``--scheduler`` without ``--workers``: the settings, strategy and shard count for the
    workers the cluster has (not this machine's cores), said in the run's first line. Before
    the connection they were checked for one worker."""
    import ppt_dask as ppt
    from ppt_dask.algorithms import choose

    workers = len(ppt.cluster.worker_addresses(client))
    if not workers:
        raise ValueError(f"the cluster at {args.scheduler} has no workers (start some: dask worker "
                         f"{args.scheduler}; or say how many: --workers)")
    again = _settings(args, "preset", workers)
    if "dtype" in s:  # a module's own dtype (_network_and_stop) stays
        again["dtype"] = s["dtype"]
    n_shards = _n_shards(args, again, n_rows, workers)
    if args.interval is None:
        presets.round_within_check(again, n_rows, n_shards)
    strategy = choose.make(again["strategy"], **{k: again.get(k) for k in STRATEGY_KEYS})
    if not args.quiet:
        print(f"the cluster at {args.scheduler} has {workers} worker{'s' * (workers > 1)}: {n_shards} "
              f"shard{'s' * (n_shards > 1)} (--workers, --shards choose others)", file=sys.stderr)
    return again, strategy, n_shards


def _n_shards(args, s: dict, n_rows: int, workers: int | None = None) -> int:
    """The number of shards (:func:`_shard_count`), checked against the rows."""
    from ppt_dask.core import validation

    n_shards = _shard_count(args, s["strategy"], workers)
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
    from ppt_dask.engine import interrupt, trainer
    from ppt_dask.engine.waits import SchedulerLost
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
                             fan_in=args.fan_in, exchange=args.exchange, local=not args.scheduler,
                             reproducible=applicability.reproducible_for(s["strategy"], args.reproducible) or "any-p")
            recorder = recorder_with(runmodel.settings(beside))
        result = ppt.train(net, shards, strategy, stop, seed=args.seed, fan_in=args.fan_in,
                           checkpoint_dir=args.checkpoint, checkpoint_every=args.checkpoint_every,
                           resume=args.resume, exchange=args.exchange, reproducible=args.reproducible,
                           recorder=recorder, hang_seconds=args.hang_seconds,
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
    except Exception as exc:  # a lost scheduler (in the rounds, or placing or releasing the data): one line
        lost = exc if isinstance(exc, SchedulerLost) else trainer.scheduler_lost(client, exc, args.checkpoint)
        if lost is None:
            raise
        interrupt.close_quietly(ppt.cluster.close, client, workers_too=False)  # the client only, quietly
        client = None
        if lost is exc:
            raise
        raise lost from exc
    finally:
        if progress is not None:
            progress.close()
        if client is not None:
            ppt.cluster.close(client)
    return result


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
