"""scikit-learn estimators over the distributed trainer: PPTClassifier, PPTRegressor.

They follow scikit-learn's estimator contract (``__init__`` stores its arguments
untouched; learned attributes end in ``_``; ``fit`` and ``partial_fit`` return ``self``)
without importing scikit-learn, which is only a test extra: ``get_params``/``set_params``
read the ``__init__`` signature as ``sklearn.base.BaseEstimator`` does, and
``__sklearn_tags__`` imports scikit-learn's tag classes only when scikit-learn itself
asks for them.

The Dask client is looked up at ``fit`` time, never stored: a client to ``scheduler``
when that address is given, else the current client (``distributed.get_client()``), else
a LocalCluster started for this one ``fit`` and closed at its end (about 2-3 s of start-up
on a small machine: start a client yourself, ``ppt.connect()``, to reuse one cluster
across fits and to watch the dashboard). The training set is placed once per ``fit`` as
logical shards (:func:`ppt_dask.enter_data`; for dask arrays the shards are built on the
workers and the data never reaches this process), trained with a strategy of
:mod:`ppt_dask.strategies`, and released (:func:`ppt_dask.exit_data`). Prediction runs
with numpy on the pulled weights, or block by block on the cluster for dask arrays.

>>> import numpy as np, ppt_dask as ppt                             # doctest: +SKIP
>>> client = ppt.connect(n_workers=2)                               # doctest: +SKIP
>>> clf = ppt.PPTClassifier(hidden_layer_sizes=(64, 64), activation="tanh",
...                         random_state=0).fit(X, y)              # doctest: +SKIP
>>> clf.predict_proba(X_test).shape                                 # doctest: +SKIP
(10000, 10)
"""

from __future__ import annotations

import contextlib
import inspect
import math
import numbers
import sys
import warnings
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from . import cluster, strategies, validation
from .network import MLP
from .shards import enter_data, exit_data
from .stopping import Stop
from .trainer import train
from .tree import split_rows

__all__ = ["PPTClassifier", "PPTRegressor", "NotFittedError"]

ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "logistic": "sigmoid"}  # sklearn name -> ours
AUTO_BATCH = 1000  # batch_size="auto": min(AUTO_BATCH, n_samples) patterns per update
RESULT_TIMEOUT = 600.0  # seconds to wait for a dask computation the estimator starts


# Errors and warnings: scikit-learn's own classes when scikit-learn is loaded (so code
# that catches them works), else these stand-ins with the same bases and names.
class NotFittedError(ValueError, AttributeError):
    """predict, score ... called before fit."""


class DataConversionWarning(UserWarning):
    """The input was converted (a column vector y was flattened)."""


class ConvergenceWarning(UserWarning):
    """max_iter was reached before the tol rule stopped training, or training diverged."""


def _sklearn_class(name: str, fallback: type) -> type:
    module = sys.modules.get("sklearn.exceptions")
    return getattr(module, name, fallback) if module is not None else fallback


def _is_dask(a) -> bool:
    return hasattr(a, "dask") and hasattr(a, "map_blocks") and hasattr(a, "chunks")


# ---- input checks (numpy only; nothing here touches the cluster) -----------------------


def _check_X_meta(X, name: str = "X"):
    """Shape and dtype checks shared by numpy and dask input, with sklearn's wording."""
    if getattr(X, "ndim", 2) != 2:
        raise ValueError(f"Expected a 2D array, got {name} of shape {tuple(X.shape)}. Reshape your data "
                         f"with {name}.reshape(-1, 1) for a single feature or {name}.reshape(1, -1) "
                         "for a single sample.")
    if any(isinstance(d, float) and math.isnan(d) for d in X.shape):
        raise ValueError(f"{name} has unknown chunk sizes {X.shape}; call {name}.compute_chunk_sizes() first")
    if np.dtype(X.dtype).kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {X.dtype}")
    if X.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={tuple(X.shape)}) while a minimum of 1 is required.")
    if X.shape[1] == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(X.shape)}) while a minimum of 1 is required.")
    return validation.check_X_meta(X, name)


