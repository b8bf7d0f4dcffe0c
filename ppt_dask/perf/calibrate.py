"""Measure the constants of the run-time model (:mod:`ppt_dask.perf.model`) on real code.

Seed 001, section V-A: "the actual implementation was used for the measurement", since
timing single arithmetic operations out of context gave errors over 20%. So:

* :func:`measure_constants` times the network's own functions on one process (a worker,
  under :func:`calibrate`): Tf, Tb, Ts per pattern as slopes of least-squares lines over
  block sizes (the gradient call's intercept is the Dask model's ``tc``), Tu the real
  update, Tm a copy of the weights, Ta eq. (9)'s averaging, To the rest of a serial epoch;
  and :func:`ppt_dask.perf.threads.time_threads` the gradient call at 1, 2, 4 ... threads;
* :func:`ppt_dask.perf.calls.measure_calls` times the real gradient call over a range of row
  counts inside real training rounds on the live cluster, on one worker alone and on all
  workers at once: the model's *call curve* (the cost per pattern is not constant, and
  workers sharing a machine slow each other);
* :func:`ppt_dask.perf.loops.measure_stream` and :func:`ppt_dask.perf.loops.measure_links`
  time the streamed rounds ``ppt.train`` runs by default: their gradient phase over the same
  call sizes, and their exchange alone (the links floor) over p and vector sizes;
* :func:`measure_head` runs the engine's round graph with gradient tasks that wait a known
  time and return a tiny vector, over 1..64 *virtual* workers (slots pinned in
  blocks onto the real ones: the tasks and tree of a cluster of that size), and fits
  ``Th = th0 + th1 * tasks_per_round``; rounds with no wait give ``tq``;
* :func:`measure_reduce` runs the same rounds over 2..p real workers with vectors of
  several sizes and fits eq. (4), ``Tr(p) = Tw w ceil(log_k p) + Ti``, to what they
  cost beyond the same rounds with a tiny vector (001's Fig. 1 test program, on the
  live cluster).

:class:`Calibration` bundles the constants, the sizes they hold for and the raw
timings as JSON: a file a user can carry to plan a cluster. Only the functions that
need a cluster import dask.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.core import model as netmodel
from ppt_dask.engine import waits
from ppt_dask.perf import fit as modelfit
from ppt_dask.perf import loops
from ppt_dask.perf import model as perfmodel
from ppt_dask.perf import threads as perfthreads
from ppt_dask.perf.calls import cluster_workers, measure_calls
from ppt_dask.perf.measure import measure_constants
from ppt_dask.perf.probes import (  # noqa: F401  (also read as calibrate.measure_head ...)
    WARMUP,
    HeadFit,
    check_rounds,
    measure_head,
    measure_reduce,
    probe_rounds,
    worker_cores,
)

CURVE_ROUNDS = 16  # rounds per size of the call curve (measure_calls); fewer when fewer probe rounds are asked


# ---- the bundle ------------------------------------------------------------------------


@dataclass
class Calibration:
    """Constants plus what they were measured for; JSON with :meth:`save` / :meth:`load`."""

    constants: perfmodel.Constants
    network: tuple | str = ()  # an MLP's layer widths, another network's name (empty: constants by hand)
    n_weights: int | None = None  # parameters of the network (weights and biases)
    n_patterns: int | None = None  # training patterns n of the data set
    n_test: int = 0
    block: int | None = None  # block size the per-pattern lines were centred on
    n_shards: int | None = None  # shards of the layout to model (None: one per worker)
    fan_in: int = 2
    workers: int = 1  # real workers of the calibrated cluster
    cores: int | None = None  # the cores those workers share, over their hosts
    measurements: dict = field(default_factory=dict)
    dtype: str | None = None  # the network's floats (float32 computes about twice as fast); None: not recorded
    threads: dict = field(default_factory=dict)  # a gradient call of "rows" rows: "seconds" at "counts" threads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # the constants become a dict of their fields

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        """A calibration, or a bare dict of :class:`perfmodel.Constants` fields."""
        if not isinstance(data, dict):
            raise ValueError(f"a calibration is a JSON object, got {type(data).__name__}")
        if "constants" not in data:  # constants given by hand for a cluster not at hand
            return cls(perfmodel.constants_from_dict(data))
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown calibration fields {unknown}; valid: {sorted(names)}")
        values = dict(data)
        values["constants"] = perfmodel.constants_from_dict(values["constants"])
        network = values.get("network") or ()
        values["network"] = network if isinstance(network, str) else tuple(network)
        return cls(**values)

    def save(self, path) -> None:
        with open(path, "w") as fh:
            json.dump(self.to_dict(), fh, indent=2)

    @classmethod
    def load(cls, path) -> Calibration:
        with open(path) as fh:
            text = fh.read()
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not JSON: {exc}") from None


def _streamed_terms(client, net, X, y, workers, rounds: int) -> tuple[dict, dict]:
    """Step 3 of :func:`calibrate`: the streamed rounds' gradient phase and links floor, as the
    :class:`Calibration`'s fields and what was seen."""
    w = net.n_params
    loop_curve = loops.measure_stream(client, net, X, y, workers,
                                      rounds=max(loops.STREAM_ROUNDS, rounds))
    links = loops.measure_links(client, (16, w, 4 * w), workers, rounds=max(loops.STREAM_ROUNDS, rounds),
                                dtype=str(np.dtype(net.dtype)))
    tl1, lag = links.tl1_seconds, 0.0
    if loop_curve.rest_shared and len(workers) >= 2:
        # the level from the real rounds, the growth in w from the floor (as th0 and Ti are
        # levelled on real rounds), and the wait for the slower loop's gradient phase, which
        # grows with it and which a floor without compute does not have (MNIST at p = 2:
        # about 1 ms beyond the gradient for short phases, 4.3 ms for phases of 62 ms)
        m, v = perfmodel.allreduce_terms(len(workers), w, np.dtype(net.dtype).itemsize)  # the exchange's terms
        level, lag = modelfit.fit_lag(loop_curve.shared, loop_curve.rest_shared)
        tl1 = max((level - links.tl0_seconds - links.tlw_seconds_per_weight * v) / m, 0.0)
    stream_fields = dict(stream_rows=loop_curve.rows, stream_first_seconds=loop_curve.first,
                         stream_more_seconds=loop_curve.more, stream_shared_factor=loop_curve.factor,
                         tl0_seconds=links.tl0_seconds, tl1_seconds=tl1,
                         tlw_seconds_per_weight=links.tlw_seconds_per_weight, stream_lag_ratio=lag)
    stream_seen = {"stream": dataclasses.asdict(loop_curve), "links": [list(s) for s in links.samples],
                   "links_floor_tl1_seconds": links.tl1_seconds}
    return stream_fields, stream_seen


