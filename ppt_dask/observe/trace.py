"""A run as a Chrome trace (``chrome://tracing``, Perfetto): pure, from the same task
records and head records as :mod:`ppt_dask.observe.breakdown`."""

from __future__ import annotations

import math

from ppt_dask.core import keys
from ppt_dask.observe.breakdown import category

STREAMED = "streamed round"  # the category of a loop's spans of one round's phases


def _finite(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def trace_events(tasks: list, heads: list | None = None, settings: dict | None = None) -> dict:
    """The run in Chrome's trace-event format (``chrome://tracing``, Perfetto).

    One track per worker (its tasks' compute, and its transfers) and one for the head
    (building and submitting each round, drawn as ending when the graph reached the
    scheduler), plus the loss as a counter. Everything is placed on the scheduler's clock
    as in :func:`breakdown` (a task's compute ends when the scheduler heard of it); times
    are microseconds from the first event.

    Streamed rounds (the head's records carry ``loops``) get one span per phase per round on
    each worker's track, inside that worker's ``ppt-loop`` task: the loop's start is placed
    on the scheduler's clock as its compute's start, and each round at the seconds since
    then that the loop measured (durations only, as everywhere here).
    """
    heads = heads or []
    if not tasks and not any(h.get("loops") for h in heads):
        return {"traceEvents": [], "displayTimeUnit": "ms", "otherData": settings or {}}
    arrivals: dict = {}
    ends: dict = {}
    for t in tasks:
        if t.round is not None and t.prefix != keys.LOOP:
            rid = (t.gen or 0, t.round)
            arrivals[rid] = min(arrivals.get(rid, t.submitted), t.submitted)
            ends[rid] = max(ends.get(rid, t.done), t.done)
    head_of = {(h.get("gen", 0), h["round"]): h for h in heads}
    submits = [(arrivals[rid] - (head_of[rid].get("head_seconds") or 0.0), arrivals[rid], rid)
               for rid in sorted(arrivals) if rid in head_of]
    loop_spans = _loop_spans(tasks, head_of, ends)
    origin = min([t.sent for t in tasks] + [a for a, _, _ in submits] + [a for _, a, _, _, _ in loop_spans])
    us = lambda x: round((x - origin) * 1e6, 3)  # noqa: E731
    workers = sorted({t.worker for t in tasks} | {w for w, *_ in loop_spans}, key=str)
    tid = {w: i + 1 for i, w in enumerate(workers)}
    events = [{"ph": "M", "pid": 1, "tid": 0, "name": "process_name", "args": {"name": "ppt_dask run"}},
              {"ph": "M", "pid": 1, "tid": 0, "name": "thread_name", "args": {"name": "head"}}]
    events += [{"ph": "M", "pid": 1, "tid": tid[w], "name": "thread_name", "args": {"name": str(w)}}
               for w in workers]
    for t in sorted(tasks, key=lambda t: t.done):
        start, stop, io_start, _ = t.layout()
        events.append({"ph": "X", "pid": 1, "tid": tid[t.worker], "name": t.prefix, "cat": category(t),
                       "ts": us(start), "dur": round((stop - start) * 1e6, 3),
                       "args": {"key": t.key, "round": t.round, "gen": t.gen, "nbytes": t.nbytes,
                                "sent_to_done_ms": round((t.done - t.sent) * 1e3, 3)}})
        for action, seconds, source in t.io:
            events.append({"ph": "X", "pid": 1, "tid": tid[t.worker], "name": action, "cat": "transfer",
                           "ts": us(io_start), "dur": round(seconds * 1e6, 3),
                           "args": {"for": t.key, "source": source}})
            io_start += seconds
    for worker, a, b, phase, (gen, r) in loop_spans:
        events.append({"ph": "X", "pid": 1, "tid": tid[worker], "name": phase, "cat": STREAMED,
                       "ts": us(a), "dur": round((b - a) * 1e6, 3), "args": {"gen": gen, "round": r}})
    for a, b, (gen, r) in submits:
        h = head_of[(gen, r)]
        events.append({"ph": "X", "pid": 1, "tid": 0, "name": "submit round", "cat": "head",
                       "ts": us(a), "dur": round((b - a) * 1e6, 3),
                       "args": {"gen": gen, "round": r, "loss": _finite(h.get("loss")),
                                "error_rate": _finite(h.get("error_rate"))}})
    for rid in sorted(ends):
        loss = _finite(head_of.get(rid, {}).get("loss"))
        if loss is not None:
            events.append({"ph": "C", "pid": 1, "tid": 0, "name": "loss", "ts": us(ends[rid]),
                           "args": {"loss": loss}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": settings or {}}


def _loop_spans(tasks: list, head_of: dict, ends: dict) -> list:
    """``(worker, start, stop, phase, (gen, round))`` of every streamed round's phases, on the
    scheduler's clock; each round's end goes into ``ends``."""
    anchors = {}  # (gen, worker) -> when the worker's loop began computing
    for t in tasks:
        if t.prefix == keys.LOOP:
            anchors[(t.gen or 0, t.worker)] = t.layout()[0]
    fallback = min([t.sent for t in tasks], default=0.0)
    spans = []
    for rid, h in sorted(head_of.items()):
        for loop in h.get("loops") or ():
            a = anchors.get((rid[0], loop["worker"]), fallback) + loop["at"]
            for phase, seconds in loop["phases"].items():  # in the order the loop ran them
                if seconds > 0:
                    spans.append((loop["worker"], a, a + seconds, phase, rid))
                    a += seconds
            ends[rid] = max(ends.get(rid, a), a)
    return spans