def _check_X(X, name: str = "X"):
    """Features as a finite numeric 2-D ndarray, or a dask array checked by its metadata."""
    if X is None:
        raise ValueError(f"{name} is None; expected an array of shape (n_samples, n_features)")
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise ValueError(f"sparse input is not supported: {name} is a {type(X).__name__} of shape "
                         f"{X.shape}; convert it with {name}.toarray()")
    if _is_dask(X):
        return _check_X_meta(X, name)
    X = np.asarray(X)
    if X.dtype == object:
        X = X.astype(np.float64)  # a TypeError naming the entry if one is not a number
    _check_X_meta(X, name)
    return validation.check_X(X, name)


def _n_features_message(n: int, est, expected: int) -> str:
    return f"X has {n} features, but {type(est).__name__} is expecting {expected} features as input."


def _encode_block(y, classes):
    return np.searchsorted(classes, y).astype(np.int64)


def _output_block(X, net: MLP, params, what: str, classes):
    """Worker side of prediction on one row block of a dask array."""
    validation.check_finite(X, "X")
    out = net.forward(params, X)
    if what == "predict":
        return classes[out.argmax(axis=1)]
    if what == "values":
        return out.ravel() if out.shape[1] == 1 else out
    return out if what == "proba" else np.log(out)


def _seed(random_state) -> int:
    """An integer seed from None, an int, a RandomState or a Generator (sklearn's meaning)."""
    if random_state is None:
        return int(np.random.SeedSequence().generate_state(1)[0])
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    raise ValueError(f"random_state must be None, an int, a RandomState or a Generator, got {random_state!r}")


# ---- the shared machinery ----------------------------------------------------------------


