"""Closed-form run-time model of training set parallelism (pure numpy, no I/O, no plots).

Source: seed 001, F. Moerchen, "Analysis of speedup as function of block size and
cluster size for parallel feed-forward neural networks on a Beowulf cluster",
section V-A, equations (3) to (8), and section VII, equation (9). Symbols:

=========  ==========================================================================
``n``      training patterns; ``m`` test patterns; ``w`` weights (Table IV)
``b``      block size: training patterns between weight updates, split over p workers
``Tf Tb``  forward / backward pass of *one pattern*; ``Ts`` squared error of one test
           pattern (so a test pattern costs ``Tf + Ts``)
``Tu Tm``  one weight update; one copy of all weights (sequential program only)
``To``     overhead of one iteration (square root, stopping test, OS, ...)
``Tr(p)``  all-reduce of w weights over p workers, eq. (4)
=========  ==========================================================================

In 001 an *iteration* is one pass over the training set plus the test error: here that
is :func:`epoch_seconds`. One weight update (one Dask round) is :func:`iteration_seconds`.
What to book from it: :mod:`ppt_dask.perf.planning`; 001's own constants: :mod:`ppt_dask.perf.paper001`.

Dask adds terms that MPI did not have (all 0 for the paper's constants):

* ``Th(p) = th0 + th1 * tasks_per_round(p)``: the head/scheduler cost of one round,
  charged once per round (``n/b`` times an epoch); :func:`tasks_per_round` counts the
  tasks exactly as :func:`ppt_dask.engine.graph.round_graph` builds them.
* ``tc``: the fixed cost of one gradient call (one shard's block), charged per shard a
  worker holds. numpy vectorises over the patterns of a block, so a call costs
  ``tc + rows (Tf + Tb)``: the intercept and slope of a least-squares fit over block
  sizes (:func:`ppt_dask.perf.fit.fit_per_pattern`), where 001 measured per pattern.
* the *call curve* (optional): seconds of one gradient call timed at several row
  counts ``call_rows``: as the serial program makes it, back to back in one process
  (``call_seconds``), and as the first call of a ``ppt-grad`` task in real rounds
  (``call_task_seconds``: the task's own costs and cold caches after the wait between
  rounds) and as each further call of a task (``call_more_seconds``: the call and its
  partial sum), plus ``call_shared_factor``, how much slower a worker computes while the
  other workers of its machine compute too (memory bandwidth, last-level cache). When
  given it replaces ``tc + rows (Tf + Tb)``: the cost per pattern is not constant on a
  real machine. A task of k calls costs ``first(rows) + (k - 1) more(rows)``, times
  ``call_shared_factor(rows)`` when more than one worker computes.
* ``tq``: the shortest gradient phase the scheduler allows: a round costs
  ``max(compute, tq)``. With distributed's message batching (``BatchedSend(interval=
  "5ms")`` in ``distributed.scheduler``) the update task is sent no sooner than ~5 ms
  after the gradient task went to the same worker, however short the gradient; with the
  batching off (:mod:`ppt_dask.engine.messages`, what ``ppt.connect`` does) tq is near 0.

>>> from ppt_dask.perf.paper001 import CONSTANTS, PROBLEMS
>>> c = CONSTANTS["bat_cave", "function"]
>>> fn = PROBLEMS["function"]
>>> round(speedup(2, 64, fn.n_patterns, fn.n_weights, c, n_test=fn.n_test), 2)  # Table VII
1.2
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ppt_dask.core.validation import check_int_array_at_least
from ppt_dask.perf.tasks import ceil_div, layout, slowest_patterns, tasks_per_round, tree_levels


@dataclass(frozen=True)
class Constants:
    """Time constants of 001 (Tables II, III, V) plus the Dask head term; all in seconds.

    ``th1_seconds`` is seconds *per task* and ``tw_seconds_per_weight`` seconds per weight
    per tree level. Every field must be finite and >= 0 (``ValueError`` otherwise).
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

    def __post_init__(self):
        _check_curve(self)
        for f in (f for f in dataclasses.fields(self) if f.name not in _CURVE):
            value = getattr(self, f.name)
            number = isinstance(value, (int, float, np.integer, np.floating))
            if isinstance(value, bool) or not (number and np.isfinite(value) and value >= 0):
                raise ValueError(f"{f.name} must be a finite number >= 0, got {value!r}")
        if any(f < 1 for f in self.call_shared_factor):
            raise ValueError(f"call_shared_factor must be >= 1, got {self.call_shared_factor!r}")