def calibrate(client, net, X, y, *, block: int, workers=None, n_shards: int | None = None,
              fan_in: int = 2, n_test: int = 0, repeats: int = 7, rounds: int = 25,
              p_values=(1, 2, 4, 8, 16, 32, 64), sizes=None, spin_seconds: float = 0.01,
              curve: bool = True, stream: bool = True, progress=None) -> Calibration:
    """All of 001's constants for ``net`` on this cluster, in one :class:`Calibration`.

    The per-pattern constants are timed on the first worker (single-threaded, with the
    cluster's malloc settings), from at most ``max(8 * block, 16384)`` rows of ``X``;
    with ``curve`` the call curve (:func:`measure_calls`) over the same rows, alone and
    on all ``workers`` at once; then :func:`measure_head` and :func:`measure_reduce`
    (vectors of w/10, w and 4w weights by default) run on all ``workers``. With the
    curve's real rounds, ``th0`` is levelled so that ``Tu + Tr(p) + Th(p)`` matches what
    those rounds cost beyond their gradient phase at p = 1 and p = all (the probes keep
    the growth ``th1``), and ``tq`` is what their shortest calls' rounds cost beyond it.
    ``n_patterns`` is ``len(X)``; the call curve runs ``min(CURVE_ROUNDS, rounds)`` rounds
    per size. With ``stream`` the streamed rounds ``ppt.train`` runs by default are timed as
    well (:mod:`ppt_dask.perf.loops`): their gradient phase over the same call sizes (the
    ``stream_*`` curve) and the links floor over p = 1..len(workers) and vectors of 16, w and
    4w values (``tl0``, ``tl1``, ``tlw``), at least ``loops.STREAM_ROUNDS`` rounds each (the
    curve's long rounds fewer, :func:`ppt_dask.perf.loops.timed_rows`); ``tl1``
    is then levelled so that ``Tl(p)`` at p = all workers, plus ``stream_lag_ratio`` times the
    gradient phase (the wait for the slower loop, which the floor without compute does not
    have), is what the real streamed rounds of the curve spent beyond their gradient and update
    (:func:`ppt_dask.perf.fit.fit_lag` over the sizes), the floor's own kept in the measurements.
    The same worker times a gradient call of ``block`` rows at 1, 2, 4 ... threads up to its
    host's cores (:func:`ppt_dask.perf.threads.time_threads`: ``Calibration.threads``), from
    which ``ppt-dask model recommend`` proposes workers x threads.
    ``progress``, when given, is called with a line at the start of each of the five steps
    (``step 2/5: ...``).
    """
    check_rounds(rounds)
    say = progress or (lambda line: None)
    workers = cluster_workers(client, workers)
    say(f"step 1/5: per-pattern constants and threads on one worker ({repeats} repeats)")
    n_rows = min(len(X), max(8 * int(block), 16384))
    data = client.scatter([np.asarray(X[:n_rows]), np.asarray(y[:n_rows])], workers=workers[:1], hash=False)
    on_worker = client.submit(measure_constants, net, *data, block=int(block), repeats=repeats,
                              workers=workers[:1], pure=False)
    local = waits.result(on_worker, 600, "the per-pattern constants timed on one worker")
    counts = perfthreads.thread_counts(worker_cores(client, workers[:1]))
    on_worker = client.submit(perfthreads.time_threads, net, *data, rows=int(block), counts=counts,
                              repeats=repeats, workers=workers[:1], pure=False)
    timed = {"rows": min(int(block), n_rows), "counts": counts,
             "seconds": waits.result(on_worker, 600, "a gradient call timed at 1, 2 ... threads on one worker")}
    del on_worker, data
    if curve:
        say(f"step 2/5: the call curve of round graphs over {len(workers)} worker(s)")
    calls = (measure_calls(client, net, X[:n_rows], y[:n_rows], workers, rounds=min(CURVE_ROUNDS, rounds))
             if curve else None)
    w = net.n_params
    stream_fields, stream_seen = {}, {}
    if stream:
        say(f"step 3/5: streamed rounds over {len(workers)} worker(s): the gradient phase, the links floor")
        stream_fields, stream_seen = _streamed_terms(client, net, X[:n_rows], y[:n_rows], workers, rounds)
    say(f"step 4/5: head and scheduler cost, {rounds} probe rounds at p = {', '.join(map(str, p_values))}")
    head = measure_head(client, workers, p_values=p_values, spin_seconds=spin_seconds,
                        rounds=rounds, fan_in=fan_in)
    sizes = sizes or sorted({max(w // 10, 1), w, 4 * w})
    reduce_samples: list = []
    tw, ti = (0.0, 0.0)
    if len(workers) >= 2:
        say(f"step 5/5: the reduce over 2..{len(workers)} workers, vectors of {', '.join(map(str, sizes))} weights")
        tw, ti = measure_reduce(client, sizes, workers, fan_in, rounds=rounds,
                                spin_seconds=spin_seconds, samples=reduce_samples)
    th0, tq = head.th0_seconds, head.tq_seconds
    curve_fields = {}
    if calls is not None:
        curve_fields = dict(call_rows=calls.rows, call_seconds=calls.bare, call_task_seconds=calls.first,
                            call_more_seconds=calls.more, call_shared_factor=calls.factor)
        if calls.periods_alone:
            # levels from the real rounds: th0 from p = 1 (one shard), then Ti from p = all
            # (calls.calls shards each); the probes keep the growth th1 and the bandwidth Tw
            # (their own levels err high, see measure_head)
            th0 = max(calls.rest(False) - local.tu_seconds - head.th1_seconds * perfmodel.tasks_per_round(1), 0.0)
            tq = calls.quantum(False)
            if len(workers) >= 2:
                p = len(workers)
                tasks = perfmodel.tasks_per_round(p, fan_in, n_shards=calls.calls * p)
                ti = max(calls.rest(True) - local.tu_seconds - th0 - head.th1_seconds * tasks
                         - tw * w * perfmodel.tree_levels(p, fan_in), 0.0)
    constants = dataclasses.replace(local, tw_seconds_per_weight=tw, ti_seconds=ti, th0_seconds=th0,
                                    th1_seconds=head.th1_seconds, tq_seconds=tq, **curve_fields, **stream_fields)
    shown = netmodel.describe(net)["network"]  # an MLP's widths, or a name
    return Calibration(constants, tuple(shown) if isinstance(shown, list) else str(shown), w, len(X),
                       int(n_test), int(block), n_shards,
                       fan_in, len(workers), worker_cores(client, workers),
                       {"head": [list(s) for s in head.samples],
                        "reduce": [list(s) for s in reduce_samples],
                        "rounds": dataclasses.asdict(calls) if calls is not None else {},
                        "probe_th0_seconds": head.th0_seconds, "probe_tq_seconds": head.tq_seconds,
                        **stream_seen, "load_average": list(os.getloadavg())},
                       str(np.dtype(net.dtype)), timed)
