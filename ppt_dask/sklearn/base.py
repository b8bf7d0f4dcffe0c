"""What the two estimators share: settings read the way scikit-learn reads them, the
strategy and shard count they imply, the cluster a ``fit`` runs on, one ``fit`` as one run
of the trainer with the ``tol`` rule applied from inside, and prediction on numpy or dask
arrays. :mod:`ppt_dask.sklearn.estimator` adds the classifier's and regressor's targets.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from ppt_dask.algorithms import choose
from ppt_dask.core import validation
from ppt_dask.core.model import describe
from ppt_dask.core.network import MLP
from ppt_dask.core.tree import split_rows
from ppt_dask.observe.display import LossCurve
from ppt_dask.sklearn import placement, weights
from ppt_dask.sklearn.contract import (
    BaseEstimator,
    as_numpy,
    check_X,
    columns_of,
    frame_as_array,
    is_dask,
    is_dask_frame,
    refuse_inapplicable,
    rows_message,
    seed_of,
    validate_data,
)
from ppt_dask.sklearn.fitrun import FitRun, Job, train_epochs

ACTIVATIONS = {"relu": "relu", "tanh": "tanh", "logistic": "sigmoid"}  # scikit-learn's -> ours
# batch_size="auto" is min(AUTO_BATCH[strategy], n_samples) (async: patterns per worker's update,
# as the command line's MNIST preset) ...
AUTO_BATCH = {"local": 100, "async": 100}
AUTO_BATCH_OTHERS = 1000  # ... or this for the strategies not named there
RESULT_TIMEOUT = 600.0  # seconds to wait for a small dask result (a dask DataFrame's row counts)
PER_SHARD = {"ppt": "local_epoch", "average": "block", "local": "block"}  # size per shard
# The defaults that differ by strategy (graphs/estimator_race.py measured them on MNIST):
LOCAL_LR = 0.05  # learning_rate_init=None with "local" (0.1 ended at 97.0 %, 0.02 took 1.4x as long)
LOCAL_STEPS = 60  # local steps per round with "local", fewer when a shard is smaller (one epoch)
# solver="auto" with "local": Adam, as MLPClassifier's defaults (learning rate 0.001, batches of
# min(200, n) rows, each pass in a new order) on a set of fewer than LOCAL_STEPS * 100 rows,
# which trains on one shard: scikit-learn's digits went from 96.9 % to 98.0 % (MLPClassifier's)
# at seed 0; momentum SGD on larger sets (on MNIST Adam took 84 epochs, 2.5x the time, 97.8 %)
ADAM_LR, ADAM_BATCH = 0.001, 200
SOLVERS = ("auto", "sgd", "adam")


# ---- worker-side functions (module level: picklable, named on the dashboard) ---------------


def _module_net(module, loss: str, row_shape: tuple, dtype):
    """The :class:`ppt_dask.TorchNet` of ``module=`` for rows of ``row_shape`` (torch is
    imported here, only for an estimator given a module)."""
    from ppt_dask.nets.torchnet import TorchNet

    try:
        net = TorchNet(module, loss=loss, row_shape=row_shape)
    except ValueError as exc:
        raise ValueError(f"module: {exc}") from None
    if dtype is not None and dtype != net.dtype:
        raise ValueError(f"dtype={dtype!r}, but the module's parameters are {net.dtype} (leave dtype=None "
                         "with module=: the module's dtype is used)")
    return net


# ---- the shared machinery ----------------------------------------------------------------


class PPTBase(BaseEstimator):
    """Parameters, the cluster, the training loop, prediction; the fitted state is ``params_``."""

    _output = "linear"  # the output layer; set by each estimator
    _default_lr = 0.1  # learning_rate_init=None means this
    _default_dtype = "float64"  # dtype=None means this

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "params_")

    def _dtype(self) -> str:
        return self._default_dtype if self.dtype is None else self.dtype

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, alpha=0.0001,
                 batch_size="auto", learning_rate_init=None, momentum=0.9, max_iter=200,
                 tol=1e-4, n_iter_no_change=10, early_stopping=False, validation_fraction=0.1,
                 random_state=None, warm_start=False, verbose=False, strategy="local", strategy_params=None,
                 n_shards=None, n_workers=None, scheduler=None, dtype=None, fan_in=2, solver="auto",
                 module=None):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.momentum = momentum
        self.max_iter = max_iter
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
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
        self.solver = solver
        self.module = module

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
        if self.module is not None:  # the built-in MLP's parameters do not apply to a module
            for name, given in (("hidden_layer_sizes", hidden != (100,)), ("activation", self.activation != "relu")):
                if given:
                    raise ValueError(f"{name}={getattr(self, name)!r} applies to the built-in MLP, not with "
                                     "module= (the module is the network)")
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
        if not isinstance(self.early_stopping, (bool, np.bool_)):
            raise ValueError(f"early_stopping must be True or False, got {self.early_stopping!r}")
        fraction = self.validation_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or not 0 < fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {fraction!r}")
        for name in ("n_shards", "n_workers"):
            if getattr(self, name) is not None:
                validation.check_int_at_least(name, getattr(self, name), 1)
        validation.check_int_at_least("fan_in", self.fan_in, 2)
        validation.check_dtype("dtype", self.dtype, allow_none=True)
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if self.solver == "adam" and self.strategy != "local":
            raise ValueError(f"solver='adam' applies to strategy local, not to strategy {self.strategy}")
        if self.scheduler is not None:
            from ppt_dask.engine.placement import cluster

            cluster.check_address(self.scheduler)
        extra = {} if self.strategy_params is None else self.strategy_params
        if not isinstance(extra, dict) or not isinstance(self.strategy, str):
            raise ValueError(f"strategy must be a name and strategy_params a dict or None, got "
                             f"{self.strategy!r} and {self.strategy_params!r}")
        refuse_inapplicable(self.strategy, self.batch_size, extra, PER_SHARD.get(self.strategy, "block"))
        settings = {"hidden": hidden, "extra": extra, "seed": seed_of(self.random_state),
                    "optimizer": {"lr": lr, "momentum": self.momentum, "l2": self.alpha}}
        self._strategy(settings, batch=1, n_shards=1)  # the strategy checks its own parameters
        return settings

    def _solver(self, n_rows: int) -> str:
        """The solver of a fit on ``n_rows``: ``solver``, or for "auto" Adam on a set that
        trains on one shard with "local" (fewer than ``LOCAL_STEPS`` batches of 100 rows),
        momentum SGD otherwise (see ``ADAM_LR``)."""
        if self.solver != "auto":
            return self.solver
        small = self.strategy == "local" and n_rows < LOCAL_STEPS * AUTO_BATCH["local"]
        return "adam" if small else "sgd"

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
        from ppt_dask.sklearn.frommodel import fitted_estimator
        return fitted_estimator(cls, model, **params)

    # -- fitting --

    def fit(self, X, y, sample_weight=None):
        """Train from new weights (from the learned ones with ``warm_start``).

        Parameters
        ----------
        X : ndarray, dask array, pandas or dask DataFrame of shape (n_samples, n_features)
            A DataFrame's column names become ``feature_names_in_``; a dask DataFrame's
            rows stay on the workers (only their counts per partition come here).
        y : ndarray, dask array, pandas or dask Series of shape (n_samples,)
            Labels (numbers or strings; a 0/1 indicator matrix (n_samples, n_labels) for
            multilabel) for the classifier; targets, also of shape (n_samples, n_outputs),
            for the regressor.
        sample_weight : array-like of shape (n_samples,), or a number, default=None
            Weights of the rows, finite and >= 0, as MLPClassifier's: a weight of 2 is the
            row twice, 0 the row left out (:mod:`ppt_dask.sklearn.weights`). Numpy or pandas
            X and y; not with ``module``.

        Returns
        -------
        self
        """
        return self._fit(X, y, incremental=False, sample_weight=sample_weight)

    def partial_fit(self, X, y, sample_weight=None):
        """One more epoch on ``(X, y)`` (rows weighted by ``sample_weight``, as in ``fit``)
        from the current weights; returns self."""
        return self._fit(X, y, incremental=True, sample_weight=sample_weight)

    def _fit(self, X, y, *, incremental: bool, classes=None, sample_weight=None):
        settings = self._settings()
        if incremental and self.early_stopping:
            raise ValueError("partial_fit does not support early_stopping=True (as MLPClassifier)")
        continuing = hasattr(self, "params_") and (incremental or self.warm_start)
        # the column names of a DataFrame (feature_names_in_), as scikit-learn
        validate_data(self, columns_of(X), reset=not continuing, skip_check_array=True)
        X, y = (frame_as_array(a, RESULT_TIMEOUT, name) if is_dask_frame(a) else a for a, name in ((X, "X"), (y, "y")))
        X = check_X(X, rows=self.module is not None)
        row_shape = tuple(int(d) for d in X.shape[1:])
        if continuing and row_shape != self.row_shape_:
            raise ValueError(rows_message(self, row_shape, self.row_shape_))
        y = self._check_y(y, int(X.shape[0]), type(self).__name__)
        X, y, w = weights.rows(self, X, y, sample_weight)  # checked; rows of weight 0 out before their labels are read
        args = (continuing, incremental, classes)
        prepared = None if is_dask(y) else self._prepare(y, None, *args)  # errors before the cluster
        validation_set = None
        if self.early_stopping:  # MLPClassifier's split: seeded, stratified for one label a row
            if prepared is None or is_dask(X):
                raise ValueError("early_stopping=True takes numpy or pandas X and y (it splits off a validation "
                                 "set here); compute a dask collection first, or stop by tol/n_iter_no_change")
            X, target, w, validation_set = weights.split(self, X, prepared[0], w, settings["seed"])
            prepared = (target, *prepared[1:])
        if w is not None:  # the weights travel with the rows, as one more column of the targets
            prepared = (weights.with_weights(prepared[0], w), *prepared[1:])
        n_rows = int(X.shape[0])
        adam = self._solver(n_rows) == "adam"
        if adam:  # Adam's step size and each pass in a new order, as MLPClassifier's defaults
            settings["optimizer"]["lr"] = ADAM_LR if self.learning_rate_init is None else self.learning_rate_init
            settings["extra"] = {"shuffle": True, **settings["extra"], "solver": "adam"}
        batch = self._batch(adam, n_rows)
        net = None if prepared is None else self._network(prepared[1], row_shape, settings, continuing, prepared)
        run = FitRun(None)
        if continuing:  # partial_fit goes on with the tol bookkeeping; a warm fit starts it again
            run = FitRun(self.params_, list(self.loss_curve_), 0, self.t_, list(self.history_),
                         *((self.best_loss_, self._no_improvement_count) if incremental else ()))
            run.state = getattr(self, "_state", None) if incremental else None
        one_shard = self.n_shards == 1 or (self.n_shards is None and self._default_shards(2, n_rows, batch) == 1)
        place = placement.choose(self, one_shard)
        try:
            job = Job(run, settings, batch, 1 if incremental else self.max_iter, not incremental, validation_set)
            if place.here:  # the rows come here (a dask array is computed where it is)
                X = as_numpy(X, RESULT_TIMEOUT, "X")
                if prepared is None:
                    prepared = self._prepare(as_numpy(y, RESULT_TIMEOUT, "y"), None, *args)
                    net = self._network(prepared[1], row_shape, settings, continuing, prepared)
                n_shards = self._train_here(job, weights.net_for(net, w), X, prepared[0])
            else:
                prepared = prepared or self._prepare(y, place.client, *args)
                net = net or self._network(prepared[1], row_shape, settings, continuing, prepared)
                n_shards = self._train_on(place.client, job, weights.net_for(net, w), X, prepared[0])
        finally:
            placement.close(place)
        _, n_outputs, learned = prepared
        self._keep_fitted(learned, net, run, (int(np.prod(row_shape)), n_outputs, row_shape), batch, n_shards, adam)
        self._state = run.state if place.here and n_shards == 1 else None  # partial_fit goes on from it
        self.placement_ = place.reason
        if validation_set is not None:
            self.validation_scores_, self.best_validation_score_ = run.scores, max(run.scores, default=-np.inf)
        return self

    def _train_here(self, job, net, X, target) -> int:
        """Train in this process (:mod:`ppt_dask.sklearn.inprocess`); returns the shard count."""
        n_rows = len(X)
        n_shards = min(self.n_shards or 1, n_rows, job.batch)
        strategy = self._strategy(job.settings, job.batch, n_shards, n_rows)
        checked = strategy.check([b - a for a, b in split_rows(n_rows, n_shards)], job.settings["seed"])
        if job.run.state is not None:  # partial_fit goes on from the last call's rounds: its epochs are done
            job.start_epoch = (job.run.state.round + 1) / checked.rounds_per_epoch(n_rows)
        train_epochs(self, job, net, None, strategy, here=(X, target, n_shards))
        return n_shards

    def _train_on(self, client, job, net, X, target) -> int:
        """Train on ``client``'s cluster: the data placed as shards, trained, released."""
        from ppt_dask.engine.placement import cluster
        from ppt_dask.engine.placement.enter import enter_data, exit_data

        n_rows = int(X.shape[0])
        n_workers = len(cluster.worker_addresses(client))
        n_shards = min(self.n_shards or self._default_shards(n_workers, n_rows, job.batch), n_rows, job.batch)
        strategy = self._strategy(job.settings, job.batch, n_shards, n_rows)
        # the data-dependent checks of the strategy, before the data is placed
        strategy.check([b - a for a, b in split_rows(n_rows, n_shards)], job.settings["seed"])
        job.run.state = None  # a state of this process's rounds does not go to a cluster
        shards = enter_data(client, X, target, n_shards, dtype=net.dtype)
        try:
            train_epochs(self, job, net, shards, strategy)
        finally:
            exit_data(shards)
        return n_shards

    def _batch(self, adam: bool, n_rows: int) -> int:
        """The rows of a mini-batch: ``batch_size``, or with "auto" the solver's and strategy's
        default; at most the ``n_rows`` samples (a larger one is clipped, with a warning)."""
        auto = ADAM_BATCH if adam else AUTO_BATCH.get(self.strategy, AUTO_BATCH_OTHERS)
        batch = min(auto, n_rows) if self.batch_size == "auto" else self.batch_size
        if batch > n_rows:
            warnings.warn(f"batch_size ({batch}) is larger than the {n_rows} samples; clipped to {n_rows}",
                          UserWarning, stacklevel=4)
            batch = n_rows
        return batch

    def _network(self, n_outputs: int, row_shape: tuple, settings: dict, continuing: bool, prepared=()):
        """The network to train: the module's, or the MLP of ``settings["hidden"]`` layers (a
        sigmoid output for multilabel ``prepared`` targets); when ``continuing``, it must be
        the one already fitted."""
        hidden = settings["hidden"]
        if self.module is not None:
            net = _module_net(self.module, self._module_loss, row_shape, self.dtype)
            if net.n_outputs != n_outputs:
                raise ValueError(f"module has {net.n_outputs} outputs; y needs {n_outputs} "
                                 f"({'classes' if self._module_loss == 'cross_entropy' else 'targets'})")
            if continuing and describe(net) != describe(self._net):
                raise ValueError("cannot continue training with another module; fit from new weights")
            return net
        multilabel = len(prepared) > 2 and prepared[2].get("_multilabel", False)
        if multilabel and self.module is not None:
            raise ValueError("a multilabel y is fitted by the built-in MLP (a sigmoid output per label), "
                             "not with module=")
        net = MLP((int(np.prod(row_shape)), *hidden, n_outputs), hidden=ACTIVATIONS[self.activation],
                  output="sigmoid" if multilabel else self._output, dtype=self._dtype())
        if continuing and net != self._net:
            raise ValueError(f"cannot continue training a {self._net.sizes} {self._net.hidden} "
                             f"network as {net.sizes} {net.hidden}; fit from new weights")
        return net

    def _keep_fitted(self, learned: dict, net, run: FitRun, shapes: tuple, batch: int, n_shards: int,
                     adam: bool) -> None:
        """The fitted attributes (scikit-learn's names) from a finished ``run``; ``shapes``:
        (n_features, n_outputs, row_shape)."""
        for name, value in learned.items():
            setattr(self, name, value)
        self._net = net
        self.params_ = np.array(run.params, dtype=net.dtype)
        if self.module is None:
            self.coefs_ = [W.copy() for W, _ in net.unflatten(self.params_)]
            self.intercepts_ = [b.copy() for _, b in net.unflatten(self.params_)]
            self.n_layers_ = len(net.sizes)
            self.out_activation_ = {"linear": "identity", "sigmoid": "logistic"}.get(net.output, net.output)
        else:
            self.module_ = net.module_of(self.params_)  # the trained torch module (skorch's name)
        self.loss_curve_ = LossCurve(run.losses)
        self.loss_ = run.losses[-1] if run.losses else np.nan  # a list of floats that draws itself in a notebook
        self.best_loss_, self.n_iter_, self.t_ = run.best, run.epochs, run.patterns
        self.history_, self._no_improvement_count = run.history, run.no_improvement
        self.n_features_in_, self.n_outputs_, self.row_shape_ = shapes
        self.batch_size_, self.n_shards_, self.solver_ = batch, n_shards, "adam" if adam else "sgd"

    # -- prediction --