_CURVE = ("call_rows", "call_seconds", "call_task_seconds", "call_more_seconds", "call_shared_factor")


def _check_curve(c) -> None:
    """The call curve: increasing positive rows, finite seconds >= 0 of the same length."""
    rows, bare, task, more, factor = (tuple(np.asarray(getattr(c, n), dtype=float).ravel()) for n in _CURVE)
    for name, values in zip(_CURVE, (rows, bare, task, more, factor)):
        object.__setattr__(c, name, values)  # lists from JSON become tuples (hashable, frozen)
        if not all(np.isfinite(values)) or any(v < 0 for v in values):
            raise ValueError(f"{name} must hold finite numbers >= 0, got {values!r}")
    if any(r < 1 or r != int(r) for r in rows) or any(b <= a for a, b in zip(rows, rows[1:])):
        raise ValueError(f"call_rows must be increasing integers >= 1, got {rows!r}")
    if len(bare) != len(rows) or any(len(v) not in (0, len(rows)) for v in (task, more, factor)):
        raise ValueError(f"call_seconds ({len(bare)}), call_task_seconds ({len(task)}), "
                         f"call_more_seconds ({len(more)}) and call_shared_factor ({len(factor)}) "
                         f"need one value per entry of call_rows ({len(rows)})")


def count_weights(layers, biases: bool = True) -> int:
    """Parameters of a fully connected network; 001's ``w`` (Table IV) has no biases.

    >>> count_weights((2, 128, 128, 1), biases=False)
    16768
    """
    layers = [int(x) for x in layers]
    if len(layers) < 2 or min(layers) < 1:
        raise ValueError(f"layers must be >= 2 positive sizes, got {layers!r}")
    return sum(a * z + (z if biases else 0) for a, z in zip(layers[:-1], layers[1:]))


def _constants(c) -> Constants:
    if not isinstance(c, Constants):
        raise ValueError(f"c must be a perfmodel.Constants, got {type(c).__name__}")
    return c


def _out(x):
    return float(x) if np.ndim(x) == 0 else np.asarray(x, dtype=float)


# ---------------------------------------------------------------- the model

def call_seconds(rows, c: Constants):
    """Seconds of one gradient call over ``rows`` patterns, as the serial program makes it.

    Without a call curve, ``tc + rows (Tf + Tb)``; with one, linear interpolation between
    the timed row counts (the smallest timed call below them, the last cost per pattern
    above them). Broadcasts ``rows`` (>= 0; 0 rows cost nothing).
    """
    c = _constants(c)
    r = np.asarray(rows, dtype=float)
    if c.call_rows:
        t = _curve(r, np.asarray(c.call_rows), np.asarray(c.call_seconds))
    else:
        t = c.tc_seconds + r * (c.tf_seconds + c.tb_seconds)
    return _out(np.where(r > 0, t, 0.0))


def task_seconds(rows, calls, c: Constants, workers=1):
    """Seconds of one ``ppt-grad`` task making ``calls`` calls of ``rows`` patterns each.

    ``first(rows) + (calls - 1) more(rows)`` (``call_task_seconds`` and
    ``call_more_seconds``; each falls back to :func:`call_seconds`), times
    ``call_shared_factor(rows)`` when ``workers > 1``. Without a call curve,
    ``calls (tc + rows (Tf + Tb))``. Broadcasts all three.
    """
    c = _constants(c)
    r, k, w = np.broadcast_arrays(np.asarray(rows, dtype=float), np.asarray(calls), np.asarray(workers))
    call = np.asarray(call_seconds(r, c))
    xs = np.asarray(c.call_rows)
    first = _curve(r, xs, np.asarray(c.call_task_seconds)) if c.call_task_seconds else call
    more = _curve(r, xs, np.asarray(c.call_more_seconds)) if c.call_more_seconds else call
    t = np.where(k > 0, first + (k - 1) * more, 0.0)
    return _out(np.where(w > 1, _shared_factor(r, c), 1.0) * np.where(r > 0, t, 0.0))


def _shared_factor(rows, c: Constants):
    """``call_shared_factor`` at ``rows`` (interpolated, the ends held), or 1."""
    if not c.call_shared_factor:
        return np.ones_like(np.asarray(rows, dtype=float))
    return np.interp(rows, np.asarray(c.call_rows), np.asarray(c.call_shared_factor))


