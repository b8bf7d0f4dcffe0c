"""What the workers learn of a table in one pass, and the rows they make of it.

:func:`survey_part` runs on one partition ``(X, y, y_missing)`` (see
:mod:`ppt_dask.data.sources`) and returns a few numbers: rows, missing and infinite values
per column, the training rows' means and sums of squared deviations, the labels and how
often each occurs. :func:`combine` adds the partitions' summaries on the head with Chan,
Golub and LeVeque's pairwise update ("Algorithms for computing the sample variance",
1983), so the scaling comes from the whole table without the rows leaving the workers.
:func:`prepare_part` then makes a partition's training (or test) rows: scaled features in
the run's dtype and encoded labels (or scaled targets). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_CLASSES = 1000  # distinct labels a classifier takes from a table (an output each)


@dataclass(frozen=True)
class Plan:
    """How the rows of every partition are split and kept (the same on every worker).

    Parameters
    ----------
    task : {"classification", "regression"}
    dropna : bool
        Drop the rows with a missing value (else they are counted and refused).
    test_fraction : float
        The share of each partition's rows drawn into the test set, by a generator seeded
        with ``(seed, partition)``: the same split on any cluster, for the same partitions.
    seed : int
    all_test : bool
        Every row is a test row (a separate test file).
    """

    task: str
    dropna: bool = False
    test_fraction: float = 0.0
    seed: int = 0
    all_test: bool = False


def moments(a: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """(n, column means, column sums of squared deviations) of a 2-D float array."""
    n = len(a)
    if n == 0:
        return 0, np.zeros(a.shape[1]), np.zeros(a.shape[1])
    mean = a.mean(axis=0)
    return n, mean, ((a - mean) ** 2).sum(axis=0)


def merge_moments(a: tuple, b: tuple) -> tuple:
    """Chan et al.'s update: the moments of two row sets from the moments of each."""
    na, ma, sa = a
    nb, mb, sb = b
    n = na + nb
    if n == 0:
        return a
    delta = mb - ma
    return n, ma + delta * (nb / n), sa + sb + delta ** 2 * (na * nb / n)


def _kept_and_test(X, y_missing, index: int, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Masks over the partition's rows: kept (complete, or all when not dropping) and test."""
    complete = ~(np.isnan(X).any(axis=1) | y_missing)
    kept = complete if plan.dropna else np.ones(len(X), dtype=bool)
    n = int(kept.sum())
    if plan.all_test:
        test = np.ones(n, dtype=bool)
    elif plan.test_fraction > 0:
        test = np.random.default_rng([plan.seed, index]).random(n) < plan.test_fraction
    else:
        test = np.zeros(n, dtype=bool)
    return kept, test


def _labels(y) -> dict:
    values, counts = np.unique(y, return_counts=True)
    if len(values) > MAX_CLASSES:  # the head says so; the whole list is not sent
        return {"too_many": len(values)}
    return dict(zip(values.tolist(), counts.tolist()))


def _targets(y) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    return y[:, None] if y.ndim == 1 else y


def survey_part(raw, index: int, plan: Plan) -> dict:
    """What the head needs to know of one partition; a few numbers, never its rows."""
    X, y, y_missing = raw
    kept, test = _kept_and_test(X, y_missing, index, plan)
    out = {"index": index, "rows": len(X), "missing": np.isnan(X).sum(axis=0),
           "y_missing": int(y_missing.sum()), "infinite": np.isinf(X).sum(axis=0), "kept": int(kept.sum())}
    X, y, labelled = X[kept], y[kept], ~y_missing[kept]
    for part, mask in (("train", ~test), ("test", test)):
        entry = {"n": int(mask.sum())}
        if part == "train":
            entry["moments"] = moments(X[mask])
        if plan.task == "classification":
            entry["labels"] = _labels(y[mask & labelled])
        else:
            entry["y_moments"] = moments(_targets(y[mask & labelled]))
        out[part] = entry
    return out


def _merge_labels(a: dict, b: dict) -> dict:
    if "too_many" in a or "too_many" in b:
        return {"too_many": max(a.get("too_many", 0), b.get("too_many", 0), len(a) + len(b))}
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    if len(out) > MAX_CLASSES:
        return {"too_many": len(out)}
    return out


@dataclass
class Survey:
    """The whole table's figures, combined from its partitions' summaries."""

    rows: int
    kept: int
    missing: np.ndarray  # per feature
    y_missing: int
    infinite: np.ndarray
    lengths: dict  # "train"/"test" -> rows of each partition
    n: dict  # "train"/"test" -> rows
    moments: tuple  # the training rows' (n, mean, sum of squared deviations) per feature
    labels: dict  # "train"/"test" -> {label: count} (classification)
    y_moments: dict  # "train"/"test" -> moments of the targets (regression)


def combine(parts: list[dict], n_features: int) -> Survey:
    """Add up the partitions' summaries (in partition order)."""
    parts = sorted(parts, key=lambda p: p["index"])
    zero = (0, np.zeros(n_features), np.zeros(n_features))
    s = Survey(0, 0, np.zeros(n_features, dtype=np.int64), 0, np.zeros(n_features, dtype=np.int64),
               {"train": [], "test": []}, {"train": 0, "test": 0}, zero, {"train": {}, "test": {}}, {})
    for p in parts:
        s.rows += p["rows"]
        s.kept += p["kept"]
        s.missing = s.missing + p["missing"]
        s.y_missing += p["y_missing"]
        s.infinite = s.infinite + p["infinite"]
        for part in ("train", "test"):
            entry = p[part]
            s.lengths[part].append(entry["n"])
            s.n[part] += entry["n"]
            if "labels" in entry:
                s.labels[part] = _merge_labels(s.labels[part], entry["labels"])
            if "y_moments" in entry:
                m = entry["y_moments"]
                s.y_moments[part] = merge_moments(s.y_moments[part], m) if part in s.y_moments else m
        s.moments = merge_moments(s.moments, p["train"]["moments"])
    return s


def scale_of(moments: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(mean, standard deviation) per column from moments; a constant column gets scale 1."""
    n, mean, m2 = moments
    std = np.sqrt(m2 / n) if n else np.ones_like(mean)
    return mean, np.where(std > 0, std, 1.0)


def prepare_part(raw, index: int, plan: Plan, part: str, scaling: dict, classes, dtype: str):
    """The ``part`` ("train" or "test") rows of one partition, ready for the network.

    Returns
    -------
    X : ndarray, shape (rows, n_features), ``dtype``: ``(x - mean) / scale``
    y : ndarray, shape (rows,) int64 class indices, or (rows, n_targets) scaled targets
    """
    X, y, y_missing = raw
    kept, test = _kept_and_test(X, y_missing, index, plan)
    mask = test if part == "test" else ~test
    X, y = X[kept][mask], y[kept][mask]
    X = ((X - scaling["mean"]) / scaling["scale"]).astype(dtype)
    if classes is None:
        y = ((_targets(y) - scaling["y_mean"]) / scaling["y_scale"]).astype(dtype)
    else:
        y = np.searchsorted(classes, y.astype(classes.dtype)).astype(np.int64)
    return X, y
