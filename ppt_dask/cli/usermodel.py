"""``--model package.module:function``: a PyTorch module of the user's on the command line.

The path names a function (or class) that returns a ``torch.nn.Module``, the
``module:attribute`` convention of uvicorn and gunicorn; as they do, the current folder is
searched first (``ppt-dask train mnist --model mynets:lenet5`` with ``mynets.py`` here); the
examples of :mod:`ppt_dask.nets.examples` work anywhere (``--model
ppt_dask.nets.examples:lenet5``). The module becomes a :class:`ppt_dask.TorchNet` with the
data set's loss (cross-entropy for classes, binary cross-entropy for 0/1 targets, squared error for
values) and row shape (MNIST: images, ``(1, 28, 28)``; ``--row-shape`` sets another), probed
on that shape before the cluster starts. A bad path, a function that does not return a
module, or a module whose output does not fit the data ends in one line naming it.

A package imported from the current folder (not installed) is pickled by value, so workers
on other machines do not need the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys

LOSS_OF_TASK = {"classification": "cross_entropy", "binary": "bce", "multilabel": "bce", "regression": "mse"}
# the row shape a module gets when --row-shape is not given: the data set's images, else flat
IMAGE_ROWS = {"mnist": (1, 28, 28)}
# what --model refuses: the flags of the built-in MLP
MLP_FLAGS = ("hidden", "activation")


def row_shape(text: str) -> tuple[int, ...]:
    """``--row-shape 1,28,28`` (an argparse type)."""
    try:
        shape = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--row-shape takes sizes like 1,28,28; got {text!r}") from None
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"--row-shape sizes must be >= 1; got {text!r}")
    return shape


def refuse_flags(args, kind: str = "preset") -> None:
    """The built-in MLP's flags do not apply with --model; on a built-in data set --row-shape
    applies only with it; --model applies to the built-in data sets (``kind`` "preset")."""
    if getattr(args, "model", None) is not None and kind != "preset":
        raise ValueError("--model applies to the built-in data sets, not to a table or arrays of your own "
                         "(they train the built-in MLP here; a module of your own on them: ppt.TorchNet with "
                         "ppt.datasets.from_table in Python)")
    if getattr(args, "model", None) is None:
        if getattr(args, "row_shape", None) is not None and kind == "preset":
            raise ValueError("--row-shape applies with --model (the built-in MLP takes flat rows)")
        return
    for name in MLP_FLAGS:
        if getattr(args, name, None) is not None:
            raise ValueError(f"--{name} applies to the built-in MLP, not with --model {args.model}")


def shaped(data, dataset: str, shape: tuple | None):
    """The data set with its rows (and test rows) of ``shape`` (default: its images, else
    flat): a view, no copy."""
    n_features = data.X.shape[1]
    shape = tuple(shape or IMAGE_ROWS.get(dataset, (n_features,)))
    if math.prod(shape) != n_features:
        raise ValueError(f"--row-shape {','.join(map(str, shape))} holds {math.prod(shape)} numbers; a row of "
                         f"{dataset} holds {n_features}")
    X_test = None if data.X_test is None else data.X_test.reshape(len(data.X_test), *shape)
    return dataclasses.replace(data, X=data.X.reshape(len(data.X), *shape), X_test=X_test)


def network(path: str, data, dtype: str | None):
    """The TorchNet of ``--model PATH`` for the (shaped) data set, probed; ``dtype``: the
    ``--dtype`` given, which must be the module's."""
    try:
        from ppt_dask.nets.torchnet import TorchNet, load_builder
    except ImportError as exc:  # the [torch] extra is not installed: say how to get it
        raise ValueError(f"--model: {exc}") from None
    builder = _imported(path, load_builder)
    if not callable(builder):
        raise ValueError(f"--model {path}: a {type(builder).__name__}, not a function or class that returns a "
                         "torch module")
    try:
        net = TorchNet(builder, loss=LOSS_OF_TASK[data.task], row_shape=data.X.shape[1:])
    except ValueError as exc:
        raise ValueError(f"--model {path}: {exc}") from None
    if dtype is not None and dtype != net.dtype:
        raise ValueError(f"--dtype {dtype}, but the parameters of --model {path} are {net.dtype} "
                         f"(build them as {dtype}, or leave out --dtype)")
    outputs = data.y.shape[1] if data.y.ndim == 2 else int(data.y.max()) + 1 if data.task == "classification" else 1
    if net.n_outputs != outputs:
        raise ValueError(f"--model {path}: the module has {net.n_outputs} outputs; {data.name} needs {outputs}")
    return net


def _imported(path: str, load_builder):
    """``load_builder(path)`` with the current folder searched first (uvicorn's --app-dir);
    a package found there is pickled by value."""
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        builder = load_builder(path)
    except ValueError as exc:
        raise ValueError(f"--model: {exc}") from None
    top = sys.modules.get(path.partition(":")[0].split(".")[0])
    origin = getattr(top, "__file__", None) or next(iter(getattr(top, "__path__", [])), None)
    if origin and os.path.abspath(origin).startswith(here + os.sep):
        import cloudpickle
        cloudpickle.register_pickle_by_value(top)
    return builder
