"""Where a fit runs: on a cluster, or in this process (:mod:`ppt_dask.sklearn.inprocess`).

Decided by where the fit is, in this order:

1. inside a Dask task (dask's joblib backend, dask-ml's ``Incremental`` and wrappers): in
   this task's process. The rounds would be tasks of the cluster whose thread this fit
   holds; with every worker busy with a fit of its own they would wait for each other.
   Said once per process with a :class:`PlacementWarning`.
2. ``scheduler=``: that scheduler's cluster; 3. the current client's cluster (``get_client()``).
4. no client, and the fit trains on one shard (``n_shards=1``, or "local" on a set of fewer
   than 60 batches, its default): in this process. One shard runs on one worker anyway, so
   the cluster would do the same arithmetic after its start (about 2 s) and its messages;
   ``placement_`` says so, no warning.
5. no client, in a process that cannot start worker processes (joblib's loky workers, a
   daemonic process): in this process, said once with a :class:`PlacementWarning`.
6. no client: the shared LocalCluster of :mod:`ppt_dask.sklearn.shared`, started on first use.
"""

from __future__ import annotations

import multiprocessing
import sys
import warnings
from dataclasses import dataclass

from ppt_dask.sklearn import shared

_WARNED: set = set()  # the reasons already said in this process


class PlacementWarning(UserWarning):
    """A fit trained in this process where a cluster was expected (said once per process)."""


@dataclass
class Place:
    """A fit's place: ``client`` (None: in this process), whether to close it, and why."""

    client: object
    close: bool
    reason: str

    @property
    def here(self) -> bool:
        return self.client is None


def in_dask_task() -> bool:
    """Whether this code runs inside a task on a Dask worker (never where distributed was not
    imported: a worker imports it before any task)."""
    if "distributed" not in sys.modules:
        return False
    try:
        from distributed import get_worker
        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def can_start_processes() -> bool:
    """Whether this process may start a LocalCluster's worker processes: not a daemonic one,
    and not one whose multiprocessing start method is unknown to multiprocessing (loky's)."""
    process = multiprocessing.current_process()
    method = multiprocessing.get_start_method(allow_none=True)
    return not process.daemon and (method is None or method in multiprocessing.get_all_start_methods())


def _say_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, PlacementWarning, stacklevel=5)


def choose(estimator, one_shard: bool, given=None) -> Place:
    """The :class:`Place` of one fit of ``estimator`` (see the module's docstring). Where
    distributed was never imported there is no client and no worker: a fit that then trains
    in this process imports neither dask nor distributed (a joblib worker's fits pay no
    import of them)."""
    if given is not None:
        return Place(given, False, "the given client's cluster")
    if in_dask_task():
        _say_once("task", f"{type(estimator).__name__}.fit runs inside a Dask task: it trains in this task's "
                  "process (the cluster's tasks would wait for the thread this fit holds)")
        return Place(None, False, "in this process: inside a Dask task")
    if estimator.scheduler is not None:
        from ppt_dask.engine.placement import cluster

        return Place(cluster.connect(estimator.scheduler), True, f"the cluster of {estimator.scheduler}")
    client = _current_client()
    if client is not None and not shared.is_shared(client):
        return Place(client, False, "the current client's cluster")
    if one_shard:
        return Place(None, False, "in this process: no client, and one shard (a cluster would run it on one worker)")
    if not can_start_processes():
        _say_once("process", f"{type(estimator).__name__}.fit runs in a process that cannot start a "
                  "LocalCluster's workers (a joblib/loky worker or a daemonic process): it trains in this "
                  "process; start a client in the main process (ppt.connect()) to train on a cluster")
        return Place(None, False, "in this process: it cannot start worker processes")
    return Place(shared.client(estimator.n_workers), False, "the shared LocalCluster (no client given)")


def _current_client():
    """The current client (``distributed.get_client``), None where there is none."""
    if "distributed" not in sys.modules:  # no client was ever made in this process
        return None
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        return None


def close(place: Place) -> None:
    if place.close and place.client is not None:
        from ppt_dask.engine.placement import cluster

        cluster.close(place.client)
