"""A multi-layer perceptron as a pure function of a flat parameter vector.

:class:`MLP` only *describes* a network (widths, activations, loss, dtype); it holds
no weights. The weights are one flat 1-D array, so a gradient task on a Dask worker
is a pure function ``(params, X, Y) -> (grad_sum, stats)`` and the per-shard
results add up: every loss and gradient is a **sum** over patterns, not a mean.

Flat layout, layer after layer: ``W_l`` of shape (sizes[l], sizes[l+1]) in C order,
then ``b_l`` of shape (sizes[l+1],). A layer computes ``a_{l+1} = f(a_l @ W_l + b_l)``
with one pattern per row, as scikit-learn's ``MLPClassifier`` does.

A worker that holds several logical shards computes all their sums in one pass
(:meth:`MLP.loss_grad_stats_shards`): the shards' rows are stacked as a 3-D array (shard,
row, feature) and every layer is one batched product. numpy's ``matmul`` runs a stacked
product as one BLAS ``gemm`` per shard, with the shapes and strides that shard's own 2-D product
has, the activations are elementwise, and every sum over rows is taken per shard, so each
shard's result is bitwise what a pass over that shard alone gives (tests/test_network.py holds
it to that), with one Python call for all of them instead of one per shard. A pass over one
block of rows is the same code with one shard.

It follows the model protocol (:class:`ppt_dask.core.model.Network`). This module imports
numpy only.

The module stays whole, over 400 lines: it is one class whose forward pass, backward pass and
batched per-shard pass share the flat layout and must stay bitwise the same; read apart, the
invariant that holds them together would be in no one file. What a pass takes (its rows,
targets and weights, checked and stacked) is :mod:`ppt_dask.core.passinputs`.

Examples
--------
>>> import numpy as np
>>> net = MLP((2, 3, 2), hidden="tanh", output="softmax")
>>> net.loss, net.n_params
('cross_entropy', 17)
>>> params = net.init_params(seed=0)
>>> X, y = np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 0])
>>> loss, grad, n = net.loss_and_grad(params, X, y)
>>> grad.shape, n
((17,), 2)
>>> net.stats(params, X, y)[2]
np.float64(2.0)
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.core import passinputs
from ppt_dask.core.activations import HIDDEN, OUTPUT
from ppt_dask.core.losses import LOSSES, check_pair, output_delta, wrong_rows
from ppt_dask.core.validation import check_dtype

__all__ = ["MLP"]



@dataclass(frozen=True)
class MLP:
    """A feed-forward network (multi-layer perceptron) over one flat vector of weights.

    The network is a value: its shape, activations and loss. The weights are a separate
    flat vector (``params``), which the engine keeps, adds and sends. It follows the
    model protocol (:class:`ppt_dask.Network`) in pure numpy.

    Parameters
    ----------
    sizes : tuple of int
        ``(n_inputs, hidden_1, ..., n_outputs)``; at least 2 entries, all >= 1.
        ``(n_inputs, n_classes)`` with a softmax output is softmax regression.
    hidden : {"sigmoid", "tanh", "relu"}
        Activation of every hidden layer (key of ``activations.HIDDEN``).
    output : {"softmax", "sigmoid", "linear"}
        Activation of the output layer (key of ``activations.OUTPUT``).
    loss : {"cross_entropy", "mse"} or None
        Key of ``losses.LOSSES``; None means cross-entropy for softmax or sigmoid
        outputs and mse for a linear output.
    dtype : {"float64", "float32"}
        dtype of parameters, gradients and the arithmetic.
    tolerance : float
        Linear output only: a pattern counts as wrong when any ``|out - t|``
        exceeds it.
    weighted : bool, keyword-only
        The targets ``Y`` carry one more column, the last: each row's weight (finite,
        >= 0). A row's loss, its gradient and its count in the stats are multiplied by
        its weight, so ``n`` in ``[loss_sum, n_wrong, n]`` is the sum of the weights
        and the update divides by it: a weight of 2 is the row twice, 0 the row left
        out (scikit-learn's ``sample_weight`` of MLPClassifier). Labels of a softmax
        output are then the first of two columns.

    Notes
    -----
    Targets ``Y`` may be 1-D integer class labels 0..n_outputs-1 (softmax output),
    a 1-D array when ``n_outputs == 1`` (read as a column), or a 2-D array of shape
    (n, n_outputs) (for softmax: one-hot rows or probabilities).

    Examples
    --------
    The 8-100-1 network of Dahl et al. (2008) on 8-bit parity:

    >>> import ppt_dask as ppt
    >>> data = ppt.datasets.parity(8)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> net.n_params, net.task
    (1001, 'binary')
    >>> params = net.init_params(seed=0)                  # shape (n_params,)
    >>> grad_sum, stats = net.loss_grad_stats(params, data.X, data.y)
    >>> grad_sum.shape, int(stats[2])                     # summed over the 256 rows
    ((1001,), 256)
    >>> net.predict(params, data.X[:4]).shape
    (4,)
    """

    sizes: tuple[int, ...]
    hidden: str = "tanh"
    output: str = "softmax"
    loss: str | None = None
    dtype: str = "float64"
    tolerance: float = 0.1
    weighted: bool = field(default=False, kw_only=True)

    def __post_init__(self):
        sizes = tuple(self.sizes) if np.ndim(self.sizes) == 1 else ()
        if len(sizes) < 2:
            raise ValueError(f"sizes needs at least 2 entries (inputs, outputs), got {self.sizes!r}")
        for width in sizes:
            if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
                raise ValueError(f"every width in sizes must be an integer >= 1, "
                                 f"got {width!r} in {self.sizes!r}")
        object.__setattr__(self, "sizes", tuple(int(w) for w in sizes))
        if self.hidden not in HIDDEN:
            raise ValueError(f"unknown hidden activation {self.hidden!r}; valid: {sorted(HIDDEN)}")
        if self.output not in OUTPUT:
            raise ValueError(f"unknown output activation {self.output!r}; valid: {sorted(OUTPUT)}")
        if self.output == "softmax" and self.sizes[-1] < 2:
            raise ValueError(f"softmax output needs >= 2 outputs, got sizes {self.sizes}; "
                             "use output='sigmoid' for one output")
        if self.loss is None:
            object.__setattr__(self, "loss", "mse" if self.output == "linear" else "cross_entropy")
        if self.loss not in LOSSES:
            raise ValueError(f"unknown loss {self.loss!r}; valid: {sorted(LOSSES)}")
        check_pair(self.output, self.loss)
        check_dtype("dtype", self.dtype)
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 <= tol < math.inf:
            raise ValueError(f"tolerance must be a finite number >= 0, got {tol!r}")
        object.__setattr__(self, "tolerance", float(tol))
        if not isinstance(self.weighted, (bool, np.bool_)):
            raise ValueError(f"weighted must be True or False, got {self.weighted!r}")

    def __getstate__(self) -> dict:
        """The fields only: the worked-out layout and mask stay behind (a network travels in
        every task; the mask alone is ``n_params`` numbers)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    # ------------------------------------------------------------------ layout

    @property
    def n_inputs(self) -> int:
        return self.sizes[0]

    @property
    def n_outputs(self) -> int:
        return self.sizes[-1]

    @property
    def row_shape(self) -> tuple[int]:
        """The shape of one input row (the model protocol, :mod:`ppt_dask.core.model`)."""
        return (self.sizes[0],)

    @property
    def task(self) -> str:
        """What the output layer solves, "classification" (softmax), "binary" or
        "multilabel" (sigmoid, one output or more) or "regression" (linear)."""
        if self.output == "softmax":
            return "classification"
        if self.output == "sigmoid":
            return "binary" if self.n_outputs == 1 else "multilabel"
        return "regression"

    def describe(self) -> dict:
        """The network in a run's settings and checkpoints (JSON values)."""
        shown = {"network": list(self.sizes), "hidden": self.hidden, "output": self.output,
                 "loss": self.loss, "dtype": self.dtype}
        return {**shown, "weighted": True} if self.weighted else shown

    @functools.cached_property
    def _layout(self) -> tuple:
        """Per layer ``(start, bias_start, stop, fan_in, fan_out)`` in the flat vector (worked
        out once: the hot path asks for it at every pass)."""
        layout, start = [], 0
        for fan_in, fan_out in zip(self.sizes, self.sizes[1:]):
            layout.append((start, start + fan_in * fan_out, start + (fan_in + 1) * fan_out, fan_in, fan_out))
            start += (fan_in + 1) * fan_out
        return tuple(layout)

    @property
    def n_params(self) -> int:
        return self._layout[-1][2]

    def unflatten(self, params: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Split a flat vector into ``[(W_0, b_0), (W_1, b_1), ...]``.

        Parameters
        ----------
        params : ndarray, shape (n_params,)

        Returns
        -------
        list of (W, b)
            ``W_l`` of shape (sizes[l], sizes[l+1]) and ``b_l`` of shape
            (sizes[l+1],), both *views* into ``params`` (writing to them writes
            to ``params``).
        """
        params = self._check_params(params, cast=False)
        return [(params[a:b].reshape(fan_in, fan_out), params[b:c]) for a, b, c, fan_in, fan_out in self._layout]

    def _shard_views(self, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`unflatten` of every row of ``flat`` (shape (S, n_params)) at once:
        ``[(W_0, b_0), ...]`` with ``W_l`` of shape (S, sizes[l], sizes[l+1]) and ``b_l``
        of shape (S, sizes[l+1]), views into ``flat``."""
        views = []
        for a, b, c, fan_in, fan_out in self._layout:
            W = flat[:, a:b].reshape(len(flat), fan_in, fan_out)
            assert not W.flags.owndata  # a view (the split of a row's run): products write into flat
            views.append((W, flat[:, b:c]))
        return views

    def weight_mask(self) -> np.ndarray:
        """1 on weight entries, 0 on biases: shape (n_params,), dtype ``self.dtype``, read-only
        (made once: every round's update asks for it).

        Used to apply L2 regularisation to the weights only.
        """
        return self._mask

    @functools.cached_property
    def _mask(self) -> np.ndarray:
        mask = np.zeros(self.n_params, dtype=self.dtype)
        for W, _ in self.unflatten(mask):
            W[...] = 1
        mask.setflags(write=False)
        return mask

    def init_params(self, seed) -> np.ndarray:
        """Random initial parameters, shape (n_params,), dtype ``self.dtype``.

        Glorot & Bengio (2010) uniform initialisation as in scikit-learn's
        ``BaseMultilayerPerceptron._init_coef``: W and then b of every layer drawn
        from U(-bound, bound) with ``bound = sqrt(6 / (fan_in + fan_out))``, or
        ``sqrt(2 / (fan_in + fan_out))`` when the hidden activation is sigmoid.
        ``seed`` goes to ``np.random.default_rng``; the same seed gives the same
        vector bit for bit (drawn in float64, then cast).
        """
        rng = np.random.default_rng(seed)
        factor = 2.0 if self.hidden == "sigmoid" else 6.0
        params = np.empty(self.n_params, dtype=np.float64)
        for W, b in self.unflatten(params):
            fan_in, fan_out = W.shape
            bound = math.sqrt(factor / (fan_in + fan_out))
            W[...] = rng.uniform(-bound, bound, W.shape)
            b[...] = rng.uniform(-bound, bound, b.shape)
        return params.astype(self.dtype, copy=False)

    # ------------------------------------------------------------------ public math

    def forward(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Network output, shape (n, n_outputs), for X of shape (n, n_inputs)."""
        params, X = self._check_params(params), passinputs.check_rows(self, X)
        return self._forward(self.unflatten(params), X[None])[-1][0]

    def loss_and_grad(self, params: np.ndarray, X: np.ndarray, Y
                      ) -> tuple[float, np.ndarray, int]:
        """Summed loss over the rows of X and its gradient.

        Parameters
        ----------
        params : ndarray, shape (n_params,)
        X : ndarray, shape (n, n_inputs)
        Y : targets for the n rows (see the class notes)

        Returns
        -------
        loss_sum : float
            Sum over the n patterns of the per-pattern loss.
        grad_sum : ndarray, shape (n_params,), dtype ``self.dtype``
            Gradient of ``loss_sum`` with respect to ``params`` (a new array).
        n : int
            Number of patterns.
        """
        grad, stats = self.loss_grad_stats(params, X, Y)
        return float(stats[0]), grad, int(stats[2])

    def loss_grad_stats(self, params: np.ndarray, X: np.ndarray, Y
                        ) -> tuple[np.ndarray, np.ndarray]:
        """Gradient and statistics from one forward/backward pass (the training hot path).

        Returns
        -------
        grad_sum : ndarray, shape (n_params,), dtype ``self.dtype``
            As in :meth:`ppt_dask.core.network.MLP.loss_and_grad`.
        stats : ndarray, shape (3,), float64
            ``[loss_sum, n_wrong, n]``; ``n_wrong`` counts the misclassified
            patterns (see :meth:`stats`). Shards' stats add up.
        """
        grads, stats = self._evaluate(params, [(X, Y)], backward=True)
        assert grads is not None  # a backward pass makes them
        return grads[0], stats[0]

    def loss_grad_stats_shards(self, params: np.ndarray, blocks) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`loss_grad_stats` of several blocks of rows in one pass (a worker's shards).

        Parameters
        ----------
        params : ndarray, shape (n_params,)
        blocks : sequence of (X, Y)
            S blocks with the same number of rows n each: ``X`` of shape (n, n_inputs) and
            its targets ``Y`` (see the class notes).

        Returns
        -------
        grad_sums : ndarray, shape (S, n_params), dtype ``self.dtype``
            Row ``i`` is block ``i``'s gradient sum.
        stats : ndarray, shape (S, 3), float64
            Row ``i`` is block ``i``'s ``[loss_sum, n_wrong, n]``.

        Row ``i`` of each is bitwise :meth:`loss_grad_stats` ``(params, *blocks[i])``: the
        blocks' rows are stacked and every layer is one batched product, which numpy runs
        as one BLAS call per block with that block's own shapes (see the module notes).
        """
        grads, stats = self._evaluate(params, blocks, backward=True)
        assert grads is not None  # a backward pass makes them
        return grads, stats

    def passes(self, params: np.ndarray, X: np.ndarray, Y):
        """A function ``rows -> (grad_sum, stats)`` for many passes over rows of ``X``.

        For a loop of small steps that updates ``params`` in place between passes (local
        SGD): the checks, the layer views of ``params`` and the gradient buffer are made
        once, not at every step. Each pass is :meth:`loss_grad_stats` of the weights as they
        are at the call, bit for bit, but writes its gradient into the same buffer: use it
        before the next pass.

        ``params`` is read at each pass where it lies when it is an aligned vector of
        ``self.dtype``; otherwise (float64 weights of a float32 network, say) it is cast into
        one working copy at each pass, as :meth:`loss_grad_stats` would cast it.
        """
        if not isinstance(params, np.ndarray):
            raise ValueError(f"passes() reads params at each pass: it needs an ndarray, got {type(params).__name__}")
        checked = self._check_params(params)  # a copy when params needs a cast or an alignment
        in_place = checked is params
        direct = isinstance(X, np.ndarray) and passinputs.check_rows(self, X) is X  # rows need no cast
        target, weights = passinputs.targets_and_weights(self, [Y], len(X))
        target = target[0]
        layers = self.unflatten(checked)
        grads = np.empty((1, self.n_params), dtype=self.dtype)
        grad_layers = self._shard_views(grads)

        def one(rows) -> tuple[np.ndarray, np.ndarray]:
            if not in_place:
                np.copyto(checked, params, casting="same_kind")
            block = X[rows] if direct else passinputs.check_rows(self, X[rows])
            if len(block) == 0:
                raise ValueError("a pass needs at least one row")
            block = np.require(block, requirements="C")  # a fancy index copies; a slice of C rows is C already
            w = None if weights is None else weights[0, rows][None]
            return grads[0], self._pass(layers, block[None], target[rows][None], grad_layers, w)[0]

        return one

    def stats(self, params: np.ndarray, X: np.ndarray, Y) -> np.ndarray:
        """``[loss_sum, n_wrong, n]`` (float64, shape (3,)) from a forward pass only.

        A pattern is wrong when (softmax) the arg-max output is not its class,
        (sigmoid) any output is on the other side of 0.5 from its target, or
        (linear) any ``|out - t| > tolerance``.
        """
        return self._evaluate(params, [(X, Y)], backward=False)[1][0]

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class labels (softmax, shape (n,)), 0/1 (sigmoid) or values (linear).

        Sigmoid and linear outputs have shape (n, n_outputs), or (n,) when there
        is a single output (as scikit-learn's estimators).
        """
        out = self.forward(params, X)
        if self.output == "softmax":
            return out.argmax(axis=1)
        if self.output == "sigmoid":
            out = (out > 0.5).astype(np.int64)
        return out.ravel() if self.n_outputs == 1 else out

    def predict_proba(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Probabilities, shape (n, n_outputs): of each class (softmax), or of
        each output being 1 (sigmoid). Not defined for a linear output."""
        if self.output == "linear":
            raise ValueError("predict_proba needs a softmax or sigmoid output, not 'linear'")
        return self.forward(params, X)

    # ------------------------------------------------------------------ internals

    def _forward(self, layers, X: np.ndarray) -> list[np.ndarray]:
        """Activations ``[X, a_1, ..., out]`` of every layer for stacked rows ``X`` of shape
        (S, n, n_inputs): each of shape (S, n, width)."""
        activations = [X]
        for l, (W, b) in enumerate(layers):
            z = activations[-1] @ W        # one gemm per shard; a new array, overwritten in place below
            z += b
            f = OUTPUT[self.output] if l == len(layers) - 1 else HIDDEN[self.hidden]
            f.forward(z.reshape(-1, z.shape[-1]))  # row by row (softmax) or elementwise, in place
            activations.append(z)
        return activations

    def _evaluate(self, params, blocks, backward: bool) -> tuple[np.ndarray | None, np.ndarray]:
        """One pass over blocks of rows: ``(grad_sums (S, n_params) or None, stats (S, 3))``."""
        params, X = self._check_params(params), passinputs.stack_rows(self, blocks)
        target, weights = passinputs.targets_and_weights(self, [Y for _, Y in blocks], X.shape[1])
        grads = np.empty((len(X), self.n_params), dtype=self.dtype) if backward else None
        if X.shape[1] == 0:
            if grads is not None:
                grads[...] = 0
            return grads, np.zeros((len(X), 3))
        return grads, self._pass(self.unflatten(params), X, target, None if grads is None else self._shard_views(grads),
                                 weights)

    def _pass(self, layers, X: np.ndarray, target: np.ndarray, grad_layers, weights=None) -> np.ndarray:
        """Forward (and, given ``grad_layers``, backward into them) over checked, stacked rows
        ``X`` (S, n, n_inputs): per shard ``[loss_sum, n_wrong, n]``, shape (S, 3). Every
        entry of ``grad_layers`` (:meth:`_shard_views`) is written. ``weights`` (S, n): the
        rows' weights (``weighted``), which multiply each row's loss, count and output delta."""
        activations = self._forward(layers, X)
        out = activations[-1]
        n_shards, n = out.shape[:2]
        rows = out.reshape(n_shards * n, self.n_outputs)  # a view: every row's own math, any stacking
        flat_target = target.reshape(n_shards * n, *target.shape[2:])
        assert self.loss is not None  # __post_init__ chose it
        stats = np.empty((n_shards, 3))
        wrong = wrong_rows(self.output, rows, flat_target, self.tolerance).reshape(n_shards, n)
        if weights is None:
            stats[:, 0] = LOSSES[self.loss].shard_values(out, target, self.output)
            stats[:, 1] = np.count_nonzero(wrong, axis=1)
            stats[:, 2] = n
        else:  # sums of the weights where the plain pass counts rows
            stats[:, 0] = LOSSES[self.loss].shard_values(out, target, self.output, weights.reshape(-1))
            stats[:, 1] = np.sum(weights * wrong, axis=1, dtype=np.float64)
            stats[:, 2] = np.sum(weights, axis=1, dtype=np.float64)
        if grad_layers is None:
            return stats

        # Backpropagation (Rumelhart, Hinton & Williams 1986): delta = dL/dz of a
        # layer; the layer's gradient is a_in^T delta and the column sums of delta,
        # both per shard (a sum over that shard's rows only).
        delta = output_delta(self.loss, self.output, rows, flat_target).reshape(out.shape)
        if weights is not None:  # dL/dz of the weighted sum (scikit-learn's deltas[last] *= sample_weight)
            delta *= weights[..., None]
        d_hidden = HIDDEN[self.hidden].backward
        assert d_hidden is not None  # every hidden activation has one (only outputs do without)
        for l in range(len(layers) - 1, -1, -1):
            gW, gb = grad_layers[l]
            np.matmul(activations[l].transpose(0, 2, 1), delta, out=gW)
            np.sum(delta, axis=1, out=gb)
            if l > 0:                      # no delta needed for the inputs
                delta = d_hidden(activations[l], delta @ layers[l][0].T)
        return stats

    def _check_params(self, params, cast: bool = True) -> np.ndarray:
        params = np.asarray(params, dtype=self.dtype) if cast else np.asarray(params)
        # Arrays received over a network may start at any byte; numpy's matmul is about
        # 1.5x slower on unaligned data, so a (cheap) aligned copy of the weights pays off.
        params = np.require(params, requirements="A")
        if params.shape != (self.n_params,):
            raise ValueError(f"params must be a 1-D vector of length n_params={self.n_params} "
                             f"for sizes {self.sizes}, got shape {params.shape}")
        return params