def _curve(r, xs, ys):
    return np.where(r > xs[-1], ys[-1] * r / xs[-1], np.interp(r, xs, ys))


def reduce_seconds(p, n_weights, c: Constants, fan_in: int = 2):
    """All-reduce time ``Tr(p) = Tw * w * ceil(log_k p) + Ti``: 001 eq. (4), k = 2 there.

    p = 1 communicates nothing, so ``Tr(1) = 0`` (eq. (4) would give Ti). Broadcasts
    ``p`` against ``n_weights``.
    """
    c = _constants(c)
    levels = np.asarray(tree_levels(p, fan_in))
    w = check_int_array_at_least("n_weights", n_weights, 1)
    tr = c.tw_seconds_per_weight * w * levels + c.ti_seconds
    return _out(np.where(levels > 0, tr, 0.0))


def head_seconds(p, c: Constants, fan_in: int = 2, n_shards=None):
    """Dask head/scheduler cost of one round, ``Th(p) = th0 + th1 * tasks_per_round(p)``.

    Not in 001 (MPI has no head); calibrate with :func:`ppt_dask.perf.fit.fit_head`.
    """
    c = _constants(c)
    tasks = np.asarray(tasks_per_round(p, fan_in, n_shards))
    return _out(c.th0_seconds + c.th1_seconds * tasks)


def compute_seconds(p, block, c: Constants, n_shards=None):
    """Gradient phase of one round: the busiest worker's calls and patterns.

    ``max(task(patterns / calls, calls), tq)`` with ``patterns = ceil(b/p)`` (001's
    ``b/p``) when ``n_shards`` is None, else the exact split of Sync over the shards,
    and ``calls`` the shards that worker holds; ``task`` is :func:`task_seconds`
    (``calls * tc + patterns (Tf + Tb)`` without a call curve). Broadcasts ``p`` and
    ``block``.
    """
    c = _constants(c)
    b = check_int_array_at_least("block", block, 1)
    workers, calls = layout(p, n_shards)
    patterns = slowest_patterns(workers, b, n_shards)
    busy = np.asarray(task_seconds(patterns / calls, calls, c, workers))
    return _out(np.maximum(busy, c.tq_seconds))


def iteration_seconds(p, block, n_weights, c: Constants, fan_in: int = 2, *, n_shards=None):
    """One weight update (one Dask round) with block b split over p workers.

    The per-block share of 001 eq. (5): the slowest worker's ``ceil(b/p) (Tf + Tb)``
    (see :func:`compute_seconds` for the Dask terms tc and tq), then ``Tu + Tr(p)``,
    plus the Dask head ``Th(p)``. 001 assumes p | b, where ``ceil(b/p) = b/p``; for
    b < p, p - b workers idle. With ``n_shards`` S < p only S workers get work.
    Broadcasts ``p`` and ``block``.

    >>> c = Constants(1e-3, 2e-3, 1e-4, 0.0, 0.0, 0.0, 1e-6, 1e-3)
    >>> round(iteration_seconds(4, 64, 1000, c), 6)  # 16*3ms + 0.1ms + (2*1ms + 1ms)
    0.0511
    """
    c = _constants(c)
    workers, _ = layout(p, n_shards)
    return _out(np.asarray(compute_seconds(p, block, c, n_shards)) + c.tu_seconds
                + np.asarray(reduce_seconds(workers, n_weights, c, fan_in))
                + np.asarray(head_seconds(p, c, fan_in, n_shards)))


def _epoch_inputs(block, n_patterns, n_test):
    n = int(check_int_array_at_least("n_patterns", n_patterns, 1))
    m = int(check_int_array_at_least("n_test", n_test, 0))
    b = check_int_array_at_least("block", block, 1)
    if (b > n).any():
        raise ValueError(f"block must be <= n_patterns = {n}, got {int(b.max())}")
    return b, n, m


def sequential_epoch_seconds(block, n_patterns, c: Constants, *, n_test: int = 0):
    """One iteration of the sequential program, 001 eq. (3):
    ``(n+m) Tf + n Tb + (n/b)(Tu + Tm + tc) + m Ts + To``. Assumes b | n like 001.

    ``tc`` (0 in 001) is the fixed cost of the one gradient call per block; with a call
    curve, ``n Tb + n Tf + (n/b) tc`` becomes ``(n/b) call(b)`` (:func:`call_seconds`)."""
    c = _constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    train = n / b * np.asarray(call_seconds(b, c))
    return _out(train + m * c.tf_seconds + n / b * (c.tu_seconds + c.tm_seconds)
                + m * c.ts_seconds + c.to_seconds)


