"""Local SGD whose average arrives one round late, so the exchange hides behind the steps.

Every shard keeps its own model: weights ``x_s`` and a momentum velocity ``v_s``. A round is
``k`` local momentum-SGD steps on mini-batches of ``block`` rows of the shard, walked in
order (``k = interval / block``). The shards' weights at the end of round ``r``, ``e_s^r``,
are averaged, weighted by the patterns each saw, into ``m^r``; that average is applied at
the start of round ``r + 2``, as the elastic correction

    x_s <- x_s + pull * (m^(r) - e_s^(r))

so while round ``r``'s results travel and are combined, the shards already run round
``r + 1`` (the exchange overlaps ``k`` local steps; a worker waits for the hop only when
its ``k`` steps take less time than the hop). This is the anchor pull of Elastic Averaging
SGD (Zhang, Choromanska & LeCun, "Deep learning with Elastic Averaging SGD", NIPS 2015)
with the one-round delay of Overlap Local-SGD (Wang, Liang & Joshi, "Overlap Local-SGD: An
Algorithmic Approach to Hide Communication Delays in Distributed SGD", ICASSP 2020; also
CoCoD-SGD, Shen et al., IJCAI 2019). The gap ``m^r - e_s^r`` is taken at the same round on
both sides, so local steps made since are kept; with ``pull = 1`` a shard would jump to
where the average was two rounds ago, plus its own progress since, which we found unstable
at small ``k`` and high learning rates; ``pull = 0.5`` was stable and converged per epoch
like synchronous SGD on MNIST (graphs/README.md). The velocity stays with its shard
(averaging it, 001's section VII practice for weights only, made no difference once the
weights are pulled together).

With ``compensate=True`` the gap is taken from where the shard *started* round ``r - 1``,
``st_s^(r-1)`` (its weights after that round's correction), not from where it ended round
``r - 2``:

    x_s <- x_s + pull * (m^(r) - st_s^(r+1))        (at the start of round r + 2)

With ``pull = 1`` a shard then starts from the average plus its own progress in the round
it has run since, the update of CoCoD-SGD (Shen et al. 2019, Algorithm 1). The plain
correction applies the gap of round ``r`` although the shard already closed part of the
gap of round ``r - 1`` at the start of round ``r + 1``: a shard's offset from the mean
follows ``d^(r+1) = d^r - pull d^(r-1) + noise``, which decays by at most ``sqrt(pull)``
a round (for ``pull`` 1 not at all). The compensated one follows
``d^(r+1) = (1 - pull) d^r + noise``: with ``pull = 1`` the offset is the last round's
own steps only, as in local SGD that averages without delay. That matters when many
shards take few steps each (8 shards of MNIST: graphs/README.md, "Settings chosen by
the number of workers"); the mean of the shards is the same under both.

The model a run reports after round ``r`` is ``m^r``, or with ``ema = b > 0`` the exponential
moving average of the averages, ``a^r = b a^(r-1) + (1 - b) m^r``: Polyak-Ruppert averaging
(Polyak & Juditsky, "Acceleration of stochastic approximation by averaging", SIAM J.
Control Optim. 1992), in its exponential form (PyTorch's ``AveragedModel`` with an EMA
function, TensorFlow's ``ExponentialMovingAverage``). It does not change the training,
only the weights reported and tested; on MNIST it reached 97% test accuracy at 4.2-5.2
epochs where ``m^r`` did at 6-7 (b = 0.5, seeds 0-3, graphs/README.md). Every worker
advances the mean at round ``r`` with the average it takes then (``a^(r-2)``), so the state
after round ``r`` holds ``a^(r-2)`` and reports ``a^r`` from it and ``m^(r-1)``, ``m^r``.

Everything a shard holds is a plain value in the state (:class:`ShardModel`), so the
head's kept copy has every shard's model and a run rolled back after a lost worker replays
bitwise; the average is combined along the fixed shard tree, so runs are bitwise equal on
any number of workers.

Pure numpy: no dask import. The rounds run on the cluster as one long task per worker
(:mod:`ppt_dask.engine.rounds.stream`, the default) or one task per worker per round
(:mod:`ppt_dask.engine.rounds.overlap`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppt_dask.algorithms.strategies import ModelState, _Base, block_rows
from ppt_dask.core import model as netmodel
from ppt_dask.core import tree
from ppt_dask.core.optimizers import adam_step, exact_scalar
from ppt_dask.core.validation import check_int_at_least


def momentum_step(params, velocity, grad_sum, count, lr: float, momentum: float, l2: float, mask) -> None:
    """:func:`ppt_dask.core.optimizers.sgd_step` in place (the same operations in the same order,
    so the same bits), for the local loop's many small steps: ``grad_sum`` is used up."""
    if l2:
        grad_sum += l2 * (mask * params)
    grad_sum /= exact_scalar(count, grad_sum.dtype)
    velocity *= momentum
    grad_sum *= lr  # in place: the same products as ``lr * grad_sum``, without a temporary
    velocity -= grad_sum
    params += velocity


