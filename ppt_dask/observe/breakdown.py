"""Where the time goes: pure transforms of per-task records into per-round rows.

Plain data in, plain data out: no dask, no bokeh. The records come from the scheduler
plugin in :mod:`ppt_dask.observe.diagnostics` (one :class:`TaskRecord` per finished ``ppt-*``
task, from the workers' own start/stop records) and from the head (one dict per round).

Clocks
------
Timestamps are read on one clock only, the scheduler's: when a round's graph arrived
(``submitted``), when a task was sent to its worker (``sent``, its transition to
``processing``) and when the worker's result was reported (``done``, its transition to
``memory``). What the workers measure enters as durations only: ``compute`` and the
``io`` (transfer, deserialization, spill) times from their own start/stop records.
Worker timestamps are not used even though distributed shifts them by an estimated offset
to the scheduler's clock: on a loaded machine that estimate was off by tens of
milliseconds between two workers of one host, which made a reduce task appear to start
before its inputs ended. Inside a task's window ``[sent, done]`` the compute is placed at
the end, the transfers just before it, and the rest of the window is scheduling latency.
The head's numbers are durations too (``head_seconds``, ``wall_seconds``).

The breakdown of a round
------------------------
Round ``k`` covers, on the scheduler's clock, the interval from the end of round ``k-1``
to its own end ``T_k`` (the last ``done`` among its tasks; for the first round, from the
arrival of its graph minus the head's time to build and send it). Each worker's time in
that interval is cut into phases, one phase at each instant, taken in this order:

``gradient``, ``reduce``, ``update``, ``evaluate``, ``other``
    the worker runs a task of that kind (``ppt-grad``; ``ppt-reduce``; ``ppt-update`` and
    the ``ppt-weights``/``ppt-stats`` picks; verification rounds; any other ``ppt-*``);
``transfer``
    it fetches inputs from another worker (or deserializes, or reads/writes spill);
``head``
    the round's graph has not reached the scheduler yet: the head is reading the last
    round's scalars, deciding, building and sending the next graph;
``scheduler``
    one of its tasks has been sent to it (its inputs are done) but is not running: the
    message to the worker, the worker's queue, and the report of the result back;
``idle``
    none of these: it waits for other workers (the barrier of a synchronous round).

A row gives each phase as the mean over the workers in seconds, so the phases add up to
the round's ``wall`` exactly, by construction. ``head_submit_seconds`` (the head's own
time to build and submit the round) is reported beside them but is not a part of the sum:
with rounds submitted ahead it overlaps the workers' compute.

Streamed rounds
---------------
On streamed rounds (:mod:`ppt_dask.engine.rounds.stream`) one task per worker runs many rounds, so
the scheduler sees no round at all. Each loop times its own rounds and the head's record of
a round carries those timings (``loops``: per worker, seconds per phase, on that worker's
clock, durations only). The row of such a round gives each phase as the mean over the
workers' loops, and ``wall`` as the mean of their round times, so the phases add up to it
here too. The phases mean: ``idle``, waiting for the other workers' sums of an earlier
round; ``reduce``, adding them along the shard tree; ``update``, the optimizer step;
``gradient``, the shards' gradients or local steps; ``transfer``, sending this round's sums
to the other workers; ``head``, waiting for the head to read (a loop runs a bounded number
of rounds ahead). There is no ``scheduler`` phase: no task is handed over per round, and the
row says so (``streamed``) rather than giving a zero that reads as a measurement.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from ppt_dask.core import keys
from ppt_dask.observe.phases import (  # noqa: F401  (also read as breakdown.PHASES ...)
    _PRIORITY,
    CATEGORY_OF_PREFIX,
    COMPUTE,
    DESCRIPTIONS,
    NOT_STREAMED,
    PHASES,
    STREAM_DESCRIPTIONS,
    TaskRecord,
    category,
)


def _segments(intervals: list) -> list:
    """``(start, stop, priority)`` intervals -> disjoint ``(start, stop, priority)`` pieces,
    each labelled with the highest-priority interval covering it (gaps left out)."""
    events = []
    for a, b, p in intervals:
        if b > a:
            events.append((a, 1, p))
            events.append((b, -1, p))
    events.sort()
    counts = [0] * len(PHASES)
    out: list = []
    prev = None
    for t, delta, p in events:
        if prev is not None and t > prev:
            active = next((i for i, c in enumerate(counts) if c > 0), None)
            if active is not None:
                if out and out[-1][2] == active and out[-1][1] == prev:
                    out[-1] = (out[-1][0], t, active)
                else:
                    out.append((prev, t, active))
        counts[p] += delta
        prev = t
    return out


def _round_ids(tasks, heads, streamed) -> list:
    have = {(t.gen or 0, t.round) for t in tasks if t.round is not None and category(t) != "evaluate"}
    if heads:
        have &= {(h.get("gen", 0), h["round"]) for h in heads}
    return sorted(have - streamed)


def breakdown(tasks: list, heads: list | None = None) -> list[dict]:
    """Per-round rows: the phases of each round's wall time (see the module docstring).

    Parameters
    ----------
    tasks : list of TaskRecord
        The run's finished tasks, any order.
    heads : list of dict, optional
        The head's per-round records (``gen``, ``round``, ``head_seconds``,
        ``wall_seconds``, ``loss``, ``error_rate``, ``patterns``, ``epoch``...; ``loops`` on
        streamed rounds). When given, only rounds the head completed get a row, and the row
        carries its numbers.

    Returns
    -------
    list of dict
        One per round in (generation, round) order: ``gen``, ``round``, ``wall``, one key
        per phase in :data:`PHASES` (mean seconds per worker; they sum to ``wall``),
        ``workers``, ``transfer_bytes``, ``streamed`` (the round ran inside the workers'
        loops: no scheduler phase), ``head_submit_seconds``, ``head_wall_seconds``, and the
        head's ``loss``, ``error_rate``, ``error_estimate``, ``patterns``, ``epoch``,
        ``patterns_per_second`` where known.
    """
    heads = heads or []
    head_of = {(h.get("gen", 0), h["round"]): h for h in heads}
    streamed = {rid for rid, h in head_of.items() if h.get("loops")}
    rows = [_loop_row(rid, head_of[rid]) for rid in streamed]
    tasks = [t for t in tasks if t.prefix != keys.LOOP]
    ids = _round_ids(tasks, heads, streamed)
    if ids:
        rows += _task_rows(ids, tasks, head_of)
    for row in rows:
        _add_head(row, head_of.get((row["gen"], row["round"])))
    return sorted(rows, key=lambda row: (row["gen"], row["round"]))


def _task_rows(ids, tasks, head_of) -> list[dict]:
    """The rows of rounds that ran as tasks, from the scheduler's records of them."""
    by_round: dict = defaultdict(list)
    for t in tasks:
        if t.round is not None and category(t) != "evaluate":
            by_round[(t.gen or 0, t.round)].append(t)
    starts, ends, arrivals = _boundaries(ids, by_round, head_of)
    workers = sorted({t.worker for rid in ids for t in by_round[rid]})
    seconds = _worker_seconds(tasks, workers, starts, ends, arrivals)
    nbytes_of = {t.key: (t.worker, t.nbytes) for t in tasks}
    rows = []
    idle = _PRIORITY["idle"]
    for k, rid in enumerate(ids):
        wall = ends[k] - starts[k]
        parts = [s / len(workers) for s in seconds[k]]
        parts[idle] = max(0.0, wall - sum(parts[:idle]))  # the rest; >= 0 up to rounding
        rows.append({"gen": rid[0], "round": rid[1], "wall": wall, **dict(zip(PHASES, parts)),
                     "workers": len(workers), "transfer_bytes": _moved(by_round[rid], nbytes_of),
                     "streamed": False})
    return rows


