"""A data set's metadata, checked on the head before any cluster work (step 1 of
:mod:`ppt_dask.data.tables`).

The file exists and is of a kind that is read (:func:`ppt_dask.data.sources.locate`), the
target and feature columns are there and the features are numbers (from the Parquet
schema, or Dask's inference from the first 256 KB of a CSV), a test file has the training
file's columns (or row shape), a row shape fits. Every error names the file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ppt_dask.core.validation import check_int_at_least
from ppt_dask.data import sources
from ppt_dask.data.sources import Source

TASKS = ("classification", "regression")


@dataclass
class Layout:
    source: Source
    features: list
    target: str | None
    label_kind: str  # numpy kind of the labels: "i", "u", "b", "f", or "O" for text
    row_shape: tuple
    frame: object = None  # tables: the lazy dask DataFrame of the used columns
    arrays: tuple = ()  # arrays: (X file, y file)

    def partitions(self) -> sources.Partitions:
        if self.frame is not None:
            return sources.Partitions(self.source.name(), self.frame, tuple(self.features), self.target)
        x, y = self.arrays
        blocks = sources.row_blocks(x.shape[0], x.row_bytes, x.deflated or x.fortran or y.deflated or y.fortran)
        return sources.Partitions(self.source.name(), arrays=(x, y), blocks=tuple(blocks))


def _kind_of(dtype) -> str:
    kind = getattr(dtype, "kind", "O") if isinstance(dtype, np.dtype) else "O"
    if kind == "O" and str(dtype).lower().startswith(("int", "uint")):
        return "i"  # nullable integers
    if kind == "O" and str(dtype).lower().startswith("float"):
        return "f"
    return kind if kind in "iubf" else "O"


def _table_layout(source: Source, target, features) -> Layout:
    frame = sources.read_frame(source)
    columns = [str(c) for c in frame.columns]
    where = source.path
    if target is None:
        raise ValueError(f"{where}: name the label column with --target (target=...); its columns are "
                         f"{listed(columns)}")
    if target not in columns:
        raise ValueError(f"{where}: no column {target!r} to take the labels from; its columns are {listed(columns)}")
    if features is None:
        features = [c for c in columns if c != target]
    else:
        features = list(features)
        missing = [c for c in features if c not in columns]
        if missing:
            raise ValueError(f"{where}: no feature column {listed(missing)}; its columns are {listed(columns)}")
        if target in features:
            raise ValueError(f"{where}: column {target!r} is the target; it cannot be a feature too")
    if not features:
        raise ValueError(f"{where}: no feature columns besides the target {target!r}")
    kinds = {c: _kind_of(frame.dtypes[c]) for c in features}
    text = [c for c in features if kinds[c] == "O"]
    if text and source.kind == "csv" and not sources.csv_has_rows(source):  # no rows to tell a type by
        raise ValueError(f"{where}: the table has no rows")
    if text:
        raise ValueError(f"{where}: feature column {text[0]!r} is not numeric ({frame.dtypes[text[0]]}); "
                         "encode it as numbers, or leave it out with --features (features=...)")
    ints = [c for c in features if kinds[c] in "iu"]
    if ints and source.kind == "csv":  # read as floats: a later empty cell would not match the sample
        frame = sources.read_frame(source, float_columns=ints)
    frame = frame[[*features, target]]
    return Layout(source, features, target, _kind_of(frame.dtypes[target]), (len(features),), frame=frame)


def _array_layout(source: Source) -> Layout:
    x, y = sources.array_pair(source)
    features = [f"x{i}" for i in range(math.prod(x.shape[1:]))]
    kind = np.dtype(y.dtype).kind
    return Layout(source, features, None, "O" if kind in "US" else kind, tuple(x.shape[1:]), arrays=(x, y))


def layout_of(source: Source, target, features) -> Layout:
    if source.is_table:
        return _table_layout(source, target, features)
    for name, value in (("--target (target=)", target), ("--features (features=)", features)):
        if value is not None:
            raise ValueError(f"{source.path}: {name} names columns of a table; arrays hold their labels as y")
    return _array_layout(source)


def listed(names) -> str:
    names = [repr(n) for n in names]
    return ", ".join(names[:12]) + (f" ... ({len(names)} in all)" if len(names) > 12 else "")


def decide_task(kind: str, task, where: str, y_2d: bool) -> str:
    """Labels that are text, integers or booleans make a classifier, floats a regressor."""
    if task is None:
        return "regression" if kind == "f" or y_2d else "classification"
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task == "regression" and kind == "O":
        raise ValueError(f"{where}: the labels are text; a regression needs numbers")
    if task == "classification" and y_2d:
        raise ValueError(f"{where}: y has several columns (targets); a classifier takes one label per row")
    return task


def row_shape_of(row_shape, layout: Layout) -> tuple:
    if row_shape is None:
        return layout.row_shape
    shape = tuple(int(check_int_at_least("every entry of row_shape", d, 1)) for d in row_shape)
    if math.prod(shape) != len(layout.features):
        raise ValueError(f"{layout.source.name()}: row shape {shape} holds {math.prod(shape)} values, but a row "
                         f"has {len(layout.features)} features")
    return shape


def test_layout_of(train: Layout, test_source: Source) -> Layout:
    """The test file's layout, with the training columns (or row shape) and kind of labels."""
    where = test_source.name()
    if test_source.is_table != train.source.is_table:
        raise ValueError(f"{where}: a test file must be of the training data's kind "
                         f"({'a table' if train.source.is_table else 'an .npz with X and y'})")
    if train.target is not None:
        columns = [str(c) for c in sources.read_frame(test_source).columns]
        missing = [c for c in [*train.features, train.target] if c not in columns]
        if missing:
            raise ValueError(f"{where}: the test file's columns differ from {train.source.name()}'s: "
                             f"it has no column {listed(missing)}")
    test = layout_of(test_source, train.target, train.features if train.target else None)
    if len(test.features) != len(train.features) or test.row_shape != train.row_shape:
        raise ValueError(f"{where}: test rows of shape {test.row_shape}, but the training rows have shape "
                         f"{train.row_shape}")
    if (test.label_kind == "O") != (train.label_kind == "O"):
        words = {True: "text", False: "numbers"}
        raise ValueError(f"{where}: the test labels are {words[test.label_kind == 'O']}, the training "
                         f"labels {words[train.label_kind == 'O']}")
    return test
