"""``ppt-dask train PATH``: the user's own table or arrays, read on the workers.

    ppt-dask train train.csv --target species --test test.csv
    ppt-dask train s3://bucket/rows.parquet --target price --test-fraction 0.2
    ppt-dask train --x X.npy --y y.npy --row-shape 1,28,28

The file's metadata is checked before the cluster starts (it exists, its kind is read, the
columns are there and are numbers); the workers then survey the rows (missing values,
labels, the scaling) and build their shards from the file, partition by partition
(:mod:`ppt_dask.data.tables`): the head never holds the rows, nor the test rows, which are
placed on the workers too. The defaults for a table are the estimators' (``PPTClassifier()``):
see :data:`ppt_dask.cli.presets.TABLE`.
"""

from __future__ import annotations

import argparse
import re
import sys

from ppt_dask.cli.presets import PRESETS, TABLE, TABLE_STRATEGY_PRESETS
from ppt_dask.core import applicability

TASK_WORDS = ("classification", "regression")
# a column name that reads as a row's identifier: id, ID, user_id, customerId, uuid, key, index, row
ID_NAME = re.compile(r"(?i:^(id|uuid|guid|key|index|row|row_?(no|num|number))$|[_\-\s]id$)|[a-z0-9](Id|ID)$")
ID_TIMEOUT = 120.0  # seconds to wait for the workers' count of an id column's distinct values


def add_data_flags(t) -> None:
    """``train``: the user's own data (a table or arrays)."""
    t.add_argument("--x", default=None, metavar="X.npy", help="the rows as an .npy array (with --y)")
    t.add_argument("--y", default=None, metavar="Y.npy", help="the labels or targets as an .npy array (with --x)")
    t.add_argument("--target", default=None, metavar="COLUMN", help="table: the column of labels or targets")
    t.add_argument("--features", type=_names, default=None, metavar="A,B,...",
                   help="table: the feature columns (default: every column but the target)")
    t.add_argument("--task", choices=TASK_WORDS, default=None,
                   help="default: labels that are text, integers or booleans make a classifier, floats a regressor")
    t.add_argument("--test", default=None, metavar="PATH", help="a test file with the training file's columns")
    t.add_argument("--test-fraction", type=_open_fraction, default=None, metavar="F",
                   help="draw this share of the rows into the test set (seeded by --seed)")
    t.add_argument("--dropna", action="store_true", default=None, help="drop the rows with a missing value")
    t.add_argument("--keep", type=_names, default=None, metavar="A,B,...",
                   help="table: columns kept out of the features (an id, say), as predict --keep carries them")


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected column names like a,b; got {text!r}")
    return names


def _open_fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {text}")
    return value


def source_kind(args) -> str:
    """"preset" (a built-in set), "table" or "arrays"; the data argument checked."""
    if args.x is not None or args.y is not None:
        if args.dataset is not None:
            raise ValueError(f"give a data set ({args.dataset!r}) or --x and --y, not both")
        if args.x is None or args.y is None:
            raise ValueError("--x and --y go together: the rows and the labels, two .npy files")
        return "arrays"
    if args.dataset is None:
        raise ValueError(f"name the data: a built-in set ({', '.join(sorted(PRESETS))}), a table (.csv, .parquet), "
                         "an .npz, or --x X.npy --y y.npy")
    if args.dataset in PRESETS:
        return "preset"
    check_named_file(args.dataset, PRESETS)
    return "arrays" if args.dataset.lower().endswith(".npz") else "table"


def check_named_file(name: str, builtin) -> None:
    """A name that is neither a built-in set nor a file (no suffix, no folder, no URL): say both."""
    import os

    if not os.path.splitext(name.rstrip("/"))[1] and "://" not in name and not os.path.isdir(name):
        raise ValueError(f"unknown data set {name!r}: not a built-in set ({', '.join(sorted(builtin))}) nor a "
                         "file (.csv, .parquet, .npz) or folder of Parquet parts")


