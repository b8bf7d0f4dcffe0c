"""Enter data / exit data: logical shards placed once on the workers, pinned.

OmpCluster's ``target enter data`` (Sobreira and Carneiro, 2024) copies each block to its device once; the
tasks of every round then run where the data already is. Here the rows are split into
``n_shards`` logical shards, a number fixed at entry and independent of the number of
workers. The workers are given contiguous blocks of shards, so each worker's share is a
run of leaves of the fixed reduction tree (see :mod:`ppt_dask.core.tree`).

Pinning uses worker *resources* rather than addresses: each worker gets a label
``ppt-<set>-w<slot>`` (set with ``Worker.set_resources``) and every task of that slot asks
for it. An address stops matching when a nanny restarts a worker on a new port (the task
would wait in ``no-worker``); a label can be given to the replacement.

Three sources:

* numpy arrays on the head: validated there, scattered to the slot's worker; the head
  keeps references to them (re-sent if a worker is lost);
* dask arrays: each shard is a task over the array's graph, computed on its worker, so
  the head never holds the data and Dask can rebuild a lost shard;
* a loader ``loader(start, stop) -> (X, y)`` run on the workers (for example
  ``functools.partial(datasets.mnist_rows, data_dir, "train")``), recomputable too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import numpy as np
from distributed import Client, wait

from ppt_dask.core import keys, validation
from ppt_dask.core.tree import split_rows, split_shards
from ppt_dask.engine import waits
from ppt_dask.engine.placement import labels
from ppt_dask.engine.placement.cluster import worker_addresses
from ppt_dask.engine.placement.shards import ShardInfo, ShardSet, make_shard

SCATTER_TIMEOUT = 120  # seconds to wait for the shards to land on the workers


def _check_y(y, n_rows: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim not in (1, 2):
        raise ValueError(f"y must be 1-D labels or 2-D targets, got shape {y.shape}")
    if len(y) != n_rows:
        raise ValueError(f"X has {n_rows} rows but y has {len(y)}")
    if y.dtype.kind not in "biuf":
        raise ValueError(f"y must be numeric, got dtype {y.dtype}")
    return validation.check_finite(y, "y")


# ---- worker side -----------------------------------------------------------------------


def _shard_info(shard, index: int, start: int, stop: int) -> ShardInfo:
    X, y = shard
    if X.ndim < 2 or X.shape[0] != stop - start or len(y) != stop - start:
        raise ValueError(
            f"shard {index} (rows {start}:{stop}) has X of shape {X.shape} and y of length "
            f"{len(y)}; expected {stop - start} rows")
    for name, arr in (("X", X), ("y", y)):
        bad = ~np.isfinite(arr)
        if bad.any():
            row = start + int(np.argwhere(bad)[0][0])
            raise ValueError(f"{name} has {int(bad.sum())} NaN/inf values; the first in row {row} (shard {index})")
    y_integral = bool(np.all(np.mod(y, 1) == 0)) if y.size else True
    return ShardInfo(index, start, stop, tuple(X.shape[1:]), str(X.dtype), tuple(y.shape[1:]),
                     float(y.min()) if y.size else 0.0, float(y.max()) if y.size else 0.0, y_integral)


def _load_shard(loader: Callable, start: int, stop: int, dtype: str):
    X, y = loader(start, stop)
    return make_shard(X, y, dtype)


# ---- head side ---------------------------------------------------------------------------


def _choose_workers(client: Client, workers) -> list[str]:
    known = worker_addresses(client)
    if workers is None:
        if not known:
            raise ValueError("the cluster has no workers")
        return known
    missing = [w for w in workers if w not in known]
    if missing:
        raise ValueError(f"unknown worker addresses {missing}; the cluster has {known}")
    return list(workers)


def enter_data(client: Client, X, y, n_shards: int, *, dtype: str = "float64",
               workers: list[str] | None = None, keep_copy: bool = True,
               replicate: bool = False) -> ShardSet:
    """Place ``(X, y)`` on the workers as ``n_shards`` logical shards, once.

    The rows are split into ``n_shards`` shards of consecutive rows, placed on the
    workers (a run of shards each) and pinned there; every round then runs where its data
    already is. After this the head needs none of the rows.

    Parameters
    ----------
    client : distributed.Client
        From :func:`ppt_dask.connect`.
    X : ndarray or dask array, shape ``(n_rows, *row_shape)``
        Rows of any shape: (n_rows, n_features) for a table, (n_rows, 1, 28, 28) for images.
    y : ndarray or dask array, shape (n_rows,) or (n_rows, n_outputs)
        Class labels, 0/1 labels or target values.
    n_shards : int
        Logical shards, fixed for the run; independent of the number of workers.
    dtype : {"float64", "float32"}
        Feature dtype on the workers (match the network's).
    workers : list of addresses, optional
        Workers to use (default: all, in address order). Named workers are kept: the
        set does not spread to other workers, nor to workers that join later (it still
        moves to a replacement when one of them dies).
    keep_copy : bool
        For numpy input, keep references on the head so lost shards can be re-sent.
    replicate : bool
        Give every worker one copy of the whole set (the setting of Dahl et al. (2008));
        each logical shard is then a random stream over all the rows (strategy ``PPT``).

    Returns
    -------
    ShardSet
        The placed shards, for :func:`ppt_dask.train`; release them with
        :func:`ppt_dask.exit_data`.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=4)   # 2 on each worker
    >>> shards.n_shards, shards.n_rows, shards.row_shape
    (4, 256, (8,))
    >>> ppt.exit_data(shards)
    >>> client.close()
    """
    validation.check_dtype("dtype", dtype)
    is_dask = hasattr(X, "dask") or hasattr(y, "dask")
    if not is_dask:
        X = validation.check_X(X, rows=True)
        y = _check_y(y, X.shape[0])
    elif len(X.shape) < 2 or len(y.shape) not in (1, 2) or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must have rows (2-D or more) and y be 1-D or 2-D with as many; got {X.shape} "
                         f"and {y.shape}")
    rows = split_rows(int(X.shape[0]), n_shards)
    if replicate:
        rows = [(0, int(X.shape[0]))] * n_shards
    copies: dict = {}  # with replication: one copy per worker, shared by its shards
    if is_dask:
        def build(s, label, key=None):
            import dask
            a, b = rows[s]
            shard = dask.delayed(make_shard)(X[a:b], y[a:b], dtype, **({"dask_key_name": key} if key else {}))
            return client.compute(shard, resources={label: 1})

        def place(s, a, b, label):
            if label not in copies or not replicate:
                copies[label] = build(s, label)
            return copies[label]
        return _enter(client, rows, place, workers, "dask", None, replicated=replicate, rebuild=build)

    def place(s, a, b, label):
        if label not in copies or not replicate:
            shard = make_shard(X[a:b], y[a:b], dtype)
            copies[label] = labels.scatter_pinned(client, shard, addr_of[label], label)
        return copies[label]
    addr_of: dict = {}
    return _enter(client, rows, place, workers, "numpy", (X, y) if keep_copy else None, addr_of,
                  replicated=replicate)


def enter_source(client: Client, loader: Callable, n_rows: int, n_shards: int, *,
                 dtype: str = "float64", workers: list[str] | None = None) -> ShardSet:
    """Shards built on the workers by a loader: the head never holds the rows.

    Each shard's rows are read by the worker that keeps them, so a lost shard is read
    again on another worker.

    Parameters
    ----------
    client : distributed.Client
        From :func:`ppt_dask.connect`.
    loader : callable
        ``loader(start, stop) -> (X_rows, y_rows)``, run on the workers; ``X_rows`` may
        have rows of any shape, ``(stop - start, *row_shape)``. It must be picklable
        (a module-level function, or a ``functools.partial`` of one).
    n_rows : int
        The rows in all.
    n_shards : int
        Logical shards, fixed for the run; independent of the number of workers.
    dtype : {"float64", "float32"}
        Feature dtype on the workers (match the network's).
    workers : list of addresses, optional
        Workers to use (default: all, in address order), as for :func:`enter_data`.

    Returns
    -------
    ShardSet
        The placed shards, for :func:`ppt_dask.train`.

    Examples
    --------
    MNIST read by the workers from the data folder (``PPT_DASK_DATA``, which the
    LocalCluster's workers inherit):

    >>> import functools
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> loader = functools.partial(ppt.datasets.mnist_rows, None, "train")
    >>> shards = ppt.enter_source(client, loader, n_rows=60000, n_shards=4)
    >>> shards.n_rows, shards.row_shape
    (60000, (784,))
    >>> ppt.exit_data(shards)
    >>> client.close()
    """
    if not callable(loader):
        raise ValueError(f"loader must be callable, got {loader!r}")
    validation.check_dtype("dtype", dtype)
    rows = split_rows(int(n_rows), n_shards)

    def build(s, label, key):
        return client.submit(_load_shard, loader, *rows[s], dtype, key=key, resources={label: 1}, pure=False)

    def place(s, a, b, label):
        return build(s, label, keys.name(keys.SHARD, f"{label}-s{s}"))
    return _enter(client, rows, place, workers, "loader", None, rebuild=build)


PLACE_TRIES = 3  # placements begun anew when a worker leaves meanwhile (workers not given)


def _enter(client, rows, place, workers, source, head_copy, addr_of=None, replicated=False,
           rebuild=None) -> ShardSet:
    """Place the shards (:func:`_place`). A worker that leaves the cluster meanwhile (killed,
    or restarting: the scheduler dropped it between its label and its shards) fails the
    placement; what was placed is released, and the placement begins again on the workers
    there are now, unless the caller named the workers: then an error names the one gone."""
    chosen = workers is not None
    for attempt in range(PLACE_TRIES):
        addresses = _choose_workers(client, workers)
        try:
            return _place(client, rows, place, addresses, source, head_copy, addr_of, replicated, rebuild, chosen)
        except (KeyError, OSError) as exc:
            who, gone = waits.who_is_gone(client, addresses, worker_addresses)  # asked once, now
            if who == waits.SCHEDULER:  # its error is the one to say
                raise exc from None
            if who != waits.WORKERS:
                raise
            if chosen:
                raise RuntimeError(f"worker(s) {gone} left the cluster while the data was placed there; "
                                   f"the cluster has {worker_addresses(client)}") from exc
            if attempt == PLACE_TRIES - 1:
                raise RuntimeError(f"workers left the cluster while the data was placed, {PLACE_TRIES} times "
                                   f"(the last: {gone})") from exc
    raise AssertionError("unreachable")


def _place(client, rows, place, workers, source, head_copy, addr_of, replicated, rebuild, chosen) -> ShardSet:
    name = f"ppt-{uuid.uuid4().hex[:8]}"
    blocks = split_shards(len(rows), len(workers))
    for slot, address in enumerate(workers):
        client.run(labels.label_worker, {f"{name}-w{slot}": 1e9}, workers=[address])
        if addr_of is not None:
            addr_of[f"{name}-w{slot}"] = address
    futures: list = [None] * len(rows)
    try:
        for slot, (a, b) in enumerate(blocks):
            for s in range(a, b):
                futures[s] = place(s, *rows[s], f"{name}-w{slot}")
    except BaseException:  # a worker gone meanwhile: nothing of this placement stays
        client.cancel([f for f in futures if f is not None])
        raise
    slot_of = {s: slot for slot, (a, b) in enumerate(blocks) for s in range(a, b)}
    infos = [client.submit(_shard_info, f, s, *rows[s], key=keys.name(keys.SHARD_INFO, f"{name}-s{s}"),
                           resources={f"{name}-w{slot_of[s]}": 1})
             for s, f in enumerate(futures)]
    try:
        wait(infos, timeout=SCATTER_TIMEOUT)
        info = client.gather(infos)
    except BaseException:
        client.cancel(futures + infos)
        raise
    finally:
        del infos
    return ShardSet(client, futures, info, workers, blocks, name, source, head_copy, replicated, chosen, rebuild)


def exit_data(shards: ShardSet) -> None:
    """Release the shards and the workers' labels; nothing is left on the scheduler.

    Parameters
    ----------
    shards : ShardSet
        From :func:`enter_data` or :func:`enter_source`; unusable afterwards.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=2)
    >>> ppt.exit_data(shards)      # the workers hold none of it any more
    >>> shards.futures
    []
    >>> client.close()
    """
    client = shards.client
    client.cancel(shards.futures)
    shards.futures = []
    alive = set(worker_addresses(client))  # a gone worker's labels went with it
    for slot, address in enumerate(shards.workers):
        try:
            if address in alive:
                client.run(labels.label_worker, {shards.label(slot): 0}, workers=[address])
        except (OSError, ValueError, KeyError):  # it left meanwhile
            pass
