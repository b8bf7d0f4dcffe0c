"""scikit-learn estimators over the distributed trainer: PPTClassifier, PPTRegressor.

scikit-learn's contract (:mod:`ppt_dask.sklearn.contract`), without importing it. The
Dask client is looked up at ``fit`` time, never stored: the client of ``scheduler`` when
given, else the current client (``distributed.get_client()``), else a LocalCluster started
for this one ``fit`` and closed at its end (2-3 s of start-up on a small machine: start a
client first, ``ppt.connect()``, to reuse a cluster and watch its dashboard). Each ``fit``
places the training set once as logical shards (:func:`ppt_dask.enter_data`: for dask
arrays they are built on the workers, the data never comes here), trains, and releases
them. Prediction runs with numpy on the pulled weights, or block by block on the cluster
for a dask array.

>>> clf = ppt.PPTClassifier(random_state=0).fit(X, y)               # doctest: +SKIP
>>> clf.predict_proba(X_test).shape                                 # doctest: +SKIP
(10000, 10)
"""

from __future__ import annotations

import contextlib
import math
import numbers
import warnings
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.algorithms import choose
from ppt_dask.core import applicability, validation
from ppt_dask.core.metrics import r2_score
from ppt_dask.core.network import MLP
from ppt_dask.core.stopping import Stop
from ppt_dask.core.tree import split_rows
from ppt_dask.engine import cluster
from ppt_dask.engine.result import Outcome
from ppt_dask.engine.shards import enter_data, exit_data
from ppt_dask.engine.trainer import train
from ppt_dask.sklearn.contract import (ContractMixin, ConvergenceWarning, NotFittedError, check_X,
                                       check_y_labels, check_y_targets, distinct_labels, is_dask,
                                       n_features_message, seed_of, sklearn_class)
from ppt_dask.sklearn.epochs import EpochCurve, ToleranceRule

__all__ = ["PPTClassifier", "PPTRegressor", "NotFittedError"]

ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "logistic": "sigmoid"}  # scikit-learn's -> ours
AUTO_BATCH = {"local": 100}  # batch_size="auto" is min(AUTO_BATCH[strategy], n_samples) ...
AUTO_BATCH_OTHERS = 1000  # ... or this for the strategies not named there
PER_SHARD = {"ppt": "local_epoch", "average": "block", "local": "block"}  # size per shard
# The defaults that differ by strategy (graphs/estimator_race.py measured them on MNIST):
LOCAL_LR = 0.05  # learning_rate_init=None with "local" (0.1 ended at 97.0 %, 0.02 took 1.4x as long)
LOCAL_STEPS = 60  # local steps per round with "local", fewer when a shard is smaller (one epoch)
RESULT_TIMEOUT = 600.0  # seconds to wait for a small dask result (the labels of a dask y)


# ---- worker-side functions (module level: picklable, named on the dashboard) ---------------


def _encode_block(y, classes):
    return np.searchsorted(classes, y).astype(np.int64)


def _output_block(X, net: MLP, params, what: str, classes):
    """``what`` of the network on rows ``X``: "predict", "proba", "log_proba" or "values"."""
    validation.check_finite(X, "X")
    out = net.forward(params, X)
    if what == "predict":
        return classes[out.argmax(axis=1)]
    if what == "values":
        return out.ravel() if out.shape[1] == 1 else out
    return out if what == "proba" else np.log(out)


@dataclass
class _Run:
    """What a fit accumulates; set on the estimator only once the fit has succeeded."""

    params: np.ndarray | None
    losses: list = field(default_factory=list)
    epochs: int = 0
    patterns: int = 0
    history: list = field(default_factory=list)
    best: float = math.inf
    no_improvement: int = 0
    state: object = None  # weights and optimizer state of the last chunk, within one fit


