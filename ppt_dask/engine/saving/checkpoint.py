"""Checkpoints of a run, written atomically, so training survives the loss of the head.

002 names the root node as the single point of failure of the head-worker design. The
head here keeps nothing that cannot be rebuilt from a checkpoint: the weights and the
optimizer state after some round, the round, the try, and the history. The strategies'
random streams are functions of (seed, round, shard), so no generator state is needed.
A run resumed from a checkpoint replays the same rounds and ends with bitwise the same
weights as an uninterrupted one.

The file is written to a temporary name in the same folder, flushed and fsync'ed, then
renamed over the old one (and the folder fsync'ed): a crash leaves either the old or the
new checkpoint, never half of one. Arrays are stored with numpy's ``.npz`` (no pickle).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

from ppt_dask.algorithms.localsgd import ShardModel
from ppt_dask.algorithms.strategies import ModelState

FILE = "checkpoint.npz"
FORMAT = 1


def _flatten_state(opt_state) -> tuple[dict, object]:
    """Arrays of the optimizer state, and a JSON description to rebuild it."""
    if opt_state is None:
        return {}, None
    if isinstance(opt_state, np.ndarray):
        return {"opt": opt_state}, "array"
    if isinstance(opt_state, dict) and "models" in opt_state:  # the local strategy's shards
        return _flatten_local(opt_state)
    if isinstance(opt_state, dict):
        arrays = {f"opt.{k}": v for k, v in opt_state.items() if isinstance(v, np.ndarray)}
        scalars = {k: v for k, v in opt_state.items() if not isinstance(v, np.ndarray)}
        return arrays, {"dict": sorted(k[4:] for k in arrays), "scalars": scalars}
    raise TypeError(f"cannot checkpoint an optimizer state of type {type(opt_state).__name__}")


def _flatten_local(opt_state: dict) -> tuple[dict, dict]:
    """The local strategy's state (:mod:`ppt_dask.algorithms.localsgd`): each shard's model, the averages."""
    arrays, shards = {}, {}
    for s, model in opt_state["models"].items():
        arrays[f"local.{s}.params"], arrays[f"local.{s}.velocity"] = model.params, model.velocity
        sent = [i for i, a in enumerate(model.sent) if a is not None]
        arrays.update({f"local.{s}.sent{i}": model.sent[i] for i in sent})
        arrays[f"local.{s}.steps"] = np.array(model.steps)  # Adam's t, and its second moment:
        if model.second is not None:
            arrays[f"local.{s}.second"] = model.second
        shards[str(s)] = sent
    arrays.update({f"avg.{r}": a for r, a in opt_state["averages"].items()})
    mean = opt_state.get("mean")
    if mean is not None:
        arrays["local.mean"] = mean
    return arrays, {"local": shards, "averages": sorted(opt_state["averages"]), "mean": mean is not None}


def _rebuild_state(arrays, description):
    if description is None:
        return None
    if description == "array":
        return arrays["opt"]
    if "local" in description:
        models = {int(s): ShardModel(arrays[f"local.{s}.params"], arrays[f"local.{s}.velocity"],
                                     tuple(arrays[f"local.{s}.sent{i}"] if i in sent else None for i in (0, 1)),
                                     arrays.get(f"local.{s}.second"), int(arrays.get(f"local.{s}.steps", 0)))
                  for s, sent in description["local"].items()}
        return {"models": models, "averages": {int(r): arrays[f"avg.{r}"] for r in description["averages"]},
                "mean": arrays["local.mean"] if description.get("mean") else None}
    return {**description["scalars"], **{k: arrays[f"opt.{k}"] for k in description["dict"]}}


def check_folder(directory) -> None:
    """Refuse a ``directory`` that cannot hold checkpoints (a file, or under one), before
    any round runs: the first write would fail only after ``checkpoint_every`` rounds."""
    path = Path(directory)
    for folder in (path, *path.absolute().parents):
        if folder.exists():
            if not folder.is_dir():
                where = "" if folder == path else f" ({str(folder)!r} is a file)"
                raise ValueError(f"checkpoint_dir {str(directory)!r} must be a folder (made when missing) "
                                 f"to hold {FILE}, but it is a file{where}")
            return


def save(directory, state: ModelState, *, round_index: int, attempt: int, history: list,
         meta: dict) -> Path:
    """Write the checkpoint of the state after ``round_index`` atomically; return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    opt_arrays, opt_description = _flatten_state(state.opt_state)
    header = {"format": FORMAT, "meta": meta, "round": int(round_index), "try": int(attempt),
              "opt_state": opt_description, "history": list(history)}
    fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, params=state.params, stats=np.asarray(state.stats, dtype=np.float64),
                     header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **opt_arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, directory / FILE)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return directory / FILE


class Writer:
    """The round loop's callback for the head's copies: each kept state (every
    ``checkpoint_every`` rounds, and the final one) is written to ``directory``."""

    def __init__(self, directory, meta: dict):
        self.directory, self.meta = directory, meta

    def __call__(self, state: ModelState, round_index: int, attempt: int, history: list) -> None:
        save(self.directory, state, round_index=round_index, attempt=attempt, history=history, meta=self.meta)


def load(directory, meta: dict) -> dict | None:
    """The checkpoint in ``directory`` (None when there is none).

    Raises ``ValueError`` naming the problem when the file is corrupted or was written by a
    run with other settings (``meta`` differs: network, strategy, shards, seed ...).
    Returns a dict with ``state`` (ModelState), ``round``, ``try`` and ``history``.
    """
    path = Path(directory) / FILE
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
        header = json.loads(arrays.pop("header").tobytes().decode())
    except Exception as exc:  # a truncated zip, bad JSON, ...: all mean the same to the user
        raise ValueError(f"checkpoint {path} is corrupted or unreadable ({type(exc).__name__}: {exc}); "
                         "delete it to start afresh") from exc
    if header.get("format") != FORMAT:
        raise ValueError(f"checkpoint {path} has format {header.get('format')!r}, expected {FORMAT}")
    saved, meta = header["meta"], json.loads(json.dumps(meta))  # tuples -> lists, as saved
    diffs = [f"{k}: checkpoint has {saved.get(k)!r}, this run has {meta.get(k)!r}"
             for k in sorted(set(saved) | set(meta)) if saved.get(k) != meta.get(k)]
    if diffs:
        raise ValueError(f"checkpoint {path} belongs to another run; " + "; ".join(diffs))
    state = ModelState(arrays["params"], _rebuild_state(arrays, header["opt_state"]),
                       arrays["stats"], header["round"])
    return {"state": state, "round": header["round"], "try": header["try"], "history": header["history"]}
