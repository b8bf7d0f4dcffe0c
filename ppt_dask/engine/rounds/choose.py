"""Which round graph a run uses, and the object that runs it for one generation.

Every kind has the same interface (``submit``, ``read_stats``, ``loop_phases``,
``state_after``, ``state_before``, ``salvage``, ``release``, ``cancel``, ``lag``,
``max_batch``; the asynchronous loops also ``record_fields``), so the round loop
(:mod:`ppt_dask.engine.trainer`) does not know which one it drives.
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core import allreduce
from ppt_dask.engine import waits
from ppt_dask.engine.placement.cluster import worker_addresses
from ppt_dask.engine.rounds import graph, onehop, overlap, sharedreduce, stream, streamasync, watched

EXCHANGES = ("auto", "all", "doubling", "tree", "stream")
# The one-hop graph (exchange "all") combines by recursive doubling from this many workers on,
# where it applies (choose_graph: what the calibration times). At 4 (graphs/round_latency.py on
# 2 cores, 2026-11-26, eight runs, one hop / floor) "all" took a median 1.27x the floor and
# doubling 1.44x, "all" ahead in each run; "all" fetches p - 1 carries, doubling log2 p.
DOUBLING_FROM = 8


def check_exchange(exchange: str) -> str:
    """``exchange`` if it names a round kind's transport, else a ``ValueError`` naming it."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
    return exchange


def choose_exchange(exchange: str, plan: graph.Plan, strategy=None) -> str:
    """The round graph for ``exchange`` on this placement ("auto": the fastest measured).

    "stream", and "auto" at any number of workers, runs one long task per worker whose partial
    sums go straight between the workers (:mod:`ppt_dask.engine.rounds.stream`, no scheduler hop a
    round; an allreduce whose bytes per worker stay under twice the weights,
    :mod:`ppt_dask.engine.rounds.allreduce`). The per-round graphs stay selectable, to see what the
    head-worker arrangement costs beside it: at 8 workers on 2 cores (2026-11-28) the doubling
    graph took 72 ms a round of MNIST block 1000 where the streamed rounds took 13 ms. For the
    local strategy "all" is one task per worker per round whose exchange overlaps the next
    round's steps (:mod:`ppt_dask.engine.rounds.overlap`)."""
    check_exchange(exchange)
    if getattr(strategy, "asynchronous", False):  # one loop per worker, never waiting for another
        if exchange not in ("auto", "stream"):
            raise ValueError(f"exchange={exchange!r} does not apply to the asynchronous strategy: its loops "
                             "stream their steps ('auto' or 'stream')")
        return "stream"
    if getattr(strategy, "shard_models", False):
        if exchange not in ("auto", "all", "stream"):
            raise ValueError(f"exchange={exchange!r} does not apply to the local strategy: use 'auto' "
                             "(streamed rounds) or 'all' (one task per worker per round)")
        return "overlap" if exchange == "all" else "stream"
    return "stream" if exchange == "auto" else exchange


def choose_allreduce(exchange: str, algorithm: str, plan: graph.Plan, strategy, net,
                     colocated=lambda need: False) -> str | None:
    """The streamed exchange's algorithm for ``net``'s partial sums over this placement
    (:func:`ppt_dask.core.allreduce.choose`); None where the rounds are not streamed or are
    asynchronous (their loops send each gradient whole). ``colocated(need)``, asked only where
    the answer decides, tells whether the blocks' workers share one host's memory with ``need``
    bytes free (:func:`ppt_dask.engine.wire.sharedmem.colocated`; what the segments of
    :mod:`ppt_dask.engine.rounds.sharedreduce` take, twice over)."""
    if exchange != "stream" or getattr(strategy, "asynchronous", False):
        return None
    own = getattr(strategy, "partial_bytes", None)  # a strategy whose sums are not the weights' size
    nbytes = own(net) if own is not None else int(net.n_params) * np.dtype(net.dtype).itemsize
    halves = allreduce.can_halve(len(plan.blocks), [nodes for *_, nodes in plan.blocks], plan.fan_in)
    p = len(plan.blocks)
    subtrees = max(len(nodes) for *_, nodes in plan.blocks)
    need = 2 * sharedreduce.segment_bytes(p, nbytes, subtrees)
    shared = algorithm in ("auto", "shared") and p > 1 and colocated(need)
    return allreduce.choose(algorithm, p, nbytes, halves, shared)


def choose_graph(plan: graph.Plan) -> str:
    """The fastest measured per-round graph for this placement: one hop all to all, or by
    recursive doubling from ``DOUBLING_FROM`` workers on where it applies."""
    doubling = len(plan.blocks) >= DOUBLING_FROM and onehop.can_double(plan) is None
    return "doubling" if doubling else "all"


def start(exchange: str, client, plan: graph.Plan, shard_futures, strategy, net, tag: str, state,
          first: int, last: int, allreduce: str = "auto", home: str | None = None, rule=None, verify=None,
          homes: list | None = None):
    """The rounds of one generation (``tag``) from ``state``, the state before round ``first``;
    ``last`` is the run's last round (the streamed rounds run up to it by themselves);
    ``allreduce`` the streamed exchange's algorithm (:func:`ppt_dask.core.allreduce.choose`);
    ``home`` the worker that holds the start state (:func:`place_state`; None: the scheduler's choice);
    ``rule``: the stopping rule synchronous streamed loops apply themselves (with ``verify``, the
    verification set, cut among the slots' workers ``homes``: :mod:`ppt_dask.engine.rounds.watched`)."""
    start_state = place_state(client, state, home)
    if exchange == "stream" and getattr(strategy, "asynchronous", False):
        return streamasync.AsyncRounds(client, plan, shard_futures, strategy, net, tag, start_state, first, state, last)
    if exchange == "stream" and rule is not None:  # each slot's part of the verification set on its worker
        parts = None if verify is None else watched.Verification(client, watched.cut(verify, net, len(homes)), homes,
                                                                   tag)
        return watched.WatchedRounds(client, plan, shard_futures, strategy, net, tag, start_state, first, state, last,
                                     rule, parts, allreduce, homes)
    if exchange == "stream":
        kind = "local" if getattr(strategy, "shard_models", False) else "sync"
        return stream.StreamRounds(client, plan, shard_futures, strategy, net, tag, start_state, first, state,
                                   last, kind, allreduce)
    if exchange == "overlap":
        return overlap.OverlapRounds(client, plan, shard_futures, strategy, net, tag, start_state, first)
    if exchange == "tree":
        return graph.TreeRounds(client, plan, shard_futures, strategy, net, tag, start_state, first)
    return onehop.OneHopRounds(client, plan, shard_futures, strategy, net, tag, start_state, first, exchange)


def place_state(client, state, home: str | None):
    """``state`` scattered to the worker ``home`` (any worker where None). A worker gone a moment
    ago, still listed, makes the scheduler's scatter fail and close the head's connection (its
    handler ends on the worker's closed comm): while the scheduler still answers, that is
    :class:`ppt_dask.engine.waits.Unanswered` naming ``home``, a lost worker the run repairs,
    not a lost scheduler."""
    try:
        return client.scatter(state, hash=False, workers=None if home is None else [home])
    except (OSError, KeyError) as exc:  # its comm closed, a refused connection; KeyError: dropped now
        if home is None:
            raise
        # while the scheduler answers, home is gone (listed yet: the scheduler sees it a moment later)
        who, _ = waits.who_is_gone(client, [home], worker_addresses, blame_listed=True)
        if who != waits.WORKERS:
            raise
        raise waits.Unanswered([home], [exc]) from exc
