"""Repeated experiments (seed 004): N random train/test splits, mean and spread.

004 reports, for the 5000-digit set, the test accuracy averaged over ten random 70/30
splits at 100, 200, 250 and 500 epochs. Each split here is seeded with its number (split
``i`` uses ``seed + i`` for the split and for the initial weights), trained once up to the
largest checkpoint, and evaluated at every checkpoint from weights pulled at that epoch.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ppt_dask.data.datasets import random_splits
from ppt_dask.engine.placement.enter import enter_data, exit_data
from ppt_dask.engine.trainer import train


def repeated_splits(client, net, X, y, strategy, stop, n_splits: int = 10, *,
                    checkpoints=(100, 200, 250, 500), test_fraction: float = 0.3, seed: int = 0,
                    n_shards: int = 2, workers=None, fan_in: int = 2, progress=None, reproducible=None) -> dict:
    """Train on ``n_splits`` random splits; test accuracy at each checkpoint epoch.

    ``reproducible``: :func:`ppt_dask.train`'s, for every split's run.

    Returns
    -------
    dict with ``checkpoints`` (epochs), ``accuracy`` (n_splits x n_checkpoints array),
    ``mean`` and ``std`` per checkpoint, and ``wall_seconds`` per split.
    """
    checkpoints = tuple(sorted(float(c) for c in checkpoints))
    if not checkpoints or checkpoints[0] <= 0:
        raise ValueError(f"checkpoints must be positive epochs, got {checkpoints}")
    stop = replace(stop, max_epochs=checkpoints[-1], test=None, target_error=None)
    accuracy = np.zeros((n_splits, len(checkpoints)))
    seconds = []
    for i, (X_train, X_test, y_train, y_test) in enumerate(
            random_splits(X, y, n_splits, test_fraction, seed)):
        shards = enter_data(client, X_train, y_train, n_shards, dtype=net.dtype, workers=workers)
        try:
            result = train(net, shards, strategy, stop, seed=seed + i, fan_in=fan_in,
                           snapshot_epochs=checkpoints, reproducible=reproducible)
        finally:
            exit_data(shards)
        for j, epoch in enumerate(checkpoints):
            params = result.snapshots.get(epoch, result.params)
            accuracy[i, j] = np.mean(net.predict(params, X_test) == y_test)
        seconds.append(result.wall_seconds)
        if progress is not None:
            progress({"split": i, **{f"accuracy@{e:g}": a for e, a in zip(checkpoints, accuracy[i])}})
    return {"checkpoints": checkpoints, "accuracy": accuracy, "mean": accuracy.mean(axis=0),
            "std": accuracy.std(axis=0, ddof=1) if n_splits > 1 else np.zeros(len(checkpoints)),
            "wall_seconds": seconds}
