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
  tasks exactly as :func:`ppt_dask.engine.rounds.graph.round_graph` builds them.
* ``tc``: the fixed cost of one gradient call (one shard's block), charged per call.
  numpy vectorises over the patterns of a block, so a call costs
  ``tc + rows (Tf + Tb)``: the intercept and slope of a least-squares fit over block
  sizes (:func:`ppt_dask.perf.fit.fit_per_pattern`), where 001 measured per pattern. How many
  calls a worker makes a round follows the run's ``reproducible`` (:func:`calls_per_round`):
  "same-p" (``ppt.train``'s default for the gradient strategies) makes one call over all the
  worker's rows of the round, so at p = 1 a round costs the serial program's call whatever the
  shards; "any-p" a call per shard it holds (their batched pass costs about that: the small
  products stay small).
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
* streamed rounds (:mod:`ppt_dask.engine.rounds.stream`, what ``ppt.train`` runs by default at any
  number of workers): no task per round, so no ``Th``; each loop computes and allreduces its
  partial sums over direct links, ``m`` messages of ``v`` values in all: ``Tl(p) = tl0 +
  m tl1 + v tlw`` (:func:`links_seconds`, calibrated from the links floor of
  ``graphs/exchange_floor.py``), and the gradient phase has its own curve timed inside real
  streamed rounds (``stream_*``). Which rounds ``exchange`` runs: :func:`round_parts`.
* ``cores``: p workers on fewer cores time-slice them, so a round's compute and exchange
  take ``p / cores`` times longer (:func:`oversubscription`): what 4 workers on 2 cores cost.
* ``tq``: the shortest gradient phase the scheduler allows: a round graph costs
  ``max(compute, tq)``. With distributed's message batching (``BatchedSend(interval=
  "5ms")`` in ``distributed.scheduler``) the update task is sent no sooner than ~5 ms
  after the gradient task went to the same worker, however short the gradient; with the
  batching off (:mod:`ppt_dask.engine.wire.messages`, what ``ppt.connect`` does) tq is near 0.

>>> from ppt_dask.perf.paper001 import CONSTANTS, PROBLEMS
>>> c = CONSTANTS["bat_cave", "function"]
>>> fn = PROBLEMS["function"]
>>> round(speedup(2, 64, fn.n_patterns, fn.n_weights, c, n_test=fn.n_test), 2)  # Table VII
1.2
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core.model import STACK_ROWS
from ppt_dask.core.validation import check_int_array_at_least
from ppt_dask.perf import curves

# the constants and their JSON form, named here too: ``perfmodel.Constants`` reads as the model's
from ppt_dask.perf.constants import STREAM_TERMS as STREAM_TERMS
from ppt_dask.perf.constants import Constants as Constants
from ppt_dask.perf.constants import check_constants
from ppt_dask.perf.constants import constants_from_dict as constants_from_dict
from ppt_dask.perf.constants import constants_to_dict as constants_to_dict
from ppt_dask.perf.constants import has_stream_terms as has_stream_terms
from ppt_dask.perf.tasks import EXCHANGES as EXCHANGES
from ppt_dask.perf.tasks import ceil_div, layout, slowest_patterns, streamed
from ppt_dask.perf.tasks import tasks_per_round as tasks_per_round
from ppt_dask.perf.tasks import tree_levels as tree_levels
from ppt_dask.perf.terms import allreduce_terms as allreduce_terms
from ppt_dask.perf.terms import call_seconds as call_seconds
from ppt_dask.perf.terms import count_weights as count_weights
from ppt_dask.perf.terms import floats
from ppt_dask.perf.terms import head_seconds as head_seconds
from ppt_dask.perf.terms import lag_seconds as lag_seconds
from ppt_dask.perf.terms import links_seconds as links_seconds
from ppt_dask.perf.terms import oversubscription as oversubscription
from ppt_dask.perf.terms import reduce_seconds as reduce_seconds
from ppt_dask.perf.terms import task_seconds as task_seconds

REPRODUCIBLE = ("same-p", "any-p")  # ppt.train's reproducible: what the model charges a worker's round


def calls_per_round(p, block, n_shards=None, reproducible: str = "same-p"):
    """How a synchronous round's gradient falls on the workers, as ``ppt.train(...,
    reproducible=reproducible)`` runs it.

    "any-p": a call per shard a worker holds; "same-p": one call over all its rows (its shards'
    rows side by side, :func:`ppt_dask.core.model.one_pass`) while each shard's share is at most
    ``STACK_ROWS`` rows, else a call per shard too.

    Parameters
    ----------
    p : int or array of int
        Workers.
    block : int or array of int
        Patterns per round, split over the shards.
    n_shards : int, optional
        Logical shards (None: one per worker).
    reproducible : {"same-p", "any-p"}

    Returns
    -------
    workers, patterns, calls : arrays of the broadcast shape of ``p`` and ``block``
        The workers holding shards, the busiest one's patterns and its calls.
    """
    if reproducible not in REPRODUCIBLE:
        raise ValueError(f"reproducible must be one of {REPRODUCIBLE}, got {reproducible!r}")
    b = check_int_array_at_least("block", block, 1)
    workers, calls = layout(p, n_shards)
    patterns = slowest_patterns(workers, b, n_shards)
    if reproducible == "same-p":
        calls = np.where(patterns / calls <= STACK_ROWS, 1, calls)
    return workers, patterns, calls


