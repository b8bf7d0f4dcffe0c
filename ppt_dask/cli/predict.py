"""``ppt-dask predict``: a saved model on a data set, or on arrays of one's own.

    ppt-dask predict model.npz parity8 --split train
    ppt-dask predict model.npz mnist --json scores.json
    ppt-dask predict model.npz --input X.npy --output y.npy
    ppt-dask predict model.npz new.csv --output predicted.csv --keep id
    ppt-dask predict model.npz mnist --model ppt_dask.nets.examples:lenet5   # a TorchNet's file

With a data set it prints the accuracy (R^2 for regression) and, for classifiers, the
confusion counts; with ``--input`` it writes the predictions to ``--output``; with a file of
one's own (a table or an ``.npz``, :mod:`ppt_dask.cli.predictfile`) it writes them to
``--output`` (``.csv``, ``.parquet`` or ``.npy``), carrying ``--keep`` columns. No cluster
is started: the model predicts with numpy (:class:`ppt_dask.Model`). Every argument is
checked before the data is read; a bad one ends with one line naming it (status 2).
"""

from __future__ import annotations

import json
import os

import numpy as np

from ppt_dask.cli import paths
from ppt_dask.data import datasets


def add_predict_parser(subparsers) -> None:
    """Register ``ppt-dask predict`` on the ``ppt-dask`` command line."""
    p = subparsers.add_parser("predict", help="predict with a model saved by train --save",
                              description="Score a saved model on a data set, or predict the rows "
                                          "of an .npy array (no cluster needed).")
    p.add_argument("model", help="model file written by `ppt-dask train ... --save PATH`")
    p.add_argument("dataset", nargs="?", default=None, metavar="DATA",
                   help=f"score on a built-in set ({', '.join(sorted(datasets.DATASETS))}), or predict the "
                        "rows of a file of your own (.csv, .parquet, .npz; a path or URL) into --output")
    p.add_argument("--split", choices=["test", "train"], default=None,
                   help="with DATASET: which part (default: test when the data set has one, else train)")
    p.add_argument("--data-dir", default=None, help="with DATASET: folder holding mnist/ and digits5000/")
    p.add_argument("--json", default=None, metavar="PATH", help="with DATASET: write the scores here")
    p.add_argument("--input", default=None, metavar="X.npy", help="rows to predict, a 2-D .npy array")
    p.add_argument("--output", default=None, metavar="OUT",
                   help="with --input or a file: where the predictions go (.csv, .parquet or .npy by its suffix)")
    p.add_argument("--keep", type=lambda t: [c.strip() for c in t.split(",") if c.strip()], default=None,
                   metavar="COLUMN", help="with a table: columns carried into the output beside the predictions")
    p.add_argument("--model", dest="module", default=None, metavar="PACKAGE.MODULE:FUNCTION",
                   help="for a model trained with train --model: the same module again (the file holds "
                        "its weights, no code; it names the path it was trained with)")


def _check(args) -> None:
    """Refuse a combination of arguments that does not apply, before any reading."""
    if args.keep is not None and (args.dataset is None or args.dataset in datasets.DATASETS):
        raise ValueError("--keep applies to a table of your own (columns to carry into --output)")
    if args.dataset is not None and args.dataset not in datasets.DATASETS:  # a file of one's own
        for flag, value in (("--split", args.split), ("--json", args.json), ("--data-dir", args.data_dir),
                            ("--input", args.input)):
            if value is not None:
                raise ValueError(f"{flag} applies to a built-in DATASET, not to a file ({args.dataset})")
        from ppt_dask.cli.owndata import check_named_file
        from ppt_dask.cli.predictfile import check_output

        check_named_file(args.dataset, datasets.DATASETS)
        check_output(args.output, args.keep, "arrays" if args.dataset.lower().endswith(".npz") else "table")
        if not os.path.isdir(os.path.dirname(os.path.abspath(args.output))):
            raise ValueError(f"--output: the folder of {args.output!r} does not exist")
        return
    if (args.dataset is None) == (args.input is None):
        raise ValueError("give a DATASET to score on, or --input X.npy to predict (one of them)")
    if args.input is not None:
        for flag, value in (("--split", args.split), ("--json", args.json), ("--data-dir", args.data_dir)):
            if value is not None:
                raise ValueError(f"{flag} applies to a DATASET, not to --input")
        if args.output is None:
            raise ValueError("--input needs --output PATH (an .npy file for the predictions)")
    elif args.output is not None:
        raise ValueError("--output applies to --input, not to a DATASET (use --json for scores)")
    paths.input_file("--input", args.input, "a 2-D .npy array of rows")
    paths.output_file("--json", args.json, "a .json file for the scores")
    paths.output_file("--output", args.output, "an .npy file for the predictions")
    paths.output_folder("--data-dir", args.data_dir, "mnist/ and digits5000/")


