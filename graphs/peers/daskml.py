"""Contender: what a Dask user does today, dask-ml's ``Incremental`` around scikit-learn's
``MLPClassifier`` (``partial_fit`` over the chunks of a dask array, one chunk after the
other; the model travels from chunk to chunk).

The cluster has ppt_dask's layout (2 worker processes of 1 thread, the same malloc
settings, see ``ppt_dask.engine.placement.cluster.WORKER_ENV``) but is a plain ``LocalCluster``; the array
is persisted on the workers in one chunk per worker before the clock starts. One epoch is
one ``Incremental.partial_fit`` over the array. ``MLPClassifier`` is set to the same math:
``solver="sgd"``, constant ``learning_rate_init=lr``, classical momentum
(``nesterovs_momentum=False``), ``batch_size=batch``, no L2 (``alpha=0``), no shuffling
(the rows in order, as everyone takes them). It cannot start from given weights (its
public API has no such parameter): it draws the same Glorot-uniform distribution with
``random_state=seed``.

    python graphs/peers/daskml.py SPEC.json RESULT.json
"""

import resource

import _common as c
import numpy as np


def _warm_up():
    """Import the estimator's modules on a worker (start-up, not the race)."""
    import dask_ml.wrappers  # noqa: F401
    import sklearn.neural_network  # noqa: F401


def _worker_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    spec, out = c.load_spec()
    import dask
    import dask.array as da
    from dask_ml.wrappers import Incremental
    from distributed import Client, LocalCluster, wait
    from sklearn.neural_network import MLPClassifier

    from ppt_dask.engine.placement.cluster import WORKER_ENV  # the same worker environment as ppt_dask's

    p = spec["p"]
    with dask.config.set({"distributed.nanny.pre-spawn-environ": WORKER_ENV}):
        cluster = LocalCluster(n_workers=p, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address=None)
    client = Client(cluster)
    try:
        client.run(_warm_up)
        X, y = c.rows(spec, "train", 0, spec["n_train"])
        chunk = -(-len(X) // p)
        X_da = da.from_array(X, chunks=(chunk, X.shape[1])).persist()
        y_da = da.from_array(y, chunks=(chunk,)).persist()
        wait([X_da, y_da])
        del X, y  # the data now lives on the workers
        X_test, y_test = c.rows(spec, "test", 0, spec["n_test"])
        hidden = tuple(spec["sizes"][1:-1])
        model = Incremental(
            MLPClassifier(hidden_layer_sizes=hidden, activation="tanh", solver="sgd",
                          learning_rate="constant", learning_rate_init=spec["lr"],
                          momentum=spec["momentum"], nesterovs_momentum=False,
                          batch_size=spec["batch"], alpha=0.0, shuffle=False,
                          random_state=spec["seed"]),
            shuffle_blocks=False)
        classes = np.arange(spec["sizes"][-1])

        def train_epoch(e):
            model.partial_fit(X_da, y_da, classes=classes)
            return model.estimator_.loss_

        def test_accuracy():
            return float(np.mean(model.predict(X_test) == y_test))

        run = c.race(spec, train_epoch, test_accuracy)
        workers = client.run(_worker_rss)
        c.write_result(out, spec, run, c.peak_rss_mib(), [workers[w] for w in sorted(workers)],
                       processes=p, initial_weights="own (random_state=seed)")
    finally:
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