def round_rows(p, block, n_shards=None, reproducible: str = "same-p"):
    """Rows of one gradient call of the busiest worker in a round (what the curves are
    timed against): its patterns over its calls (:func:`calls_per_round`). Broadcasts ``p``
    and ``block``."""
    _workers, patterns, calls = calls_per_round(p, block, n_shards, reproducible)
    return floats(patterns / calls)


def compute_seconds(p, block, c: Constants, n_shards=None, *, streamed: bool = False, cores=None,
                    reproducible: str = "same-p"):
    """Gradient phase of one round: the busiest worker's calls and patterns.

    ``task(patterns / calls, calls)`` with ``patterns = ceil(b/p)`` (001's ``b/p``) when
    ``n_shards`` is None, else the exact split of Sync over the shards, and ``calls`` those of
    :func:`calls_per_round` (one a round under "same-p", one a shard under "any-p"); ``task`` is
    :func:`task_seconds` (``calls * tc + patterns (Tf + Tb)`` without a call curve), times
    :func:`oversubscription`. A round graph's phase is at least ``tq`` (the scheduler's message
    batching); a streamed loop's is not. Broadcasts ``p`` and ``block``.
    """
    c = check_constants(c)
    workers, patterns, calls = calls_per_round(p, block, n_shards, reproducible)
    busy = np.asarray(task_seconds(patterns / calls, calls, c, workers, streamed=streamed))
    busy = busy * oversubscription(workers, cores)
    return floats(busy if streamed else np.maximum(busy, c.tq_seconds))


def round_parts(p, block, n_weights, c: Constants, fan_in: int = 2, *, n_shards=None,
                exchange: str = "auto", cores=None, reproducible: str = "same-p") -> dict:
    """The terms of one round (seconds, each of the broadcast shape of ``p`` and ``block``).

    ``compute`` (:func:`compute_seconds`), ``update`` (``Tu``), ``exchange`` and ``head``.
    Where ``ppt.train(..., exchange=exchange)`` streams the rounds
    (:func:`ppt_dask.perf.tasks.streamed`) and the links were calibrated, ``exchange`` is
    :func:`links_seconds` (times :func:`oversubscription`: the loops share the cores) and
    ``head`` 0 (the head reads rounds while the loops go on), and the exchange also holds the
    wait for the slowest loop (:func:`lag_seconds`); on a round graph, eq. (4)'s
    ``Tr(p)`` and the head ``Th(p)``. ``streamed`` (bools) says which rounds were charged as
    streamed, ``graph_for_stream`` (bools) where streamed rounds had to take the graph's terms
    (its compute curve and ``tq`` too) because the constants have no streamed exchange (001's
    own, or an older calibration). ``reproducible``: ``ppt.train``'s (:func:`calls_per_round`).
    """
    c = check_constants(c)
    workers, _ = layout(p, n_shards)
    s = np.asarray(streamed(p, fan_in, n_shards, exchange))
    links = has_stream_terms(c)
    shape = np.broadcast(np.asarray(p), np.asarray(block)).shape
    parts = {}
    for flag in (False, True):
        graph = not (flag and links)
        compute = np.asarray(compute_seconds(p, block, c, n_shards, streamed=not graph, cores=cores,
                                             reproducible=reproducible))
        comm = np.asarray(reduce_seconds(workers, n_weights, c, fan_in) if graph
                          else links_seconds(workers, n_weights, c)) * oversubscription(workers, cores)
        parts[flag] = dict(
            compute=compute, update=np.full(shape, c.tu_seconds),
            exchange=comm if graph else comm + lag_seconds(workers, compute, c),
            head=np.asarray(head_seconds(p, c, fan_in, n_shards, exchange)) if graph else np.zeros(np.shape(p)))
    out = {k: floats(np.broadcast_to(np.where(s, parts[True][k], parts[False][k]), shape)) for k in parts[True]}
    out["streamed"] = s if s.ndim else bool(s)
    out["graph_for_stream"] = (s & (not links)) if s.ndim else bool(s and not links)
    return out


