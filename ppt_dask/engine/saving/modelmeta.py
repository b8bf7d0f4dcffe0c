"""What a model file says of its network and arrays (:mod:`ppt_dask.engine.saving.modelfile`
reads and writes the file): an MLP's fields or another network's description, the network
rebuilt from them and checked against the one given, the run's settings as JSON, and the
checksum of the arrays."""

from __future__ import annotations

import hashlib

import numpy as np

from ppt_dask.core import model as netmodel
from ppt_dask.core.model import Network
from ppt_dask.core.network import MLP

NETWORK_FIELDS = ("sizes", "hidden", "output", "loss", "dtype", "tolerance")


def default_classes(net: Network) -> np.ndarray:
    """The labels the trainer uses: 0..k-1 (classification), 0/1 (binary), none otherwise."""
    if net.task == "classification":
        return np.arange(net.n_outputs)
    return np.array([0, 1]) if net.task == "binary" else np.array([], dtype=np.int64)


def network_meta(net: Network) -> dict:
    """What the file says of the network: an MLP's fields (files of format 1 as they always
    were), or another network's ``describe()`` with its kind."""
    if isinstance(net, MLP):
        return {"sizes": list(net.sizes), "hidden": net.hidden, "output": net.output,
                "loss": net.loss, "dtype": net.dtype, "tolerance": net.tolerance}
    return {"kind": type(net).__name__, **netmodel.describe(net), "n_params": int(net.n_params),
            "row_shape": list(net.row_shape), "n_outputs": int(net.n_outputs), "task": net.task,
            "dtype": str(net.dtype)}


def network_from(meta: dict, module, path: str) -> Network:
    """The network of a file: an MLP from its fields; any other from ``module``, checked
    against what the file says of it."""
    if "kind" not in meta:
        if module is not None:
            raise ValueError(f"{path} holds an MLP, rebuilt from the file: module= does not apply")
        return MLP(**{k: (tuple(v) if k == "sizes" else v) for k, v in meta.items() if k in NETWORK_FIELDS})
    if module is None:
        built = f" (trained with the module of {meta['module']!r})" if meta.get("module") else ""
        raise ValueError(f"{path} holds the weights of a {meta['kind']} ({meta.get('network')}){built}; a model "
                         "file holds no code: give the network again, load_model(path, module=...) "
                         "(ppt-dask predict: --model PACKAGE.MODULE:FUNCTION)")
    if meta["kind"] == "TorchNet" and not isinstance(module, Network):
        from ppt_dask.nets.torchnet import TorchNet  # torch: only for files of a TorchNet
        net = TorchNet.rebuild(module, meta)
    else:
        net = netmodel.check_network(module, "module")
    found = {**netmodel.describe(net), "n_params": int(net.n_params), "row_shape": list(net.row_shape),
             "dtype": str(net.dtype)}
    differ = [f"{k}: the file has {meta[k]!r}, the network {found[k]!r}" for k in
              ("n_params", "row_shape", "dtype", "architecture") if k in meta and k in found and meta[k] != found[k]]
    if differ:
        raise ValueError(f"{path}: the network given is not the one trained ({'; '.join(differ)})")
    return net


def jsonable(value):
    """Settings and summaries as JSON: numpy scalars and arrays, tuples, anything else as text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def digest(params: np.ndarray, classes: np.ndarray, *scaling: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in (params, classes, *scaling):
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()
