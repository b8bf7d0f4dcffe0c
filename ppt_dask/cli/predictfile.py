"""``ppt-dask predict MODEL PATH --output OUT``: a saved model on a file of one's own.

    ppt-dask predict model.npz new.csv --output predicted.csv --keep id
    ppt-dask predict model.npz s3://bucket/new.parquet --output predicted.parquet
    ppt-dask predict model.npz new.npz --output predicted.npy

The file is read one partition at a time (a table's, or blocks of rows of an array), the
model's scaling applied (:class:`ppt_dask.Model`), and each partition's predictions written
before the next is read, so memory holds one partition. The output's suffix chooses the
format: ``.csv`` and ``.parquet`` get a ``prediction`` column (and the ``--keep`` columns
before it), ``.npy`` the predictions alone. The output is written to a temporary name and
renamed when whole. When the file holds the model's target column (or an ``.npz`` its
``y``), the accuracy (R^2 for a regression) is printed too. No cluster is started.
"""

from __future__ import annotations

import os

import numpy as np

from ppt_dask.data import sources, tablestats

OUTPUTS = (".csv", ".parquet", ".npy")
PREDICTION = "prediction"  # the column of the predictions in a .csv or .parquet output


def check_output(output: str | None, keep, kind: str) -> str:
    """The output's format from its suffix; ``--keep`` refused where it cannot apply."""
    if output is None:
        raise ValueError("--output PATH is needed: where the predictions go (.csv, .parquet or .npy)")
    suffix = os.path.splitext(output)[1].lower()
    if suffix not in OUTPUTS:
        raise ValueError(f"--output {output}: unknown suffix {suffix or '(none)'}; write {', '.join(OUTPUTS)}")
    if keep and suffix == ".npy":
        raise ValueError("--keep applies to a .csv or .parquet output; an .npy holds the predictions alone")
    if keep and kind != "table":
        raise ValueError("--keep applies to a table (columns to carry through), not to arrays")
    return suffix


def _parts(model, source, keep: list):
    """Per partition: (raw features (n, n_features), kept columns (a DataFrame or None), the
    labels or None)."""
    pre = model.preprocessing or {}
    if source.is_table:
        frame = sources.read_frame(source)
        columns = [str(c) for c in frame.columns]
        missing = [c for c in pre["features"] if c not in columns]
        if missing:
            raise ValueError(f"{source.path}: no column {missing[:5]} of the {len(pre['features'])} the model "
                             f"was trained on ({model.summary.get('dataset', 'its table')})")
        absent = [c for c in keep if c not in columns]
        if absent:
            raise ValueError(f"--keep: {source.path} has no column {absent[0]!r}")
        target = pre.get("target") if pre.get("target") in columns else None
        used = list(dict.fromkeys([*pre["features"], *keep, *([target] if target else [])]))
        frame = frame[used]
        for i in range(frame.npartitions):
            df = frame.partitions[i].compute(scheduler="sync")
            X, y, _ = sources.frame_arrays(df, list(pre["features"]), target)
            yield X, (df[keep].reset_index(drop=True) if keep else None), (y if target else None)
        return
    x = sources.array_file(source.path, source.storage_options, "X")
    try:  # the labels, when the archive has them: for the score
        y = sources.array_file(source.path, source.storage_options, "y")
    except ValueError:
        y = None
    whole = x.deflated or x.fortran or (y is not None and (y.deflated or y.fortran))
    for a, b in sources.row_blocks(x.shape[0], x.row_bytes, whole):
        yield sources.array_rows(x, a, b), None, (None if y is None else sources.array_rows(y, a, b))


class _Writer:
    """Predictions appended partition by partition to a temporary file, renamed at the end."""

    def __init__(self, path: str, suffix: str):
        self.path, self.suffix = path, suffix
        self.tmp = f"{path}.tmp-{os.getpid()}{suffix}"
        self.parquet = None
        self.pieces: list = []  # .npy: the predictions, written at the end
        self.rows = 0

    def add(self, pred: np.ndarray, kept) -> None:
        self.rows += len(pred)
        if self.suffix == ".npy":
            self.pieces.append(pred)
            return
        import pandas as pd

        columns = ({PREDICTION: pred} if pred.ndim == 1
                   else {f"{PREDICTION}_{k}": pred[:, k] for k in range(pred.shape[1])})
        df = pd.DataFrame(columns)
        if kept is not None:
            df = pd.concat([kept, df], axis=1)
        if self.suffix == ".csv":
            df.to_csv(self.tmp, mode="a", header=self.rows == len(pred), index=False)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(df, preserve_index=False)
        if self.parquet is None:
            self.parquet = pq.ParquetWriter(self.tmp, table.schema)
        self.parquet.write_table(table)

    def close(self) -> None:
        if self.suffix == ".npy":
            with open(self.tmp, "wb") as fh:
                np.save(fh, np.concatenate(self.pieces) if self.pieces else np.empty(0))
        elif self.parquet is not None:
            self.parquet.close()
        elif self.rows == 0:  # a table without rows: an empty file
            open(self.tmp, "w").close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if self.parquet is not None:
            self.parquet.close()
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def predict_file(model, path: str, output: str, keep: list, storage_options=None) -> dict:
    """Predict the rows of ``path`` into ``output``; the scores when the labels are there."""
    source = sources.locate(path, storage_options=storage_options)
    if not model.preprocessing and source.is_table:
        raise ValueError(f"{path}: this model was trained on {model.summary.get('dataset', 'a built-in set')}, "
                         "not on a table: it knows no columns (predict arrays with --input X.npy)")
    suffix = check_output(output, keep, "table" if source.is_table else "arrays")
    writer = _Writer(output, suffix)
    right = seen = 0
    moments, sse = None, 0.0
    try:
        for X, kept, y in _parts(model, source, keep):
            bad = np.isnan(X).sum(axis=0)
            if bad.any():
                names = (model.preprocessing or {}).get("features") or [f"x{i}" for i in range(X.shape[1])]
                j = int(np.argmax(bad))
                raise ValueError(f"{path}: missing values in column {names[j]!r} ({int(bad[j])} in one part); "
                                 "drop or fill those rows first")
            pred = model.predict(X.reshape(len(X), -1))
            writer.add(pred, kept)
            if y is not None and model.task == "regression":
                t = np.asarray(y, dtype=np.float64).reshape(pred.shape)
                sse += float(np.sum((t - pred) ** 2))
                part = tablestats.moments(t.reshape(len(t), -1))
                moments = part if moments is None else tablestats.merge_moments(moments, part)
            elif y is not None:
                right += int(np.sum(pred == np.asarray(y).astype(pred.dtype)))
                seen += len(pred)
        writer.close()
    except BaseException:
        writer.discard()
        raise
    scores = {"rows": writer.rows}
    if seen:
        scores["accuracy"] = right / seen
    if moments is not None and np.sum(moments[2]) > 0:
        scores["r2"] = 1.0 - sse / float(np.sum(moments[2]))
    return scores
