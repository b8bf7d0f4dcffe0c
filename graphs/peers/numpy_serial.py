"""Contender: the same math serially in one process (ppt_dask's own numpy, no Dask).

Mini-batch SGD with momentum, ``block = batch`` rows taken in order, exactly the rounds of
``ppt_dask.Sync(block=batch)`` on one shard: ``strategy.work`` then ``strategy.apply``, as
``ppt_dask.algorithms.serial.train_serial`` runs them (001's T_serial). The BLAS threads come from
the environment the driver sets (OPENBLAS_NUM_THREADS=1 or 2).

    python graphs/peers/numpy_serial.py SPEC.json RESULT.json
"""

import _common as c


def main():
    spec, out = c.load_spec()
    import ppt_dask as ppt

    X, y = c.rows(spec, "train", 0, spec["n_train"])
    X_test, y_test = c.rows(spec, "test", 0, spec["n_test"])
    net = ppt.MLP(tuple(spec["sizes"]), hidden="tanh", output="softmax", dtype=spec["dtype"])
    strategy = ppt.Sync(lr=spec["lr"], momentum=spec["momentum"], block=spec["batch"]).check([len(X)], spec["seed"])
    state = strategy.init(c.init_params(spec))
    steps = len(X) // spec["batch"]
    shard = (X, y)

    def train_epoch(e):
        nonlocal state
        loss = 0.0
        for i in range(steps):
            r = e * steps + i
            state = strategy.apply(net, state, strategy.work(net, strategy.broadcast(state), shard, 0, r))
            loss += state.stats[0]
        return loss / (steps * spec["batch"])

    def test_accuracy():
        s = net.stats(state.params, X_test, y_test)
        return 1.0 - s[1] / s[2]

    run = c.race(spec, train_epoch, test_accuracy)
    c.write_result(out, spec, run, c.peak_rss_mib())


if __name__ == "__main__":
    main()
