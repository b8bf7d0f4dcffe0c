"""Contender: ppt_dask, one strategy on p single-threaded workers.

``ppt.connect(n_workers=p)`` starts the LocalCluster (one worker process per core, one
BLAS thread each); the shards (one per worker) are loaded *on the workers*
(``enter_source``), so the head never holds the training set; ``ppt.train`` runs with
000's stopping rule, ``Stop(target_error=1 - target, test=(X_test, y_test))``: when the
error estimate over the last epoch of patterns is at or below the target, the weights are
checked on the test set, and the run stops at the first check that passes. Start-up
(cluster, imports, data entry) is timed apart; the race is ``Result.wall_seconds``.

The strategies, with the grid's ``lr`` and ``batch`` (patterns per update):

* ``sync``: ``Sync(block=batch)``, 001's learning by block;
* ``ppt``: ``PPT(local_epoch=batch / p)``, 000's random local epochs;
* ``average``: ``Average(block=batch, local_epochs=1)``, local mini-batches of ``batch``
  rows and one average per epoch (001 section VII, 004);
* ``async``: ``Async(block=batch, staleness=4)``, bounded staleness (003);
* ``local``: ``LocalSGD(block=batch)``, local SGD with the average applied one round late
  (its defaults: 30 local steps a round, pull 0.5).

    python graphs/peers/ppt_dask_run.py SPEC.json RESULT.json
"""

import resource
import time

import _common as c
import numpy as np


class Pruned(Exception):
    """A tuning run that has run longer than the best setting so far."""


def load_rows(data, split, dtype, start, stop):
    """The workers' loader (pickled by value from this script, run on the workers)."""
    X = np.load(f"{data}/X_{split}.npy", mmap_mode="r")
    y = np.load(f"{data}/y_{split}.npy", mmap_mode="r")
    return np.array(X[start:stop], dtype=dtype), np.array(y[start:stop], dtype=np.int64)


def strategy_of(spec, ppt):
    name, p = spec["strategy"], spec["p"]
    common = dict(lr=spec["lr"], momentum=spec["momentum"])
    if name == "sync":
        return ppt.Sync(block=spec["batch"], **common)
    if name == "ppt":
        return ppt.PPT(local_epoch=spec["batch"] // p, **common)
    if name == "average":
        return ppt.Average(block=spec["batch"], local_epochs=1.0, **common)
    if name == "async":
        return ppt.Async(block=spec["batch"], staleness=4, **common)
    if name == "local":
        return ppt.LocalSGD(block=spec["batch"], **common)
    raise ValueError(f"unknown strategy {name!r}")


def _worker_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    spec, out = c.load_spec()
    import functools

    import ppt_dask as ppt
    from ppt_dask.observe.breakdown import phase_table, summarize

    p = spec["p"]
    client = ppt.connect(n_workers=p, dashboard_address=None)
    try:
        client.wait_for_workers(p, timeout=120)
        loader = functools.partial(load_rows, spec["data"], "train", spec["dtype"])
        shards = ppt.enter_source(client, loader, spec["n_train"], n_shards=p, dtype=spec["dtype"])
        X_test, y_test = c.rows(spec, "test", 0, spec["n_test"])
        net = ppt.MLP(tuple(spec["sizes"]), hidden="tanh", output="softmax", dtype=spec["dtype"])
        strategy = strategy_of(spec, ppt)
        stop = ppt.Stop(max_epochs=spec["max_epochs"], target_error=round(1 - spec["target"], 12),
                        test=(X_test, y_test))
        params = c.init_params(spec)
        history = []

        def progress(record):
            history.append(record)
            if record["elapsed_seconds"] > spec["max_seconds"]:
                raise Pruned

        t_ready = time.time()
        t0 = time.perf_counter()
        try:
            result = ppt.train(net, shards, strategy, stop, seed=spec["seed"], params=params,
                               progress=progress)
            rows = result.breakdown()
            run = {"reached": bool(result.learned), "seconds": result.wall_seconds,
                   "epochs": float(result.epochs), "stopped_because": result.stopped_because,
                   "test_accuracy": result.test_accuracy, "head_seconds": result.head_seconds,
                   "rounds": result.rounds,
                   "test_checks": sum("verified_error_rate" in r for r in result.history),
                   "breakdown": summarize(rows) if rows else None,
                   "phases": phase_table(rows) if rows else None}
        except Pruned:
            run = {"reached": False, "seconds": time.perf_counter() - t0,
                   "epochs": float(history[-1]["epoch"]), "stopped_because": "pruned",
                   "rounds": len(history)}
        run["t_ready"] = t_ready
        # one record per whole epoch (and the last), not per round
        run["history"] = [{"epoch": r["epoch"], "seconds": r["elapsed_seconds"], "loss": r["loss"],
                           "error_estimate": r["error_estimate"], "test_accuracy": (
                               1 - r["verified_error_rate"] if "verified_error_rate" in r else None)}
                          for i, r in enumerate(history)
                          if i == len(history) - 1 or int(r["epoch"] + 1e-9) != int(history[i + 1]["epoch"] + 1e-9)]
        if run.get("test_checks"):  # what the stopping rule's test-set checks cost the head
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                net.stats(result.params, X_test, y_test)
                ts.append(time.perf_counter() - t)
            run["test_check_seconds"] = run["test_checks"] * sorted(ts)[1]
        workers = client.run(_worker_rss)
        c.write_result(out, spec, run, c.peak_rss_mib(), [workers[w] for w in sorted(workers)],
                       processes=p)
    finally:
        ppt.cluster.close(client)


if __name__ == "__main__":
    main()
