"""Asynchronous SGD with bounded staleness (seed 003; Downpour and Hogwild! in 004's
references): what each worker's replica computes and applies. Pure numpy: no dask import.

No global barrier and no parameter server. Every worker slot keeps a *replica* of the model
(weights and momentum velocity). One step of a slot:

1. the gradient of ``block`` patterns of its shards (split over them, each walked in order)
   at its replica's weights;
2. every gradient of another slot that has arrived meanwhile, applied as one momentum-SGD
   step each (never waiting for one that has not);
3. its own gradient, applied as one more step and sent to every other slot, unless it is
   too stale for all of them (then it is dropped, here too).

Every replica applies the same gradients, in the order they reach it, so the replicas stay
close (the same steps in different orders), and a lost worker takes nothing with it that
another replica lacks, but for the gradient it was computing.

Staleness. A replica counts, per slot, the gradients it has taken (its *clock*); a gradient
carries the clock of the replica it was computed at. Its staleness where it arrives is the
number of gradients the receiving replica has taken that the sender's had not,
``sum_s max(0, mine[s] - theirs[s])``: the steps that went into the receiver's weights
since, which is what makes a gradient stale (Ho et al., "More Effective Distributed ML via a
Stale Synchronous Parallel Parameter Server", NIPS 2013, bound the same count). The bound is
kept where a gradient is made: a slot that has heard, by the time its gradient is done, that
every other replica has taken more than ``staleness`` gradients since it began, drops it (a
straggler's gradients, while it still takes the others' and so keeps up). Dropping it only
where it arrives would leave the replicas apart for good: see :meth:`Replica.take`.

Step size. Every gradient kept is applied at the full learning rate; what asynchrony needs
is less *momentum*. Asynchrony itself acts as momentum: under a queueing model of ``M``
workers the expected asynchronous SGD step is a momentum step with implicit momentum
``1 - 1/M`` (Mitliagkas, Zhang, Hadjis & Re, "Asynchrony begets Momentum, with an
Application to Deep Learning", Allerton 2016; Liu et al. 2018 show the same trade-off), so
the explicit momentum that works synchronously is too much here. On MNIST at two workers,
with the same long-run step ``lr / (1 - momentum) = 0.5``, 97% took a median 6.5 epochs with
momentum 0.9, 6.0 with 0.8, 5.2 with 0.6 and 4.5 with none (lr 0.5; synchronous SGD by
block 200, lr 0.1, momentum 0.9: 5.4): the command line's preset has none. Dividing the
rate of a gradient of staleness ``tau`` by ``tau`` (Zhang, Gupta, Lian & Liu,
"Staleness-aware Async-SGD for Distributed Deep Learning", IJCAI 2016) was slower there:
with staleness 1 to 3 it mostly halves the others' gradients. graphs/README.md
("Asynchronous training") has the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from ppt_dask.algorithms.strategies import ModelState, _Base, block_rows, shard_share
from ppt_dask.core import model
from ppt_dask.core.optimizers import sgd_step
from ppt_dask.core.validation import check_int_at_least

# A round of the head is about this many patterns of updates (of any workers): the head's
# reading, checks and records then cost little beside the work of a round, as a synchronous
# round of block 1000 does on MNIST (60 rounds an epoch; see Async.updates_per_round)
ROUND_PATTERNS = 1000


@dataclass(frozen=True)
class Async(_Base):
    """Asynchronous SGD with bounded staleness: a replica per worker, no barrier.

    Training on stale gradients, as discussed in the Stack Exchange thread (2015) (Hogwild!,
    Downpour), with the bound of stale synchronous parallel: each worker keeps a replica,
    applies the others' gradients as they arrive and never waits. Its result depends on the
    order in which gradients arrive: it is not reproducible to the bit.

    Parameters
    ----------
    lr : float
        Learning rate of each gradient's step, > 0.
    momentum : float
        Momentum coefficient, in [0, 1); it runs across the replica's sequence of steps
        (see the module docstring for why it is set lower than for a synchronous run).
    l2 : float
        L2 penalty on the weights (not the biases), >= 0.
    block : int or None
        Patterns per update: each worker's gradient covers ``block`` patterns of its
        shards, split over them. None: each update is one whole shard (a worker takes its
        shards in turn).
    staleness : int
        The largest staleness a gradient may have (gradients the other replicas have taken
        that its maker's had not, as far as its maker has heard when it is done); its maker
        drops a staler one, for all replicas.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> strategy = ppt.Async(lr=0.2, block=100, staleness=3)
    >>> strategy.name, strategy.staleness
    ('async', 3)
    """

    block: int | None = None
    staleness: int = 8

    name = "async"
    asynchronous = True  # rounds: ppt_dask.engine.rounds.streamasync

    def __post_init__(self):
        super().__post_init__()
        if self.block is not None:
            check_int_at_least("block", self.block, 1)
        check_int_at_least("staleness", self.staleness, 0)

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> Async:
        if replicated:
            raise ValueError("the asynchronous strategy needs disjoint shards (replicate=False)")
        if self.block is not None and self.block > sum(shard_rows):
            raise ValueError(f"block ({self.block}) is larger than the training set ({sum(shard_rows)} rows)")
        return super().check(shard_rows, seed, replicated)

    def update_patterns(self) -> float:
        """Patterns an update covers (None: the mean shard)."""
        if self.block is not None:
            return float(self.block)
        return sum(self.shard_rows) / len(self.shard_rows)

    def updates_per_round(self) -> int:
        """Updates in a round of the head: about ``ROUND_PATTERNS`` patterns, and at least
        four rounds an epoch."""
        per_update = self.update_patterns()
        most = max(1, int(sum(self.shard_rows) // (4 * per_update)))
        return max(1, min(most, math.ceil(ROUND_PATTERNS / per_update)))

    def rounds_per_epoch(self, n_rows: int) -> float:
        return n_rows / (self.update_patterns() * self.updates_per_round())

    def step_rows(self, n_rows: int, i: int, k: int, step: int):
        """Rows of the ``i``-th of a worker's ``k`` shards (``n_rows`` rows) in its step
        ``step``; None when that shard has no part in the step."""
        if self.block is None:
            return slice(0, n_rows) if step % k == i else None
        share = shard_share(self.block, k, i)
        return block_rows(n_rows, share, step) if share else None

    def work(self, net, params, block, ids: tuple, step: int) -> tuple:
        """Gradient sum and stats ``[loss_sum, n_wrong, n]`` of ``block = (X, y)``: the rows
        the shards ``ids`` give to a step (:func:`step_gradient`)."""
        X, y = block
        return net.loss_grad_stats(params, X, y)


def step_gradient(strategy, net, params, shards: list, shard_ids, step: int) -> tuple:
    """One worker's gradient of a step: ``(grad_sum, stats)`` over the rows its ``shards``
    (the data of ``shard_ids``) give to step ``step``, in one pass.

    ``strategy`` is an :class:`Async`, or a test double around one: its ``work`` is called
    once, with the ids of the shards the rows come from."""
    k = len(shard_ids)
    taken = [(s, X[rows], y[rows]) for i, (s, (X, y)) in enumerate(zip(shard_ids, shards))
             if (rows := strategy.step_rows(len(X), i, k, step)) is not None]
    if len(taken) == 1:
        s, X, y = taken[0]
        return strategy.work(net, params, (X, y), (s,), step)
    X, y = np.concatenate([t[1] for t in taken]), np.concatenate([t[2] for t in taken])
    return strategy.work(net, params, (X, y), tuple(t[0] for t in taken), step)


@dataclass
class Gradient:
    """A gradient sent to the other replicas: who computed it, at which clock, on how many
    patterns."""

    slot: int
    clock: dict  # slot -> gradients of that slot the sender's replica had taken
    grad_sum: np.ndarray
    count: float


def staleness(mine: dict, theirs: dict) -> int:
    """Gradients in ``mine`` (a replica's clock) that ``theirs`` had not taken."""
    return sum(max(0, n - theirs.get(slot, 0)) for slot, n in mine.items())


@dataclass
class Replica:
    """One worker slot's replica: its state (weights, momentum), its clock, what it has heard
    of the others' clocks, its count of gradients dropped.

    Examples
    --------
    Two replicas take each other's gradient: the same two steps in the other order, which
    plain SGD (no momentum) makes the same weights.

    >>> from ppt_dask.core.network import MLP
    >>> net = MLP((2, 2), output="linear")
    >>> strategy = Async(lr=0.5).check([4, 4])
    >>> start = strategy.init(np.zeros(net.n_params))
    >>> a, b = Replica(strategy, net, start, 0), Replica(strategy, net, start, 1)
    >>> ga = a.own(np.ones(net.n_params), np.array([0.0, 0.0, 2.0]), {})
    >>> gb = b.own(-3 * np.ones(net.n_params), np.array([0.0, 0.0, 1.0]), {})
    >>> a.take(gb), b.take(ga)  # each was computed before the other's step: staleness 1
    (1, 1)
    >>> bool(np.array_equal(a.state.params, b.state.params)), float(a.state.params[0])
    (True, 1.25)
    """

    strategy: Async
    net: object
    state: ModelState
    slot: int
    clock: dict = field(default_factory=dict)  # slot -> its gradients this replica has taken
    heard: dict = field(default_factory=dict)  # slot -> the newest clock of that slot's replica heard of
    dropped: int = 0

    def own(self, grad_sum: np.ndarray, stats, computed_at: dict) -> Gradient | None:
        """Apply this replica's own gradient, computed when its clock was ``computed_at``, and
        return the message to send the others; or drop it (None) when every other replica
        heard of has already taken more than ``staleness`` gradients since: the bound is kept
        at the source, where a gradient is dropped for all replicas at once (see :meth:`take`)."""
        if self.heard and all(staleness(theirs, computed_at) > self.strategy.staleness
                              for theirs in self.heard.values()):
            self.dropped += 1
            return None
        message = Gradient(self.slot, dict(computed_at), grad_sum, float(stats[2]))
        self._step(grad_sum, message.count, stats)
        self.clock[self.slot] = self.clock.get(self.slot, 0) + 1
        return message

    def take(self, message: Gradient) -> int:
        """Apply another replica's gradient; its staleness here.

        Every gradient that arrives is applied: one replica applying a gradient another drops
        would leave the two apart for good (their weights differ by that step from then on).
        On 8-bit parity at two workers, dropping on arrival at a bound of 2 or 4 dropped 5-10%
        of the gradients and the run no longer learned, where a bound of 16, which dropped
        none, learned. So the bound is kept by the sender (:meth:`own`), from what it has
        heard of the others' clocks; the staleness where a gradient lands can exceed it by the
        steps its receiver took since the sender last heard of it."""
        tau = staleness(self.clock, message.clock)
        self.clock[message.slot] = max(self.clock.get(message.slot, 0), message.clock.get(message.slot, 0) + 1)
        heard = {**message.clock, message.slot: message.clock.get(message.slot, 0) + 1}
        known = self.heard.get(message.slot, {})
        self.heard[message.slot] = {s: max(n, known.get(s, 0)) for s, n in {**known, **heard}.items()}
        self._step(message.grad_sum, message.count, self.state.stats)
        return tau

    def _step(self, grad_sum, count: float, stats) -> None:
        mask = model.weight_mask(self.net) if self.strategy.l2 else None
        params, opt_state = sgd_step(self.strategy.optimizer, self.state.params, grad_sum, count,
                                     self.state.opt_state, mask)
        self.state = replace(self.state, params=params, opt_state=opt_state, stats=np.asarray(stats))


# A worker slot whose gradients were dropped this often (a share of its steps) over a run is
# said to have been left out: its shards' rows were hardly learned
LEFT_OUT_SHARE = 0.5


class StaleGradientsWarning(UserWarning):
    """An asynchronous run dropped most of a worker's gradients as too stale.

    A worker more than ``staleness`` steps behind the others (a straggler) has its
    gradients dropped, and the rows of its shards go unlearned; :func:`ppt_dask.train`
    warns with this category at the end of such a run, naming the worker
    (``Result.dropped_shares()`` gives each worker's share).

    Examples
    --------
    Make the warning an error, to stop a pipeline that must learn every shard:

    >>> import warnings
    >>> import ppt_dask as ppt
    >>> warnings.simplefilter("error", ppt.StaleGradientsWarning)
    >>> warnings.resetwarnings()
    """


def dropped_shares(history: list[dict]) -> list[float] | None:
    """The share of each worker slot's steps whose gradient was dropped (too stale for all the
    others, or not sent to a peer that read too slowly), over the rounds of ``history`` (an
    asynchronous run's records: ``updates`` and ``dropped_by`` per slot); None for a run
    without them (a synchronous one) or without steps.

    A slot more than ``staleness`` steps behind the others (a straggler: a slower machine, a
    worker sharing its core) has its gradients dropped at the source, every one of them when
    it is that far behind all the time; the others never see the rows of its shards, whose
    weights then do not learn them (8-bit parity at two workers, staleness 2, one worker six
    times slower: not learned in 2000 epochs in 40 of 40 runs of a simulation; staleness 8:
    learned in a median 84 epochs).

    >>> dropped_shares([{"updates": [3, 1], "dropped_by": [0, 1]}, {"updates": [1, 1], "dropped_by": [0, 1]}])
    [0.0, 1.0]
    """
    rows = [r for r in history if "dropped_by" in r]
    if not rows:
        return None
    steps = np.sum([r["updates"] for r in rows], axis=0)
    dropped = np.sum([r["dropped_by"] for r in rows], axis=0)
    return [float(d / n) if n else 0.0 for d, n in zip(dropped, steps)]


def left_out(shares: list[float] | None, bound: str) -> str | None:
    """A sentence on the slots of ``shares`` (:func:`dropped_shares`) that had at least
    ``LEFT_OUT_SHARE`` of their gradients dropped, or None when none had; ``bound`` is the
    staleness bound as the reader set it (``staleness=2``, ``--staleness 2``).

    >>> left_out([0.0, 0.96], "staleness=2")  # doctest: +NORMALIZE_WHITESPACE
    'worker slot 1 had 96% of its gradients dropped as too stale (it ran more than staleness=2
    steps behind the others): the rows of its shards were hardly learned; a larger bound keeps them'
    """
    slow = [(i, share) for i, share in enumerate(shares or ()) if share >= LEFT_OUT_SHARE]
    if not slow:
        return None
    who = " and ".join(f"worker slot {i}" for i, _ in slow)
    shown = ", ".join(f"{share:.0%}" for _, share in slow)
    its, it = ("its", "it") if len(slow) == 1 else ("their", "they")
    return (f"{who} had {shown} of {its} gradients dropped as too stale ({it} ran more than "
            f"{bound} steps behind the others): the rows of {its} shards were hardly learned; "
            f"a larger bound keeps them")


def train_serial(net, shards: list, strategy: Async, state: ModelState, steps: int, first_step: int = 0) -> tuple:
    """The serial reference of one worker holding every shard: ``steps`` steps from ``state``
    (its steps numbered from ``first_step``). With one worker no gradient is ever stale, and
    the engine's run on one worker is this, bit for bit.

    Returns the replica's state after the last step and each step's stats."""
    replica = Replica(strategy, net, state, 0)
    history = []
    for t in range(first_step, first_step + steps):
        grad_sum, stats = step_gradient(strategy, net, replica.state.params, shards, tuple(range(len(shards))), t)
        replica.own(grad_sum, stats, dict(replica.clock))
        history.append(stats)
    return replica.state, history
