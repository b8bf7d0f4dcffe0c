"""Compute as measured: what a worker's gradient work costs at the sizes the calibration timed.

001 charges every pattern ``Tf + Tb`` (its eq. (3)-(5)). On a real machine the cost per
pattern is not constant: a call has a fixed cost, a block that stops fitting the caches costs
more per row, the first call after a wait finds the caches cold, and workers that share a
machine slow each other down (memory bandwidth, last-level cache). So the calibration times
the real code at several row counts (:mod:`ppt_dask.perf.calls` for the round graph and the
serial program, :mod:`ppt_dask.perf.loops` for streamed rounds), and the model interpolates
linearly between the timed sizes. Outside the timed range it keeps 001's form, anchored at the
nearest timed size so that the curve stays continuous: a call of ``r`` rows costs the nearest
timed call times ``(tc + r (Tf + Tb)) / (tc + r0 (Tf + Tb))``, 001's per-pattern line with the
Dask call cost ``tc`` (:func:`along`); :func:`measured_rows` says where that is the case.

Three curves, each optional (without one, 001's ``tc + rows (Tf + Tb)`` per call):

* the serial program: one call of ``r`` rows per round, back to back (``call_seconds``
  over ``call_rows``);
* a round graph's ``ppt-grad`` task: the first call of a task, each further call, and the
  factor when all workers compute at once (``call_task_seconds``, ``call_more_seconds``,
  ``call_shared_factor``, over ``call_rows``);
* a streamed loop's gradient phase (:mod:`ppt_dask.engine.rounds.stream`): the same three timed
  inside real streamed rounds (``stream_first_seconds``, ``stream_more_seconds``,
  ``stream_shared_factor`` over ``stream_rows``).

Pure numpy; ``c`` is a :class:`ppt_dask.perf.model.Constants` (read by field name).
"""

from __future__ import annotations

import numpy as np

CALL_CURVE = ("call_rows", "call_seconds", "call_task_seconds", "call_more_seconds", "call_shared_factor")
STREAM_CURVE = ("stream_rows", "stream_first_seconds", "stream_more_seconds", "stream_shared_factor")


def check_curves(c) -> None:
    """Both curves: increasing integer rows >= 1, finite seconds >= 0, one value per row
    (the second field of each is required with the rows, the others may be empty), factors
    > 0 (>= 1 for the round graph's). Lists from JSON become tuples (the constants stay
    hashable and frozen). ``ValueError`` otherwise."""
    for names in (CALL_CURVE, STREAM_CURVE):
        values = [tuple(float(v) for v in np.asarray(getattr(c, n), dtype=float).ravel()) for n in names]
        for name, vals in zip(names, values):
            object.__setattr__(c, name, vals)
            if not all(np.isfinite(vals)) or any(v < 0 for v in vals):
                raise ValueError(f"{name} must hold finite numbers >= 0, got {vals!r}")
        rows = values[0]
        if any(r < 1 or r != int(r) for r in rows) or any(b <= a for a, b in zip(rows, rows[1:])):
            raise ValueError(f"{names[0]} must be increasing integers >= 1, got {rows!r}")
        lengths = {n: len(v) for n, v in zip(names[1:], values[1:])}
        short = [n for n in names[1:2] if lengths[n] != len(rows)]  # the rows' own times
        odd = [n for n in names[2:] if lengths[n] not in (0, len(rows))]
        if short or odd:
            listed = ", ".join(f"{n} ({lengths[n]})" for n in names[1:])
            raise ValueError(f"{listed} need one value per entry of {names[0]} ({len(rows)})")
        if any(f <= 0 for f in values[-1]):
            raise ValueError(f"{names[-1]} must be > 0, got {values[-1]!r}")
    if any(f < 1 for f in c.call_shared_factor):
        raise ValueError(f"call_shared_factor must be >= 1, got {c.call_shared_factor!r}")


def paper_call(rows, c):
    """001's cost of one call of ``rows`` patterns, ``tc + rows (Tf + Tb)`` (seconds)."""
    return c.tc_seconds + np.asarray(rows, dtype=float) * (c.tf_seconds + c.tb_seconds)


def along(rows, xs, ys, c):
    """``ys`` timed at ``xs`` rows, at ``rows``: linear between the timed sizes; outside
    them 001's line :func:`paper_call` through the nearest timed point (proportional to the
    rows where the constants give no line). Broadcasts ``rows``."""
    r = np.asarray(rows, dtype=float)
    xs, ys = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)

    def beyond(x0, y0):
        line, at = paper_call(r, c), float(paper_call(x0, c))
        return y0 * (line / at if at > 0 else r / x0)
    inside = np.interp(r, xs, ys)
    return np.where(r > xs[-1], beyond(xs[-1], ys[-1]), np.where(r < xs[0], beyond(xs[0], ys[0]), inside))


def measured_rows(c, streamed: bool = False) -> tuple:
    """The smallest and largest rows of one call that were timed for these rounds (the
    streamed loop's curve, or the round graph's), or None where no curve was measured."""
    rows = c.stream_rows if streamed else c.call_rows
    return (int(rows[0]), int(rows[-1])) if rows else None


def call_seconds(rows, c):
    """Seconds of one gradient call over ``rows`` patterns, as the serial program makes it.

    Without a call curve, ``tc + rows (Tf + Tb)``; with one, :func:`along` it. Broadcasts
    ``rows`` (>= 0; 0 rows cost nothing).
    """
    r = np.asarray(rows, dtype=float)
    if c.call_rows:
        t = along(r, c.call_rows, c.call_seconds, c)
    else:
        t = paper_call(r, c)
    return np.where(r > 0, t, 0.0)


def shared_factor(rows, c, streamed: bool = False):
    """How much slower a worker computes while the others compute too, at ``rows`` (the
    curve's ends held outside it), or 1 where it was not measured."""
    xs, factor = (c.stream_rows, c.stream_shared_factor) if streamed else (c.call_rows, c.call_shared_factor)
    if not factor:
        return np.ones_like(np.asarray(rows, dtype=float))
    return np.interp(rows, np.asarray(xs), np.asarray(factor))


def task_seconds(rows, calls, c, workers=1, streamed: bool = False):
    """Seconds of one worker's gradient work in a round: ``calls`` calls of ``rows`` each.

    ``first(rows) + (calls - 1) more(rows)``, times :func:`shared_factor` when ``workers >
    1``: on a round graph one ``ppt-grad`` task (``call_task_seconds``,
    ``call_more_seconds``; each falls back to :func:`call_seconds`), on streamed rounds
    (``streamed``) a loop's gradient phase (``stream_first_seconds``,
    ``stream_more_seconds``; without that curve, the round graph's). Broadcasts all three.
    """
    r, k, w = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(calls), np.asarray(workers))
    if streamed and c.stream_rows:
        xs, first_ys, more_ys = c.stream_rows, c.stream_first_seconds, c.stream_more_seconds
    else:
        streamed, xs, first_ys, more_ys = False, c.call_rows, c.call_task_seconds, c.call_more_seconds
    call = call_seconds(r, c)
    first = along(r, xs, first_ys, c) if first_ys else call
    more = along(r, xs, more_ys, c) if more_ys else call
    t = np.where(k > 0, first + (k - 1) * more, 0.0)
    return np.where(w > 1, shared_factor(r, c, streamed), 1.0) * np.where(r > 0, t, 0.0)