def epoch_seconds(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
                  fan_in: int = 2, n_shards=None):
    """One iteration of the parallel program (001's Tpi), eq. (5) plus the Dask head:

    ``(n/b) [ceil(b/p)(Tf + Tb) + Tu + Tr(p) + Th(p)] + ceil(m/p)(Tf + Ts) + To``.

    With p | b, p | m and the Dask terms 0 this is eq. (5) term by term: ``(n+m)Tf/p +
    nTb/p + (n/b)(Tu + Tr(p)) + mTs/p + To``. No Tm (the reduction's buffer replaces the
    copy) and To is not divided by p, as in eq. (5). Broadcasts ``p`` and ``block``.
    """
    c = _constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    workers, _ = layout(p, n_shards)
    test = ceil_div(m, workers) * (c.tf_seconds + c.ts_seconds)
    per_round = np.asarray(iteration_seconds(p, b, n_weights, c, fan_in, n_shards=n_shards))
    return _out(n / b * per_round + test + c.to_seconds)


def speedup(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
            fan_in: int = 2, n_shards=None):
    """Predicted speedup of one iteration, 001 eq. (7) = eq. (3) / eq. (5).

    At p = 1 this is not exactly 1: the parallel program saves ``(n/b) Tm`` and pays Th.
    """
    seq = sequential_epoch_seconds(block, n_patterns, c, n_test=n_test)
    return _out(np.asarray(seq) / np.asarray(epoch_seconds(
        p, block, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in, n_shards=n_shards)))


def efficiency(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
               fan_in: int = 2, n_shards=None):
    """Predicted efficiency ``S(p) / p``, 001 eq. (8) (and eq. (2))."""
    s = speedup(p, block, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in,
                n_shards=n_shards)
    return _out(np.asarray(s) / check_int_array_at_least("p", p, 1))


def averaging_epoch_seconds(p, block, interval, n_patterns, n_weights, c: Constants, *,
                            n_test: int = 0, fan_in: int = 2, n_shards=None):
    """One iteration with weight averaging, 001 eq. (9) (section VII), plus the Dask head:

    ``ceil(n/p) Tf + ceil(m/p) Tf + ceil(n/p) Tb + (n/b)(Tu + Tm)
    + (n/a)(Ta + Tr(p) + Th(p)) + ceil(m/p) Ts + To``

    with local block b and averaging every a patterns (``interval``). A worker's
    ``ceil(n/p)`` patterns are ``ceil(n/p)/b`` calls of b rows (:func:`call_seconds`:
    each adds ``tc``, or the call curve replaces ``b (Tf + Tb) + tc``; times
    ``call_shared_factor`` for p > 1). As printed, eq. (9)
    charges ``n/b`` local updates (not ``n/(p b)``) and ``n/a`` averages (a counted over
    all workers); we follow the paper. Broadcasts ``p``, ``block`` and ``interval``.
    """
    c = _constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    a = check_int_array_at_least("interval", interval, 1)
    workers, _ = layout(p, n_shards)
    slowdown = np.where(workers > 1, _shared_factor(b, c), 1.0)
    local = (ceil_div(n, workers) / b * np.asarray(call_seconds(b, c)) * slowdown
             + n / b * (c.tu_seconds + c.tm_seconds))
    average = n / a * (c.ta_seconds + np.asarray(reduce_seconds(workers, n_weights, c, fan_in))
                       + np.asarray(head_seconds(p, c, fan_in, n_shards)))
    test = ceil_div(m, workers) * (c.tf_seconds + c.ts_seconds)
    return _out(local + average + test + c.to_seconds)


def averaging_speedup(p, block, interval, n_patterns, n_weights, c: Constants, *,
                      n_test: int = 0, fan_in: int = 2, n_shards=None):
    """Speedup with weight averaging: eq. (3) (unchanged, same b) over eq. (9)."""
    seq = sequential_epoch_seconds(block, n_patterns, c, n_test=n_test)
    return _out(np.asarray(seq) / np.asarray(averaging_epoch_seconds(
        p, block, interval, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in,
        n_shards=n_shards)))


# ---------------------------------------------------------------- data files

def constants_to_dict(c: Constants) -> dict:
    """The JSON form of :class:`Constants`: field name -> seconds (a plain dict)."""
    return dataclasses.asdict(_constants(c))


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
