"""scikit-learn estimators over the distributed trainer: PPTClassifier, PPTRegressor.

On scikit-learn's base classes (the ``[sklearn]`` extra, :mod:`ppt_dask.sklearn.contract`). The
Dask client is looked up at ``fit`` time, never stored (:mod:`ppt_dask.sklearn.placement`):
inside a Dask task or a process that cannot start workers the fit trains in its own process;
else on the cluster of ``scheduler``, or of the current client; without one, a fit on one
shard trains in this process, any other on one LocalCluster shared by such fits
(:mod:`ppt_dask.sklearn.shared`). Each ``fit``
places the training set once as logical shards (:func:`ppt_dask.enter_data`: for dask
arrays they are built on the workers, the data never comes here), trains, and releases
them. Prediction runs with numpy on the pulled weights, or block by block on the cluster
for a dask array.

>>> clf = ppt.PPTClassifier(random_state=0).fit(X, y)               # doctest: +SKIP
>>> clf.predict_proba(X_test).shape                                 # doctest: +SKIP
(10000, 10)
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core.metrics import r2_score
from ppt_dask.sklearn.base import RESULT_TIMEOUT, PPTBase
from ppt_dask.sklearn.contract import (
    ClassifierMixin,
    NotFittedError,
    RegressorMixin,
    check_is_fitted,
    check_y_labels,
    check_y_targets,
    compute,
    distinct_labels,
    is_dask,
    is_dask_frame,
)
from ppt_dask.sklearn.output import output_of

__all__ = ["PPTClassifier", "PPTRegressor", "NotFittedError"]



def _encode_block(y, classes):
    return np.searchsorted(classes, y).astype(np.int64)


def _values(a, name: str) -> np.ndarray:
    """A dask collection computed (:func:`ppt_dask.sklearn.contract.compute`), as a numpy array."""
    if is_dask(a) or is_dask_frame(a):
        a = compute(a, RESULT_TIMEOUT, name)
    return np.asarray(a)


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
        Patterns per weight update over all shards (the block of Mörchen (2004); for "local", "ppt"
        and "average" each shard takes ``batch_size // n_shards`` per step). "auto" is
        ``min(100, n_samples)`` for "local" (each worker steps on its own shard between
        averages, so small steps cost no scheduling) and ``min(1000, n_samples)`` for the
        others (a synchronous round costs milliseconds of scheduling besides compute,
        which 1000 patterns keep small on MNIST-sized networks); with Adam ``min(200,
        n_samples)``, MLPClassifier's. An integer is refused with "epoch" (each update sees
        the whole set).
    learning_rate_init : float or None, default=None
        Constant step size; None means 0.001 with Adam (MLPClassifier's), 0.05 for "local",
        else {lr}. Scale the inputs (and, for regression, the targets): gradient descent
        with momentum diverges on unscaled data.
    momentum : float, default=0.9
        Heavy-ball momentum (not Nesterov), in [0, 1); with Adam, its ``beta_1``.
    max_iter : int, default=200
        Most epochs of ``fit``; ``partial_fit`` runs one epoch per call.
    tol : float, default=1e-4
        ``fit`` stops when for more than ``n_iter_no_change`` consecutive epochs the mean
        training loss has not fallen below the best so far minus ``tol``.
    n_iter_no_change : int, default=10
    early_stopping : bool, default=False
        Set ``validation_fraction`` of the rows aside (seeded by ``random_state``, stratified
        for the classifier) and stop when for more than ``n_iter_no_change`` epochs the
        validation score (accuracy; R^2 for the regressor) has not risen above the best so
        far plus ``tol``; the best epoch's weights are kept. Numpy or pandas data only.
    validation_fraction : float, default=0.1
        In (0, 1): the share of the rows set aside with ``early_stopping``.
    random_state : None, int, RandomState or Generator, default=None
        Seeds the initial weights and the strategies' draws. With an int, a fit gives the
        same weights on any number of workers for a given ``n_shards``.
    warm_start : bool, default=False
        ``fit`` continues from the learned weights.
    verbose : bool, default=False
        Print the loss of every epoch, as scikit-learn does, and show the progress
        (:mod:`ppt_dask.progress`: a widget in Jupyter, a bar on a terminal) with epochs,
        loss, error, patterns per second, time left and the link to the ``/ppt`` page.
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
    solver : {"auto", "sgd", "adam"}, default="auto"
        The local steps of "local": momentum SGD, or Adam (Kingma & Ba 2015; each shard
        keeps its own moments, ``beta_2`` 0.999, ``epsilon`` 1e-8; each pass over a shard in
        a new order, as scikit-learn's ``shuffle=True``). "auto" is Adam on a set of fewer
        than 6000 samples, which "local" trains on one shard (there Adam generalizes better:
        on scikit-learn's digits 98.0 % against 96.9 %, MLPClassifier's 98.0 %), momentum SGD
        on larger sets (on MNIST Adam took 84 epochs and 2.5x the time for 97.8 %). The other
        strategies step with momentum SGD.
    module : torch.nn.Module, or a class or function that returns one, default=None
        Train this PyTorch module instead of the built-in MLP (skorch's ``module``; the
        ``[torch]`` extra): it becomes a :class:`ppt_dask.TorchNet` with the {loss} loss,
        for rows of X of any shape (images as (n_samples, 1, 28, 28)); it must have one
        output per {outputs}. ``hidden_layer_sizes`` and ``activation`` do not apply; the
        dtype is the module's. The trained module is ``module_``.

    Attributes
    ----------
    {classes}coefs_ : list of ndarray
        ``coefs_[i]`` of shape (n_units_i, n_units_i+1): the weights of layer i (the MLP).
    intercepts_ : list of ndarray
        ``intercepts_[i]`` of shape (n_units_i+1,) (the MLP).
    module_ : torch.nn.Module
        With ``module``: a copy of it holding the trained weights.
    params_ : ndarray of shape (n_params,)
        Weights and biases as one flat vector, the trainer's layout.
    loss_curve_ : list of float
        Mean training loss of each epoch (without the L2 term); ``best_loss_`` its minimum.
        A list that draws itself in a notebook (:class:`ppt_dask.observe.display.LossCurve`).
    n_iter_ : int
        Epochs trained by the last ``fit`` or ``partial_fit`` call (MLPClassifier's count);
        ``t_`` the training patterns processed over all calls (with ``sample_weight``, the
        sum of their weights).
    loss_ : float
        The last epoch's mean training loss.
    validation_scores_ : list of float
        With ``early_stopping``: the validation score of each epoch; ``best_validation_score_``
        their maximum, whose weights were kept.
    placement_ : str
        Where the last fit trained, in words: a cluster, or this process and why.
    n_features_in_, n_outputs_, n_layers_ : int
        ``n_layers_`` for the MLP only.
    row_shape_ : tuple of int
        The shape of one row of X, ``(n_features_in_,)`` for a table.
    out_activation_ : str
        The MLP's output layer.
    batch_size_, n_shards_ : int
        The block size and the number of logical shards used.
    solver_ : str
        The solver of the last fit, "adam" or "sgd" (what ``solver="auto"`` chose).
    history_ : list of dict
        One record per round: loss, error rate, patterns, wall and head seconds.

    Notes
    -----
    scikit-learn's ``parametrize_with_checks`` passes with no check skipped by this estimator
    (scikit-learn itself skips ``check_estimators_data_not_an_array`` with pandas objects
    when pandas is not installed, and ``check_array_api_input`` when ``SCIPY_ARRAY_API`` is
    not set) and one expected to fail in float32: ``check_sample_weight_equivalence_on_dense_data``
    asks predict_proba to 1e-7, and float32 sums of the weighted rows and of the repeated rows,
    added in another order, are 2e-6 apart (in float64 it passes). Where it differs from ``{sklearn}``: one solver,
    gradient descent with momentum and a constant step (a distributed round per block, or
    with "local" per ``interval`` patterns of each shard);
    ``partial_fit`` starts the momentum again from zero; ``loss_curve_`` leaves out the L2
    term. ``fit`` is one run of the trainer, stopped from inside at the epoch where the
    ``tol`` rule fires.
"""