def _read_input(path: str) -> np.ndarray:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--input: no file {path!r}")
    try:
        X = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"--input {path}: not a readable .npy array ({exc})") from None
    if not isinstance(X, np.ndarray):
        raise ValueError(f"--input {path}: an .npz archive; give one 2-D .npy array")
    return X


def _describe(model, path: str) -> str:
    from ppt_dask.core.model import describe, label

    net, s = model.net, model.summary
    trained = f", trained on {s['dataset']}" if s.get("dataset") else ""
    epochs = s.get("epochs")
    how = (f" ({s['strategy']}, {epochs:.4g} epochs)" if isinstance(epochs, (int, float))
           else f" ({s['strategy']})") if s.get("strategy") else ""
    d = describe(net)
    kind = (f"{d['hidden']}/{d['output']}" if "hidden" in d  # an MLP
            else f"{d.get('kind', type(net).__name__)}, rows {model.row_shape}")
    return f"{path}: {label(net)} {kind} {net.dtype}, {model.task}{trained}{how}"


def _rows(X: np.ndarray, model) -> np.ndarray:
    """Flat rows of a model of images (a TorchNet's (1, 28, 28)) as its rows: a view."""
    if X.ndim == 2 and len(model.row_shape) > 1 and X.shape[1] == model.n_features:
        return X.reshape(len(X), *model.row_shape)
    return X


def _confusion_lines(classes, counts) -> list[str]:
    labels = [str(c) for c in classes.tolist()]
    width = max(6, *(len(x) + 1 for x in labels), len(str(int(counts.max()))) + 1)
    head = " " * width + "".join(x.rjust(width) for x in labels)
    return [head] + [x.rjust(width) + "".join(str(int(n)).rjust(width) for n in row)
                     for x, row in zip(labels, counts)]


def _predict_input(model, path, output) -> int:
    """``--input``: the model's predictions for the rows of an array file, saved to ``output``."""
    X = _rows(_read_input(path), model)
    if X.ndim < 2:
        raise ValueError(f"--input {path}: expected an array of rows (rows, {model.n_features}), "
                         f"got shape {X.shape}")
    try:
        pred = model.predict(X)
    except ValueError as exc:
        raise ValueError(f"--input {path}: {exc}") from None
    np.save(output, pred)
    print(f"wrote     {len(pred)} predictions, shape {pred.shape}, to {output}")
    return 0


def predict_command(args) -> int:
    from ppt_dask.engine.saving.modelfile import load_model

    _check(args)
    module = None
    if args.module is not None:
        from ppt_dask.cli import usermodel
        from ppt_dask.nets.torchnet import load_builder
        module = usermodel._imported(args.module, load_builder)
    model = load_model(args.model, module=module)
    print(f"model     {_describe(model, args.model)}")
    if args.dataset is not None and args.dataset not in datasets.DATASETS:
        from ppt_dask.cli.predictfile import predict_file

        scores = predict_file(model, args.dataset, args.output, args.keep or [])
        print(f"wrote     {scores['rows']} predictions to {args.output}")
        if "accuracy" in scores:
            print(f"accuracy  {scores['accuracy']:.4f} (the file's labels)")
        if "r2" in scores:
            print(f"r2        {scores['r2']:.4f} (the file's targets)")
        return 0
    if args.input is not None:
        return _predict_input(model, args.input, args.output)
    seed = model.settings.get("seed", 0)
    data = datasets.load(args.dataset, data_dir=args.data_dir, seed=seed if isinstance(seed, int) else 0,
                         dtype=model.net.dtype)
    split = args.split or ("test" if data.X_test is not None else "train")
    if split == "test" and data.X_test is None:
        raise ValueError(f"{args.dataset} has no test set; use --split train")
    X, y = (data.X, data.y) if split == "train" else (data.X_test, data.y_test)
    X = _rows(X, model)
    if X.shape[1:] != model.row_shape:
        raise ValueError(f"{args.dataset} has {X.shape[1]} features per row, but the model takes "
                         f"{model.n_features}: it was not trained on this data set")
    scores = {"model": os.path.abspath(args.model), "dataset": args.dataset, "split": split, "rows": len(X)}
    print(f"data      {args.dataset} {split}: {len(X)} rows")
    if model.task == "regression":
        scores["r2"] = model.score(X, y)
        print(f"r2        {scores['r2']:.4f}")
    else:
        pred = model.predict(X)
        right = pred == np.asarray(y).reshape(pred.shape)
        right = right.all(axis=1) if right.ndim == 2 else right
        scores["accuracy"], scores["correct"] = float(right.mean()), int(right.sum())
        print(f"accuracy  {scores['accuracy']:.4f} ({scores['correct']} of {len(X)})")
    if model.classes is not None:
        counts = model.confusion(X, y)
        scores["classes"], scores["confusion"] = model.classes.tolist(), counts.tolist()
        print("confusion rows: true class, columns: predicted")
        print("\n".join(_confusion_lines(model.classes, counts)))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(scores, fh, indent=2)
    return 0
