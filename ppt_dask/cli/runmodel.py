"""The run-time model beside a run: what ``ppt-dask train`` predicted a round would cost, and what it cost.

``ppt-dask train ... --calibration FILE`` (or, without the flag, the calibration ``ppt-dask
model calibrate`` kept in the user's cache for the same network) predicts the run's round
before it starts (:func:`ppt_dask.perf.model.iteration_seconds`, for the rounds the run's
``--exchange`` picks, its workers, block and shards, on the cores of the machine when the
cluster is the local one) and prints at the end the predicted and the measured median round
(the breakdown's rows: what the live page's bars show) and their ratio. The prediction goes
into the run's settings, so the live page (``/ppt``) draws it as a line over the bars and the
report keeps it beside the measured median.

The model is of synchronous rounds (eq. (5) of Mörchen (2004)): ``--calibration`` applies to ``--strategy
block`` and ``epoch`` and is refused for the others with one line; a cached calibration is
used only where it applies.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ppt_dask.cli import paths

STRATEGIES = ("block", "epoch")  # what the run-time model predicts (synchronous rounds)
CACHE_ENV = "PPT_DASK_CACHE"  # the folder of kept calibrations (default: $XDG_CACHE_HOME/ppt_dask)


def cache_dir() -> Path:
    """Where ``ppt-dask model calibrate`` keeps a copy of each calibration."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ppt_dask"


def cache_file(network, n_weights, dtype) -> Path:
    """The kept calibration of a network (an MLP's widths, or a module's name, with its
    number of parameters, so two modules of one class name are told apart, and its floats)."""
    name = "-".join(map(str, network)) if not isinstance(network, str) else network
    return cache_dir() / f"calibration-{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}-w{n_weights}-{dtype}.json"


def keep(cal) -> Path | None:
    """Save ``cal`` in the user's cache (the newest calibration of its network); the path, or
    None where the cache cannot be written (said by the caller, never fatal)."""
    path = cache_file(cal.network, cal.n_weights, cal.dtype)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cal.save(path)
    except OSError:
        return None
    return path


@dataclass
class Beside:
    """A calibration for the run, and what it predicts (filled once the workers are known)."""

    cal: object
    path: str
    predicted_seconds: float | None = None
    rounds: str = ""


def given(args, strategy: str):
    """``--calibration FILE`` checked before any cluster work: it applies to the strategy, the
    file exists and loads. None when the flag is not given."""
    if not getattr(args, "calibration", None):
        return None
    if strategy not in STRATEGIES:
        raise ValueError(f"--calibration applies to --strategy {', '.join(STRATEGIES)} (the run-time model "
                         f"predicts synchronous rounds), not to --strategy {strategy}")
    from ppt_dask.perf.calibrate import Calibration

    paths.input_file("--calibration", args.calibration, "a .json file written by `ppt-dask model calibrate`")
    return Beside(Calibration.load(args.calibration), args.calibration)


def for_network(beside, net, strategy: str):
    """The given calibration checked against the run's network, else the cached one of that
    network (where the model applies), else None."""
    from ppt_dask.core.model import describe
    from ppt_dask.perf.calibrate import Calibration

    if beside is None:
        shown = describe(net)["network"]
        path = cache_file(tuple(shown) if isinstance(shown, list) else str(shown), net.n_params,
                          str(np.dtype(net.dtype)))
        if strategy not in STRATEGIES or not path.is_file():
            return None
        try:
            beside = Beside(Calibration.load(path), str(path))
        except (OSError, ValueError):  # an unreadable cache file is not the run's business
            return None
        if beside.cal.n_weights != net.n_params or beside.cal.dtype != str(np.dtype(net.dtype)):
            return None  # not this network's after all: no word on it
    w, dtype = beside.cal.n_weights, str(np.dtype(net.dtype))
    if w is not None and w != net.n_params:
        raise ValueError(f"--calibration {beside.path} was calibrated for a network of {w} parameters, "
                         f"this run's has {net.n_params}: calibrate it (`ppt-dask model calibrate`)")
    if beside.cal.dtype is not None and beside.cal.dtype != dtype:
        raise ValueError(f"--calibration {beside.path} was calibrated in {beside.cal.dtype}, this run computes in "
                         f"{dtype}: calibrate with --dtype {dtype} (or train with --dtype {beside.cal.dtype})")
    return beside


def predict(beside, *, workers: int, block: int, n_shards: int, fan_in: int, exchange: str, local: bool,
            reproducible: str = "same-p"):
    """Fill ``beside`` with the predicted round of the run: ``workers`` holding shards, a block
    of ``block`` patterns over ``n_shards``, the run's ``exchange`` and ``reproducible`` (a call
    a worker, or a call a shard); on the cores of this machine where the cluster is the local
    one (``local``), else a core per worker."""
    from ppt_dask.perf import curves
    from ppt_dask.perf import model as perfmodel

    c, w = beside.cal.constants, beside.cal.n_weights or 1
    cores = os.cpu_count() if local else None
    parts = perfmodel.round_parts(workers, block, w, c, fan_in, n_shards=n_shards, exchange=exchange, cores=cores,
                                  reproducible=reproducible)
    beside.predicted_seconds = float(perfmodel.iteration_seconds(workers, block, w, c, fan_in, n_shards=n_shards,
                                                                 exchange=exchange, cores=cores,
                                                                 reproducible=reproducible))
    kind = ("the one-hop graph's terms for streamed rounds (no streamed terms in the calibration)"
            if parts["graph_for_stream"] else "streamed rounds" if parts["streamed"] else f"{exchange} rounds")
    where = f"{cores} cores" if cores else "a core per worker"
    beside.rounds = f"{kind}, {workers} worker{'s' if workers != 1 else ''}, block {block}, {where}"
    timed = curves.measured_rows(c, streamed=bool(parts["streamed"]) and not parts["graph_for_stream"])
    rows = float(perfmodel.round_rows(workers, block, n_shards, reproducible))
    if timed and not timed[0] <= rows <= timed[1]:
        beside.rounds += (f"; calls of {rows:.0f} rows, outside the {timed[0]}..{timed[1]} timed: the "
                          "per-pattern line there")
    return beside


def settings(beside) -> dict:
    """What the run's settings carry for the page and the report."""
    return {"predicted_round_ms": 1e3 * beside.predicted_seconds, "run-time model": beside.path}


def measured_round(rows: list[dict]) -> float | None:
    """The measured median round: the breakdown's rows (the page's bars), seconds."""
    walls = [r["wall"] for r in rows if r.get("wall")]
    return float(np.median(walls)) if walls else None


def summary(beside, measured: float | None) -> dict:
    """The --json entry: predicted and measured median round and their ratio."""
    ratio = None if not measured else beside.predicted_seconds / measured
    return {"calibration": beside.path, "predicted_round_seconds": beside.predicted_seconds,
            "measured_round_seconds": measured, "predicted_over_measured": ratio, "rounds": beside.rounds}


def line(entry: dict) -> str:
    """The printed line: ``run-time model: predicted 12.3 ms a round, measured 13.1 ms ...``."""
    measured = entry["measured_round_seconds"]
    seen = "no round measured" if measured is None else (
        f"measured {1e3 * measured:.3g} ms (median), predicted/measured {entry['predicted_over_measured']:.2f}")
    return (f"run-time model ({entry['calibration']}): predicted {1e3 * entry['predicted_round_seconds']:.3g} ms "
            f"a round, {seen}; {entry['rounds']}")
