"""The time constants of the run-time model (:mod:`ppt_dask.perf.model`) and their JSON form
(pure numpy, no I/O).

:class:`Constants` holds 001's constants (Tables II, III, V) and the terms Dask adds, each
checked where it is made; :func:`constants_to_dict` / :func:`constants_from_dict` are what a
calibration file or a user's own JSON file holds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ppt_dask.perf.curves import CALL_CURVE, STREAM_CURVE, check_curves


@dataclass(frozen=True)
class Constants:
    """Time constants of 001 (Tables II, III, V) plus the Dask terms; all in seconds.

    ``th1_seconds`` is seconds *per task*, ``tw_seconds_per_weight`` seconds per weight
    per tree level, ``tlw_seconds_per_weight`` seconds per weight per other worker. Every
    scalar field must be finite and >= 0 (``ValueError`` otherwise); the curves are
    checked by :func:`ppt_dask.perf.curves.check_curves`.
    :func:`constants_to_dict` / :func:`constants_from_dict` give the JSON form.
    """

    tf_seconds: float  # Tf: forward pass, one pattern
    tb_seconds: float  # Tb: backward pass, one pattern
    tu_seconds: float  # Tu: one weight update (momentum)
    tm_seconds: float  # Tm: copy all weights (sequential program only, eq. (3))
    ts_seconds: float  # Ts: squared error, one test pattern
    to_seconds: float  # To: overhead, once per iteration (epoch)
    tw_seconds_per_weight: float = 0.0  # Tw of eq. (4)
    ti_seconds: float = 0.0  # Ti of eq. (4): start-up and latency of one all-reduce
    ta_seconds: float = 0.0  # Ta of eq. (9): one weight averaging (scale, copy, reset)
    th0_seconds: float = 0.0  # Dask: fixed head/scheduler cost per round
    th1_seconds: float = 0.0  # Dask: head/scheduler cost per task in a round
    tc_seconds: float = 0.0  # Dask/numpy: fixed cost of one gradient call (one shard)
    tq_seconds: float = 0.0  # Dask: shortest gradient phase (message batching; ~0 without)
    call_rows: tuple = ()  # rows of one gradient call at which the call curve was timed
    call_seconds: tuple = ()  # that call, back to back in one process (the serial program)
    call_task_seconds: tuple = ()  # a ppt-grad task of that one call in real rounds (or ())
    call_more_seconds: tuple = ()  # each further call of such a task (or ())
    call_shared_factor: tuple = ()  # tasks' time factor when all workers compute at once (or ())
    tl0_seconds: float = 0.0  # streamed: a loop's own cost of a round beyond compute and update (p = 1)
    tl1_seconds: float = 0.0  # streamed: latency of one link message a loop sends
    tlw_seconds_per_weight: float = 0.0  # streamed: per value a loop sends
    stream_lag_ratio: float = 0.0  # streamed, p >= 2: the wait for the slowest loop per second of gradient
    stream_rows: tuple = ()  # rows of one call at which streamed rounds' gradient phase was timed
    stream_first_seconds: tuple = ()  # a loop's first call of a round, in real streamed rounds
    stream_more_seconds: tuple = ()  # each further call of that round (or ())
    stream_shared_factor: tuple = ()  # gradient phase's factor with all workers computing (or ())

    def __post_init__(self):
        check_curves(self)
        for f in (f for f in dataclasses.fields(self) if f.name not in CALL_CURVE + STREAM_CURVE):
            value = getattr(self, f.name)
            number = isinstance(value, (int, float, np.integer, np.floating))
            if isinstance(value, bool) or not (number and np.isfinite(value) and value >= 0):
                raise ValueError(f"{f.name} must be a finite number >= 0, got {value!r}")


STREAM_TERMS = ("tl0_seconds", "tl1_seconds", "tlw_seconds_per_weight")


def has_stream_terms(c) -> bool:
    """Whether the streamed exchange was calibrated (any of ``STREAM_TERMS`` > 0): without,
    streamed rounds are charged the one-hop graph's terms (:func:`round_parts` says so)."""
    return any(getattr(c, n) > 0 for n in STREAM_TERMS)


def check_constants(c) -> Constants:
    """``c`` if it is a :class:`Constants`, else a ``ValueError`` naming its type."""
    if not isinstance(c, Constants):
        raise ValueError(f"c must be a perfmodel.Constants, got {type(c).__name__}")
    return c



def constants_to_dict(c: Constants) -> dict:
    """The JSON form of :class:`Constants`: field name -> seconds (a plain dict)."""
    return dataclasses.asdict(check_constants(c))


def constants_from_dict(values: dict) -> Constants:
    """:class:`Constants` from a dict of its fields (for example a user's JSON file for a
    cluster they do not have yet). The six constants of 001's Tables II/III are
    required, the rest default to 0; an unknown name raises ``ValueError``.

    >>> constants_from_dict({"tf_seconds": 1e-4, "tb_seconds": 2e-4, "tu_seconds": 0,
    ...                      "tm_seconds": 0, "ts_seconds": 0, "to_seconds": 0}).tb_seconds
    0.0002
    """
    if not isinstance(values, dict):
        raise ValueError(f"constants must be a JSON object of seconds, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(Constants)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"unknown constants {unknown}; valid names: {sorted(fields)}")
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in values]
    if missing:
        raise ValueError(f"missing constants {missing} (seconds; 001 Tables II/III)")
    return Constants(**values)
