"""Trained models as files: ``result.save(path)``, :func:`load_model`, :class:`Model`.

A model file is a numpy ``.npz`` archive holding three arrays and nothing executable
(it is read with ``allow_pickle=False``):

``params``
    The weights, one flat vector in the network's layout (:class:`ppt_dask.MLP`'s, or a
    :class:`ppt_dask.TorchNet`'s: its trainable parameters in ``named_parameters()`` order),
    in the run's dtype.
``classes``
    The labels the outputs stand for (numbers or strings), empty for a regression model.
``meta``
    UTF-8 JSON as a ``uint8`` array: the file format and its version, the ppt_dask version
    that wrote it, the network description (an MLP's widths, activations, loss, dtype,
    tolerance; for another network its ``describe()``: a TorchNet's class, loss, row shape,
    outputs, architecture checksum and, when it was built by an importable function, that
    function's path), the task, the number of input numbers per row and the shape of a row,
    a SHA-256 of the other arrays, and the run's settings and summary (the ``--json``
    summary of the command line).
``x_mean``, ``x_scale`` (and ``y_mean``, ``y_scale`` for regression), from version 2
    Only for a model trained on a table or arrays of one's own (:mod:`ppt_dask.data.tables`):
    the scaling computed on the cluster, applied again to the rows given to predict (and
    undone on the predicted targets); ``meta`` then names the feature columns, the target
    column and the shape of a row. Version 1 files (without them, and of MLPs only) are read
    as before.

:func:`load_model` checks all of it before returning a :class:`Model`: a file that is not a
model, comes from another format version, or whose arrays do not match their checksum
(corrupted) is refused with a ``ValueError`` naming the file and the reason. A file holds
no code: an MLP is rebuilt from its description; any other network is given again,
``load_model(path, module=...)`` (for a TorchNet its module, the function that builds it or
that function's import path; the file names the path it was trained with). A
:class:`Model` predicts without a Dask cluster.

>>> result.save("parity8.npz")                                   # doctest: +SKIP
>>> model = ppt.load_model("parity8.npz")                        # doctest: +SKIP
>>> model.score(X, y)                                            # doctest: +SKIP
1.0
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.core import validation
from ppt_dask.core.model import Network
from ppt_dask.engine.saving.modelmeta import default_classes, digest, jsonable, network_from, network_meta

__all__ = ["FORMAT", "FORMAT_VERSION", "Model", "load_model", "save_result"]

FORMAT = "ppt_dask.model"
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)  # version 2 added the optional scaling of the inputs (x_mean ...)
ARRAYS = ("params", "classes", "meta")
SCALING = ("x_mean", "x_scale", "y_mean", "y_scale")  # Model.preprocessing's arrays, saved under these
INPUT_FIELDS = ("features", "target", "row_shape")  # and its names, in meta["inputs"]




@dataclass(frozen=True, eq=False)
class Model:
    """A trained network and what it was trained on; predicts with numpy only.

    Parameters
    ----------
    net : a network of the model protocol (:class:`ppt_dask.core.model.Network`)
        An MLP, a TorchNet, or a model of your own.
    params : ndarray, shape (net.n_params,)
        The weights.
    classes : ndarray or None
        The label of each softmax output, or the two labels (negative, positive) of a
        single sigmoid output (None: 0..k-1, or 0 and 1); None for regression and
        multilabel models (their predictions are values and 0/1 rows).
    settings, summary : dict
        The run's settings (strategy, workers, seed ...) and its summary (epochs, loss,
        accuracy, wall seconds ...), as saved.
    preprocessing : dict or None
        For data of one's own (:attr:`ppt_dask.data.tables.Table.preprocessing`):
        ``features`` (column names), ``target``, ``row_shape``, ``mean`` and ``scale`` per
        feature, ``y_mean`` and ``y_scale`` per target. :meth:`predict` and the others then
        take the rows as they are in the file (of shape ``(n, n_features)`` or ``(n, *row_shape)``)
        and scale them; regression targets come back unscaled.

    Attributes
    ----------
    task : {"classification", "binary", "multilabel", "regression"}
        What the network predicts.
    row_shape : tuple of int
        The shape of one input row: ``(n_features,)``, or ``(1, 28, 28)`` for images.
    n_features : int
        Numbers per row (the product of ``row_shape``).

    Examples
    --------
    A model is what ``result.save(path)`` writes and :func:`ppt_dask.load_model` reads;
    here one is made of untrained weights:

    >>> import os, tempfile
    >>> import ppt_dask as ppt
    >>> data = ppt.datasets.parity(8)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> model = ppt.Model(net, net.init_params(0))     # or result.params after a run
    >>> model.task, model.row_shape, model.classes.tolist()
    ('binary', (8,), [0, 1])
    >>> model.predict(data.X[:4]).shape
    (4,)
    >>> 0.0 <= model.score(data.X, data.y) <= 1.0
    True
    >>> path = model.save(os.path.join(tempfile.mkdtemp(), "parity.npz"))
    >>> ppt.load_model(path).n_features
    8
    """

    net: Network
    params: np.ndarray
    classes: np.ndarray | None = None
    settings: dict = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    preprocessing: dict | None = None

    def __post_init__(self):
        params = np.require(np.asarray(self.params, dtype=self.net.dtype), requirements="A")
        if params.shape != (self.net.n_params,):
            raise ValueError(f"params must be a 1-D vector of length n_params={self.net.n_params}, "
                             f"got shape {params.shape}")
        object.__setattr__(self, "params", params)
        if self.classes is None and self.task in ("classification", "binary"):
            object.__setattr__(self, "classes", default_classes(self.net))
        if self.classes is not None:
            classes = np.asarray(self.classes)
            want = {"classification": self.net.n_outputs, "binary": 2}.get(self.task)
            if want is None or classes.shape != (want,) or classes.dtype == object:
                raise ValueError(f"a {self.task} model with {self.net.n_outputs} outputs takes "
                                 f"{want or 'no'} class labels (numbers or strings), got {classes!r}")
            object.__setattr__(self, "classes", classes)

    @property
    def task(self) -> str:
        """"classification", "binary", "multilabel" or "regression"."""
        return self.net.task

    @property
    def row_shape(self) -> tuple:
        """The shape of one input row: ``(n_features,)``, or ``(1, 28, 28)`` for images."""
        return tuple(self.net.row_shape)

    @property
    def n_features(self) -> int:
        """Numbers per row (the product of ``row_shape``)."""
        return int(np.prod(self.row_shape))

    def _X(self, X) -> np.ndarray:
        pre = self.preprocessing
        if pre and pre.get("target") is not None and hasattr(X, "columns"):  # a DataFrame: by name
            missing = [c for c in pre["features"] if c not in X.columns]
            if missing:
                raise ValueError(f"X has no column {missing[:5]} of the {len(pre['features'])} the model takes")
            X = X[list(pre["features"])].to_numpy(dtype=np.float64)
        shape = tuple(pre.get("row_shape") or ()) if pre else ()
        if pre and len(shape) > 1 and np.ndim(X) == len(shape) + 1 and np.shape(X)[1:] == shape:
            X = np.reshape(X, (len(X), -1))  # rows of the row shape, flattened as in training
        X = validation.check_X(X, "X", rows=True)
        if X.shape[1:] != self.row_shape:
            if X.ndim == 2 and len(self.row_shape) == 1:
                raise ValueError(f"X has {X.shape[1]} features per row, but the model takes {self.n_features}")
            raise ValueError(f"X has rows of shape {X.shape[1:]}, but the model takes rows of shape {self.row_shape}")
        if pre:  # the scaling of the training rows, computed on the cluster
            X = ((X - np.asarray(pre["mean"])) / np.asarray(pre["scale"])).astype(self.net.dtype)
        return X

    def predict(self, X) -> np.ndarray:
        """Labels (classification, binary), 0/1 rows (multilabel) or values (regression).

        Parameters
        ----------
        X : array-like, shape ``(n_samples, *row_shape)``

        Returns
        -------
        ndarray, shape (n_samples,), or (n_samples, n_outputs) for several outputs
        """
        out = self.net.predict(self.params, self._X(X))
        if self.preprocessing and "y_mean" in self.preprocessing:  # targets back in their units
            scale, mean = (np.asarray(self.preprocessing[k]).reshape(-1) for k in ("y_scale", "y_mean"))
            out = out * (scale if out.ndim == 2 else scale[0]) + (mean if out.ndim == 2 else mean[0])
        return out if self.classes is None else self.classes[out]

    def predict_proba(self, X) -> np.ndarray:
        """Probabilities, shape (n_samples, n_classes) in ``classes`` order.

        A single sigmoid output gives two columns (negative, positive), as scikit-learn's
        binary classifiers; multilabel models one column per output.
        """
        if not hasattr(self.net, "predict_proba"):
            raise ValueError(f"a {type(self.net).__name__} has no predict_proba")
        out = self.net.predict_proba(self.params, self._X(X))
        return np.hstack([1 - out, out]) if self.task == "binary" else out

    def score(self, X, y) -> float:
        """Accuracy (whole rows for multilabel), or R^2 averaged over the targets."""
        pred, y = self.predict(X), np.asarray(y)
        if len(y) != len(pred):
            raise ValueError(f"y has {len(y)} rows but X has {len(pred)}")
        if self.task == "regression":
            from ppt_dask.core.metrics import r2_score
            return float(r2_score(y.reshape(pred.shape), pred))
        right = pred == y.reshape(pred.shape)
        return float(np.mean(right.all(axis=1) if right.ndim == 2 else right))

    def confusion(self, X, y) -> np.ndarray:
        """Counts ``C[i, j]`` of rows of class ``classes[i]`` predicted as ``classes[j]``."""
        if self.classes is None:
            raise ValueError(f"a {self.task} model has no classes to count confusions of")
        y, pred = np.asarray(y).ravel(), self.predict(X)
        if len(y) != len(pred):
            raise ValueError(f"y has {len(y)} rows but X has {len(pred)}")
        unknown = np.setdiff1d(y, self.classes)
        if unknown.size:
            raise ValueError(f"y holds labels {unknown[:5].tolist()} the model does not know "
                             f"(its classes: {self.classes.tolist()})")
        k = len(self.classes)
        index = {c: i for i, c in enumerate(self.classes.tolist())}
        rows = np.array([index[v] for v in y.tolist()], dtype=np.intp)
        cols = np.array([index[v] for v in pred.tolist()], dtype=np.intp)
        return np.bincount(rows * k + cols, minlength=k * k).reshape(k, k)

    def save(self, path) -> str:
        """Write the model to ``path`` (a ``.npz``; written to a temporary name, then renamed)."""
        net = self.net
        classes = np.array([], dtype=np.int64) if self.classes is None else self.classes
        pre = self.preprocessing or {}
        scaling = {name: np.asarray(pre[key], dtype=np.float64) for name, key in
                   zip(SCALING, ("mean", "scale", "y_mean", "y_scale")) if key in pre}
        from ppt_dask import __version__
        meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "ppt_dask_version": __version__,
                "network": network_meta(net), "task": self.task, "n_features": self.n_features,
                "row_shape": list(self.row_shape), "sha256": digest(self.params, classes, *scaling.values()),
                "settings": jsonable(self.settings), "summary": jsonable(self.summary)}
        if pre:
            meta["inputs"] = {k: jsonable(pre.get(k)) for k in INPUT_FIELDS}
        path = os.fspath(path)
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ValueError(f"cannot save the model to {path!r}: the folder {folder!r} does not exist")
        tmp = f"{path}.tmp-{os.getpid()}.npz"
        try:
            with open(tmp, "wb") as fh:  # a file object: numpy adds no second .npz suffix
                np.savez(fh, params=self.params, classes=classes, **scaling,
                         meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8))
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return path


def save_result(result, path, classes=None, summary=None, preprocessing=None) -> str:
    """Write a finished run (:class:`ppt_dask.Result`) as a model file; see :meth:`ppt_dask.Model.save`.

    ``classes`` are the labels of the outputs when they are not the trainer's 0..k-1;
    ``summary`` replaces ``result.summary()`` (the command line adds the data set's name);
    ``preprocessing`` is a table's (:attr:`ppt_dask.data.tables.Table.preprocessing`).
    """
    model = Model(result.net, np.asarray(result.params), classes,
                  dict(result.settings), result.summary() if summary is None else summary, preprocessing)
    return model.save(path)


def load_model(path, module=None) -> Model:
    """Read a model file written by ``Result.save`` or :meth:`ppt_dask.Model.save`.

    Parameters
    ----------
    path : str or path
        A ``.npz`` file written by ``Result.save`` or ``Model.save``.
    module : optional
        For a file of any network but an MLP, the network again: for a TorchNet its
        ``torch.nn.Module``, the function or class that builds it, or that function's import
        path ``"package.module:function"`` (the file names the one it was trained with); for
        a model of your own, the network object. Checked against the file (parameter count,
        row shape, dtype, architecture).

    Returns
    -------
    Model
        The network, its weights, classes, settings and summary; it predicts with numpy
        only, without a cluster.

    Raises
    ------
    FileNotFoundError
        No such file.
    ValueError
        The file is not a ppt_dask model, was written in another format version, or is
        corrupted (unreadable archive, bad JSON, arrays that do not match the checksum).

    Examples
    --------
    >>> import os, tempfile
    >>> import ppt_dask as ppt
    >>> data = ppt.datasets.parity(8)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> path = ppt.Model(net, net.init_params(0)).save(os.path.join(tempfile.mkdtemp(), "m.npz"))
    >>> model = ppt.load_model(path)                   # result.save(path) after a run
    >>> model.predict(data.X[:3]).shape, model.task
    ((3,), 'binary')
    >>> ppt.load_model("no-such-file.npz")
    Traceback (most recent call last):
    ...
    FileNotFoundError: ...
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no model file {path!r}")
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"PK\x03\x04":  # every .npz is a zip archive; anything else is refused unread
        raise ValueError(f"{path}: not a ppt_dask model file (not an .npz archive)")
    try:
        archive = np.load(path, allow_pickle=False)
        with archive:
            names = set(archive.files)
            if not set(ARRAYS) <= names:
                raise ValueError(f"{path}: not a ppt_dask model file (arrays {sorted(names)}; "
                                 f"a model holds {list(ARRAYS)})")
            arrays = {name: archive[name] for name in (*ARRAYS, *SCALING) if name in names}
        meta = json.loads(arrays["meta"].tobytes().decode())
    except ValueError as exc:
        if str(exc).startswith(path):
            raise
        raise ValueError(f"{path}: not a readable ppt_dask model file ({exc})") from None
    except (zipfile.BadZipFile, EOFError, OSError, UnicodeDecodeError, KeyError) as exc:
        raise ValueError(f"{path}: not a readable ppt_dask model file ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a ppt_dask model file (no {FORMAT!r} header)")
    if meta.get("format_version") not in READ_VERSIONS:
        raise ValueError(f"{path}: model file format version {meta.get('format_version')!r} (written by "
                         f"ppt_dask {meta.get('ppt_dask_version')}); this ppt_dask reads versions "
                         f"{', '.join(map(str, READ_VERSIONS))}")
    params, classes = arrays["params"], arrays["classes"]
    scaling = [arrays[name] for name in SCALING if name in arrays]
    if meta.get("sha256") != digest(params, classes, *scaling):
        raise ValueError(f"{path}: corrupted model file (the weights do not match their checksum)")
    try:
        net = network_from(meta["network"], module, path)
        pre = None
        if "inputs" in meta or scaling:
            pre = {**{k: meta["inputs"][k] for k in INPUT_FIELDS},
                   **{key: arrays[name] for name, key in zip(SCALING, ("mean", "scale", "y_mean", "y_scale"))
                      if name in arrays}}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: inconsistent model file ({type(exc).__name__}: {exc})") from None
    try:
        return Model(net, params, classes if classes.size else None,
                     meta.get("settings", {}), meta.get("summary", {}), pre)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: inconsistent model file ({exc})") from None
