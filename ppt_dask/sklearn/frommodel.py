"""A fitted estimator from a model file: ``PPTClassifier.from_model`` and ``PPTRegressor.from_model``.

The model file (:mod:`ppt_dask.engine.saving.modelfile`) holds an MLP's weights and what it
was trained for; here they become scikit-learn's fitted attributes (``coefs_``,
``intercepts_``, ``classes_`` ...), as if the estimator had been fitted.
"""

from __future__ import annotations

import numpy as np

from ppt_dask.core.network import MLP
from ppt_dask.engine.saving.modelfile import Model, load_model

_ACTIVATION_NAMES = {"relu": "relu", "tanh": "tanh", "sigmoid": "logistic"}  # ours -> scikit-learn's


def fitted_estimator(cls, model, **params):
    """A fitted :class:`~ppt_dask.PPTClassifier` or :class:`~ppt_dask.PPTRegressor` from a model.

    Parameters
    ----------
    cls : the estimator class
    model : Model or path of a model file
    **params : more constructor parameters (``scheduler``, ``max_iter`` ...) for later fits

    A single sigmoid output (a "binary" model, as the parity8 preset trains) becomes the
    classifier's two softmax outputs with the same probabilities: softmax of (0, z) is
    (1 - sigmoid(z), sigmoid(z)), so the first class gets a zero column of weights.
    """
    model = model if isinstance(model, Model) else load_model(model)
    net, task = model.net, model.task
    if model.preprocessing:
        raise ValueError(f"a model trained on {model.summary.get('dataset', 'a table')} scales its inputs itself "
                         f"(the table's statistics); predict with ppt.load_model(path), not a {cls.__name__}")
    if not isinstance(net, MLP):
        raise ValueError(f"from_model takes a model file of an MLP, not of a {type(net).__name__}; "
                         f"fit {cls.__name__}(module=...) or use ppt.load_model(path, module=...)")
    kind = getattr(cls, "_estimator_kind", None)
    wanted = {"classifier": ("classification", "binary"), "regressor": ("regression",)}.get(kind, ())
    if task not in wanted:
        raise ValueError(f"a {task} model cannot become a {cls.__name__} (it takes {' or '.join(wanted)} models)")
    if net.loss != ("mse" if kind == "regressor" else "cross_entropy"):
        raise ValueError(f"a model trained with the {net.loss} loss cannot become a {cls.__name__}")
    layers = [(W.copy(), b.copy()) for W, b in net.unflatten(model.params)]
    if task == "binary":  # one sigmoid unit -> two softmax units with the same probabilities
        W, b = layers[-1]
        layers[-1] = (np.hstack([np.zeros_like(W), W]), np.concatenate([np.zeros_like(b), b]))
    sizes = (*net.sizes[:-1], layers[-1][0].shape[1])
    est = cls(hidden_layer_sizes=tuple(net.sizes[1:-1]), activation=_ACTIVATION_NAMES[net.hidden],
              dtype=net.dtype, **params)
    est._net = MLP(sizes, hidden=net.hidden, output=est._output, dtype=net.dtype)
    est.params_ = np.concatenate([np.concatenate([W.ravel(), b]) for W, b in layers]).astype(net.dtype)
    est.coefs_ = [W for W, _ in layers]
    est.intercepts_ = [b for _, b in layers]
    if kind == "classifier":
        est.classes_ = model.classes
    summary = model.summary
    est.loss_curve_, est.best_loss_ = [], float(summary.get("train_loss") or np.inf)
    est.n_iter_, est.t_, est.history_, est._no_improvement_count = 0, 0, [], 0
    est.n_features_in_, est.n_outputs_, est.n_layers_ = net.n_inputs, sizes[-1], len(sizes)
    est.row_shape_ = net.row_shape
    est.out_activation_ = "identity" if est._output == "linear" else est._output
    est.batch_size_, est.n_shards_ = summary.get("block"), model.settings.get("shards")
    return est
