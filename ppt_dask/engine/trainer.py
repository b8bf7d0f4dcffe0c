"""Train: the arguments checked, the tries of a run (restarts, a resumed checkpoint), its result.

Each try is the head's round loop (:mod:`ppt_dask.engine.roundloop`): rounds submitted
ahead, scalars read, a copy kept now and then, a lost worker recovered from.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable

import numpy as np

from ppt_dask.core import applicability, model, validation
from ppt_dask.core.model import Network
from ppt_dask.core.stopping import Stop
from ppt_dask.core.validation import check_int_at_least
from ppt_dask.engine import headblas, interrupt, loopenv, waits, watch
from ppt_dask.engine.placement.shards import ShardSet
from ppt_dask.engine.result import Outcome, Result, evaluate, test_error
from ppt_dask.engine.roundloop import End, Kept, Run, one_try
from ppt_dask.engine.rounds import choose, graph
from ppt_dask.engine.saving import checkpoint


def train(net: Network, shards: ShardSet, strategy, stop: Stop = Stop(), *, seed: int = 0,
          params: np.ndarray | None = None, fan_in: int = 2, pipeline: int = 1,
          progress: Callable[[dict], None] | None = None,
          on_round: Callable[[dict], bool | None] | None = None, snapshot_epochs: tuple = (),
          checkpoint_dir=None, checkpoint_every: int | None = None, resume: bool = False,
          initial_state=None, exchange: str = "auto", allreduce: str = "auto",
          reproducible: str | None = None, hang_seconds: float = 30.0,
          recorder: Callable | None = None) -> Result:
    """Train ``net`` on the placed ``shards`` with ``strategy`` until ``stop``.

    Each worker runs one loop over the rounds for its shards; the loops add their sums
    straight to each other along the fixed shard tree, and the head reads each round's
    numbers from the loops' mailboxes, checks ``stop``, keeps a copy of the weights now
    and then and recovers from a lost worker. What a seeded run repeats bit for bit is
    ``reproducible`` below (the user guide states both promises once:
    :ref:`Reproducibility <concepts-reproducibility>`).

    Parameters
    ----------
    net : a network of the model protocol (:class:`ppt_dask.core.model.Network`)
        :class:`ppt_dask.MLP`, :class:`ppt_dask.TorchNet`, or a model of your own; one that
        takes rows of any shape is fixed to the shards' (``with_row_shape``).
    shards : ShardSet
        From :func:`ppt_dask.enter_data`.
    strategy : Sync, PPT, Average, LocalSGD or Async
        What a round computes and how the parts become the next weights.
    stop : Stop
        Max epochs, target error (windowed estimate, then verified), restarts.
    seed : int
        Seeds the initial weights (try ``t`` of a restarted run uses ``seed + t``) and the
        strategies' random streams.
    params : ndarray, shape (net.n_params,), optional
        Initial weights (first try only).
    fan_in : int
        Children per node of the reduction tree (>= 2).
    pipeline : int
        Rounds submitted ahead of the one whose loss the head reads (>= 0).
    progress : bool or callable, optional
        True: show the progress (:mod:`ppt_dask.progress`: a widget in Jupyter, a bar on a
        terminal) with epochs, loss, error, patterns per second, time left and the run's
        ``/ppt`` link. A callable is called with each round's record instead.
    on_round : callable, optional
        Called with each round's record after the round's checks; when it returns True the
        run stops there, keeping the state after that round (``stopped_because="stopped"``).
    snapshot_epochs : tuple of float
        Epochs after which the head pulls a copy of the weights (``Result.snapshots``).
    checkpoint_dir : path, optional
        Write a checkpoint there with each of the head's copies of the state and at the end.
    checkpoint_every : int, optional
        Rounds between the head's copies of the state: what a run rolls back to when a
        worker is lost (and what is written to ``checkpoint_dir``). None: every 25 rounds,
        or less often where a copy would take more than 5% of the run's time (short rounds
        of a state spread over many workers: local SGD's shard models); the rounds replayed
        after a lost worker are as many, the result the same bits.
    resume : bool
        Continue from the checkpoint in ``checkpoint_dir`` when there is one.
    initial_state : ModelState, optional
        Weights *and* optimizer state to start from (a previous ``Result.state``), so a
        run continues another one without resetting momentum.
    exchange : {"auto", "all", "doubling", "tree", "stream"}
        How a round's partial sums meet. "stream" (the "auto" choice at any number of workers)
        runs one long task per worker for the whole run, whose sums go straight to the other
        workers (:mod:`ppt_dask.engine.rounds.stream`, no scheduler hop a round). The per-round graphs stay
        selectable to see what the head-worker arrangement costs: "all" and "doubling" run the
        reduce and the update inside the next round's gradient tasks (one scheduler hop per
        round; "doubling" pairs workers over ``log2 p`` hops,
        see :mod:`ppt_dask.engine.rounds.onehop`); "tree" is the explicit graph of map, reduce and
        update tasks (:mod:`ppt_dask.engine.rounds.graph`, three hops). For the local strategy
        (:class:`ppt_dask.LocalSGD`), "all" is one task per worker per round whose exchange
        overlaps the next round's local steps (:mod:`ppt_dask.engine.rounds.overlap`). The
        asynchronous strategy runs on streamed loops only (:mod:`ppt_dask.engine.rounds.streamasync`).
    allreduce : {"auto", "shared", "direct", "halving", "scatter"}
        The streamed rounds' allreduce (:mod:`ppt_dask.core.allreduce`): "shared", for workers
        of one host, passes the partial sums through shared memory and one worker adds them
        (a token a worker through the links a round); "direct" sends each
        worker's partial sums whole to every other worker (one message latency, ``(p - 1) w``
        values sent by each); "halving" and "scatter" a reduce-scatter then an all-gather (at
        most ``2 w`` values each, whatever ``p``), by recursive halving and doubling
        (``2 log2 p`` messages; a power-of-two number of workers holding equal blocks of
        shards, fan-in 2) or pairwise (``2 (p - 1)`` in two phases); "auto" takes "shared" where
        every worker holding shards is on one host (a LocalCluster, one machine's workers),
        else "direct" at 2 workers and for small networks, "scatter" beyond. The same bits
        every way. Streamed synchronous and local strategies only (the asynchronous loops send
        each gradient to every replica).
    reproducible : {"any-p", "same-p"}, optional
        What a seeded run repeats bit for bit. "any-p": the same weights on any number of
        workers (every logical shard's sums computed on their own, all of a worker's shards in
        one batched pass, added along the fixed shard tree). "same-p": the same weights on the
        same number of workers, through a lost worker and a resume: a worker computes its rows
        of a round in one pass, one partial a worker, added along a fixed tree over the workers
        (the same rows and the same sums as "any-p", rounded otherwise). None (the default):
        "same-p" for the strategies whose round is a gradient (epoch, block, ppt: it is the
        faster, see graphs/block_race.py), "any-p" for averaging and local SGD (a model per
        shard: the same bits on any number of workers at no cost); the asynchronous strategy
        promises neither, and either value is refused for it. ``Result.settings["reproducible"]``
        says what the run promised.
    hang_seconds : float
        A synchronous streamed run's loop that makes no progress for this long (or for 200 of
        the run's median rounds, if that is longer) while the others wait for it is hung: a
        stopped process, a stuck read, a call that never returns. The head names it (a
        ``RuntimeWarning`` and the run's ``recovered`` event), restarts its worker through
        the worker's nanny (so it cannot rejoin half-way) and goes on as from a lost worker,
        to the same weights where the run promised them.
    recorder : callable, optional
        ``recorder(client, run_id, settings)`` makes the run's watcher: its
        ``round_done(record)`` sees every round (on streamed rounds with each loop's timing of
        it under ``loops``), its ``finish()`` returns the run's records
        (``Result.diagnostics``: breakdown, report, trace). :func:`ppt_dask.train` passes the
        collector of :mod:`ppt_dask.observe`; None records nothing.

    Returns
    -------
    Result
        The trained weights (``params``), a record per round (``history``), why the run
        stopped and the time breakdown; ``result.save(path)`` keeps the model.

    Examples
    --------
    The 8-100-1 network of Dahl et al. (2008) learns 8-bit parity on two workers:

    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=4)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> stop = ppt.Stop(max_epochs=2000, target_error=0.0)
    >>> result = ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9), stop)
    >>> result.learned, result.stopped_because, result.train_error_rate
    (True, 'target_error', 0.0)
    >>> ppt.exit_data(shards)
    >>> client.close()
    """
    if progress is not None and not callable(progress):  # True, False, or refused
        return _with_display(dict(locals()))  # the first statement: locals() are the parameters
    # -- check everything before any cluster work --
    name = applicability.strategy_name(strategy)
    applicability.refuse(name, {  # refused, never ignored
        "exchange": exchange, "pipeline": pipeline, "checkpoint": checkpoint_dir, "resume": resume,
        "restarts": stop.restarts, "on_round": on_round, "snapshot_epochs": tuple(snapshot_epochs),
        "initial_state": initial_state})
    fan_in = check_int_at_least("fan_in", fan_in, 2)
    if isinstance(hang_seconds, bool) or not isinstance(hang_seconds, (int, float)) or not hang_seconds > 0:
        raise ValueError(f"hang_seconds must be a positive number of seconds, got {hang_seconds!r}")
    pipeline = check_int_at_least("pipeline", pipeline, 0)
    if checkpoint_every is not None:
        checkpoint_every = check_int_at_least("checkpoint_every", checkpoint_every, 1)
    choose.check_exchange(exchange)
    if resume and not checkpoint_dir:
        raise ValueError("resume=True needs checkpoint_dir")
    if checkpoint_dir:
        checkpoint.check_folder(checkpoint_dir)
    applicability.refuse_pipeline(name, exchange, pipeline)
    applicability.refuse_allreduce(name, exchange, allreduce)
    promise = applicability.reproducible_for(name, reproducible)
    net = model.check_network(model.for_rows(model.check_network(net), shards.row_shape))
    validation.check_network_fits(net, shards)
    validation.check_test_set(net, stop.test)
    strategy = strategy.check([i.stop - i.start for i in shards.info], seed, shards.replicated)
    if allreduce in ("halving", "shared"):  # refused here, not at the first round, where the layout does not allow it
        choose.choose_allreduce("stream", allreduce, graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in,
                                                                     whole=promise == "same-p"),
                                strategy, net, shards.colocated)
    if params is not None and np.shape(params) != (net.n_params,):
        raise ValueError(f"params has shape {np.shape(params)}; the network needs ({net.n_params},)")
    _send_network(shards, net)
    rounds_per_epoch = strategy.rounds_per_epoch(shards.n_rows)
    max_rounds = max(1, math.ceil(stop.max_epochs * rounds_per_epoch - 1e-9))
    if initial_state is not None:
        max_rounds += initial_state.round + 1
    run_id = uuid.uuid4().hex[:8]
    meta = {**model.describe(net), "strategy": repr(strategy), "rows": shards.n_rows,
            "shards": shards.n_shards, "fan_in": fan_in, "seed": seed, "reproducible": promise}
    saved = checkpoint.load(checkpoint_dir, meta) if (checkpoint_dir and resume) else None
    diag = watch.start(recorder, shards, run_id, watch.settings(net, shards, strategy, fan_in=fan_in,
                                                                pipeline=pipeline, seed=seed, exchange=exchange,
                                                                reproducible=promise))
    run = Run(net, shards, strategy, stop, fan_in, pipeline, exchange, allreduce, rounds_per_epoch, max_rounds,
               {max(1, round(e * rounds_per_epoch)) - 1: e for e in snapshot_epochs},
               checkpoint_every, meta, progress, on_round,
               checkpoint.Writer(checkpoint_dir, meta) if checkpoint_dir else None, diag, run_id,
               time.perf_counter(), reproducible=promise, hang_seconds=float(hang_seconds))

    try:
        return _tries(run, saved, initial_state, params, seed)
    except Exception as exc:
        lost = scheduler_lost(shards.client, exc, checkpoint_dir)
        if lost is None:
            raise
        raise lost from exc


def scheduler_lost(client, exc: BaseException, checkpoint_dir=None) -> waits.SchedulerLost | None:
    """``exc`` as a :class:`ppt_dask.engine.waits.SchedulerLost` when ``client`` lost its
    scheduler (:func:`ppt_dask.engine.waits.scheduler_gone`): one line naming the scheduler, its
    host, the error and the checkpoint to go on from; None when the scheduler is still there.
    The rounds of :func:`train` raise it, and so does the command line around the data's
    placing and release."""
    lost = waits.scheduler_gone(client, exc)
    if lost is None:
        return None
    cause = " ".join(str(exc).split()) or type(exc).__name__
    return waits.SchedulerLost(f"{lost}: {cause}; {_resume_note(checkpoint_dir)}")


def _resume_note(checkpoint_dir) -> str:
    """Where a run that cannot go on may be continued from."""
    if not checkpoint_dir:
        return "no checkpoint was kept (checkpoint_dir, --checkpoint DIR, keeps one to resume from)"
    saved = interrupt.saved_round(checkpoint_dir)
    if saved is None:
        return f"checkpoint {checkpoint_dir} holds none yet"
    return f"checkpoint {checkpoint_dir} holds round {saved} (go on with --resume, resume=True)"


def _tries(run: Run, saved, initial_state, params, seed: int) -> Result:
    """The run's tries (restarts), from the checkpoint, the initial state or new weights."""
    shards, net, strategy, stop = run.shards, run.net, run.strategy, run.stop
    attempt, end = 0, None
    with headblas.beside(shards.workers):  # the head's checks leave the workers their cores
        for attempt in range(saved["try"] if saved else 0, stop.restarts + 1):
            if saved:  # resume: the state after round saved["round"], and the history up to it
                run.history[:] = saved["history"]
                kept = Kept(saved["round"], saved["state"], len(run.history))
                saved = None
            elif initial_state is not None and attempt == 0:  # continue its round numbering
                kept = Kept(initial_state.round, initial_state, len(run.history))
            else:
                start = params if (params is not None and attempt == 0) else net.init_params(seed + attempt)
                kept = Kept(-1, strategy.init(np.asarray(start, dtype=net.dtype)), len(run.history))
            end = one_try(run, attempt, kept)
            if end.outcome is not Outcome.MAX_EPOCHS or stop.target_error is None:
                break
            run.gen += 1
        return _finish(run, attempt, end)