def _loop_row(rid: tuple, head: dict) -> dict:
    """The row of a streamed round, from the loops' own timings in the head's record."""
    loops = head["loops"]
    parts = dict.fromkeys(PHASES, 0.0)
    for loop in loops:
        for phase, seconds in loop["phases"].items():
            parts[phase if phase in _PRIORITY else "other"] += max(0.0, seconds) / len(loops)
    return {"gen": rid[0], "round": rid[1], "wall": sum(parts.values()), **parts, "workers": len(loops),
            "transfer_bytes": sum(int(loop.get("bytes") or 0) for loop in loops), "streamed": True}


def _add_head(row: dict, h: dict | None) -> None:
    """The head's numbers of the round, where it has a record of it."""
    if h is None:
        return
    row["head_submit_seconds"] = h.get("head_seconds")
    row["head_wall_seconds"] = h.get("wall_seconds")
    for name in ("loss", "error_rate", "error_estimate", "patterns", "epoch"):
        if h.get(name) is not None:
            row[name] = h[name]
    if h.get("patterns") and h.get("wall_seconds"):
        row["patterns_per_second"] = h["patterns"] / h["wall_seconds"]


def _boundaries(ids, by_round, head_of) -> tuple:
    """Per round: start (the previous round's end), end (its last ``done``) and the
    arrival of its graph; the first round starts when the head began to build it."""
    starts, ends, arrivals = [], [], []
    for k, rid in enumerate(ids):
        mine = by_round[rid]
        arrival = min(t.submitted for t in mine)
        begin = ends[-1] if k else arrival - (head_of.get(rid, {}).get("head_seconds") or 0.0)
        starts.append(begin)
        ends.append(max(max(t.done for t in mine), begin))
        arrivals.append(arrival)
    return starts, ends, arrivals


