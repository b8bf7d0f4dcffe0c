"""ppt_dask: data-parallel training of neural networks on a Dask cluster.

The head places the training set once as logical shards on the workers
(:func:`enter_data`), then every round sends one gradient task per worker, combines the
results in tree-reduce tasks and applies the update on the cluster, where the weights
stay (:func:`train`).

>>> import ppt_dask as ppt                                       # doctest: +SKIP
>>> client = ppt.connect()                                       # doctest: +SKIP
>>> data = ppt.datasets.parity(8)                                # doctest: +SKIP
>>> shards = ppt.enter_data(client, data.X, data.y, n_shards=8)  # doctest: +SKIP
>>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")  # doctest: +SKIP
>>> result = ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9),
...                    ppt.Stop(max_epochs=2000, target_error=0.0))  # doctest: +SKIP
"""

from . import cluster, datasets, strategies, validation
from .cluster import connect
from .network import MLP
from .optimizers import SGD
from .shards import ShardSet, enter_data, enter_source, exit_data
from .asynchronous import Async
from .estimator import PPTClassifier, PPTRegressor
from .stopping import Stop
from .strategies import PPT, Average, Slowed, Sync
from .localsgd import LocalSGD
from .trainer import Result, evaluate, train
from .modelfile import Model, load_model

__all__ = [
    "MLP", "Model", "SGD", "Async", "Average", "LocalSGD", "PPT", "PPTClassifier", "PPTRegressor", "Slowed", "Result", "ShardSet", "Stop", "Sync", "cluster", "connect", "datasets",
    "enter_data", "enter_source", "evaluate", "exit_data", "load_model", "strategies", "train", "validation",
]
__version__ = "0.1.0"
