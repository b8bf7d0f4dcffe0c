"""The user's own data, as dask arrays the workers build: :func:`from_table`, :func:`from_arrays`.

    >>> data = ppt.datasets.from_table("s3://bucket/train.parquet", target="label",
    ...                                test_fraction=0.2, client=client)      # doctest: +SKIP
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=8)         # doctest: +SKIP

Three steps, the rows never on the head:

1. **Metadata** (the head): the file exists and is of a kind that is read, the target and
   feature columns are there and the features are numbers (from the Parquet schema, or
   Dask's inference from the first 256 KB of a CSV), a test file has the same columns, a
   row shape fits. Errors here name the file and cost no cluster work.
2. **Survey** (the workers, one task per partition): rows, missing and infinite values per
   column, the training rows' means and spreads, the labels
   (:mod:`ppt_dask.data.tablestats`). The head gets a few numbers per partition and refuses
   missing values (unless ``dropna``), an empty table, a single class.
3. **The arrays**: dask arrays of known chunk sizes whose blocks are a partition read,
   split (``test_fraction``), scaled with the survey's statistics and labels encoded, each
   built where it is computed. :func:`ppt_dask.enter_data` takes them: each shard is a task
   over those blocks on its worker, and Dask builds it again if the worker is lost.

The features are scaled to zero mean and unit variance over the training rows (as
scikit-learn's ``StandardScaler``), and regression targets too; :attr:`Table.preprocessing`
is what the model file keeps so that prediction applies the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ppt_dask.core.validation import check_dtype, check_int_at_least
from ppt_dask.data import sources, tablemeta, tablestats

MEMORY_SHARE = 0.4  # the shards may take this share of a worker's memory_limit (the rest:
# reading partitions, training buffers, and distributed's spill threshold at 60%)
SURVEY_TIMEOUT = 3600.0  # seconds for one pass over the table


@dataclass(frozen=True, eq=False)
class Table:
    """A data set read on the workers: what :func:`ppt_dask.enter_data` takes, and its facts.

    Attributes
    ----------
    X, y : dask arrays, shapes (n_rows, n_features) and (n_rows,) class indices, or
        (n_rows, 1) scaled targets; built on whatever computes them (the workers).
    X_test, y_test : dask arrays or None
        The test rows (``test`` file or ``test_fraction``), prepared the same way.
    task : {"classification", "regression"}
    classes : ndarray or None
        The labels in order (output k stands for ``classes[k]``).
    features : tuple of str
        The feature columns (``x0``, ``x1`` ... for arrays).
    target : str or None
        The label column of a table.
    scaling : dict
        ``mean`` and ``scale`` per feature; ``y_mean``, ``y_scale`` for regression.
    row_shape : tuple of int
        The shape of one row for networks that take shaped rows (``(n_features,)`` by
        default); the MLP takes the rows flat.
    n_rows, n_test, dropped : int
        Training rows, test rows, rows dropped for missing values.
    test_spread : float or None
        Regression: the scaled test targets' sum of squared deviations (R^2's denominator).
    """

    name: str
    X: object
    y: object
    X_test: object
    y_test: object
    task: str
    classes: np.ndarray | None
    features: tuple
    target: str | None
    scaling: dict = field(repr=False)
    row_shape: tuple
    n_rows: int
    n_test: int
    dropped: int
    dtype: str
    test_spread: float | None = None  # regression: the test targets' sum of squares about their mean

    @property
    def n_features(self) -> int:
        return len(self.features)

    @property
    def n_outputs(self) -> int:
        return len(self.classes) if self.classes is not None else len(self.scaling["y_mean"])

    def nbytes(self) -> int:
        """Bytes the training and test rows take on the workers, labels included."""
        per_row = self.n_features * np.dtype(self.dtype).itemsize + 8
        return (self.n_rows + self.n_test) * per_row

    @property
    def preprocessing(self) -> dict:
        """What prediction needs to treat new rows as these were (for the model file)."""
        return {"features": list(self.features), "target": self.target, "row_shape": list(self.row_shape),
                **{k: np.asarray(v) for k, v in self.scaling.items()}}


# ---- step 2: the survey ---------------------------------------------------------------------


def _compute(tasks: list, client, timeout: float) -> list:
    """Results of delayed ``tasks``: on the client's workers, else on dask's default scheduler."""
    if client is None:
        import dask
        return list(dask.compute(*tasks))
    futures = client.compute(tasks)
    try:
        return [f.result(timeout=timeout) for f in futures]
    except BaseException:
        client.cancel(futures)
        raise


def survey_task(parts: sources.Partitions, i: int, plan) -> dict:
    """:func:`ppt_dask.data.tablestats.survey_part` of partition ``i``, read here; a read error
    comes back as the result (the head words it), not as a failed task."""
    try:
        raw = parts.read(i)
    except Exception as exc:  # pandas', pyarrow's, fsspec's: any problem of the file
        return {"index": i, "error": exc}
    return tablestats.survey_part(raw, i, plan)


def prepare_task(parts: sources.Partitions, i: int, *args):
    """:func:`ppt_dask.data.tablestats.prepare_part` of partition ``i``, read here."""
    return tablestats.prepare_part(parts.read(i), i, *args)


def _survey(layout: tablemeta.Layout, plan, client, timeout: float) -> tablestats.Survey:
    import dask

    parts = layout.partitions()
    step = dask.delayed(survey_task, pure=True)
    results = _compute([step(parts, i, plan) for i in range(parts.n)], client, timeout)
    for r in results:
        if "error" in r:
            raise sources.explain(r["error"], layout.source.name())
    return tablestats.combine(results, len(layout.features))


def _check_survey(s: tablestats.Survey, layout: tablemeta.Layout, plan, dropna: bool) -> None:
    where = layout.source.name()
    names = layout.features if layout.target is not None else [f"column {i} of X" for i in range(len(layout.features))]
    if s.rows == 0:
        raise ValueError(f"{where}: the table has no rows")
    inf = [(n, int(c)) for n, c in zip(names, s.infinite) if c]
    if inf:
        raise ValueError(f"{where}: infinite values in " + ", ".join(f"{n!r} ({c})" for n, c in inf[:5]))
    if not dropna:
        gaps = [(n, int(c)) for n, c in zip(names, s.missing) if c]
        if s.y_missing:
            gaps.append((layout.target or "y", s.y_missing))
        if gaps:
            listed = ", ".join(f"{n!r} ({c} row{'s' if c != 1 else ''})" for n, c in gaps[:8])
            raise ValueError(f"{where}: missing values in {listed}; drop those rows with --dropna (dropna=True)")
    if s.kept == 0:
        raise ValueError(f"{where}: no rows left after dropping the {s.rows} with missing values")
    part = "test" if plan.all_test else "train"
    if s.n[part] == 0:
        raise ValueError(f"{where}: no {'test' if plan.all_test else 'training'} rows (of {s.kept}); "
                         "lower the test fraction")
    if plan.task != "classification":
        return
    labels = s.labels[part]
    if "too_many" in labels:
        raise ValueError(f"{where}: {labels['too_many']} or more distinct labels in {layout.target or 'y'!r}, "
                         f"more than a classifier takes ({tablestats.MAX_CLASSES}); for numbers to "
                         "predict, use --task regression")
    if not plan.all_test and len(labels) < 2:
        raise ValueError(f"{where}: the labels ({layout.target or 'y'!r}) hold one class only "
                         f"({next(iter(labels), None)!r}); a classifier needs two or more")


# ---- step 3: the arrays ----------------------------------------------------------------------


def _arrays(layout: tablemeta.Layout, plan, part: str, lengths: list, scaling: dict, classes, dtype: str):
    # y: (n,) class indices, or (n, n_targets) scaled targets
    """Dask arrays (X, y) of the ``part`` rows, one block per partition that has any."""
    import dask
    import dask.array as da

    prepare = dask.delayed(prepare_task, pure=True, nout=2)
    parts = layout.partitions()
    n_features = len(layout.features)
    Xs, ys = [], []
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        X, y = prepare(parts, i, plan, part, scaling, classes, dtype)
        Xs.append(da.from_delayed(X, (n, n_features), dtype=dtype))
        ys.append(da.from_delayed(y, (n,) if classes is not None else (n, len(scaling["y_mean"])),
                                  dtype=np.int64 if classes is not None else dtype))
    return da.concatenate(Xs), da.concatenate(ys)


def _classes(labels: dict, kind: str) -> np.ndarray:
    values = sorted(labels)
    return np.array(values, dtype=str) if kind == "O" else np.array(values)


@dataclass
class Reading:
    """A data set whose metadata is checked (no cluster work yet); :meth:`read` surveys it
    on the workers and returns the :class:`Table`. Made by :func:`open_data`."""

    layout: tablemeta.Layout
    test_layout: tablemeta.Layout | None
    plan: tablestats.Plan
    row_shape: tuple
    dtype: str

    @property
    def kind(self) -> str:
        """"table" or "arrays"."""
        return "table" if self.layout.source.is_table else "arrays"

    def read(self, client=None, timeout: float = SURVEY_TIMEOUT) -> Table:
        """Survey the rows on the workers (``client``'s, else dask's current scheduler),
        refuse what cannot be trained on, and return the lazy arrays."""
        layout, plan, dtype = self.layout, self.plan, self.dtype
        s = _survey(layout, plan, client, timeout)
        _check_survey(s, layout, plan, plan.dropna)
        mean, scale = tablestats.scale_of(s.moments)
        scaling = {"mean": mean, "scale": scale}
        classes = None
        if plan.task == "classification":
            classes = _classes(s.labels["train"], layout.label_kind)
        else:
            scaling["y_mean"], scaling["y_scale"] = tablestats.scale_of(s.y_moments["train"])
        X, y = _arrays(layout, plan, "train", s.lengths["train"], scaling, classes, dtype)
        X_test = y_test = None
        test, test_layout = s, layout
        if self.test_layout is not None:
            test_layout, test_plan = self.test_layout, replace(plan, test_fraction=0.0, all_test=True)
            test = _survey(test_layout, test_plan, client, timeout)
            _check_survey(test, test_layout, test_plan, plan.dropna)
            X_test, y_test = _arrays(test_layout, test_plan, "test", test.lengths["test"], scaling, classes, dtype)
        elif s.n["test"]:
            X_test, y_test = _arrays(layout, plan, "test", s.lengths["test"], scaling, classes, dtype)
        spread = None
        if classes is not None:
            unseen = sorted(set(test.labels["test"]) - set(classes.tolist()), key=str)
            if unseen:
                raise ValueError(f"{test_layout.source.name()}: test labels {unseen[:5]} are not among the "
                                 f"training labels {classes.tolist()[:10]}")
        elif test.n["test"]:  # the test targets' spread (scaled), for R^2
            spread = float(np.sum(test.y_moments["test"][2] / scaling["y_scale"] ** 2))
        return Table(layout.source.name(), X, y, X_test, y_test, plan.task, classes, tuple(layout.features),
                     layout.target, scaling, self.row_shape, s.n["train"], test.n["test"], s.rows - s.kept, dtype,
                     spread)


def open_data(path=None, target=None, *, x=None, y=None, features=None, task=None, test=None, test_fraction=None,
              seed=0, dropna=False, row_shape=None, dtype="float64", storage_options=None) -> Reading:
    """Check a data set's metadata on the head: :func:`from_table` without the survey.

    ``path`` is a table or an ``.npz``; or ``x`` and ``y`` name two ``.npy`` files.
    """
    check_dtype("dtype", dtype)
    check_int_at_least("seed", seed, 0)
    if test_fraction is not None and not (isinstance(test_fraction, (int, float)) and 0 < test_fraction < 1):
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    if test_fraction is not None and test is not None:
        raise ValueError("give a test file or a test fraction, not both")
    options = dict(storage_options or {})
    if (path is None) == (x is None and y is None):
        raise ValueError("give a data file (path), or the rows and labels as x= and y= (.npy files)")
    if path is None and (x is None or y is None):
        raise ValueError("give both x= (the rows) and y= (the labels), two .npy files")
    source = sources.locate(path if path is not None else x, y_path=y, storage_options=options)
    test_source = sources.locate(test, storage_options=options) if test is not None else None
    layout = tablemeta.layout_of(source, target, features)
    y_2d = bool(layout.arrays) and len(layout.arrays[1].shape) == 2
    task = tablemeta.decide_task(layout.label_kind, task, source.name(), y_2d)
    shape = tablemeta.row_shape_of(row_shape, layout)
    test_layout = None if test_source is None else tablemeta.test_layout_of(layout, test_source)
    plan = tablestats.Plan(task, bool(dropna), float(test_fraction or 0.0), int(seed))
    return Reading(layout, test_layout, plan, shape, dtype)


def from_table(path, target=None, *, features=None, task=None, test=None, test_fraction=None, seed=0,
               dropna=False, row_shape=None, dtype="float64", storage_options=None, client=None,
               timeout=SURVEY_TIMEOUT) -> Table:
    """A table (CSV, Parquet) or an ``.npz`` (``X`` and ``y``) read on the workers.

    Parameters
    ----------
    path : str or path
        ``.csv``/``.tsv`` (optionally ``.gz``, ``.bz2``, ``.xz``, ``.zst``), ``.parquet`` (a
        file or a folder of parts), or ``.npz``; local, or any URL fsspec reads.
    target : str
        The label column of a table (not for ``.npz``).
    features : list of str, optional
        The feature columns (default: every column but the target); numbers only.
    task : {"classification", "regression"}, optional
        Default: labels that are text, integers or booleans give a classification (the
        classes in sorted order), floats a regression.
    test : str, optional
        A test file with the same columns (or an ``.npz`` of the same row shape).
    test_fraction : float, optional
        The share of rows drawn into the test set instead, seeded with ``seed``.
    dropna : bool
        Drop the rows with a missing value (else they are refused, counted per column).
    row_shape : tuple of int, optional
        The shape of one row (its product the number of features).
    dtype : {"float64", "float32"}
        Of the prepared rows (match the network's).
    storage_options : dict, optional
        For fsspec (credentials, endpoints of object stores).
    client : distributed.Client, optional
        Where the survey runs (default: dask's current scheduler, the client's workers
        when a client exists).

    Returns
    -------
    Table

    Raises
    ------
    FileNotFoundError, ValueError
        One line that names the file and the problem.
    ImportError
        A table without pandas and pyarrow (``pip install 'ppt_dask[tables]'``).
    """
    return open_data(path, target, features=features, task=task, test=test, test_fraction=test_fraction,
                     seed=seed, dropna=dropna, row_shape=row_shape, dtype=dtype,
                     storage_options=storage_options).read(client, timeout)


def from_arrays(x, y, *, task=None, test=None, test_fraction=None, seed=0, dropna=False, row_shape=None,
                dtype="float64", storage_options=None, client=None, timeout=SURVEY_TIMEOUT) -> Table:
    """Rows and labels from two ``.npy`` files (rows of any shape, flattened); see :func:`from_table`.

    ``test`` is an ``.npz`` with ``X`` and ``y``.
    """
    return open_data(x=x, y=y, task=task, test=test, test_fraction=test_fraction, seed=seed, dropna=dropna,
                     row_shape=row_shape, dtype=dtype, storage_options=storage_options).read(client, timeout)


def check_fits(table: Table, memory_limits: list, n_workers: int | None = None) -> None:
    """Refuse a table whose rows would take more than ``MEMORY_SHARE`` of the workers' memory.

    Parameters
    ----------
    memory_limits : list of int
        Each worker's ``memory_limit`` in bytes (0 or None: no limit, nothing checked).
    n_workers : int, optional
        The workers the rows are spread over (default: all of ``memory_limits``).
    """
    limits = [m for m in memory_limits if m]
    if not limits or len(limits) != len(memory_limits):
        return
    n = n_workers or len(limits)
    need, allowed = table.nbytes(), MEMORY_SHARE * min(limits) * n
    if need > allowed:
        raise ValueError(f"{table.name}: too large for the workers' memory: its {table.n_rows + table.n_test:,} "
                         f"rows x {table.n_features} features take {_size(need)} as {table.dtype}, and "
                         f"{n} worker{'s' if n != 1 else ''} of {_size(min(limits))} each hold at most "
                         f"{_size(allowed)} of shards ({MEMORY_SHARE:.0%} of their memory); add workers "
                         "or memory, use fewer features" + (", or float32" if table.dtype != "float32" else ""))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"
