"""The ``ppt-dask`` command line.

    ppt-dask train parity8 --workers 2 --json out.json
    ppt-dask train mnist --workers 2 --strategy block --block 1000 --epochs 5

Runs on a LocalCluster it starts (one single-threaded worker process per core) unless
``--scheduler ADDRESS`` names an existing one. Everything is checked before the cluster
starts; a bad value exits with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import numpy as np

from . import datasets

# Per data set: the network and the settings that learn it (seed 000 for parity, 001 for
# Encoder, Function and Digits). Command-line flags override them.
PRESETS = {
    "parity8": dict(hidden=(100,), activation="tanh", output="sigmoid", strategy="epoch",
                    lr=2.0, momentum=0.9, epochs=2000, target_error=0.0),
    "encoder": dict(hidden=(8,), activation="sigmoid", output="sigmoid", strategy="epoch",
                    lr=2.0, momentum=0.9, epochs=5000, target_error=0.0),
    "function": dict(hidden=(128, 128), activation="tanh", output="linear", strategy="block",
                     block=16, lr=0.1, momentum=0.5, epochs=200, target_error=None),
    "mnist": dict(hidden=(64, 64), activation="tanh", output="softmax", strategy="block",
                  block=1000, lr=0.5, momentum=0.9, epochs=15, target_error=0.03),
    "digits5000": dict(hidden=(25,), activation="sigmoid", output="softmax", strategy="epoch",
                       lr=2.0, momentum=0.9, l2=0.6987, epochs=500, target_error=None),
}


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hidden takes widths like 64,64; got {text!r}") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"--hidden widths must be >= 1; got {text!r}")
    return sizes


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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppt-dask", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a network on a data set")
    t.add_argument("dataset", choices=sorted(PRESETS))
    t.add_argument("--workers", type=_int_at_least(1), default=None, help="worker processes (default: one per core)")
    t.add_argument("--threads-per-worker", type=_int_at_least(1), default=1)
    t.add_argument("--shards", type=_int_at_least(1), default=None, help="logical shards (default: 8, or the workers if more)")
    t.add_argument("--strategy", choices=["epoch", "block"], default=None)
    t.add_argument("--block", type=_int_at_least(1), default=None, help="patterns per update (strategy block)")
    t.add_argument("--lr", type=float, default=None)
    t.add_argument("--momentum", type=float, default=None)
    t.add_argument("--l2", type=float, default=None)
    t.add_argument("--epochs", type=_positive_float, default=None)
    t.add_argument("--target-error", type=float, default=None, help="error rate to reach (verified)")
    t.add_argument("--hidden", type=_hidden, default=None, help="hidden widths, e.g. 64,64")
    t.add_argument("--activation", choices=["sigmoid", "tanh", "relu"], default=None)
    t.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    t.add_argument("--fan-in", type=_int_at_least(2), default=2, help="children per reduce task")
    t.add_argument("--pipeline", type=_int_at_least(0), default=1, help="rounds submitted ahead")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--scheduler", default=None, help="address of an existing scheduler")
    t.add_argument("--data-dir", default=None, help="folder holding mnist/ and digits5000/")
    t.add_argument("--json", default=None, metavar="PATH", help="write a summary here")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def _settings(args) -> dict:
    s = dict(PRESETS[args.dataset])
    for name in ("strategy", "block", "lr", "momentum", "l2", "epochs", "target_error",
                 "hidden", "activation"):
        value = getattr(args, name)
        if value is not None:
            s[name] = value
    return s


class Progress:
    """One line every half second or so: epoch, loss, error, seconds per round."""

    def __init__(self, every: float = 0.5, stream=sys.stderr):
        self.every, self.stream, self.last = every, stream, 0.0

    def __call__(self, record: dict) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        print(f"epoch {record['epoch']:8.2f}  round {record['round']:6d}  loss {record['loss']:.5f}  "
              f"error {record['error_rate']:.4f}  {record['wall_seconds']:.4f} s/round", file=self.stream)


def train_command(args) -> int:
    import ppt_dask as ppt  # the dask-using layers, loaded once the arguments are good

    s = _settings(args)
    if args.scheduler:
        ppt.cluster.check_address(args.scheduler)
    data = datasets.load(args.dataset, data_dir=args.data_dir, seed=args.seed, dtype=args.dtype)
    n_outputs = (int(data.y.max()) + 1 if data.task == "classification"
                 else 1 if data.y.ndim == 1 else data.y.shape[1])
    net = ppt.MLP((data.X.shape[1], *s["hidden"], n_outputs), hidden=s["activation"],
                  output=s["output"], dtype=args.dtype)
    strategy = ppt.strategies.make(s["strategy"], lr=s["lr"], momentum=s["momentum"],
                                   l2=s.get("l2", 0.0), block=s.get("block"))
    test = (data.X_test, data.y_test) if data.X_test is not None else None
    stop = ppt.Stop(max_epochs=s["epochs"], target_error=s["target_error"], test=test)
    workers = args.workers
    n_shards = args.shards or max(8, workers or 0)
    ppt.validation.check_n_shards(n_shards, len(data.X))
    client = ppt.connect(args.scheduler, n_workers=workers, threads_per_worker=args.threads_per_worker)
    try:
        addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])[: workers or None]
        shards = ppt.enter_data(client, data.X, data.y, n_shards, dtype=args.dtype, workers=addresses)
        result = ppt.train(net, shards, strategy, stop, seed=args.seed, fan_in=args.fan_in,
                           pipeline=args.pipeline, progress=None if args.quiet else Progress())
        ppt.exit_data(shards)
    finally:
        ppt.cluster.close(client)
    summary = {"dataset": args.dataset, "network": list(net.sizes), **result.summary(),
               "lr": s["lr"], "momentum": s["momentum"], "l2": s.get("l2", 0.0), "block": s.get("block"),
               "median_round_seconds": float(np.median([r["wall_seconds"] for r in result.history]))}
    print(" ".join(f"{k}={v}" for k, v in summary.items() if k in (
        "dataset", "strategy", "workers", "epochs", "rounds", "train_loss", "train_error_rate",
        "test_accuracy", "wall_seconds", "learned")))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    if result.stopped_because.startswith("diverged"):
        print(f"ppt-dask: {result.stopped_because}; kept the last good weights", file=sys.stderr)
        return 3
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return train_command(args)
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"ppt-dask: error: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
