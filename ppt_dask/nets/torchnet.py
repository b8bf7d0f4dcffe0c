"""A PyTorch module as a network of the model protocol (:class:`ppt_dask.core.model.Network`).

:class:`TorchNet` keeps the module's structure and its constants; the weights are the
engine's flat vector. Each gradient call copies the vector into a working copy of the module
(its trainable parameters are views of one flat tensor, so that is one copy), runs the
module and the loss summed over the rows, and returns the gradients of that sum from
autograd as one flat numpy vector. So the tree reduce adds the shards' sums and every
strategy runs unchanged, as for the numpy MLP.

Decisions (refusals are one line, before any cluster work; see :mod:`ppt_dask.nets.torchcheck`):

* **Losses are sums over rows.** A loss named by a string is applied with
  ``reduction="sum"``; a ``torch.nn`` loss module is copied with its ``reduction`` set to
  ``"sum"`` (a mean over a shard's rows would weigh the shards wrongly when the tree adds
  them); a plain function must return one loss per row, which are summed.
* **Modes.** Gradient passes run the module in train mode (``module.train()``, as a PyTorch
  training loop does: dropout on); the checks on the training and test sets and the
  predictions in eval mode, without gradients.
* **Random forward passes** (dropout) draw from torch's generator seeded, for each pass,
  from a checksum of the pass's weights and rows (CRC-32): the same pass draws the same
  masks on any worker, in the serial reference and in a replay after a lost worker, so
  runs stay bitwise the same; a deterministic module skips it.
* **Frozen parameters and buffers** are constants that travel with the module; a pass that
  changes a buffer (BatchNorm's running statistics) is refused, so are hooks, sparse
  gradients, lazy, non-float or non-CPU parameters.
* **Threads.** A network computes with as many torch threads as the worker it runs on has
  threads (``threads="auto"``, the default): the process's ``OMP_NUM_THREADS``, which
  ``ppt.connect(threads_per_worker=t)`` (``--threads-per-worker t``) and the ssh deploy set
  to each worker's ``t`` (so NumPy's BLAS has ``t`` threads there too), and Dask's own
  workers to 1 (Dask's nanny writes it into the process that starts a local cluster too, so
  the head computes with the workers' count); where it is unset, one thread. So one worker of ``t``
  threads on ``t`` cores runs each step on all of them (the OpenMP threads inside MPI ranks of
  Sobreira and Carneiro (2024)), and ``t`` workers of one thread do not fight over the cores. ``threads=k`` sets
  ``k`` in every process; None leaves torch's setting alone. The threads are set in the
  thread that computes, before each pass (OpenMP keeps a count per thread). What a seeded
  run repeats bit for bit (``train``'s ``reproducible``: the same number of workers, or with
  "any-p" any number) holds when every worker has the same threads (torch splits its sums by
  the thread count), and so does the match with the serial path run with those threads.
* **Deterministic kernels.** With ``deterministic=True`` (the default) those processes run
  torch's deterministic kernels where it has them, a warning where it has none
  (``torch.set_deterministic_debug_mode("warn")``, which is
  ``torch.use_deterministic_algorithms(True, warn_only=True)``); on the CPU they differ from
  the default ones only for scatter-like operations (``index_put`` with accumulation,
  ``index_copy``, ``put_``), whose default kernels may add in another order on several
  threads. The mode cost nothing measurable on a small CNN's step (0.98-1.01x the default
  kernels', with torch's filling of new tensors; graphs/README.md, "A module's step");
  ``deterministic=False`` leaves torch's setting.
* **Initial weights** for seed ``s``: the module's builder (a class or a function given
  instead of a module) called under ``torch.manual_seed(s)``, or, for a module given as an
  object, each submodule's ``reset_parameters()`` under that seed (parameters that no
  ``reset_parameters`` covers keep the values given). ``params=net.params_of(module)``
  starts a run from the module's own weights.

The module travels to the workers pickled once per network (cloudpickle, so classes made in
a notebook go too) without its trainable weights; each worker process keeps the copy it
built for the next tasks of the same network, one working copy per worker thread.

This package (:mod:`ppt_dask.nets`) is the only part of ppt_dask that imports torch.

The module stays whole, over 400 lines: it is one class, the adapter between a torch module and
the model protocol (:class:`ppt_dask.core.model.Network`); its parameter layout, the working
copies on the workers and the passes over them are one concept, and torch's types stay in it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import uuid
import zlib

import numpy as np

from ppt_dask.core import validation

INSTALL_HINT = ("ppt.TorchNet needs PyTorch: pip install 'ppt_dask[torch]' (torch 2.1 to 2.13.0; on Linux "
                "the CPU build: pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu)")
try:
    import torch
    from torch import nn
except ImportError as exc:  # the extra is not installed
    raise ImportError(f"{INSTALL_HINT} ({exc})") from None

# after torch: its ImportError says how to install it
from ppt_dask.nets import building, copies, torchcheck, torchloss  # noqa: E402
from ppt_dask.nets.building import load_builder  # noqa: E402, F401  (the CLI's --model takes it from here)
from ppt_dask.nets.torchloss import LOSSES  # noqa: E402

__all__ = ["TorchNet", "LOSSES", "load_builder"]

CHUNK_ROWS = 1024  # rows per forward pass of the checks and predictions (bounded memory)


class TorchNet:
    """A ``torch.nn.Module`` trained by ppt_dask: any strategy, any number of workers.

    Parameters
    ----------
    module : torch.nn.Module, or a class or function returning one
        The network (a class or function is called with no arguments). It is copied:
        later changes to it do not reach the TorchNet.
    loss : {"cross_entropy", "nll", "bce", "mse"}, a torch.nn loss module, or a function
        ``loss(outputs, targets) -> per-row losses, shape (rows,)``
        "cross_entropy": the module returns logits, the targets are class labels
        (classification); "nll": log-probabilities; "bce": logits of 0/1 targets (binary
        with one output, multilabel with more; ``BCEWithLogitsLoss``); "mse": half the sum
        of squared errors per row (regression, as :class:`ppt_dask.MLP` and scikit-learn's
        MLPRegressor). A loss module is summed over rows (``reduction="sum"``).
    row_shape : tuple of int, optional
        The shape of one input row, ``(1, 28, 28)`` for MNIST images. None: the shape of the
        data it is trained on (``ppt.train`` fixes it from the shards).
    task : {"classification", "binary", "multilabel", "regression"}, optional
        Needed for a loss function or a loss module not named above.
    tolerance : float
        Regression: a row counts as wrong when an output is off by more than this.
    threads : "auto", int or None
        torch threads in every process the network computes in: "auto" (the default) as many
        as the worker has threads (``OMP_NUM_THREADS``, 1 where unset); an int that many;
        None leaves torch's setting alone.
    deterministic : bool
        Torch's deterministic kernels there too (``torch.set_deterministic_debug_mode("warn")``).

    Attributes
    ----------
    n_params, dtype, row_shape, n_outputs, task : the model protocol's
    random : bool
        Whether the forward pass is random (its draws are then seeded per pass).
    module_path : str or None
        ``"package.module:function"`` when ``module`` was a builder importable by that path
        (model files record it).

    Examples
    --------
    A small module on 8-bit parity: its weights become one flat vector, its gradient
    comes from autograd, summed over the rows:

    >>> import torch
    >>> import ppt_dask as ppt
    >>> data = ppt.datasets.parity(8, dtype="float32")
    >>> module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    >>> net = ppt.TorchNet(module, loss="bce", row_shape=(8,))
    >>> net.n_params, net.dtype, net.task
    (161, 'float32', 'binary')
    >>> params = net.init_params(seed=0)
    >>> grad_sum, stats = net.loss_grad_stats(params, data.X, data.y)
    >>> grad_sum.shape, int(stats[2])
    ((161,), 256)
    >>> type(net.module_of(params)).__name__       # back in PyTorch, with these weights
    'Sequential'

    ``ppt.train(net, shards, strategy)`` trains it as it does an MLP.
    """

    def __init__(self, module, loss="cross_entropy", *, row_shape=None, task=None, tolerance: float = 0.1,
                 threads: int | str | None = "auto", deterministic: bool = True):
        builder = None if isinstance(module, nn.Module) else module
        if builder is not None and not callable(builder):
            raise ValueError(f"module must be a torch.nn.Module or a function that returns one, got {module!r}")
        if builder is not None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                module = building.built(builder)
        torchcheck.check_module(module, self._what(module, builder))
        if threads is not None and not (isinstance(threads, str) and threads == "auto"):
            try:
                validation.check_int_at_least("threads", threads, 1)
            except ValueError:
                raise ValueError(f"threads must be 'auto', an integer >= 1 or None, got {threads!r}") from None
        validation.check_nonneg("tolerance", tolerance)
        self.name = type(module).__name__
        self.module_path = building.path_of(builder) if builder is not None else None
        self.threads, self.deterministic, self.tolerance = threads, bool(deterministic), float(tolerance)
        summed, self.loss_name, task_of_loss, self.outputs = torchloss.loss_spec(loss)
        if task is not None and task not in validation.TASKS:
            raise ValueError(f"task must be one of {validation.TASKS}, got {task!r}")
        if task is None and task_of_loss is None:
            raise ValueError(f"a loss of your own needs task= ({', '.join(validation.TASKS)}), got loss {loss!r}")
        self._task = task or task_of_loss
        self._shared = copies.Shared(copy.deepcopy(module), builder, summed)
        names = [(n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad]
        self._layout = tuple(names)
        self.n_params = int(sum(math.prod(s) for _, s in names))
        self.dtype = str(next(p.dtype for p in module.parameters() if p.requires_grad)).replace("torch.", "")
        # with a module given as an object, parameters no reset_parameters() covers keep their values
        self._kept = () if builder is not None else tuple(building.uncovered(module))
        self._token, self._bytes = uuid.uuid4().hex, None
        self.row_shape, self.n_outputs, self.random = None, None, False
        self._pickle()  # now: a module that cannot be sent to the workers is refused here
        if row_shape is not None:
            self._bind(row_shape)

    # ------------------------------------------------------------------ the protocol

    @property
    def task(self) -> str:
        if self._task == "binary" and (self.n_outputs or 1) > 1:
            return "multilabel"  # a 0/1 target per output
        return self._task

    def with_row_shape(self, row_shape) -> TorchNet:
        """This network fixed to rows of ``row_shape`` (probed: its outputs, its loss)."""
        other = copy.copy(self)
        other._bind(row_shape)
        return other

    def init_params(self, seed) -> np.ndarray:
        """Initial weights for ``seed`` (see the module docstring), shape (n_params,)."""
        return self.params_of(self._initialised(int(seed)))

    def weight_mask(self) -> np.ndarray:
        """1 on parameters of 2 or more dimensions (weights, kernels), 0 on vectors (biases,
        norms' scales): L2 on the weights only, as the MLP and common PyTorch practice."""
        return np.concatenate([np.full(math.prod(s), 1 if len(s) >= 2 else 0, dtype=self.dtype)
                               for _, s in self._layout])

    def loss_grad_stats(self, params: np.ndarray, X: np.ndarray, Y) -> tuple[np.ndarray, np.ndarray]:
        """The gradient of the loss summed over the rows (shape (n_params,)) and
        ``[loss_sum, n_wrong, n]``, from one train-mode pass."""
        grad = np.zeros(self.n_params, dtype=self.dtype)
        if len(X) == 0:
            return grad, np.zeros(3)
        work = self._ready(params)
        x, t = self._rows(X), self._target(Y, len(X))
        work.mode(True)
        with self._seeded(params, X):  # a random module's draws: seeded, one pass at a time
            out = _as_rows(work.module(x))
            loss = self._loss(out, t)
            grads = torch.autograd.grad(loss, work.trainable, allow_unused=True)
        flat, start = torch.from_numpy(grad), 0
        for g, p in zip(grads, work.trainable):
            if g is not None:
                flat[start:start + p.numel()].copy_(g.reshape(-1))
            start += p.numel()
        return grad, np.array([float(loss.detach()), self._wrong(out.detach(), t), len(X)], dtype=np.float64)

    def stats(self, params: np.ndarray, X: np.ndarray, Y) -> np.ndarray:
        """``[loss_sum, n_wrong, n]`` from eval-mode passes without gradients."""
        total = np.zeros(3)
        for start in range(0, len(X), CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            with self._evaluating(params, X[rows]) as out:
                t = self._target(np.asarray(Y)[rows], len(out))
                total += (float(self._loss(out, t)), self._wrong(out, t), len(out))
        return total

    def forward(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """The module's outputs in eval mode, shape (n, n_outputs)."""
        outs = []
        for start in range(0, len(X), CHUNK_ROWS):
            with self._evaluating(params, X[start:start + CHUNK_ROWS]) as out:
                outs.append(out.numpy().copy())
        return np.concatenate(outs) if outs else np.zeros((0, self.n_outputs), dtype=self.dtype)

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class indices (classification), 0/1 (binary, multilabel) or values; shape (n,) for
        one output, else (n, n_outputs)."""
        out = self.forward(params, X)
        if self.task == "classification":
            return out.argmax(axis=1)
        if self.task in ("binary", "multilabel"):
            out = (out > (0.5 if self.outputs == "probs" else 0.0)).astype(np.int64)
        return out.ravel() if self.n_outputs == 1 else out

    def predict_proba(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Probabilities, shape (n, n_outputs): of each class (softmax of logits, exp of
        log-probabilities), or of each output being 1 (sigmoid of logits)."""
        if self.task == "regression":
            raise ValueError("predict_proba needs a classification or binary network, not regression")
        out = torch.from_numpy(self.forward(params, X))
        if self.outputs == "probs":
            return out.numpy()
        if self.task == "classification":
            return (out.exp() if self.outputs == "log_probs" else torch.softmax(out, dim=1)).numpy()
        return torch.sigmoid(out).numpy()

    def describe(self) -> dict:
        """The network in a run's settings, checkpoints and model files (JSON values)."""
        return {"network": self.name, "kind": "TorchNet", "module": self.module_path, "loss": self.loss_name,
                "task": self.task, "outputs": self.outputs, "row_shape": list(self.row_shape or ()),
                "n_outputs": self.n_outputs, "n_params": self.n_params, "dtype": self.dtype,
                "architecture": self.architecture()}

    # ------------------------------------------------------------------ modules and weights

    def architecture(self) -> str:
        """A checksum of the module's structure (its printout, parameter names and shapes)."""
        text = repr(self._shared.template) + repr(self._layout)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def params_of(self, module: nn.Module) -> np.ndarray:
        """The flat vector of ``module``'s trainable weights (the same layout), shape (n_params,)."""
        layout = tuple((n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad)
        if layout != self._layout:
            raise ValueError(f"the module's parameters {building.shown(layout)} differ from the network's "
                             f"{building.shown(self._layout)}")
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for n, p in module.named_parameters() if p.requires_grad])
        return flat.numpy().astype(self.dtype, copy=True)

    def module_of(self, params: np.ndarray) -> nn.Module:
        """A new module (a copy of the network's) holding the weights ``params``."""
        module = copy.deepcopy(self._shared.template)
        building.materialise(module, self._layout)
        params = self._check_params(params)
        with torch.no_grad():
            start = 0
            for p in (q for q in module.parameters() if q.requires_grad):
                p.copy_(torch.from_numpy(params[start:start + p.numel()].copy()).view(p.shape))
                start += p.numel()
        return module

    @classmethod
    def rebuild(cls, module, description: dict) -> TorchNet:
        """The TorchNet a model file describes (``describe()``), from ``module`` given again:
        a module, the function that builds it, or its path ``"package.module:function"``.

        A loss of one's own is not in the file: the network then scores with the named loss
        of its task and outputs (predictions do not need the loss)."""
        if isinstance(module, str):
            module = load_builder(module)
        loss = description.get("loss")
        if loss not in LOSSES:
            task = "binary" if description.get("task") == "multilabel" else description.get("task")
            loss = next((name for name, (_, t, o) in LOSSES.items()
                         if t == task and o in (description.get("outputs"), "values")), "mse")
        net = cls(module, loss=loss, row_shape=tuple(description["row_shape"]),
                  task=None if loss in LOSSES else description.get("task"))
        if loss != description.get("loss"):
            net.loss_name = f"{description.get('loss')} (not in the file; scores with {loss!r})"
            net.outputs = description.get("outputs", net.outputs)
        return net

    def __repr__(self) -> str:
        shape = "any" if self.row_shape is None else self.row_shape
        return f"TorchNet({self.name}, loss={self.loss_name!r}, row_shape={shape}, {self.n_params} parameters)"

    # ------------------------------------------------------------------ pickling

    def _pickle(self) -> bytes:
        """The module without its trainable weights (they are the engine's vector) and its
        builder, pickled once (cloudpickle: what a notebook defines travels by value)."""
        if self._bytes is None:
            import cloudpickle  # a dependency of dask

            template = copy.deepcopy(self._shared.template)
            for name, p in template.named_parameters():
                if p.requires_grad and name not in self._kept:
                    p.data = torch.empty(0, dtype=p.dtype)
            try:
                self._bytes = cloudpickle.dumps((template, self._builder, self._loss))
            except Exception as exc:
                raise ValueError(f"{self._what(template, self._builder)} cannot be pickled to go to the workers "
                                 f"({type(exc).__name__}: {exc})") from None
        return self._bytes

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k != "_shared"}
        state["_bytes"] = self._pickle()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._shared = copies.shared(self._token, self._bytes, self._layout)

    # ------------------------------------------------------------------ internals

    @property
    def _builder(self):
        return self._shared.builder

    @property
    def _loss(self):
        return self._shared.loss

    @staticmethod
    def _what(module, builder) -> str:
        if builder is not None:
            return f"the module of {getattr(builder, '__qualname__', repr(builder))}()"
        return f"module {type(module).__name__}"

    def _bind(self, row_shape) -> None:
        shape = tuple(row_shape) if np.ndim(row_shape) == 1 else None
        if not shape or any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1 for d in shape):
            raise ValueError(f"row_shape must be a tuple of integers >= 1, got {row_shape!r}")
        shape = tuple(int(d) for d in shape)
        module = self._initialised(0)
        x = torch.from_numpy(np.random.default_rng(0).standard_normal((2, *shape)).astype(self.dtype))
        found = torchcheck.probe(module, x, self._loss, self._probe_target, self._what(module, self._builder))
        if self._task == "classification" and found["n_outputs"] < 2:
            raise ValueError(f"{self._what(module, self._builder)} has {found['n_outputs']} output for "
                             f"classification; it needs one per class (2 or more)")
        self.row_shape, self.n_outputs, self.random = shape, found["n_outputs"], found["random"]

    def _probe_target(self, out: torch.Tensor) -> torch.Tensor:
        if self._task == "classification":
            return torch.zeros(len(out), dtype=torch.int64)
        return torch.zeros_like(out)

    def _initialised(self, seed: int) -> nn.Module:
        """A module with the initial weights of ``seed``."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if self._builder is not None:
                module = building.built(self._builder)
                layout = tuple((n, tuple(p.shape)) for n, p in module.named_parameters() if p.requires_grad)
                if layout != self._layout:
                    name = getattr(self._builder, "__qualname__", "the builder")
                    raise ValueError(f"{name}() returns a module of other parameters on a second call "
                                     f"({building.shown(layout)}); it must build the same module every time")
                return module
            module = copy.deepcopy(self._shared.template)
            building.materialise(module, self._layout)
            for sub in module.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()
            return module

    def _check_params(self, params) -> np.ndarray:
        params = np.asarray(params, dtype=self.dtype)
        if params.shape != (self.n_params,):
            raise ValueError(f"params must be a 1-D vector of length n_params={self.n_params}, got shape "
                             f"{params.shape}")
        return params

    def _ready(self, params) -> copies.Work:
        """This thread's working copy, holding ``params``."""
        if self.row_shape is None:
            raise ValueError(f"{self!r} takes rows of any shape: fix it first (net.with_row_shape(shape), or "
                             "train it: ppt.train fixes it to the data's)")
        copies.configure(self.threads, self.deterministic)
        local = self._shared.local
        work = getattr(local, "work", None)
        if work is None:
            work = local.work = copies.Work(self._shared.template, self.n_params, getattr(torch, self.dtype))
        work.load(self._check_params(params))
        return work

    @contextlib.contextmanager
    def _evaluating(self, params, X):
        """The eval-mode outputs of rows ``X``, without gradients."""
        work = self._ready(params)
        work.mode(False)
        with torch.no_grad(), self._seeded(params, X):
            yield _as_rows(work.module(self._rows(X)))

    def _seeded(self, params, X):
        """Torch's generator seeded from the pass's weights and rows, for a random module."""
        if not self.random:
            return contextlib.nullcontext()
        seed = zlib.crc32(np.ascontiguousarray(X), zlib.crc32(np.ascontiguousarray(params)))
        return copies.forked(seed)

    def _rows(self, X) -> torch.Tensor:
        X = np.asarray(X)
        if X.shape[1:] != self.row_shape:
            raise ValueError(f"X must have rows of shape {self.row_shape}, got X of shape {X.shape}")
        return copies.tensor(np.require(X, dtype=self.dtype, requirements="C"))

    def _target(self, Y, n: int) -> torch.Tensor:
        Y = np.asarray(Y)
        if len(Y) != n:
            raise ValueError(f"Y has {len(Y)} rows but X has {n}")
        if self._task == "classification" and Y.ndim == 1:
            return copies.tensor(np.require(Y, dtype=np.int64, requirements="C"))
        return copies.tensor(np.require(Y, dtype=self.dtype, requirements="C")).reshape(n, -1)

    def _wrong(self, out: torch.Tensor, t: torch.Tensor) -> int:
        if self._task == "classification":
            labels = t if t.ndim == 1 else t.argmax(dim=1)
            return int((out.argmax(dim=1) != labels).sum())
        if self._task in ("binary", "multilabel"):
            wrong = (out > (0.5 if self.outputs == "probs" else 0.0)) != (t > 0.5)
        else:
            wrong = (out - t).abs() > self.tolerance
        return int(wrong.any(dim=1).sum())


def _as_rows(out: torch.Tensor) -> torch.Tensor:
    return out.reshape(-1, 1) if out.ndim == 1 else out