GIVEN = ("target", "features", "task", "test", "test_fraction", "row_shape", "dropna", "data_dir", "splits",
         "split_epochs")


def refuse_flags(args, kind: str) -> None:
    """The data flags that do not apply to this kind of data, refused in one line."""
    if getattr(args, "keep", None) and kind != "table":
        raise ValueError(f"--keep applies to a table (columns kept out of the features), not to "
                         f"{'arrays' if kind == 'arrays' else 'a built-in set'} ({args.dataset or args.x})")
    given = {name: getattr(args, name) for name in GIVEN}
    applicability.refuse_source(kind, given, args.dataset or args.x, spell=applicability.cli_spelling)


def settings(args) -> dict:
    """The table preset with the strategy's own settings; the flags are applied by the caller."""
    s = dict(TABLE)
    s.update(TABLE_STRATEGY_PRESETS.get(args.strategy or s["strategy"], {}))
    return s


def open_data(args, dtype: str):
    """The data's metadata, checked on the head (:func:`ppt_dask.data.tables.open_data`)."""
    from ppt_dask.data import tables

    if args.test is not None and args.test_fraction is not None:
        raise ValueError("--test and --test-fraction both give a test set: give one")
    task = args.task
    common = dict(features=args.features, task=task, test=args.test, test_fraction=args.test_fraction,
                  seed=args.seed, dropna=bool(args.dropna), row_shape=args.row_shape, dtype=dtype)
    if args.x is not None:
        return tables.open_data(x=args.x, y=args.y, **common)
    reading = tables.open_data(args.dataset, args.target, **common)
    keep = getattr(args, "keep", None) or []
    if keep:  # the features without the kept columns, checked by name
        columns = [*reading.layout.frame.columns]
        absent = [c for c in keep if c not in columns]
        if absent:
            raise ValueError(f"--keep: {args.dataset} has no column {absent[0]!r}")
        if args.target in keep:
            raise ValueError(f"--keep {args.target}: that is the --target column")
        if args.features is not None and set(keep) & set(args.features):
            raise ValueError(f"--keep and --features both name {sorted(set(keep) & set(args.features))[0]!r}")
        features = [c for c in (args.features or [c for c in columns if c != args.target]) if c not in keep]
        reading = tables.open_data(args.dataset, args.target, **{**common, "features": features})
    return reading


def identifier_columns(client, reading, n_rows: int) -> list[str]:
    """The feature columns that look like an identifier: named like one (:data:`ID_NAME`)
    and a different value in each of the ``n_rows`` rows (counted on the workers; only the
    count comes back)."""
    layout = reading.layout
    frame = getattr(layout, "frame", None)
    if frame is None:
        return []
    named = [c for c in layout.features if ID_NAME.search(str(c))]
    if not named:
        return []
    try:
        counts = [f.result(ID_TIMEOUT) for f in client.compute([frame[c].nunique() for c in named])]
    except TimeoutError:
        raise TimeoutError(f"waited {ID_TIMEOUT:g} s for the workers' count of the distinct values of "
                           f"{', '.join(map(repr, named))}") from None
    return [c for c, n in zip(named, counts) if int(n) == n_rows]