def _worker_seconds(tasks, workers, starts, ends, arrivals) -> list:
    """``seconds[k][phase]``: the phases of round ``k`` summed over the workers."""
    lo, hi = starts[0], ends[-1]
    intervals: dict = {w: [] for w in workers}
    for t in tasks:
        if t.worker not in intervals or t.done < lo or t.sent > hi:
            continue
        _, _, io_start, io_stop = t.layout()
        intervals[t.worker] += [(a, b, _PRIORITY[p]) for a, b, p in t.compute_parts()]
        intervals[t.worker] += [(io_start, io_stop, _PRIORITY["transfer"]),
                                (t.sent, io_start, _PRIORITY["scheduler"])]
    for a, r in zip(starts, arrivals):
        if r > a:  # the round's graph came after the previous round had ended
            for w in workers:
                intervals[w].append((a, r, _PRIORITY["head"]))
    seconds = [[0.0] * len(PHASES) for _ in starts]
    for w in workers:
        k = 0
        for a, b, p in _segments(intervals[w]):
            while k < len(starts) and ends[k] <= a:
                k += 1
            j = k
            while j < len(starts) and starts[j] < b:
                seconds[j][p] += max(0.0, min(b, ends[j]) - max(a, starts[j]))
                j += 1
    return seconds


def _moved(round_tasks, nbytes_of) -> int:
    """Bytes of ``ppt-*`` results the round's tasks fetched from another worker (each
    result counted once per receiving worker)."""
    seen = set()
    for t in round_tasks:
        for d in t.deps:
            if d in nbytes_of and nbytes_of[d][0] != t.worker:
                seen.add((t.worker, d))
    return sum(nbytes_of[d][1] for _, d in seen)


def is_streamed(rows: list[dict]) -> bool:
    """Whether every round of the rows ran on streamed rounds (no scheduler hop a round)."""
    return bool(rows) and all(r.get("streamed") for r in rows)


def _weight(row: dict) -> int:
    """The rounds a row stands for: a bin of older rounds (:mod:`ppt_dask.observe.roundlog`)
    gives the mean round of ``rounds``; any other row is one round."""
    return row.get("rounds", 1)


def _weighted_median(pairs) -> float:
    """The median of ``(value, weight)`` pairs: ``statistics.median`` where every weight is 1,
    else the value at which the weights reach half the total."""
    pairs = sorted(pairs)
    if all(w == 1 for _, w in pairs):
        return statistics.median(v for v, _ in pairs)
    total = sum(w for _, w in pairs)
    seen = 0
    for value, weight in pairs:
        seen += weight
        if 2 * seen >= total:
            return value
    return math.nan


def phase_table(rows: list[dict]) -> list[dict]:
    """A gprof-style flat profile of the rounds (002, Table 1): one entry per phase.

    Streamed rounds have no ``scheduler`` phase: it is left out, and the descriptions say
    what each phase is inside a worker's loop. A row of ``rounds`` binned rounds counts as many.

    Returns
    -------
    list of dict
        Sorted by time, largest first: ``phase``, ``percent`` (of the summed wall time),
        ``cumulative_seconds``, ``seconds`` (mean per worker, summed over the rounds),
        ``rounds``, ``ms_per_round`` and ``description``.
    """
    wall = sum(r["wall"] * _weight(r) for r in rows)
    n = sum(_weight(r) for r in rows)
    streamed = is_streamed(rows)
    phases = [p for p in PHASES if not (streamed and p in NOT_STREAMED)]
    words = STREAM_DESCRIPTIONS if streamed else DESCRIPTIONS
    totals = sorted(((sum(r[p] * _weight(r) for r in rows), p) for p in phases), key=lambda x: -x[0])
    out, cumulative = [], 0.0
    for seconds, phase in totals:
        cumulative += seconds
        out.append({"phase": phase, "percent": 100.0 * seconds / wall if wall else 0.0,
                    "cumulative_seconds": cumulative, "seconds": seconds, "rounds": n,
                    "ms_per_round": 1e3 * seconds / n if n else 0.0,
                    "description": words[phase]})
    return out


