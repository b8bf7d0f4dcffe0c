"""The ``ppt-dask`` command line's parser: every command and flag, with their types and help.

Building it loads no dask (``--version`` and ``--help`` stay instant): each command's module
imports what it needs when it runs. The values are checked here as far as a type can check
one; what depends on other flags is checked by :mod:`ppt_dask.cli.flags` before the cluster
starts.
"""

from __future__ import annotations

import argparse

from ppt_dask import __version__
from ppt_dask.cli import flags as cliflags
from ppt_dask.cli import owndata, usermodel
from ppt_dask.cli.presets import PRESETS

DESCRIPTION = "Data-parallel training of neural networks on a Dask cluster: train, deploy, model the run time, predict."


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
    parser = argparse.ArgumentParser(prog="ppt-dask", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ppt-dask {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a network on a data set")
    t.add_argument("dataset", nargs="?", default=None, metavar="DATA",
                   help=f"a built-in set ({', '.join(sorted(PRESETS))}), or your own: a table (.csv, "
                        ".parquet file or folder of parts) or an .npz with X and y; a path or any URL "
                        "fsspec reads")
    t.add_argument("--workers", type=_int_at_least(1), default=None,
                   help="worker processes (default: one per core; with --scheduler, all the cluster's)")
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
                   help="epoch: full batch; block: --block patterns per update (Mörchen 2004); ppt: random "
                        "local epochs (Dahl et al. 2008); average: weight averaging (Mörchen; Alowaisheq and "
                        "Dhami); local: local SGD, "
                        "the average applied one round late (overlapped); async: a replica per worker, "
                        "no barrier, bounded staleness")
    t.add_argument("--block", type=_int_at_least(1), default=None,
                   help="patterns per update (block; async: per worker's update), or the local mini-batch "
                        "(average, local)")
    t.add_argument("--local-epoch", type=_int_at_least(1), default=None,
                   help="ppt: patterns each shard draws per round (the local epoch size of Dahl et al. 2008)")
    t.add_argument("--replicate", action=argparse.BooleanOptionalAction, default=None,
                   help="ppt: every worker holds the whole set and draws from all of it (as Dahl et al. 2008)")
    t.add_argument("--interval", type=_int_at_least(1), default=None,
                   help="average, local: patterns per shard between averages (the a of Mörchen 2004)")
    t.add_argument("--pull", type=_positive_float, default=None,
                   help="local: the share of the gap to the (one round late) average a shard closes, in (0, 1]")
    t.add_argument("--compensate", action=argparse.BooleanOptionalAction, default=None,
                   help="local: take the gap to the late average from where a shard started the round it ran "
                        "since (CoCoD-SGD), not from where it ended the averaged round")
    t.add_argument("--ema", type=_fraction, default=None,
                   help="local: report the running mean of the averages, the old mean weighted EMA "
                        "in [0, 1) (0: the last average)")
    t.add_argument("--local-epochs", type=_positive_float, default=None,
                   help="average: passes over each shard between averages (Alowaisheq and Dhami: 5)")
    t.add_argument("--sample-fraction", type=_positive_float, default=None,
                   help="average: each local step draws this fraction of the shard with replacement "
                        "(Alowaisheq and Dhami: 0.9)")
    t.add_argument("--momentum-policy", choices=["reset", "average"], default=None,
                   help="average: the velocity across averages")
    t.add_argument("--staleness", type=_int_at_least(0), default=None,
                   help="async: the largest staleness a gradient may have (steps the other replicas took "
                        "that its maker's had not); its maker drops a staler one")
    t.add_argument("--shuffle", action=argparse.BooleanOptionalAction, default=None,
                   help="local: walk each pass over a shard in a new order, seeded (default: on with --model, "
                        "as a PyTorch DataLoader's shuffle=True; off for the built-in MLP's mnist preset)")
    t.add_argument("--solver", choices=["sgd", "adam"], default=None,
                   help="local: the local steps' optimizer (default sgd; a table of your own: adam when it "
                        "has fewer than 60 batches of rows, each pass in a new order)")


def _stop_flags(t) -> None:
    """``train``: when a run stops, restarts, checkpoints and the repeated splits of Alowaisheq and Dhami."""
    t.add_argument("--restarts", type=_int_at_least(0), default=0,
                   help="tries from new random weights when one ends without learning (as Dahl et al. 2008)")
    t.add_argument("--window-epochs", type=_positive_float, default=None,
                   help="with a target error: the error estimate covers the last k*n patterns "
                        "(the k of Dahl et al. 2008; default 1; mnist: 0.4)")
    t.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="write a checkpoint (atomically) with each of the head's copies of the state and at the end")
    t.add_argument("--checkpoint-every", type=_int_at_least(1), default=None,
                   help="rounds between the head's copies of the state (checkpoints; what a run rolls back to when a "
                        "worker dies; default 25, fewer copies where one would take over 5%% of the run's time)")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint DIR")
    t.add_argument("--splits", type=_int_at_least(1), default=None,
                   help="repeat on N random 70/30 splits; report mean and spread of test accuracy "
                        "(as Alowaisheq and Dhami)")
    t.add_argument("--split-epochs", default=None,
                   help="with --splits: epochs at which to measure test accuracy (default 100,200,250,500)")
    t.add_argument("--epochs", type=_positive_float, default=None)
    t.add_argument("--target-error", type=float, default=None, help="error rate to reach (verified)")
    t.add_argument("--check-every", type=_positive_float, default=None,
                   help="epochs between two verifications of the target on the test set (default: 1; mnist: 0.2)")
    t.add_argument("--screen", choices=["on", "off"], default=None,
                   help="on: verify only once the training-error estimate is at or below the target "
                        "(the rule of Dahl et al. 2008); off: verify every --check-every epochs (default: on)")


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
                   help="how a round's sums meet: auto (the default) and stream run one long task "
                        "per worker whose sums go worker to worker (an allreduce, no scheduler hop); "
                        "the per-round graphs: all (one scheduler hop), doubling (log2 p hops), "
                        "tree (the papers' reduce tasks, three hops); local: stream or all")
    t.add_argument("--reproducible", choices=["any-p", "same-p"], default=None,
                   help="what a seeded run repeats bit for bit: same-p, the same weights on the same number "
                        "of workers, through a lost worker and --resume (a worker's rows of a round in one "
                        "pass: the default for epoch, block, ppt); any-p, the same weights on any number of "
                        "workers (every logical shard on its own: average and local always)")
    t.add_argument("--hang-seconds", type=_positive_float, default=30.0,
                   help="a worker whose loop makes no progress this long while the others wait for it "
                        "(a stopped process, a stuck read) is named, restarted, and the run goes on as from "
                        "a lost worker (synchronous streamed runs; default 30, or 200 median rounds if longer)")
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
