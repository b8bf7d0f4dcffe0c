"""What the two estimators share: settings read the way scikit-learn reads them, the
strategy and shard count they imply, the cluster a ``fit`` runs on, one ``fit`` as one run
of the trainer with the ``tol`` rule applied from inside, and prediction on numpy or dask
arrays. :mod:`ppt_dask.sklearn.estimator` adds the classifier's and regressor's targets.
"""

from __future__ import annotations

import contextlib
import numbers
import warnings

import numpy as np

from ppt_dask.algorithms import choose
from ppt_dask.core import applicability, validation
from ppt_dask.core.model import describe
from ppt_dask.core.network import MLP
from ppt_dask.core.tree import split_rows
from ppt_dask.engine.placement import cluster
from ppt_dask.engine.placement.enter import enter_data, exit_data
from ppt_dask.observe.display import LossCurve
from ppt_dask.sklearn.contract import (
    BaseEstimator,
    check_X,
    columns_of,
    frame_as_array,
    is_dask,
    is_dask_frame,
    n_features_message,
    seed_of,
    validate_data,
)
from ppt_dask.sklearn.fitrun import FitRun, train_epochs

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


def rows_message(estimator, shape: tuple, fitted: tuple) -> str:
    """X's rows are not those the estimator was fitted on: scikit-learn's words for tables."""
    if len(shape) == len(fitted) == 1:
        return n_features_message(shape[0], estimator, fitted[0])
    return f"X has rows of shape {shape}; {type(estimator).__name__} was fitted on rows of shape {fitted}"


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
                 tol=1e-4, n_iter_no_change=10, random_state=None, warm_start=False,
                 verbose=False, strategy="local", strategy_params=None, n_shards=None,
                 n_workers=None, scheduler=None, dtype=None, fan_in=2, solver="auto",
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
            if key == "solver":
                raise ValueError("strategy_params['solver'] is the estimator's solver parameter: give solver=...")
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

    # -- the cluster --

    @contextlib.contextmanager
    def _client(self, given=None):
        """The client of one fit: ``given``, ``scheduler``'s, the current one, or a new LocalCluster."""
        from distributed import get_client

        if given is not None:
            client, close = given, None
        elif self.scheduler is not None:
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
        X : ndarray, dask array, pandas or dask DataFrame of shape (n_samples, n_features)
            A DataFrame's column names become ``feature_names_in_``; a dask DataFrame's
            rows stay on the workers (only their counts per partition come here).
        y : ndarray, dask array, pandas or dask Series of shape (n_samples,)
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

    def _fit(self, X, y, *, incremental: bool, classes=None, client=None):
        settings = self._settings()
        continuing = hasattr(self, "params_") and (incremental or self.warm_start)
        if client is None:  # the column names of a DataFrame (feature_names_in_), as scikit-learn
            validate_data(self, columns_of(X), reset=not continuing, skip_check_array=True)
        if client is None and (is_dask_frame(X) or is_dask_frame(y)):
            with self._client() as client:  # a dask DataFrame's rows are counted on the workers
                X, y = (frame_as_array(a, client, RESULT_TIMEOUT, name) if is_dask_frame(a) else a
                        for a, name in ((X, "X"), (y, "y")))
                return self._fit(X, y, incremental=incremental, classes=classes, client=client)
        X = check_X(X, rows=self.module is not None)
        n_rows, row_shape = int(X.shape[0]), tuple(int(d) for d in X.shape[1:])
        n_features = int(np.prod(row_shape))
        adam = self._solver(n_rows) == "adam"
        if adam:  # Adam's step size and each pass in a new order, as MLPClassifier's defaults
            settings["optimizer"]["lr"] = ADAM_LR if self.learning_rate_init is None else self.learning_rate_init
            settings["extra"] = {"shuffle": True, **settings["extra"], "solver": "adam"}
        if continuing and row_shape != self.row_shape_:
            raise ValueError(rows_message(self, row_shape, self.row_shape_))
        y = self._check_y(y, n_rows, type(self).__name__)
        args = (continuing, incremental, classes)
        prepared = None if is_dask(y) else self._prepare(y, None, *args)  # errors before the cluster
        batch = self._batch(adam, n_rows)
        run = FitRun(None)
        if continuing:  # partial_fit goes on with the tol bookkeeping; a warm fit starts it again
            run = FitRun(self.params_, list(self.loss_curve_), self.n_iter_, self.t_, list(self.history_),
                       *((self.best_loss_, self._no_improvement_count) if incremental else ()))

        def network(n_outputs: int):
            return self._network(n_outputs, row_shape, settings["hidden"], continuing)

        if prepared is not None:  # the architecture, checked before the cluster
            net = network(prepared[1])
        with self._client(client) as client:
            target, n_outputs, learned = prepared or self._prepare(y, client, *args)
            net = net if prepared is not None else network(n_outputs)
            n_workers = len(cluster.worker_addresses(client))
            n_shards = min(self.n_shards or self._default_shards(n_workers, n_rows, batch), n_rows, batch)
            strategy = self._strategy(settings, batch, n_shards, n_rows)
            # the data-dependent checks of the strategy, before the data is placed
            strategy.check([b - a for a, b in split_rows(n_rows, n_shards)], settings["seed"])
            shards = enter_data(client, X, target, n_shards, dtype=net.dtype)
            try:
                train_epochs(self, run, net, shards, strategy, 1 if incremental else self.max_iter,
                                 settings["seed"], tol_rule=not incremental)
            finally:
                exit_data(shards)

        self._keep_fitted(learned, net, run, (n_features, n_outputs, row_shape), batch, n_shards, adam)
        return self

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

    def _network(self, n_outputs: int, row_shape: tuple, hidden, continuing: bool):
        """The network to train: the module's, or the MLP of ``hidden`` layers; when
        ``continuing``, it must be the one already fitted."""
        if self.module is not None:
            net = _module_net(self.module, self._module_loss, row_shape, self.dtype)
            if net.n_outputs != n_outputs:
                raise ValueError(f"module has {net.n_outputs} outputs; y needs {n_outputs} "
                                 f"({'classes' if self._module_loss == 'cross_entropy' else 'targets'})")
            if continuing and describe(net) != describe(self._net):
                raise ValueError("cannot continue training with another module; fit from new weights")
            return net
        net = MLP((int(np.prod(row_shape)), *hidden, n_outputs), hidden=ACTIVATIONS[self.activation],
                  output=self._output, dtype=self._dtype())
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
            self.out_activation_ = "identity" if self._output == "linear" else self._output
        else:
            self.module_ = net.module_of(self.params_)  # the trained torch module (skorch's name)
        self.loss_curve_ = LossCurve(run.losses)  # a list of floats that draws itself in a notebook
        self.best_loss_, self.n_iter_, self.t_ = run.best, run.epochs, run.patterns
        self.history_, self._no_improvement_count = run.history, run.no_improvement
        self.n_features_in_, self.n_outputs_, self.row_shape_ = shapes
        self.batch_size_, self.n_shards_, self.solver_ = batch, n_shards, "adam" if adam else "sgd"

    # -- prediction --
