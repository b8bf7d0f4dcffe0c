"""Fitting 001's run-time model to measurements (seed 001, section V).

Kept apart from :mod:`ppt_dask.perf.model`, which only predicts (measuring and predicting apart):
these functions turn timed rounds into the constants the model takes, and score the
model's predictions. Pure numpy: no dask import.
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core.validation import check_int_array_at_least
from ppt_dask.perf.tasks import tree_levels


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray, what: str) -> tuple[float, float]:
    """Least squares for two coefficients constrained >= 0.

    If the unconstrained optimum has a negative coefficient, the constrained optimum of
    this convex problem lies on a face where that coefficient is 0 (KKT): try both faces.
    """
    if np.linalg.matrix_rank(x) < 2:
        raise ValueError(f"cannot separate the two coefficients: {what}")
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    if (coef >= 0).all():
        return float(coef[0]), float(coef[1])
    faces = []
    for j in range(2):
        col = x[:, j]
        face = np.zeros(2)
        face[j] = max(col @ y / (col @ col), 0.0)
        faces.append(face)
    best = min(faces, key=lambda f: float(np.sum((x @ f - y) ** 2)))
    return float(best[0]), float(best[1])


def _seconds(name, value) -> np.ndarray:
    arr = np.asarray(value, dtype=float).ravel()
    if arr.size == 0 or not np.isfinite(arr).all() or (arr < 0).any():
        raise ValueError(f"{name} must be finite seconds >= 0, got {value!r}")
    return arr


def fit_reduce(p_values, n_weights_values, seconds, fan_in: int = 2) -> tuple[float, float]:
    """Fit eq. (4), ``seconds = Tw * w * ceil(log_k p) + Ti``, as 001 does for Fig. 1.

    Parameters: ``p_values`` (k,) ints >= 2 (p = 1 has no reduction), ``n_weights_values``
    (k,), ``seconds`` (k,) measured all-reduce times. Least squares on the design
    ``[w * ceil(log_k p), 1]`` with both coefficients >= 0 (a negative bandwidth or
    latency means noise, so the fit sits on the boundary instead).
    Returns ``(tw_seconds_per_weight, ti_seconds)``.
    """
    p = check_int_array_at_least("p_values", p_values, 2).ravel()
    w = check_int_array_at_least("n_weights_values", n_weights_values, 1).ravel()
    y = _seconds("seconds", seconds)
    if not p.size == w.size == y.size:
        raise ValueError(f"lengths differ: p {p.size}, n_weights {w.size}, seconds {y.size}")
    x = np.column_stack([w * np.asarray(tree_levels(p, fan_in)), np.ones(p.size)])
    return _nonneg_lstsq(x, y, "need two distinct values of w * ceil(log_k p)")


def fit_per_pattern(patterns, seconds, *, relative: bool = False) -> tuple[float, float]:
    """Fit ``seconds = t_pattern * patterns + t_fixed`` (both >= 0) to timed calls.

    How 001's per-pattern constants are measured here: numpy vectorises over the rows of
    a block, so one call of ``r`` rows costs a fixed part plus ``r`` times a per-pattern
    part; a least-squares line over several block sizes separates them (a single ratio
    ``seconds / r`` would charge the fixed part to every pattern). ``patterns`` (k,)
    ints >= 1 with at least two distinct values, ``seconds`` (k,). ``relative=True``
    minimises relative residuals, so the small calls pin the fixed part and the large
    ones the slope. Returns ``(seconds_per_pattern, fixed_seconds)``.

    >>> fit_per_pattern([10, 100, 1000], [0.002, 0.011, 0.101])
    (0.0001, 0.001)
    """
    r = check_int_array_at_least("patterns", patterns, 1).ravel()
    y = _seconds("seconds", seconds)
    if r.size != y.size:
        raise ValueError(f"lengths differ: patterns {r.size}, seconds {y.size}")
    x = np.column_stack([r.astype(float), np.ones(r.size)])
    if relative:
        if not (y > 0).all():
            raise ValueError(f"relative fit needs seconds > 0, got {seconds!r}")
        x, y = x / y[:, None], np.ones(y.size)
    slope, fixed = _nonneg_lstsq(x, y, "need two distinct block sizes")
    return round(slope, 15), round(fixed, 15)


def fit_head(tasks_per_round_values, seconds, *, relative: bool = False) -> tuple[float, float]:
    """Fit ``seconds = th0 + th1 * tasks`` (both >= 0) to measured head time per round.

    ``tasks_per_round_values`` (k,) task counts (see :func:`tasks_per_round`), ``seconds``
    (k,). ``relative=True`` minimises relative residuals (each row divided by its
    seconds, all > 0), so a few-millisecond round at p = 2 weighs as much as a large
    virtual cluster's: the error measure of :func:`prediction_error`.
    Returns ``(th0_seconds, th1_seconds)``.
    """
    t = check_int_array_at_least("tasks_per_round", tasks_per_round_values, 1).ravel()
    y = _seconds("seconds", seconds)
    if t.size != y.size:
        raise ValueError(f"lengths differ: tasks {t.size}, seconds {y.size}")
    x = np.column_stack([np.ones(t.size), t.astype(float)])
    if relative:
        if not (y > 0).all():
            raise ValueError(f"relative fit needs seconds > 0, got {seconds!r}")
        x, y = x / y[:, None], np.ones(y.size)
    return _nonneg_lstsq(x, y, "need two distinct task counts")


def prediction_error(predicted, measured) -> float:
    """Mean absolute relative error ``mean(|predicted - measured| / measured)``; 001's
    Table VI reports about 5%. Arrays of equal shape; measured > 0."""
    pred, meas = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    if pred.shape != meas.shape or pred.size == 0:
        raise ValueError(f"shapes differ or empty: {pred.shape} vs {meas.shape}")
    if not (np.isfinite(pred).all() and np.isfinite(meas).all() and (meas > 0).all()):
        raise ValueError(f"measured must be finite and > 0, got {measured!r}")
    return float(np.mean(np.abs(pred - meas) / meas))


def fit_links(p_values, n_weights_values, seconds, terms=None) -> tuple[float, float]:
    """Fit a streamed round's exchange beyond its p = 1 cost, ``seconds = m tl1 + v tlw``.

    ``m`` messages of ``v`` values in all sent by each loop (:func:`ppt_dask.perf.model.links_seconds`);
    ``terms`` gives ``(m, v)`` per sample, by default ``(p - 1, (p - 1) w)``: whole partial sums
    to each of the p - 1 others. Least squares with both coefficients >= 0, as
    :func:`fit_reduce` fits eq. (4). ``p_values`` (k,) ints >= 2, ``n_weights_values`` (k,)
    with two distinct values at least, ``seconds`` (k,). Returns ``(tl1_seconds,
    tlw_seconds_per_weight)``.

    >>> fit_links([2, 2, 3], [10, 1000, 10], [0.00101, 0.002, 0.00202])
    (0.001, 1e-06)
    """
    p = check_int_array_at_least("p_values", p_values, 2).ravel()
    w = check_int_array_at_least("n_weights_values", n_weights_values, 1).ravel()
    y = _seconds("seconds", seconds)
    if not p.size == w.size == y.size:
        raise ValueError(f"lengths differ: p {p.size}, n_weights {w.size}, seconds {y.size}")
    design = (np.column_stack([p - 1, (p - 1) * w]).astype(float) if terms is None
              else np.asarray(terms, dtype=float).reshape(p.size, 2))
    tl1, tlw = _nonneg_lstsq(design, y, "need two distinct vector sizes")
    return round(tl1, 15), round(tlw, 18)


def fit_lag(gradient_seconds, rest_seconds) -> tuple[float, float]:
    """Fit what a streamed round spends beyond its gradient phase against that phase,
    ``rest = level + lag * gradient`` (both >= 0), over the sizes of a calibration.

    With p >= 2 loops a round waits for the slowest one's gradient phase: the phases vary
    round to round, and the longer they are the longer the wait, where the links floor (no
    compute) has none. ``gradient_seconds`` (k,) the rounds' gradient phase (the mean over
    the loops), ``rest_seconds`` (k,) their exchange phases (transfer, idle, reduce, head),
    at two distinct gradient phases at least. Relative residuals of the round
    (``gradient + rest``), so a short round's error weighs as much as a long one's: the
    model's error measure. Returns ``(level_seconds, lag)``, ``lag`` a ratio.

    >>> fit_lag([0.001, 0.01, 0.1], [0.0011, 0.0020, 0.011])
    (0.001, 0.1)
    """
    g = _seconds("gradient_seconds", gradient_seconds)
    y = _seconds("rest_seconds", rest_seconds)
    if g.size != y.size:
        raise ValueError(f"lengths differ: gradient {g.size}, rest {y.size}")
    scale = g + y
    if not (scale > 0).all():
        raise ValueError(f"rounds must take time: gradient + rest > 0, got {gradient_seconds!r}, {rest_seconds!r}")
    x = np.column_stack([np.ones(g.size), g]) / scale[:, None]
    level, lag = _nonneg_lstsq(x, y / scale, "need two distinct gradient phases")
    return round(level, 15), round(lag, 12)