@dataclass
class ShardModel:
    """One shard's own model between rounds.

    ``sent`` holds the shard's weights at the end of the last two rounds ``(e^(r-1), e^r)``
    (None before there were any): the correction of round ``r + 1`` needs ``e^(r-1)``; with
    ``compensate`` its first entry is instead where the shard started round ``r``,
    ``st^r``, the anchor of that correction.
    With Adam, ``velocity`` is the first moment, ``second`` the second and ``steps`` the
    steps taken (the bias correction's ``t``).
    """

    params: np.ndarray
    velocity: np.ndarray
    sent: tuple = (None, None)
    second: np.ndarray | None = None
    steps: int = 0


@dataclass(frozen=True)
class LocalSGD(_Base):
    """Local SGD with momentum, the average applied one round late.

    Each shard keeps its own model and momentum and takes ``interval / block`` local steps
    a round; the workers' weights are averaged (the weight averaging of Mörchen (2004),
    section VII), and the average of round ``r`` is applied in round ``r + 2`` as a pull
    toward it, so the exchange overlaps the next round's steps (as Overlap Local-SGD and
    CoCoD-SGD do). The same weights, to the bit, on any number of workers.

    Parameters
    ----------
    lr : float
        Learning rate of the local steps, > 0.
    momentum : float
        Momentum coefficient of the local steps, in [0, 1) (Adam's ``beta1`` with
        ``solver="adam"``).
    l2 : float
        L2 penalty on the weights (not the biases), >= 0.
    block : int
        Rows per local step (the local mini-batch).
    interval : int or None
        Patterns per shard between averages (the *a* of Mörchen (2004));
        ``k = interval / block`` local steps per round. Default: 30 steps.
    pull : float
        The share of the gap to the average a shard closes, in (0, 1].
    ema : float
        The weight of the running mean in the reported model, in [0, 1): 0 reports the
        last average ``m^r``; ``b`` reports ``a^r = b a^(r-1) + (1 - b) m^r``.
    solver : {"sgd", "adam"}
        The local steps: SGD with momentum, or Adam (:func:`ppt_dask.core.optimizers.adam_step`,
        ``momentum`` its ``beta1``), each shard keeping its own moments.
    shuffle : bool
        Walk each pass over a shard in a new random order (seeded by the run's seed, the
        shard and the pass: the same on any worker), as scikit-learn's ``shuffle=True``;
        else in the shard's order, every pass alike.
    compensate : bool
        Take the gap to the average from where the shard started the round it has run
        since (CoCoD-SGD's update with ``pull = 1``; see the module docstring), not from
        where it ended the averaged round.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> strategy = ppt.LocalSGD(lr=0.2, momentum=0.8, block=100, interval=6000, pull=0.5)
    >>> strategy.name, strategy.interval // strategy.block    # local steps a round
    ('local', 60)
    """

    block: int = 100
    interval: int | None = None
    pull: float = 0.5
    ema: float = 0.0
    solver: str = "sgd"
    shuffle: bool = False
    compensate: bool = False

    name = "local"
    shard_models = True  # every shard keeps a model of its own (ppt_dask.engine.rounds.stream, .overlap)

    def __post_init__(self):
        super().__post_init__()
        check_int_at_least("block", self.block, 1)
        if self.interval is not None:
            check_int_at_least("interval", self.interval, 1)
        if not (isinstance(self.pull, (int, float)) and 0 < self.pull <= 1):
            raise ValueError(f"pull must be in (0, 1], got {self.pull!r}")
        if not (isinstance(self.ema, (int, float)) and not isinstance(self.ema, bool) and 0 <= self.ema < 1):
            raise ValueError(f"ema must be in [0, 1), got {self.ema!r}")
        if self.solver not in ("sgd", "adam"):
            raise ValueError(f"solver must be 'sgd' or 'adam', got {self.solver!r}")
        if not isinstance(self.shuffle, bool):
            raise ValueError(f"shuffle must be True or False, got {self.shuffle!r}")
        if not isinstance(self.compensate, bool):
            raise ValueError(f"compensate must be True or False, got {self.compensate!r}")

    def check(self, shard_rows, seed: int = 0, replicated: bool = False) -> LocalSGD:
        if replicated:
            raise ValueError("the local strategy needs disjoint shards (replicate=False)")
        if self.block > min(shard_rows):
            raise ValueError(f"block ({self.block}) is larger than the smallest shard ({min(shard_rows)} rows)")
        return super().check(shard_rows, seed, replicated)

    def steps(self) -> int:
        """Local steps per round."""
        return 30 if self.interval is None else max(1, -(-self.interval // self.block))

    def rounds_per_epoch(self, n_rows: int) -> float:
        return n_rows / (self.steps() * self.block * self.n_shards)

    def init(self, params: np.ndarray) -> ModelState:
        """The state before round 0: every shard starts from ``params``, no averages yet."""
        return ModelState(params, {"models": {}, "averages": {}, "mean": None}, round=-1)

    def model_of(self, state: ModelState, s: int) -> ShardModel:
        """Shard ``s``'s model in ``state`` (a fresh one before its first round)."""
        model = state.opt_state["models"].get(s)
        if model is None:
            second = np.zeros_like(state.params) if self.solver == "adam" else None
            return ShardModel(state.params.copy(), np.zeros_like(state.params), second=second)
        return model

    def local_round(self, net, model: ShardModel, average, shard, s: int, r: int) -> tuple:
        """Round ``r`` on shard ``s``: the late correction, then ``k`` local steps.

        ``average`` is ``m^(r-2)`` (None while there is none). Returns the new
        :class:`ShardModel` and the partial ``(n * weights, [loss_sum, n_wrong, n])``.
        """
        X, y = shard
        params = model.params
        if average is not None and model.sent[0] is not None:
            params = params + params.dtype.type(self.pull) * (average - model.sent[0])
        else:
            params = params.copy()
        start = params.copy() if self.compensate else None  # the anchor of round r + 2's correction
        velocity = model.velocity.copy()  # the model passed in stays as it was (a replay reads it)
        second = None if model.second is None else model.second.copy()
        mask = netmodel.weight_mask(net) if self.l2 else None
        stats = np.zeros(3)
        steps = self.steps()
        grad_stats = netmodel.passes(net, params, X, y)  # checks and views once a round, not once a step
        walk = self._walk(len(X), s)
        for i in range(steps):
            grad_sum, step_stats = grad_stats(walk(r * steps + i))
            stats += step_stats
            if second is None:
                momentum_step(params, velocity, grad_sum, step_stats[2], self.lr, self.momentum, self.l2, mask)
            else:
                adam_step(params, velocity, second, model.steps + i + 1, grad_sum, step_stats[2], self.lr,
                          self.momentum, self.l2, mask)
        done = ShardModel(params, velocity, (start if self.compensate else model.sent[1], params), second,
                          model.steps + steps)
        return done, (params * params.dtype.type(stats[2]), stats)

    def _walk(self, n_rows: int, s: int):
        """``step -> rows`` of shard ``s``: blocks in order, or (``shuffle``) blocks of a new
        permutation each pass, drawn from ``(seed, shard, pass)``."""
        if not self.shuffle or self.block >= n_rows:
            return lambda step: block_rows(n_rows, self.block, step)
        orders: dict = {}

        def rows(step: int) -> np.ndarray:
            p, offset = divmod(step * self.block, n_rows)
            if offset + self.block <= n_rows:  # within one pass: a slice of its order
                if p not in orders:
                    orders[p] = np.random.default_rng([self.seed, s, p]).permutation(n_rows)
                return orders[p][offset:offset + self.block]
            at = step * self.block + np.arange(self.block)
            passes, offsets = np.divmod(at, n_rows)
            for p in np.unique(passes).tolist():
                if p not in orders:
                    orders[p] = np.random.default_rng([self.seed, s, p]).permutation(n_rows)
            return np.concatenate([orders[p][offsets[passes == p]] for p in np.unique(passes).tolist()])
        return rows

    @staticmethod
    def average_of(total: tuple) -> np.ndarray:
        """``m``: the patterns-weighted mean of the shards' weights, from the tree total."""
        weighted, stats = total
        return weighted / weighted.dtype.type(stats[2])

    def mean_with(self, mean, average):
        """The running mean after one more average: ``b * mean + (1 - b) * average`` (the
        average itself when there is no mean yet; None when ``ema`` is 0 or there is no
        average yet)."""
        if not self.ema:
            return None
        if average is None:
            return mean
        if mean is None:
            return average.copy()
        b = average.dtype.type(self.ema)
        return b * mean + (average.dtype.type(1) - b) * average

    def after(self, models: dict, averages: dict, stats, r: int, mean=None) -> ModelState:
        """The state after round ``r``: every shard's model, the averages still to apply and
        the running mean ``a^(r-2)``; it reports ``m^r``, or with ``ema`` the mean ``a^r``."""
        reported = averages[r]
        if self.ema:
            reported = self.mean_with(self.mean_with(mean, averages.get(r - 1)), averages[r])
        return ModelState(reported, {"models": dict(sorted(models.items())),
                                     "averages": {k: averages[k] for k in (r - 1, r) if k in averages},
                                     "mean": mean}, stats, r)


def block_round(strategy: LocalSGD, net, models: dict, average, shards: list, shard_ids: tuple, nodes: tuple,
                r: int, fan_in: int, n_shards: int) -> tuple:
    """Round ``r`` on one worker's block of shards (``shard_ids``, their data in ``shards``):
    the shards' new models and the partial sums of the block's subtrees ``nodes``, combined
    along the fixed shard tree."""
    position = {s: i for i, s in enumerate(shard_ids)}
    done, leaves = {}, {}

    def leaf(s: int) -> tuple:
        if s not in leaves:
            done[s], leaves[s] = strategy.local_round(net, models[s], average, shards[position[s]], s, r)
        return leaves[s]

    partial = {node: tree.evaluate(node, leaf, fan_in, n_shards) for node in nodes}
    return done, partial


def round_stats(logs: list, fan_in: int, n_shards: int) -> list:
    """Per round, the stats ``[loss_sum, n_wrong, n]`` added in tree order from every
    worker's logged subtrees (``logs``: per worker, per round, {tree node: (stats,)}, the
    stats an array or a list of floats)."""
    return [tree.evaluate_owned({node: (np.asarray(value[0], dtype=np.float64),)
                                 for node, value in tree.merged(rounds).items()}, fan_in, n_shards)[0]
            for rounds in zip(*logs)]


def state_after(strategy: LocalSGD, r: int, models: dict, partial: dict, previous: dict | None, pending,
                fan_in: int, n_shards: int, mean=None) -> ModelState:
    """The state after round ``r`` from every shard's model and the tree's partial sums of
    round ``r`` (``partial``) and ``r - 1`` (``previous``; where None, ``pending`` is
    ``m^(r-1)`` or None); ``mean`` is the running mean ``a^(r-2)`` the workers hold."""
    total = tree.evaluate_owned(partial, fan_in, n_shards)
    averages = {r: strategy.average_of(total)}
    if previous:
        averages[r - 1] = strategy.average_of(tree.evaluate_owned(previous, fan_in, n_shards))
    elif pending is not None:
        averages[r - 1] = pending
    return strategy.after(models, averages, total[-1], r, mean)


def train_serial(net, shards: list, strategy: LocalSGD, state: ModelState, rounds: int,
                 fan_in: int = 2) -> tuple:
    """The serial reference of :class:`LocalSGD`: ``rounds`` rounds from ``state``.

    Returns the state after the last round and the per-round total stats."""
    models = {s: strategy.model_of(state, s) for s in range(len(shards))}
    averages = dict(state.opt_state["averages"])
    mean = state.opt_state.get("mean")
    history = []
    for r in range(state.round + 1, state.round + 1 + rounds):
        mean = strategy.mean_with(mean, averages.get(r - 2))  # a^(r-2), as the workers advance it
        parts = []
        for s, shard in enumerate(shards):
            models[s], part = strategy.local_round(net, models[s], averages.get(r - 2), shard, s, r)
            parts.append(part)
        total = tree.reduce_serial(parts, fan_in)
        averages[r] = strategy.average_of(total)
        state = strategy.after(models, averages, total[-1], r, mean)
        history.append(total[-1])
    return state, history