def format_table(table: list[dict]) -> str:
    """The phase table as text, in gprof's column order."""
    lines = ["  %     cumulative    self              self",
             " time     seconds   seconds  rounds  ms/round  phase"]
    for e in table:
        lines.append(f"{e['percent']:5.1f} {e['cumulative_seconds']:11.3f} {e['seconds']:9.3f} "
                     f"{e['rounds']:7d} {e['ms_per_round']:9.3f}  {e['phase']}")
    return "\n".join(lines)


def summarize(rows: list[dict]) -> dict:
    """Run totals of the rows: the figures a person asks for first.

    ``percent_not_gradient`` is the share of the workers' time (summed over the rounds)
    spent on anything but gradient compute; ``median_head_submit_ms`` the head's median
    time to build and submit one round. A row of ``rounds`` binned rounds counts as many
    rounds of its means (the medians then take its mean round that many times).
    """
    if not rows:
        return {"rounds": 0}
    wall = sum(r["wall"] * _weight(r) for r in rows)
    gradient = sum(r["gradient"] * _weight(r) for r in rows)
    submit = [(r["head_submit_seconds"], _weight(r)) for r in rows if r.get("head_submit_seconds") is not None]
    n = sum(_weight(r) for r in rows)
    out = {"rounds": n, "workers": max(r["workers"] for r in rows), "wall_seconds": wall,
           "streamed": is_streamed(rows),
           "percent_not_gradient": 100.0 * (1.0 - gradient / wall) if wall else 0.0,
           "median_round_ms": 1e3 * _weighted_median((r["wall"], _weight(r)) for r in rows),
           "transfer_bytes_per_round": _weighted_median((r["transfer_bytes"], _weight(r)) for r in rows),
           "median_head_submit_ms": 1e3 * _weighted_median(submit) if submit else None}
    head_wall = sum((r.get("head_wall_seconds") or 0.0) * _weight(r) for r in rows)
    patterns = sum((r.get("patterns") or 0) * _weight(r) for r in rows)
    out["patterns_per_second"] = patterns / head_wall if head_wall and patterns else None
    return out


# Bars of the page and report: the phases grouped as people ask about them.
STACKS = (("gradient", ("gradient",)), ("reduce", ("reduce", "update")), ("other", ("evaluate", "other")),
          ("transfer", ("transfer",)), ("scheduler", ("scheduler",)), ("head", ("head",)),
          ("idle", ("idle",)))


def bar_columns(rows: list[dict]) -> dict:
    """Column data of the per-round bars (milliseconds) and of the throughput plot."""
    cols: dict = {"x": list(range(len(rows))), "gen": [r["gen"] for r in rows],
                  "round": [r["round"] for r in rows], "wall_ms": [1e3 * r["wall"] for r in rows]}
    for name, parts in STACKS:
        cols[name] = [1e3 * sum(r[p] for p in parts) for r in rows]
    cols["not_gradient_percent"] = [100.0 * (1 - r["gradient"] / r["wall"]) if r["wall"] else 0.0
                                    for r in rows]
    cols["patterns_per_second"] = [r.get("patterns_per_second", math.nan) for r in rows]
    return cols


def curve_columns(heads: list[dict]) -> dict:
    """Column data of the loss and error curves, from the head's records (NaN where unknown)."""
    def get(name):
        return [math.nan if h.get(name) is None else float(h[name]) for h in heads]
    return {"x": list(range(len(heads))), "gen": [h.get("gen", 0) for h in heads],
            "round": [h["round"] for h in heads], "epoch": get("epoch"), "loss": get("loss"),
            "error_rate": get("error_rate"), "error_estimate": get("error_estimate")}
