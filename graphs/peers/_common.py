"""What every contender of ``graphs/peers.py`` shares: the spec, the data, the race.

Each contender runs in processes of its own (so its peak memory and its thread settings
are its own) and is started by the driver with two arguments: a JSON spec and the path of
the JSON result to write. This module imports numpy only, so a peer that does not use
ppt_dask (PyTorch, MPI) does not pay for importing dask.

The spec (written by ``peers.py``)::

    {"contender": "torch", "lr": 0.1, "batch": 100, "momentum": 0.9, "data": DIR,
     "sizes": [784, 64, 64, 10], "dtype": "float32", "n_train": 60000, "n_test": 10000,
     "target": 0.97, "max_epochs": 30, "max_seconds": 120.0, "seed": 0,
     "t_launch": <time.time() just before the driver started the process>, ...}

``DIR`` holds ``X_train.npy, y_train.npy, X_test.npy, y_test.npy`` (the first n_train /
n_test rows of MNIST, pixels / 255 in the spec's dtype) and ``init.npy``, the initial
weights from ``ppt_dask.MLP(sizes).init_params(seed)``: flat, layer after layer, ``W``
of shape (fan_in, fan_out) in C order, then ``b``.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from pathlib import Path

import numpy as np


def load_spec(argv=None) -> tuple[dict, Path]:
    """``(spec, result_path)`` from the command line ``SPEC.json RESULT.json``."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        raise SystemExit(f"usage: {Path(sys.argv[0]).name} SPEC.json RESULT.json")
    return json.loads(Path(argv[0]).read_text()), Path(argv[1])


def rows(spec: dict, split: str, start: int = 0, stop: int | None = None):
    """Rows [start, stop) of the train or test split: ``X`` (n, 784) and ``y`` (n,) int64.

    Memory-mapped, then copied: a process holds only the rows it asked for.
    """
    base = Path(spec["data"])
    X = np.load(base / f"X_{split}.npy", mmap_mode="r")
    y = np.load(base / f"y_{split}.npy", mmap_mode="r")
    stop = len(X) if stop is None else stop
    return np.array(X[start:stop]), np.array(y[start:stop], dtype=np.int64)


def split_rows(n_rows: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous rows of each part, as ``ppt_dask.core.tree.split_rows`` cuts shards."""
    edges = [(s * n_rows) // parts for s in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def init_params(spec: dict) -> np.ndarray:
    """The shared initial weights, flat, in the spec's dtype."""
    return np.load(Path(spec["data"]) / "init.npy").astype(spec["dtype"])


def layers(flat: np.ndarray, sizes) -> list[tuple[np.ndarray, np.ndarray]]:
    """``[(W_0, b_0), ...]`` as views into ``flat`` (W of shape (fan_in, fan_out))."""
    out, start = [], 0
    for fan_in, fan_out in zip(sizes, sizes[1:]):
        W = flat[start:start + fan_in * fan_out].reshape(fan_in, fan_out)
        start += fan_in * fan_out
        out.append((W, flat[start:start + fan_out]))
        start += fan_out
    assert start == len(flat), "flat vector and sizes disagree"
    return out


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def race(spec: dict, train_epoch, test_accuracy, agree=lambda flag: flag) -> dict:
    """Train epoch after epoch; check the test accuracy after each; stop at the target.

    The same rule for every contender that checks once per epoch: the clock starts here
    (data in place, model built), the check's own time counts, and the run stops at the
    first check at or above ``spec["target"]``. It also stops when the loss is not finite,
    after ``max_epochs``, or (tuning only) once it has run ``max_seconds``: past that it
    cannot beat the contender's best setting so far.

    Parameters
    ----------
    train_epoch : callable(epoch_index) -> float
        One pass over the training set; returns the mean training loss.
    test_accuracy : callable() -> float
        Accuracy on the whole test set (the same value on every process of a run).
    agree : callable(bool) -> bool
        For runs of several processes: True when any process says True (they must all
        leave the loop at the same epoch).
    """
    history, reached, why = [], False, "max_epochs"
    t0 = time.perf_counter()
    epoch = 0
    for epoch in range(1, int(spec["max_epochs"]) + 1):
        loss = float(train_epoch(epoch - 1))
        accuracy = float(test_accuracy())
        elapsed = time.perf_counter() - t0
        history.append({"epoch": epoch, "seconds": elapsed, "test_accuracy": accuracy, "loss": loss})
        if accuracy >= spec["target"]:
            reached, why = True, "target"
            break
        bad, slow = agree(not math.isfinite(loss)), agree(elapsed > spec["max_seconds"])
        if bad or slow:
            why = "diverged" if bad else "pruned"
            break
    return {"reached": reached, "seconds": time.perf_counter() - t0, "epochs": float(epoch),
            "stopped_because": why, "history": history, "t_ready": time.time() - (time.perf_counter() - t0)}


def write_result(path: Path, spec: dict, run: dict, rss_main_mib: float, rss_workers_mib=(),
                 **more) -> None:
    """The result file the driver reads: the run, start-up seconds and peak memory."""
    out = {**run, "startup_seconds": run["t_ready"] - spec["t_launch"],
           "samples": run["epochs"] * spec["n_train"],
           "rss_main_mib": rss_main_mib, "rss_workers_mib": list(rss_workers_mib), **more}
    out["samples_per_second"] = out["samples"] / out["seconds"] if out["seconds"] > 0 else None
    Path(path).write_text(json.dumps(out, indent=1))