class _PPTBase:
    """get/set_params, repr, the hyper-parameter checks and the training loop."""

    _output = "linear"  # set by the subclasses

    # -- the parameter contract (as sklearn.base.BaseEstimator) --

    @classmethod
    def _get_param_names(cls) -> list[str]:
        params = inspect.signature(cls.__init__).parameters.values()
        return sorted(p.name for p in params if p.name != "self" and p.kind != p.VAR_KEYWORD)

    def get_params(self, deep: bool = True) -> dict:
        """The constructor arguments (and, with ``deep``, those of nested estimators)."""
        out = {}
        for key in self._get_param_names():
            value = getattr(self, key)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{key}__{k}", v) for k, v in value.get_params().items())
            out[key] = value
        return out

    def set_params(self, **params):
        """Set constructor arguments (``name=value``, or ``nested__name=value``); returns self."""
        valid = self.get_params(deep=True)
        nested = defaultdict(dict)
        for key, value in params.items():
            key, delim, sub_key = key.partition("__")
            if key not in valid:
                raise ValueError(f"Invalid parameter {key!r} for estimator {type(self).__name__}. "
                                 f"Valid parameters are: {self._get_param_names()!r}.")
            if delim:
                nested[key][sub_key] = value
            else:
                setattr(self, key, value)
                valid[key] = value
        for key, sub_params in nested.items():
            valid[key].set_params(**sub_params)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        changed = [f"{k}={getattr(self, k)!r}" for k in self._get_param_names()
                   if repr(getattr(self, k)) != repr(defaults.get(k))]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "params_")

    def _check_is_fitted(self) -> None:
        if not hasattr(self, "params_"):
            raise _sklearn_class("NotFittedError", NotFittedError)(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with "
                "appropriate arguments before using this estimator.")

    def _tags(self, estimator_type: str, **kinds):
        from sklearn.utils import InputTags, Tags, TargetTags  # only scikit-learn calls this

        return Tags(estimator_type=estimator_type, input_tags=InputTags(),
                    target_tags=TargetTags(required=True, multi_output=self._output == "linear"),
                    **kinds)

    # -- hyper-parameters, checked before any cluster work --

    def _settings(self) -> dict:
        hidden = self.hidden_layer_sizes
        hidden = (hidden,) if isinstance(hidden, numbers.Integral) else hidden
        try:
            hidden = tuple(hidden)
        except TypeError:
            raise ValueError(f"hidden_layer_sizes must be an int or a sequence of ints, got {hidden!r}") from None
        for width in hidden:
            validation.check_int_at_least("every entry of hidden_layer_sizes", width, 1)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.batch_size != "auto":
            validation.check_int_at_least("batch_size ('auto' or an integer)", self.batch_size, 1)
        validation.check_int_at_least("max_iter", self.max_iter, 1)
        validation.check_nonneg("tol", self.tol)
        validation.check_int_at_least("n_iter_no_change", self.n_iter_no_change, 1)
        for name in ("n_shards", "n_workers"):
            if getattr(self, name) is not None:
                validation.check_int_at_least(name, getattr(self, name), 1)
        validation.check_int_at_least("fan_in", self.fan_in, 2)
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if self.scheduler is not None:
            cluster.check_address(self.scheduler)
        extra = self.strategy_params if self.strategy_params is not None else {}
        if not isinstance(extra, dict):
            raise ValueError(f"strategy_params must be a dict or None, got {extra!r}")
        if not isinstance(self.strategy, str):
            raise ValueError(f"strategy must be a strategy name, got {self.strategy!r}")
        validation.check_positive("learning_rate_init", self.learning_rate_init)
        validation.check_nonneg("alpha", self.alpha)
        validation.check_nonneg("momentum", self.momentum)
        if not self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        optimizer = {"lr": self.learning_rate_init, "momentum": self.momentum, "l2": self.alpha}
        try:  # the strategy validates its own parameters
            strategies.make(self.strategy, **optimizer, block=1, **extra)
        except TypeError as exc:
            raise ValueError(f"bad strategy_params {extra!r} for strategy {self.strategy!r}: {exc}") from None
        return {"hidden": hidden, "optimizer": optimizer, "extra": extra, "seed": _seed(self.random_state)}

    def _make_strategy(self, settings: dict, n_rows: int):
        batch = min(AUTO_BATCH, n_rows) if self.batch_size == "auto" else self.batch_size
        if batch > n_rows:
            warnings.warn(f"batch_size ({batch}) is larger than the {n_rows} samples; clipped to {n_rows}",
                          UserWarning, stacklevel=4)
            batch = n_rows
        strategy = strategies.make(self.strategy, **settings["optimizer"], block=batch, **settings["extra"])
        return strategy, batch

    # -- the cluster --

    @contextlib.contextmanager
    def _client(self):
        """The client for one fit: ``scheduler``'s, the current one, or a new LocalCluster."""
        if self.scheduler is not None:
            client = cluster.connect(self.scheduler)
            try:
                yield client
            finally:
                client.close()
            return
        from distributed import get_client

        try:
            client = get_client()
        except ValueError:  # no client around: start a cluster for this fit only
            client = None
        if client is not None:
            yield client
            return
        client = cluster.connect(n_workers=self.n_workers, dashboard_address=None)
        try:
            yield client
        finally:
            cluster.close(client)

    # -- fitting --

    def _fit(self, X, y, *, incremental: bool, classes=None):
        settings = self._settings()
        X = _check_X(X)
        n_rows, n_features = (int(d) for d in X.shape)
        continuing = hasattr(self, "params_") and (incremental or self.warm_start)
        if continuing and n_features != self.n_features_in_:
            raise ValueError(_n_features_message(n_features, self, self.n_features_in_))
        target, n_outputs, learned = self._targets(y, n_rows, continuing, incremental, classes)
        net = MLP((n_features, *settings["hidden"], n_outputs), hidden=ACTIVATIONS[self.activation],
                  output=self._output, dtype=self.dtype)
        if continuing and net != self._net:
            raise ValueError(f"cannot continue training: the network is now {net.sizes} {net.hidden}, "
                             f"it was {self._net.sizes} {self._net.hidden} (fit from scratch)")
        strategy, batch = self._make_strategy(settings, n_rows)
        if continuing:
            run = _Run(self.params_, list(self.loss_curve_), self.n_iter_, self.t_, list(self.history_),
                       self.best_loss_ if incremental else math.inf,
                       self._no_improvement_count if incremental else 0)
        else:
            run = _Run(None)

        with self._client() as client:
            n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
            wanted = self.n_shards if self.n_shards is not None else max(1, n_workers)
            n_shards = min(wanted, n_rows, batch) if strategy.name == "block" else min(wanted, n_rows)
            validation.check_n_shards(n_shards, n_rows)
            # data-dependent checks of the strategy (a local epoch larger than a shard ...)
            strategy.check([b - a for a, b in split_rows(n_rows, n_shards)], settings["seed"])
            shards = enter_data(client, X, target, n_shards, dtype=self.dtype)
            try:
                self._train_loop(run, net, shards, strategy, 1 if incremental else self.max_iter,
                                 settings["seed"], tol_rule=not incremental)
            finally:
                exit_data(shards)

        for name, value in learned.items():
            setattr(self, name, value)
        self._net = net
        self.params_ = np.array(run.params, dtype=self.dtype)
        layers = net.unflatten(self.params_)
        self.coefs_ = [W.copy() for W, _ in layers]
        self.intercepts_ = [b.copy() for _, b in layers]
        self.loss_curve_, self.best_loss_, self.n_iter_, self.t_ = run.losses, run.best, run.epochs, run.patterns
        self.history_, self._no_improvement_count = run.history, run.no_improvement
        self.n_features_in_ = n_features
        self.n_outputs_ = n_outputs
        self.n_layers_ = len(net.sizes)
        self.out_activation_ = "identity" if self._output == "linear" else self._output
        self.batch_size_, self.n_shards_ = batch, n_shards
        return self

    def _train_loop(self, run: "_Run", net, shards, strategy, epochs: int, seed: int, *, tol_rule: bool):
        """Train ``epochs`` epochs into ``run``, stopping early by scikit-learn's tol rule.

        The rule (MLPClassifier's, with ``early_stopping=False``): an epoch whose mean
        loss is not below the best loss minus ``tol`` counts as no improvement; training
        stops when more than ``n_iter_no_change`` epochs in a row do. The trainer has no
        head-side stop hook, so the epochs run in chunks just long enough to reach the
        earliest epoch at which the rule can fire: the stopping epoch is the rule's own.
        Each chunk is one ``train`` call, and momentum restarts at zero with each.
        """
        done = 0
        while done < epochs:
            chunk = epochs - done
            if tol_rule:
                # the first epoch sets the best loss: it cannot count as no improvement
                chunk = min(chunk, self.n_iter_no_change + 1 - run.no_improvement + (run.best == math.inf))
            result = train(net, shards, strategy, Stop(max_epochs=chunk), seed=seed + run.epochs,
                           params=run.params, fan_in=self.fan_in,
                           progress=self._progress if self.verbose else None)
            run.params = result.params
            run.history += [{**r, "epoch": r.get("epoch", 0) + run.epochs} for r in result.history]
            run.patterns += int(sum(r.get("patterns", 0) for r in result.history))
            for loss in _epoch_losses(result.history, chunk):
                run.epochs += 1
                run.losses.append(loss)
                run.no_improvement = run.no_improvement + 1 if loss > run.best - self.tol else 0
                run.best = min(run.best, loss)
                if self.verbose:
                    print(f"Iteration {run.epochs}, loss = {loss:.8f}")
            done += chunk
            if result.stopped_because.startswith("diverged"):
                warnings.warn(f"training {result.stopped_because} (loss not finite); kept the last good "
                              "weights; try a smaller learning_rate_init",
                              _sklearn_class("ConvergenceWarning", ConvergenceWarning), stacklevel=4)
                return
            if tol_rule and run.no_improvement > self.n_iter_no_change:
                if self.verbose:
                    print(f"Training loss did not improve more than tol={self.tol} for "
                          f"{self.n_iter_no_change} consecutive epochs. Stopping.")
                return
        if tol_rule:
            warnings.warn(f"Maximum iterations ({epochs}) reached and the optimization hasn't converged yet.",
                          _sklearn_class("ConvergenceWarning", ConvergenceWarning), stacklevel=4)

    def _progress(self, record: dict) -> None:
        if record["round"] % 50 == 0:
            print(f"  round {record['round']}: loss {record['loss']:.5f}, "
                  f"error {record['error_rate']:.4f}, {record['wall_seconds'] * 1e3:.1f} ms")

    # -- prediction --

    def _output_of(self, X, what: str, classes=None):
        """``what`` ("predict", "proba", "log_proba", "values") for numpy or dask X."""
        self._check_is_fitted()
        X = _check_X(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(_n_features_message(X.shape[1], self, self.n_features_in_))
        if not _is_dask(X):
            return _output_block(X, self._net, self.params_, what, classes)
        X = X.rechunk({1: -1})  # whole rows in every block
        if what == "predict" or (what == "values" and self.n_outputs_ == 1):
            dtype = classes.dtype if what == "predict" else self.dtype
            return X.map_blocks(_output_block, self._net, self.params_, what, classes,
                                dtype=dtype, drop_axis=1)
        return X.map_blocks(_output_block, self._net, self.params_, what, classes,
                            dtype=self.dtype, chunks=(X.chunks[0], (self.n_outputs_,)))


@dataclass
class _Run:
    """What one fit or partial_fit accumulates (set on the estimator only at the end)."""

    params: np.ndarray | None
    losses: list = field(default_factory=list)
    epochs: int = 0
    patterns: int = 0
    history: list = field(default_factory=list)
    best: float = math.inf
    no_improvement: int = 0


def _epoch_losses(history: list[dict], epochs: int) -> list[float]:
    """Mean loss per epoch (weighted by patterns) from one train call's rounds."""
    if not history:
        return [math.nan] * epochs
    sums, counts = np.zeros(epochs), np.zeros(epochs)
    for i, record in enumerate(history):
        epoch = record["epoch"] if "epoch" in record else (i + 1) * epochs / len(history)
        e = min(epochs - 1, max(0, math.ceil(epoch - 1e-9) - 1))
        n = record.get("patterns", 1)
        sums[e] += record["loss"] * n
        counts[e] += n
    # a diverged run ends early: only the epochs it reached have a loss
    return [float(s / c) for s, c in zip(sums, counts) if c > 0]


_PARAMS_DOC = """
    Parameters
    ----------
    hidden_layer_sizes : int or tuple of int, default=(100,)
        Widths of the hidden layers; ``()`` gives a network without hidden layer.
    activation : {"relu", "tanh", "logistic"}, default="relu"
        Activation of every hidden layer ("logistic" is the sigmoid).
    alpha : float, default=0.0001
        L2 penalty on the weights (not the biases), scikit-learn's convention: the
        gradient of a block of ``m`` patterns is ``(sum of gradients + alpha * W) / m``.
    batch_size : int or "auto", default="auto"
        Patterns per weight update over all shards (the block of seed 001); "auto" is
        ``min(1000, n_samples)``: a round costs about 10-20 ms of scheduling besides
        compute, so 1000 keeps that small for MNIST-sized networks (scikit-learn's 200 would
        make it dominate). Ignored by ``strategy="epoch"``.
    learning_rate_init : float
        Step size of gradient descent (constant).
    momentum : float, default=0.9
        Momentum of gradient descent (heavy ball, not Nesterov), in [0, 1).
    max_iter : int, default=200
        Maximum number of epochs of ``fit`` (``partial_fit`` runs one epoch per call).
    tol : float, default=1e-4
        Training stops when the epoch's mean training loss has not fallen below the best so
        far minus ``tol`` for more than ``n_iter_no_change`` consecutive epochs.
    n_iter_no_change : int, default=10
        See ``tol``.
    random_state : None, int, RandomState or Generator, default=None
        Seeds the initial weights and the strategies' random draws. With an int the fit is
        reproducible for a given ``n_shards`` (and any number of workers).
    warm_start : bool, default=False
        ``fit`` continues from the learned weights instead of starting again.
    verbose : bool, default=False
        Print the loss of every epoch (and of every 50th round) while training.
    strategy : str, default="block"
        A name of :func:`ppt_dask.strategies.make`: "block" (synchronous by block),
        "epoch" (full batch), "ppt", "average", "async".
    strategy_params : dict or None, default=None
        More arguments of the strategy (for example ``{"local_epoch": 64}`` for "ppt").
    n_shards : int or None, default=None
        Logical shards of the training set; None: one per worker (capped by the batch).
    n_workers : int or None, default=None
        Workers of the LocalCluster started when no client exists (None: one per core).
    scheduler : str or None, default=None
        Address of a scheduler to connect to for each fit (``tls://host:8786``).
    dtype : {"float64", "float32"}, default="float64"
        Precision of weights and arithmetic.
    fan_in : int, default=2
        Children per reduce task of the tree reduce.
"""

_ATTRIBUTES_DOC = """
    coefs_ : list of ndarray
        ``coefs_[i]`` has shape (n_units_i, n_units_{i+1}): the weights of layer i.
    intercepts_ : list of ndarray
        ``intercepts_[i]`` has shape (n_units_{i+1},).
    params_ : ndarray of shape (n_params,)
        All weights and biases as one flat vector (the trainer's layout).
    loss_curve_ : list of float
        Mean training loss of every epoch (the data term, without the L2 penalty).
    best_loss_ : float
        The smallest entry of ``loss_curve_``.
    n_iter_ : int
        Epochs trained.
    t_ : int
        Training patterns processed.
    n_features_in_ : int
    n_outputs_ : int
    n_layers_ : int
    out_activation_ : str
    batch_size_ : int
        The block size used.
    n_shards_ : int
        The logical shards used.
    history_ : list of dict
        Per round of the last fit: loss, error rate, patterns, wall and head seconds.
"""

_CHECKS_DOC = """
    Notes
    -----
    scikit-learn's ``parametrize_with_checks`` passes on this estimator with no check
    skipped or expected to fail. Differences from ``MLPClassifier``/``MLPRegressor``:
    one solver (gradient descent with momentum and a constant step, run as one
    distributed round per block); ``partial_fit`` and each chunk of epochs between checks
    of the ``tol`` rule restart the momentum at zero; ``loss_curve_`` holds the data loss
    without the L2 term. Fitting with no client around starts and stops a LocalCluster
    each time (2-3 s): start a client first to reuse one.
"""


class PPTClassifier(_PPTBase):
    __doc__ = ("""A multi-layer perceptron classifier trained data-parallel on a Dask cluster.

    Softmax output and cross-entropy loss, for two classes too (two outputs).
""" + _PARAMS_DOC + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The labels, sorted; the network's output k is the probability of ``classes_[k]``.
""" + _ATTRIBUTES_DOC + _CHECKS_DOC)

    _output = "softmax"

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, alpha=0.0001,
                 batch_size="auto", learning_rate_init=0.3, momentum=0.9, max_iter=200,
                 tol=1e-4, n_iter_no_change=10, random_state=None, warm_start=False,
                 verbose=False, strategy="block", strategy_params=None, n_shards=None,
                 n_workers=None, scheduler=None, dtype="float64", fan_in=2):
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

    def __sklearn_tags__(self):
        from sklearn.utils import ClassifierTags

        return self._tags("classifier", classifier_tags=ClassifierTags())

    def _targets(self, y, n_rows: int, continuing: bool, incremental: bool, classes):
        """Labels encoded as 0..n_classes-1 (numpy, or a dask array mapped block by block)."""
        name = type(self).__name__
        if y is None:
            raise ValueError(f"{name} requires y to be passed, but the target y is None.")
        if _is_dask(y):
            if y.ndim != 1 or y.shape[0] != n_rows:
                raise ValueError(f"y must be 1-D with one label per row of X ({n_rows}); got shape {y.shape}")
            from distributed import get_client

            found = np.asarray(get_client().compute(y.map_blocks(np.unique).rechunk(-1)).result(RESULT_TIMEOUT))
            found = np.unique(found)
        else:
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1:
                warnings.warn("A column-vector y was passed when a 1d array was expected. Please change "
                              "the shape of y to (n_samples, ), for example using ravel().",
                              _sklearn_class("DataConversionWarning", DataConversionWarning), stacklevel=4)
                y = y.ravel()
            if y.ndim != 1:
                raise ValueError(f"y should be a 1d array, got an array of shape {y.shape} instead.")
            if len(y) != n_rows:
                raise ValueError(f"X has {n_rows} rows but y has {len(y)}")
            found = y
        if found.dtype.kind == "c":
            raise ValueError(f"Complex data not supported: y has dtype {found.dtype}")
        if found.dtype.kind == "f":
            validation.check_finite(found, "y")
            if np.any(found != np.round(found)):
                bad = found[found != np.round(found)][0]
                raise ValueError(f"Unknown label type: continuous (y holds non-integer values such as {bad!r}); "
                                 "a classifier needs discrete classes (use PPTRegressor for continuous targets)")
        try:
            found = np.unique(found)
        except TypeError as exc:
            raise ValueError(f"Unknown label type: labels of mixed types cannot be sorted ({exc})") from None
        if continuing:
            known = self.classes_
            if classes is not None and not np.array_equal(np.unique(classes), known):
                raise ValueError(f"classes={classes!r} is not the same as on the first call ({known!r})")
        elif incremental:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
            known = np.unique(np.asarray(classes))
        else:
            known = found
        unseen = np.setdiff1d(found, known)
        if unseen.size:
            raise ValueError(f"y holds labels {unseen.tolist()} that are not in classes {known.tolist()}")
        if len(known) < 2:
            raise ValueError(f"y has only one class ({known.tolist()}); a classifier needs at least 2 classes")
        if _is_dask(y):
            return y.map_blocks(_encode_block, known, dtype=np.int64), len(known), {"classes_": known}
        return _encode_block(y, known), len(known), {"classes_": known}

    def fit(self, X, y):
        """Train from scratch (or from the learned weights with ``warm_start``).

        Parameters
        ----------
        X : ndarray or dask array of shape (n_samples, n_features)
        y : ndarray or dask array of shape (n_samples,)
            Class labels (numbers or strings).

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y, classes=None):
        """One more epoch on ``(X, y)``, from the current weights.

        Parameters
        ----------
        X : ndarray or dask array of shape (n_samples, n_features)
        y : ndarray or dask array of shape (n_samples,)
        classes : array-like of shape (n_classes,)
            All the classes; required on the first call, optional later.

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=True, classes=classes)

    def predict(self, X):
        """Labels, shape (n_samples,) (a dask array for dask input)."""
        self._check_is_fitted()
        return self._output_of(X, "predict", self.classes_)

    def predict_proba(self, X):
        """Class probabilities, shape (n_samples, n_classes), columns in ``classes_`` order."""
        return self._output_of(X, "proba")

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`, shape (n_samples, n_classes)."""
        return self._output_of(X, "log_proba")

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on ``(X, y)``: a float."""
        pred = self.predict(X)
        if _is_dask(pred):
            return float((pred == y).mean().compute()) if sample_weight is None else \
                float(np.average(np.asarray(pred == y), weights=sample_weight))
        y = np.asarray(y)
        return float(np.average(pred == (y.ravel() if y.ndim == 2 else y), weights=sample_weight))


class PPTRegressor(_PPTBase):
    __doc__ = ("""A multi-layer perceptron regressor trained data-parallel on a Dask cluster.

    Linear output and squared error (half the sum of squares per pattern, as
    ``MLPRegressor``); one or several targets.
""" + _PARAMS_DOC + """
    Attributes
    ----------
""" + _ATTRIBUTES_DOC + _CHECKS_DOC)

    _output = "linear"

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, alpha=0.0001,
                 batch_size="auto", learning_rate_init=0.01, momentum=0.9, max_iter=200,
                 tol=1e-4, n_iter_no_change=10, random_state=None, warm_start=False,
                 verbose=False, strategy="block", strategy_params=None, n_shards=None,
                 n_workers=None, scheduler=None, dtype="float64", fan_in=2):
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

    def __sklearn_tags__(self):
        from sklearn.utils import RegressorTags

        return self._tags("regressor", regressor_tags=RegressorTags())

    def _targets(self, y, n_rows: int, continuing: bool, incremental: bool, classes):
        """Targets as (n_samples, n_outputs) floats (numpy, or a dask array)."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        if _is_dask(y):
            if y.ndim not in (1, 2) or y.shape[0] != n_rows:
                raise ValueError(f"y must be 1-D or 2-D with one row per row of X ({n_rows}); got shape {y.shape}")
            n_outputs = 1 if y.ndim == 1 else int(y.shape[1])
            y = y.reshape(-1, 1) if y.ndim == 1 else y
        else:
            y = np.asarray(y)
            if y.dtype.kind == "c":
                raise ValueError(f"Complex data not supported: y has dtype {y.dtype}")
            y = y.astype(np.float64) if y.dtype == object else y
            y = validation.check_y(y, n_rows, "regression")
            n_outputs = y.shape[1]
        if continuing and n_outputs != self.n_outputs_:
            raise ValueError(f"y has {n_outputs} targets; the model was fitted with {self.n_outputs_}")
        return y, n_outputs, {}

    def fit(self, X, y):
        """Train from scratch (or from the learned weights with ``warm_start``).

        Parameters
        ----------
        X : ndarray or dask array of shape (n_samples, n_features)
        y : ndarray or dask array of shape (n_samples,) or (n_samples, n_outputs)

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y):
        """One more epoch on ``(X, y)``, from the current weights; returns self."""
        return self._fit(X, y, incremental=True)

    def predict(self, X):
        """Predictions, shape (n_samples,) for one target, else (n_samples, n_outputs)."""
        return self._output_of(X, "values")

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination R^2 (averaged over targets), as ``r2_score``."""
        pred = self.predict(X)
        if _is_dask(pred):
            pred = pred.compute()
        y = np.asarray(y.compute() if _is_dask(y) else y, dtype=np.float64)
        pred = np.asarray(pred, dtype=np.float64).reshape(len(pred), -1)
        y = y.reshape(len(y), -1)
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        w = w[:, None]
        ss_res = (w * (y - pred) ** 2).sum(axis=0)
        ss_tot = (w * (y - np.average(y, axis=0, weights=w.ravel())) ** 2).sum(axis=0)
        r2 = np.where(ss_tot > 0, 1 - ss_res / np.where(ss_tot > 0, ss_tot, 1), np.where(ss_res > 0, 0.0, 1.0))
        return float(r2.mean())