def _with_display(call: dict) -> Result:
    """:func:`train` with ``progress=True``: the progress display made for the run (it draws
    from the first round on) and closed with it; ``progress=False``: none."""
    progress = call["progress"]
    if progress is False:
        return train(**{**call, "progress": None})
    if progress is not True:
        raise ValueError("progress must be True (show the progress), False or None (nothing), or a callable "
                         f"taking each round's record; got {progress!r}")
    from ppt_dask.engine.placement.cluster import page_url
    from ppt_dask.progress import Training

    client = call["shards"].client
    display = Training(call["stop"].max_epochs, link=lambda: page_url(client))
    result = None
    try:
        result = train(**{**call, "progress": display})
    finally:
        display.close(result)
    return result
def _network_size(net) -> int:
    return int(net.n_params)


def _send_network(shards: ShardSet, net) -> None:
    """Every worker of the shards unpickles the network once before the clock starts, as the
    data was placed before it: a TorchNet imports torch there and builds its module (seconds
    on a busy machine that the first rounds would otherwise wait for); the MLP costs nothing."""
    shards.client.run(_network_size, net, workers=list(dict.fromkeys(shards.workers)))


def _finish(run: Run, attempt: int, end: End) -> Result:
    shards, net, stop = run.shards, run.net, run.stop
    final = end.state
    if run.on_keep is not None:
        run.on_keep(final, end.round, attempt, run.history)
    wall = time.perf_counter() - run.t_start
    records = run.diag.finish()
    train_stats = evaluate(net, shards, final.params, run.fan_in)
    test_accuracy = None if stop.test is None else 1.0 - test_error(net, final.params, stop.test)
    epochs = int((run.history.column("try") == attempt).sum()) / run.rounds_per_epoch
    return Result(net, final.params, run.history, run.strategy, end.learned, end.outcome.words(end.where),
                  epochs, wall, run.head_seconds, float(train_stats[0] / train_stats[2]),
                  float(train_stats[1] / train_stats[2]), test_accuracy,
                  {"workers": len(shards.worker_blocks()), "shards": shards.n_shards,
                   "fan_in": run.fan_in, "pipeline": run.pipeline, "exchange": run.used_exchange,
                   "allreduce": run.used_allreduce, "reproducible": run.reproducible,
                   "seed": run.meta["seed"], "target_error": stop.target_error, "tries": attempt + 1,
                   "recoveries": run.recoveries, "events": run.events,
                   "worker_settings": loopenv.summary(run.worker_settings)},
                  run.snapshots, records, final, end.outcome)