def fill_sizes(args, s: dict, n_rows: int, n_workers: int) -> int:
    """The data-dependent settings the flags left open, as the estimators choose them; the
    number of shards. One shard per worker, one for a set of fewer than ``steps`` batches
    for the local strategy (a round of ``steps`` local steps would not fit a shard);
    ``batch`` rows a step over all shards; ``steps`` steps between averages, at most a pass
    over a shard."""
    strategy = s["strategy"]
    if s.get("solver") is None and strategy == "local" and n_rows < s["steps"] * s["batch"]:
        s["solver"] = "adam"  # on a set too small for a round of local steps (else momentum SGD)
    if s.get("solver") == "adam":  # MLPClassifier's rate and batch, each pass in a new order
        s.update(batch=s["adam_batch"], shuffle=True, **({} if args.lr is not None else {"lr": s["adam_lr"]}))
    batch = min(s["batch"], n_rows)
    per_worker = strategy in ("ppt", "average", "local")
    if args.shards:
        n_shards = args.shards
    elif strategy == "local" and n_rows < s["steps"] * batch:
        n_shards = 1
    else:
        n_shards = n_workers if per_worker else max(8, n_workers)
    n_shards = min(n_shards, n_rows)
    if args.block is None and strategy != "epoch":
        s["block"] = max(1, batch // n_shards) if per_worker else batch
    if strategy == "local" and args.interval is None:
        steps = max(1, min(s["steps"], (n_rows // n_shards) // s["block"]))
        s["interval"] = steps * s["block"]
    if strategy == "ppt" and args.local_epoch is None:
        s["local_epoch"] = max(1, min(s["block"], n_rows // n_shards))
    return n_shards


def network_and_stop(ppt, s: dict, table, test_shards, dtype: str, restarts: int):
    """The preset's network for the table's width and outputs; the stop with the test shards."""
    output = "softmax" if table.task == "classification" else "linear"
    net = ppt.MLP((table.n_features, *s["hidden"], table.n_outputs), hidden=s["activation"], output=output,
                  dtype=dtype)
    stop = ppt.Stop(max_epochs=s["epochs"], target_error=s["target_error"], test=test_shards,
                    window_epochs=s.get("window_epochs", 1.0), restarts=restarts,
                    check_every=s.get("check_every", 1.0), screen=s.get("screen", "on") == "on")
    return net, stop


def read_on(client, args, s: dict, reading, dtype: str, addresses):
    """Survey and check the data on the workers, place the test rows; (table, test shards)."""
    import ppt_dask as ppt
    from ppt_dask.data import tables

    table = reading.read(client)
    if not args.features:  # an id column trained on as a feature: said, with the flag that leaves it out
        for column in identifier_columns(client, reading, table.n_rows + table.n_test + table.dropped):
            print(f"ppt-dask: warning: column {column!r} has a different value in every row and looks like an "
                  f"identifier: it is trained on as a feature; leave it out with --keep {column}", file=sys.stderr)
    known = ppt.cluster.workers(client)
    used = addresses or sorted(known)
    tables.check_fits(table, [known[w].get("memory_limit") for w in used])
    if not args.quiet:
        kind = f"{len(table.classes)} classes" if table.classes is not None else "regression"
        print(f"read on the workers: {table.n_rows} training rows, {table.n_test} test rows, "
              f"{table.n_features} features, {kind}" + (f"; {table.dropped} rows with missing values dropped"
                                                        if table.dropped else ""), file=sys.stderr)
    test_shards = None
    if table.X_test is not None:
        test_shards = ppt.enter_data(client, table.X_test, table.y_test, min(len(used), table.n_test),
                                     dtype=dtype, workers=addresses)
    return table, test_shards


def tolerance_rule(s: dict, strategy_name: str):
    """scikit-learn's ``tol`` rule on the epochs' mean training loss (``on_round``), as the
    estimators stop; None for the asynchronous strategy (it has no rounds to stop at)."""
    if strategy_name == "async" or s.get("tol") is None:
        return None
    from ppt_dask.sklearn.epochs import EpochCurve, ToleranceRule

    return EpochCurve(ToleranceRule(s["tol"], s["n_iter_no_change"])).add


def test_r2(net, test_shards, params, table) -> float | None:
    """R^2 of a regression on the test rows, computed where they are: 1 - SSE / SST."""
    if table.task != "regression" or test_shards is None or not table.test_spread:
        return None
    from ppt_dask.engine.result import evaluate

    loss_sum = float(evaluate(net, test_shards, params)[0])  # half the sum of squares
    return 1.0 - 2.0 * loss_sum / table.test_spread
