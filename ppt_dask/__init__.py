"""ppt_dask: data-parallel training of neural networks on a Dask cluster.

The head (this process) places the training set once as logical shards on the workers
(:func:`enter_data`). :func:`train` then starts one long task per worker, a loop over the
rounds: each round a loop computes its shards' gradients, adds its sums with the other
loops' straight over links of their own (through shared memory on one machine), in the
fixed order, and takes the step, so every worker holds bitwise the same weights as the
others. What a seeded run repeats from one run to the next is ``train``'s ``reproducible``
(by default for :class:`Sync` the same weights on the same number of workers; with "any-p"
on any number). No task is scheduled per round: the head
reads each batch of rounds' numbers from the loops' mailboxes, checks the stopping rule,
keeps a copy of the weights now and then, and recovers from a lost worker.

The strategies (:class:`Sync`, :class:`PPT`, :class:`Average`, :class:`LocalSGD`,
:class:`Async`) say what a round computes; :class:`MLP` and :class:`TorchNet` (any PyTorch
module) are the networks; :class:`PPTClassifier` and :class:`PPTRegressor` put it all
behind scikit-learn's API. The documentation's Concepts page names the parts.

Examples
--------
>>> import ppt_dask as ppt
>>> client = ppt.connect(n_workers=2)
>>> data = ppt.datasets.parity(8)
>>> shards = ppt.enter_data(client, data.X, data.y, n_shards=4)
>>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
>>> result = ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9),
...                    ppt.Stop(max_epochs=2000, target_error=0.0))
>>> result.learned
True
>>> ppt.exit_data(shards)
>>> client.close()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# name -> the module that defines it. Importing ppt_dask loads none of them: each is
# imported the first time it is used, so ``import ppt_dask.core`` stays numpy only and the
# command line checks its arguments before dask is loaded.
_EXPORTS = {
    "MLP": "ppt_dask.core.network",
    "Network": "ppt_dask.core.model",
    "TorchNet": "ppt_dask.nets.torchnet",
    "SGD": "ppt_dask.core.optimizers",
    "Stop": "ppt_dask.core.stopping",
    "connect": "ppt_dask.engine.placement.cluster",
    "ShardSet": "ppt_dask.engine.placement.shards", "enter_data": "ppt_dask.engine.placement.enter",
    "enter_source": "ppt_dask.engine.placement.enter", "exit_data": "ppt_dask.engine.placement.enter",
    "Async": "ppt_dask.algorithms.asynchronous", "StaleGradientsWarning": "ppt_dask.algorithms.asynchronous",
    "PPT": "ppt_dask.algorithms.strategies", "Average": "ppt_dask.algorithms.average",
    "Sync": "ppt_dask.algorithms.strategies",
    "LocalSGD": "ppt_dask.algorithms.localsgd",
    "Result": "ppt_dask.engine.result", "evaluate": "ppt_dask.engine.result", "train": "ppt_dask.api",
    "PPTClassifier": "ppt_dask.sklearn.estimator", "PPTRegressor": "ppt_dask.sklearn.estimator",
    "Model": "ppt_dask.engine.saving.modelfile", "load_model": "ppt_dask.engine.saving.modelfile",
    "show_versions": "ppt_dask.versions",
}
_MODULES = {
    "cluster": "ppt_dask.engine.placement.cluster",
    "datasets": "ppt_dask.data.datasets",
    "strategies": "ppt_dask.algorithms.strategies",
}
# not public: ppt_dask.core.validation (the checks of every entry point, named in their
# errors; its check_* helpers are the package's own, free to change)

__all__ = sorted([*_EXPORTS, *_MODULES])


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        raise AttributeError(f"module 'ppt_dask' has no attribute {name!r}")
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__():
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from ppt_dask.algorithms import strategies
    from ppt_dask.algorithms.asynchronous import Async, StaleGradientsWarning
    from ppt_dask.algorithms.average import Average
    from ppt_dask.algorithms.localsgd import LocalSGD
    from ppt_dask.algorithms.strategies import PPT, Sync
    from ppt_dask.api import train
    from ppt_dask.core.model import Network
    from ppt_dask.core.network import MLP
    from ppt_dask.core.optimizers import SGD
    from ppt_dask.core.stopping import Stop
    from ppt_dask.data import datasets
    from ppt_dask.engine.placement import cluster
    from ppt_dask.engine.placement.cluster import connect
    from ppt_dask.engine.placement.enter import enter_data, enter_source, exit_data
    from ppt_dask.engine.placement.shards import ShardSet
    from ppt_dask.engine.result import Result, evaluate
    from ppt_dask.engine.saving.modelfile import Model, load_model
    from ppt_dask.nets.torchnet import TorchNet
    from ppt_dask.sklearn.estimator import PPTClassifier, PPTRegressor
    from ppt_dask.versions import show_versions

__version__ = "0.1.0"