def iteration_seconds(p, block, n_weights, c: Constants, fan_in: int = 2, *, n_shards=None,
                      exchange: str = "auto", cores=None, reproducible: str = "same-p"):
    """One weight update (one Dask round) with block b split over p workers.

    The per-block share of 001 eq. (5): the slowest worker's ``ceil(b/p) (Tf + Tb)``
    (see :func:`compute_seconds` for the Dask terms tc and tq), then ``Tu + Tr(p)``,
    plus the Dask head ``Th(p)``; on streamed rounds ``Tu + Tl(p)`` instead
    (:func:`round_parts`). 001 assumes p | b, where ``ceil(b/p) = b/p``; for b < p, p - b
    workers idle. With ``n_shards`` S < p only S workers get work. ``cores``: the cores the
    workers share (None: one each). Broadcasts ``p`` and ``block``.

    >>> c = Constants(1e-3, 2e-3, 1e-4, 0.0, 0.0, 0.0, 1e-6, 1e-3)
    >>> round(iteration_seconds(4, 64, 1000, c), 6)  # 16*3ms + 0.1ms + (2*1ms + 1ms)
    0.0511
    """
    parts = round_parts(p, block, n_weights, c, fan_in, n_shards=n_shards, exchange=exchange, cores=cores,
                        reproducible=reproducible)
    return floats(sum(np.asarray(parts[k]) for k in ("compute", "update", "exchange", "head")))


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
    c = check_constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    train = n / b * np.asarray(call_seconds(b, c))
    return floats(train + m * c.tf_seconds + n / b * (c.tu_seconds + c.tm_seconds)
                + m * c.ts_seconds + c.to_seconds)


def epoch_seconds(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
                  fan_in: int = 2, n_shards=None, exchange: str = "auto", cores=None, reproducible: str = "same-p"):
    """One iteration of the parallel program (001's Tpi), eq. (5) plus the Dask head:

    ``(n/b) [ceil(b/p)(Tf + Tb) + Tu + Tr(p) + Th(p)] + ceil(m/p)(Tf + Ts) + To``.

    With p | b, p | m and the Dask terms 0 this is eq. (5) term by term: ``(n+m)Tf/p +
    nTb/p + (n/b)(Tu + Tr(p)) + mTs/p + To``. No Tm (the reduction's buffer replaces the
    copy) and To is not divided by p, as in eq. (5). The rounds (:func:`iteration_seconds`)
    and the test patterns take :func:`oversubscription` times longer when the p workers
    share fewer ``cores``. Broadcasts ``p`` and ``block``.
    """
    c = check_constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    workers, _ = layout(p, n_shards)
    test = ceil_div(m, workers) * (c.tf_seconds + c.ts_seconds) * oversubscription(workers, cores)
    per_round = np.asarray(iteration_seconds(p, b, n_weights, c, fan_in, n_shards=n_shards,
                                             exchange=exchange, cores=cores, reproducible=reproducible))
    return floats(n / b * per_round + test + c.to_seconds)


def speedup(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
            fan_in: int = 2, n_shards=None, exchange: str = "auto", cores=None, reproducible: str = "same-p"):
    """Predicted speedup of one iteration, 001 eq. (7) = eq. (3) / eq. (5).

    At p = 1 this is not exactly 1: the parallel program saves ``(n/b) Tm`` and pays Th.
    """
    seq = sequential_epoch_seconds(block, n_patterns, c, n_test=n_test)
    return floats(np.asarray(seq) / np.asarray(epoch_seconds(
        p, block, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in, n_shards=n_shards,
        exchange=exchange, cores=cores, reproducible=reproducible)))


def efficiency(p, block, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
               fan_in: int = 2, n_shards=None, exchange: str = "auto", cores=None, reproducible: str = "same-p"):
    """Predicted efficiency ``S(p) / p``, 001 eq. (8) (and eq. (2))."""
    s = speedup(p, block, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in,
                n_shards=n_shards, exchange=exchange, cores=cores, reproducible=reproducible)
    return floats(np.asarray(s) / check_int_array_at_least("p", p, 1))


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
    c = check_constants(c)
    b, n, m = _epoch_inputs(block, n_patterns, n_test)
    a = check_int_array_at_least("interval", interval, 1)
    workers, _ = layout(p, n_shards)
    slowdown = np.where(workers > 1, curves.shared_factor(b, c), 1.0)
    local = (ceil_div(n, workers) / b * np.asarray(call_seconds(b, c)) * slowdown
             + n / b * (c.tu_seconds + c.tm_seconds))
    average = n / a * (c.ta_seconds + np.asarray(reduce_seconds(workers, n_weights, c, fan_in))
                       + np.asarray(head_seconds(p, c, fan_in, n_shards)))
    test = ceil_div(m, workers) * (c.tf_seconds + c.ts_seconds)
    return floats(local + average + test + c.to_seconds)


def averaging_speedup(p, block, interval, n_patterns, n_weights, c: Constants, *,
                      n_test: int = 0, fan_in: int = 2, n_shards=None):
    """Speedup with weight averaging: eq. (3) (unchanged, same b) over eq. (9)."""
    seq = sequential_epoch_seconds(block, n_patterns, c, n_test=n_test)
    return floats(np.asarray(seq) / np.asarray(averaging_epoch_seconds(
        p, block, interval, n_patterns, n_weights, c, n_test=n_test, fan_in=fan_in,
        n_shards=n_shards)))