def _epoch_losses(history: list[dict], epochs: int, complete: bool) -> list[float]:
    """Mean loss of each epoch (weighted by patterns) from the rounds of one train call.

    The asynchronous strategy counts only the patterns of the gradients it applied in
    ``epoch``: a ``complete`` run's records are spread over all its ``epochs``.
    """
    sums, counts = np.zeros(epochs), np.zeros(epochs)
    reached = history[-1].get("epoch", epochs) if history else epochs
    scale = epochs / reached if complete and 0 < reached < epochs else 1.0
    for i, record in enumerate(history):
        epoch = scale * record["epoch"] if "epoch" in record else (i + 1) * epochs / len(history)
        e = min(epochs - 1, max(0, math.ceil(epoch - 1e-9) - 1))
        sums[e] += record["loss"] * record.get("patterns", 1)
        counts[e] += record.get("patterns", 1)
    return [float(s / c) for s, c in zip(sums, counts) if c > 0]  # a diverged run ends early


# ---- the shared machinery ----------------------------------------------------------------


class _PPTBase(ContractMixin):
    """Parameters, the sklearn contract, the cluster, the training loop, prediction."""

    _output = "linear"  # the output layer; set by each estimator
    _default_lr = 0.1  # learning_rate_init=None means this
    _default_dtype = "float64"  # dtype=None means this

    def _dtype(self) -> str:
        return self._default_dtype if self.dtype is None else self.dtype

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, alpha=0.0001,
                 batch_size="auto", learning_rate_init=None, momentum=0.9, max_iter=200,
                 tol=1e-4, n_iter_no_change=10, random_state=None, warm_start=False,
                 verbose=False, strategy="local", strategy_params=None, n_shards=None,
                 n_workers=None, scheduler=None, dtype=None, fan_in=2):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.momentum = momentum
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.random_state = random_state
        self.warm_start = warm_start
        self.verbose = verbose
        self.strategy = strategy
        self.strategy_params = strategy_params
        self.n_shards = n_shards
        self.n_workers = n_workers
        self.scheduler = scheduler
        self.dtype = dtype
        self.fan_in = fan_in

    # -- hyper-parameters, checked before any cluster work --

    def _settings(self) -> dict:
        hidden = self.hidden_layer_sizes
        try:
            hidden = (hidden,) if isinstance(hidden, numbers.Integral) else tuple(hidden)
        except TypeError:
            raise ValueError(f"hidden_layer_sizes must be an int or a sequence of ints, got {hidden!r}") from None
        for width in hidden:
            validation.check_int_at_least("every entry of hidden_layer_sizes", width, 1)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if not (isinstance(self.batch_size, str) and self.batch_size == "auto"):
            validation.check_int_at_least("batch_size ('auto' or an integer)", self.batch_size, 1)
        lr = self.learning_rate_init
        if lr is None:
            lr = LOCAL_LR if self.strategy == "local" else self._default_lr
        validation.check_positive("learning_rate_init", lr)
        validation.check_nonneg("alpha", self.alpha)
        if validation.check_nonneg("momentum", self.momentum) >= 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        validation.check_int_at_least("max_iter", self.max_iter, 1)
        validation.check_nonneg("tol", self.tol)
        validation.check_int_at_least("n_iter_no_change", self.n_iter_no_change, 1)
        for name in ("n_shards", "n_workers"):
            if getattr(self, name) is not None:
                validation.check_int_at_least(name, getattr(self, name), 1)
        validation.check_int_at_least("fan_in", self.fan_in, 2)
        validation.check_dtype("dtype", self.dtype, allow_none=True)
        if self.scheduler is not None:
            cluster.check_address(self.scheduler)
        extra = {} if self.strategy_params is None else self.strategy_params
        if not isinstance(extra, dict) or not isinstance(self.strategy, str):
            raise ValueError(f"strategy must be a name and strategy_params a dict or None, got "
                             f"{self.strategy!r} and {self.strategy_params!r}")
        self._refuse_inapplicable(extra)
        settings = {"hidden": hidden, "extra": extra, "seed": seed_of(self.random_state),
                    "optimizer": {"lr": lr, "momentum": self.momentum, "l2": self.alpha}}
        self._strategy(settings, batch=1, n_shards=1)  # the strategy checks its own parameters
        return settings

    def _refuse_inapplicable(self, extra: dict) -> None:
        """What does not apply to the strategy is refused (:mod:`ppt_dask.core.applicability`)."""
        if self.strategy not in applicability.STRATEGIES:
            return  # choose.make names the choices
        size = PER_SHARD.get(self.strategy, "block")
        for key in extra:
            if key not in applicability.STRATEGY_OWN:
                raise ValueError(f"strategy_params[{key!r}] is not a parameter of a strategy; "
                                 f"they are {', '.join(applicability.STRATEGY_OWN)}")
            if key == size and self.batch_size != "auto":
                raise ValueError(f"strategy_params[{key!r}] and batch_size={self.batch_size!r} both set "
                                 "the size of a block: give one")
        applicability.refuse(self.strategy, {k: v for k, v in extra.items() if k != size},
                             spell=lambda k: f"strategy_params[{k!r}]")
        if self.strategy == "epoch" and self.batch_size != "auto":
            raise ValueError(f"batch_size={self.batch_size!r} applies to strategy block, ppt, average, "
                             "local, async, not to strategy epoch (each update sees the whole set)")

    def _default_shards(self, n_workers: int, n_rows: int, batch: int) -> int:
        """``n_shards=None``: one shard per worker, except for "local" on a set smaller than
        ``LOCAL_STEPS`` batches. There no shard can take a full round of steps, a round is
        short beside the exchange of its average, and one shard's rounds need none (on
        scikit-learn's digits, 200 epochs: 1.6-1.7 s on one shard, 2.4-2.5 s on two)."""
        if self.strategy == "local" and n_rows < LOCAL_STEPS * batch:
            return 1
        return max(1, n_workers)

    def _strategy(self, settings: dict, batch: int, n_shards: int, n_rows: int | None = None):
        """The strategy for ``batch`` patterns per update over all shards (of ``n_rows``)."""
        size = max(1, batch // n_shards) if self.strategy in PER_SHARD else batch
        sizes = {PER_SHARD.get(self.strategy, "block"): size, **settings["extra"]}
        if self.strategy == "local" and n_rows is not None and "interval" not in sizes:
            # LOCAL_STEPS steps between averages, but no more than a pass over the smallest
            # shard: a round then ends within an epoch, so that max_iter epochs are never
            # overrun by more than a round and every epoch has a loss of its own
            block = sizes["block"]
            steps = max(1, min(LOCAL_STEPS, (n_rows // n_shards) // block))
            sizes["interval"] = steps * block
        try:
            return choose.make(self.strategy, **settings["optimizer"], **sizes)
        except TypeError as exc:
            raise ValueError(f"bad strategy_params {settings['extra']!r} for strategy "
                             f"{self.strategy!r}: {exc}") from None

    @classmethod
    def from_model(cls, model, **params):
        """A fitted estimator holding a saved model's weights (a :class:`ppt_dask.Model` or
        the path of a model file); ``params`` are constructor parameters for later fits."""
        from ppt_dask.engine.modelfile import fitted_estimator
        return fitted_estimator(cls, model, **params)

    # -- the cluster --

    @contextlib.contextmanager
    def _client(self):
        """The client of one fit: ``scheduler``'s, the current one, or a new LocalCluster."""
        from distributed import get_client

        if self.scheduler is not None:
            client, close = cluster.connect(self.scheduler), cluster.close
        else:
            try:
                client, close = get_client(), None
            except ValueError:  # no client around: a cluster for this fit only
                client, close = cluster.connect(n_workers=self.n_workers, dashboard_address=None), cluster.close
        try:
            yield client
        finally:
            if close is not None:
                close(client)

    # -- fitting --

    def fit(self, X, y):
        """Train from new weights (from the learned ones with ``warm_start``).

        Parameters
        ----------
        X : ndarray or dask array of shape (n_samples, n_features)
        y : ndarray or dask array of shape (n_samples,)
            Labels (numbers or strings) for the classifier; targets, also of shape
            (n_samples, n_outputs), for the regressor.

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y):
        """One more epoch on ``(X, y)`` from the current weights; returns self."""
        return self._fit(X, y, incremental=True)

    def _fit(self, X, y, *, incremental: bool, classes=None):
        settings = self._settings()
        X = check_X(X)
        n_rows, n_features = (int(d) for d in X.shape)
        continuing = hasattr(self, "params_") and (incremental or self.warm_start)
        if continuing and n_features != self.n_features_in_:
            raise ValueError(n_features_message(n_features, self, self.n_features_in_))
        y = self._check_y(y, n_rows, type(self).__name__)
        args = (continuing, incremental, classes)
        prepared = None if is_dask(y) else self._prepare(y, None, *args)  # errors before the cluster
        auto = AUTO_BATCH.get(self.strategy, AUTO_BATCH_OTHERS)
        batch = min(auto, n_rows) if self.batch_size == "auto" else self.batch_size
        if batch > n_rows:
            warnings.warn(f"batch_size ({batch}) is larger than the {n_rows} samples; clipped to {n_rows}",
                          UserWarning, stacklevel=3)
            batch = n_rows
        run = _Run(None)
        if continuing:  # partial_fit goes on with the tol bookkeeping; a warm fit starts it again
            run = _Run(self.params_, list(self.loss_curve_), self.n_iter_, self.t_, list(self.history_),
                       *((self.best_loss_, self._no_improvement_count) if incremental else ()))

        def network(n_outputs: int) -> MLP:
            net = MLP((n_features, *settings["hidden"], n_outputs), hidden=ACTIVATIONS[self.activation],
                      output=self._output, dtype=self._dtype())
            if continuing and net != self._net:
                raise ValueError(f"cannot continue training a {self._net.sizes} {self._net.hidden} "
                                 f"network as {net.sizes} {net.hidden}; fit from new weights")
            return net

        if prepared is not None:  # the architecture, checked before the cluster
            network(prepared[1])
        with self._client() as client:
            target, n_outputs, learned = prepared or self._prepare(y, client, *args)
            net = network(n_outputs)
            n_workers = len(cluster.worker_addresses(client))
            n_shards = min(self.n_shards or self._default_shards(n_workers, n_rows, batch), n_rows, batch)
            strategy = self._strategy(settings, batch, n_shards, n_rows)
            # the data-dependent checks of the strategy, before the data is placed
            strategy.check([b - a for a, b in split_rows(n_rows, n_shards)], settings["seed"])
            shards = enter_data(client, X, target, n_shards, dtype=self._dtype())
            try:
                self._train_loop(run, net, shards, strategy, 1 if incremental else self.max_iter,
                                 settings["seed"], tol_rule=not incremental)
            finally:
                exit_data(shards)

        for name, value in learned.items():
            setattr(self, name, value)
        self._net = net
        self.params_ = np.array(run.params, dtype=self._dtype())
        self.coefs_ = [W.copy() for W, _ in net.unflatten(self.params_)]
        self.intercepts_ = [b.copy() for _, b in net.unflatten(self.params_)]
        self.loss_curve_, self.best_loss_, self.n_iter_, self.t_ = run.losses, run.best, run.epochs, run.patterns
        self.history_, self._no_improvement_count = run.history, run.no_improvement
        self.n_features_in_, self.n_outputs_, self.n_layers_ = n_features, n_outputs, len(net.sizes)
        self.out_activation_ = "identity" if self._output == "linear" else self._output
        self.batch_size_, self.n_shards_ = batch, n_shards
        return self

    def _train_loop(self, run: _Run, net, shards, strategy, epochs: int, seed: int, *, tol_rule: bool):
        """Train up to ``epochs`` epochs into ``run`` in one :func:`ppt_dask.train` call.

        The rule is MLPClassifier's (``early_stopping=False``, :class:`ppt_dask.sklearn.epochs.ToleranceRule`):
        an epoch whose mean loss is not below the best loss so far minus ``tol`` counts as no
        improvement, and training stops once more than ``n_iter_no_change`` epochs in a row
        count. The trainer calls back after every round (``on_round``); the round that
        completes the rule's epoch stops the run there. The asynchronous strategy has no
        such call-back: its ``epochs`` all run and the rule only decides the warning. Without
        ``tol_rule`` (``partial_fit``) the rule's bookkeeping (``best_loss_``) goes on, as
        scikit-learn's, but does not stop the run.
        """
        rule = ToleranceRule(self.tol, self.n_iter_no_change, run.best, run.no_improvement)
        curve = EpochCurve(rule, on_epoch=self._print_epoch(run.epochs) if self.verbose else None)
        asynchronous = getattr(strategy, "asynchronous", False)
        result = train(net, shards, strategy, Stop(max_epochs=epochs), seed=seed, params=run.params,
                       fan_in=self.fan_in, progress=None,
                       on_round=None if asynchronous else curve.add if tol_rule else
                       lambda record: curve.add(record) and False)
        diverged = result.outcome is Outcome.DIVERGED
        if asynchronous:  # its records carry the epochs of the gradients it applied
            curve = EpochCurve(rule, on_epoch=curve.on_epoch)
            for loss in _epoch_losses(result.history, epochs, complete=not diverged):
                curve.add({"epoch": len(curve.losses) + 1, "loss": loss})
        elif diverged:
            curve.close_partial()
        run.params, run.state = result.params, result.state
        run.history += [{**r, "epoch": r.get("epoch", 0) + run.epochs} for r in result.history]
        run.patterns += int(sum(r.get("patterns", 0) for r in result.history))
        run.losses += curve.losses
        run.epochs += len(curve.losses)
        run.best, run.no_improvement = rule.best, rule.no_improvement
        if diverged:
            warnings.warn(f"training {result.stopped_because} (loss not finite); kept the last good "
                          "weights; scale the inputs and targets or lower learning_rate_init",
                          sklearn_class("ConvergenceWarning", ConvergenceWarning), stacklevel=4)
            return
        if tol_rule and curve.stopped_by_rule and not asynchronous:
            if self.verbose:
                print(f"Training loss did not improve more than tol={self.tol} for "
                      f"{self.n_iter_no_change} consecutive epochs. Stopping.")
            return
        if tol_rule and len(curve.losses) >= epochs and not curve.stopped_by_rule:
            warnings.warn(f"Maximum iterations ({epochs}) reached and the optimization hasn't converged yet.",
                          sklearn_class("ConvergenceWarning", ConvergenceWarning), stacklevel=4)

    @staticmethod
    def _print_epoch(before: int):
        def show(epoch: int, loss: float) -> None:
            print(f"Iteration {before + epoch}, loss = {loss:.8f}")
        return show

    # -- prediction --

    def _output_of(self, X, what: str, classes=None):
        """:func:`_output_block` on numpy X here, or on each row block of a dask X."""
        self._check_is_fitted()
        X = check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(n_features_message(X.shape[1], self, self.n_features_in_))
        if not is_dask(X):
            return _output_block(X, self._net, self.params_, what, classes)
        X = X.rechunk({1: -1})  # whole rows in every block; the weights go into the graph once
        if what == "predict" or (what == "values" and self.n_outputs_ == 1):
            return X.map_blocks(_output_block, self._net, self.params_, what, classes, drop_axis=1,
                                dtype=classes.dtype if what == "predict" else self._net.dtype)
        return X.map_blocks(_output_block, self._net, self.params_, what, classes, dtype=self._net.dtype,
                            chunks=(X.chunks[0], (self.n_outputs_,)))


_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : int or tuple of int, default=(100,)
        Widths of the hidden layers; ``()`` gives a network without hidden layer.
    activation : {"relu", "tanh", "logistic"}, default="relu"
        Activation of the hidden layers ("logistic" is the sigmoid).
    alpha : float, default=0.0001
        L2 penalty on the weights (not the biases), as scikit-learn's: a block of ``m``
        patterns steps along ``(sum of their gradients + alpha * W) / m``.
    batch_size : int or "auto", default="auto"
        Patterns per weight update over all shards (seed 001's block; for "local", "ppt"
        and "average" each shard takes ``batch_size // n_shards`` per step). "auto" is
        ``min(100, n_samples)`` for "local" (each worker steps on its own shard between
        averages, so small steps cost no scheduling) and ``min(1000, n_samples)`` for the
        others (a synchronous round costs milliseconds of scheduling besides compute,
        which 1000 patterns keep small on MNIST-sized networks). An integer is refused with
        "epoch" (each update sees the whole set).
    learning_rate_init : float or None, default=None
        Constant step size; None means 0.05 for "local", else {lr}. Scale the inputs (and,
        for regression, the targets): gradient descent with momentum diverges on unscaled
        data.
    momentum : float, default=0.9
        Heavy-ball momentum (not Nesterov), in [0, 1).
    max_iter : int, default=200
        Most epochs of ``fit``; ``partial_fit`` runs one epoch per call.
    tol : float, default=1e-4
        ``fit`` stops when for more than ``n_iter_no_change`` consecutive epochs the mean
        training loss has not fallen below the best so far minus ``tol``.
    n_iter_no_change : int, default=10
    random_state : None, int, RandomState or Generator, default=None
        Seeds the initial weights and the strategies' draws. With an int, a fit gives the
        same weights on any number of workers for a given ``n_shards``.
    warm_start, verbose : bool, default=False
        ``fit`` continues from the learned weights; print the loss of every epoch.
    strategy : str, default="local"
        A name for :func:`ppt_dask.algorithms.choose.make`: "local", "block", "epoch", "ppt",
        "average", "async". "local" (:class:`ppt_dask.algorithms.localsgd.LocalSGD`): every worker
        takes momentum steps on its own shard and the shards' weights are averaged every
        60 steps (at most one pass over a shard), the average arriving one round late so
        that the exchange hides behind the steps. On MNIST it reached MLPClassifier's test
        accuracy in less time than MLPClassifier (graphs/README.md, "PPTClassifier against
        MLPClassifier");
        "block" is synchronous SGD, every update waiting for all shards.
    strategy_params : dict or None, default=None
        More arguments of the strategy, for example ``{"interval": 6000}`` (patterns per
        shard between averages) for "local" or ``{"local_epochs": 2}`` for "average"; one
        that does not apply to the strategy is refused (:mod:`ppt_dask.core.applicability`).
    n_shards : int or None, default=None
        Logical shards of the training set; None: one per worker, but one for "local" on
        a set of fewer than ``60 * batch_size`` samples (too small for a round of 60 steps
        a shard: its rounds are short beside an exchange, and one shard needs none).
    n_workers : int or None, default=None
        Workers of the LocalCluster started when there is no client (None: one per core).
    scheduler : str or None, default=None
        Address of a scheduler to connect to for each fit, e.g. ``"tls://host:8786"``.
    dtype : {"float32", "float64"} or None, default=None
        The weights' and the arithmetic's. None: float32 for PPTClassifier (the same test
        accuracy on MNIST as float64 in about two thirds of the time), float64 for
        PPTRegressor (scikit-learn expects float64 predictions of a regressor).
    fan_in : int, default=2
        Children per task of the tree reduce.

    Attributes
    ----------
    {classes}coefs_ : list of ndarray
        ``coefs_[i]`` of shape (n_units_i, n_units_i+1): the weights of layer i.
    intercepts_ : list of ndarray
        ``intercepts_[i]`` of shape (n_units_i+1,).
    params_ : ndarray of shape (n_params,)
        Weights and biases as one flat vector, the trainer's layout.
    loss_curve_ : list of float
        Mean training loss of each epoch (without the L2 term); ``best_loss_`` its minimum.
    n_iter_ : int
        Epochs trained; ``t_`` the training patterns processed.
    n_features_in_, n_outputs_, n_layers_ : int
    out_activation_ : str
    batch_size_, n_shards_ : int
        The block size and the number of logical shards used.
    history_ : list of dict
        One record per round: loss, error rate, patterns, wall and head seconds.

    Notes
    -----
    scikit-learn's ``parametrize_with_checks`` passes with no check skipped or expected to
    fail by this estimator (scikit-learn itself skips ``check_estimators_data_not_an_array``
    with pandas objects when pandas is not installed, and ``check_array_api_input`` when
    ``SCIPY_ARRAY_API`` is not set). Where it differs from ``{sklearn}``: one solver,
    gradient descent with momentum and a constant step (a distributed round per block, or
    with "local" per ``interval`` patterns of each shard);
    ``partial_fit`` starts the momentum again from zero; ``loss_curve_`` leaves out the L2
    term. ``fit`` is one run of the trainer, stopped from inside at the epoch where the
    ``tol`` rule fires (the asynchronous strategy runs all ``max_iter`` epochs).
"""


class PPTClassifier(_PPTBase):
    __doc__ = """A multi-layer perceptron classifier trained data-parallel on a Dask cluster.

    Softmax output and cross-entropy loss, two outputs for two classes.
""" + _DOC.replace("{lr}", "0.3").replace("{sklearn}", "MLPClassifier").replace(
        "{classes}", "classes_ : ndarray of shape (n_classes,)\n"
                     "        The sorted labels; output k is the probability of ``classes_[k]``.\n    ")

    _output, _default_lr, _estimator_kind = "softmax", 0.3, "classifier"
    _default_dtype = "float32"  # the same test accuracy on MNIST as float64, in less time
    _check_y = staticmethod(check_y_labels)

    def _prepare(self, y, client, continuing: bool, incremental: bool, classes):
        """Labels encoded as 0..n_classes-1 (numpy, or a dask array mapped on the workers)."""
        found = y
        if is_dask(y):  # only the distinct labels come back
            found = client.compute(y.map_blocks(np.unique).rechunk(-1)).result(RESULT_TIMEOUT)
        found = distinct_labels(found)
        if continuing:
            known = self.classes_
            if classes is not None and not np.array_equal(np.unique(classes), known):
                raise ValueError(f"classes={classes!r} differs from the first call's {known!r}")
        elif incremental and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        else:
            known = found if classes is None else np.unique(np.asarray(classes))
        unseen = np.setdiff1d(found, known)
        if unseen.size:
            raise ValueError(f"y holds labels {unseen.tolist()} that are not in classes {known.tolist()}")
        if len(known) < 2:
            raise ValueError(f"y has only one class ({known.tolist()}); a classifier needs at least 2 classes")
        encoded = (y.map_blocks(_encode_block, known, dtype=np.int64) if is_dask(y)
                   else _encode_block(y, known))
        return encoded, len(known), {"classes_": known}

    def partial_fit(self, X, y, classes=None):
        """One more epoch from the current weights; ``classes`` (all labels) needed the first time."""
        return self._fit(X, y, incremental=True, classes=classes)

    def predict(self, X):
        """Labels of the rows of X, shape (n_samples,); a dask array for a dask X."""
        self._check_is_fitted()
        return self._output_of(X, "predict", self.classes_)

    def predict_proba(self, X):
        """Probabilities, shape (n_samples, n_classes), columns in ``classes_`` order."""
        return self._output_of(X, "proba")

    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`, shape (n_samples, n_classes)."""
        return self._output_of(X, "log_proba")

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on ``(X, y)`` (weighted by ``sample_weight``), a float."""
        right = self.predict(X) == (y if is_dask(y) else np.asarray(y).reshape(len(y), -1)[:, 0])
        right = right.compute() if is_dask(right) else right
        return float(np.average(right, weights=sample_weight))


class PPTRegressor(_PPTBase):
    __doc__ = """A multi-layer perceptron regressor trained data-parallel on a Dask cluster.

    Linear output and squared error (half the sum of squares per pattern, as
    MLPRegressor); one target or several.
""" + _DOC.replace("{lr}", "0.1").replace("{sklearn}", "MLPRegressor").replace("{classes}", "")

    _output, _default_lr, _estimator_kind, _multi_output = "linear", 0.1, "regressor", True
    _check_y = staticmethod(check_y_targets)

    def _prepare(self, y, client, continuing: bool, incremental: bool, classes):
        if continuing and y.shape[1] != self.n_outputs_:
            raise ValueError(f"y has {y.shape[1]} targets; the model was fitted with {self.n_outputs_}")
        return y, int(y.shape[1]), {}

    def predict(self, X):
        """Predictions, shape (n_samples,) for one target, else (n_samples, n_outputs)."""
        return self._output_of(X, "values")

    def score(self, X, y, sample_weight=None):
        """R^2 averaged over the targets, as scikit-learn's ``r2_score``: a float."""
        pred, y = (a.compute() if is_dask(a) else a for a in (self.predict(X), y))
        return r2_score(y, pred, sample_weight)