class PPTClassifier(ClassifierMixin, PPTBase):
    __doc__ = """A multi-layer perceptron classifier trained data-parallel on a Dask cluster.

    Softmax output and cross-entropy loss, two outputs for two classes.
""" + _DOC.replace("{lr}", "0.3").replace("{sklearn}", "MLPClassifier").replace(
        "{loss}", "cross-entropy (logits out)").replace("{outputs}", "class").replace(
        "{classes}", "classes_ : ndarray of shape (n_classes,)\n"
                     "        The sorted labels; output k is the probability of ``classes_[k]``.\n    ") + """
    Examples
    --------
    scikit-learn's 8x8 digits on a LocalCluster of two workers (``fit`` uses the current
    client, or starts a LocalCluster of its own for the fit):

    >>> import ppt_dask as ppt
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.model_selection import train_test_split
    >>> client = ppt.connect(n_workers=2)
    >>> X, y = load_digits(return_X_y=True)
    >>> X_train, X_test, y_train, y_test = train_test_split(X / 16, y, random_state=0)
    >>> clf = ppt.PPTClassifier(random_state=0).fit(X_train, y_train)
    >>> clf.score(X_test, y_test) > 0.9
    True
    >>> clf.predict(X_test[:3]).shape, clf.classes_.tolist()
    ((3,), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
    >>> client.close()
"""

    _output, _default_lr, _estimator_kind = "softmax", 0.3, "classifier"
    _module_loss = "cross_entropy"
    _default_dtype = "float32"  # the same test accuracy on MNIST as float64, in less time
    _check_y = staticmethod(check_y_labels)

    def _prepare(self, y, client, continuing: bool, incremental: bool, classes):
        """Labels encoded as 0..n_classes-1 (numpy, or a dask array mapped on the workers);
        a multilabel indicator matrix as it is (a sigmoid output per label)."""
        if y.ndim == 2:
            return self._prepare_multilabel(y, continuing)
        if continuing and getattr(self, "_multilabel", False):
            raise ValueError("y has one label a row; the model was fitted on a multilabel indicator matrix")
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
        return encoded, len(known), {"classes_": known, "_multilabel": False}

    def _prepare_multilabel(self, y, continuing: bool):
        """A 0/1 indicator matrix (n_samples, n_labels): MLPClassifier's multilabel targets."""
        if is_dask(y):
            raise ValueError("a multilabel y must be a numpy array or DataFrame (a dask one: compute it first)")
        values = np.unique(y)
        if not np.isin(values, (0, 1)).all():
            raise ValueError(f"a 2-D y is a multilabel indicator matrix of 0 and 1; it holds {values[:5].tolist()}")
        if continuing and (not getattr(self, "_multilabel", False) or y.shape[1] != self.n_outputs_):
            raise ValueError(f"y has {y.shape[1]} labels a row; the model was fitted on other targets")
        return y.astype(np.float64), int(y.shape[1]), {"classes_": np.arange(y.shape[1]), "_multilabel": True}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True  # a 0/1 indicator matrix, a sigmoid output per label
        return tags

    def _validation_score(self, net, params, X_val, target_val, w_val=None) -> float:
        """Accuracy on the validation set (all labels of a row right, for multilabel), weighted
        by ``w_val``."""
        if target_val.ndim == 2:
            right = np.all((net.predict_proba(params, X_val) > 0.5) == (target_val > 0.5), axis=1)
        else:
            right = net.predict(params, X_val) == target_val
        return float(right.mean() if w_val is None else np.average(right, weights=w_val))

    def partial_fit(self, X, y, classes=None, *, sample_weight=None):
        """One more epoch from the current weights; ``classes`` (all labels) needed the first
        time; ``sample_weight`` as in ``fit``."""
        return self._fit(X, y, incremental=True, classes=classes, sample_weight=sample_weight)

    def predict(self, X):
        """Labels of the rows of X, shape (n_samples,); a dask array for a dask X."""
        check_is_fitted(self)
        return output_of(self, X, "predict", self.classes_)

    def predict_proba(self, X):
        """Probabilities, shape (n_samples, n_classes), columns in ``classes_`` order."""
        return output_of(self, X, "proba")

    def predict_log_proba(self, X):
        """The logarithm of :meth:`predict_proba`, shape (n_samples, n_classes)."""
        return output_of(self, X, "log_proba")

    def score(self, X, y, sample_weight=None):
        """Mean accuracy on ``(X, y)`` (weighted by ``sample_weight``), a float."""
        predicted, y = _values(self.predict(X), "the predictions"), _values(y, "y")
        if predicted.ndim == 2:  # multilabel: a row counts when all its labels are right
            right = np.all(predicted == y.reshape(predicted.shape), axis=1)
        else:
            right = predicted == y.reshape(len(y), -1)[:, 0]
        return float(np.average(right, weights=None if sample_weight is None else _values(sample_weight, "weights")))


class PPTRegressor(RegressorMixin, PPTBase):
    __doc__ = """A multi-layer perceptron regressor trained data-parallel on a Dask cluster.

    Linear output and squared error (half the sum of squares per pattern, as
    MLPRegressor); one target or several.
""" + _DOC.replace("{lr}", "0.1").replace("{sklearn}", "MLPRegressor").replace("{classes}", "").replace(
        "{loss}", "squared-error").replace("{outputs}", "target") + """
    Examples
    --------
    The Function problem of Mörchen (2004): a surface over the unit square, learned from
    1024 noisy points:

    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.function()
    >>> reg = ppt.PPTRegressor(random_state=0).fit(data.X, data.y)
    >>> reg.predict(data.X_test).shape
    (128,)
    >>> client.close()
"""

    _output, _default_lr, _estimator_kind = "linear", 0.1, "regressor"
    _module_loss = "mse"
    _check_y = staticmethod(check_y_targets)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # several targets in one network
        return tags

    def _prepare(self, y, client, continuing: bool, incremental: bool, classes):
        if continuing and y.shape[1] != self.n_outputs_:
            raise ValueError(f"y has {y.shape[1]} targets; the model was fitted with {self.n_outputs_}")
        return y, int(y.shape[1]), {}

    def _validation_score(self, net, params, X_val, target_val, w_val=None) -> float:
        """R^2 on the validation set (MLPRegressor's early-stopping score), weighted by ``w_val``."""
        return r2_score(target_val, net.predict(params, X_val).reshape(target_val.shape), w_val)

    def predict(self, X):
        """Predictions, shape (n_samples,) for one target, else (n_samples, n_outputs)."""
        return output_of(self, X, "values")

    def score(self, X, y, sample_weight=None):
        """R^2 averaged over the targets, as scikit-learn's ``r2_score``: a float."""
        pred, y = _values(self.predict(X), "the predictions"), _values(y, "y")
        return r2_score(y, pred, None if sample_weight is None else _values(sample_weight, "weights"))
