"""PPTClassifier against scikit-learn's MLPClassifier, each with its defaults, side by side.

Both fit the same training rows with their default hyper-parameters (the same hidden
layer, (100,) relu, by default) and ``random_state=0``; the table gives fit time, epochs
(``n_iter_``) and test accuracy on MNIST (60000/10000) and on scikit-learn's digits
(1347/450, scaled to [0, 1]). PPTClassifier fits on a LocalCluster of one worker process
per core, started before the clock runs; MLPClassifier runs in this process (its BLAS
limited to one thread per core). Whatever the defaults are when it runs is what it
measures: it sets nothing but ``random_state``.

Usage::

    python graphs/estimator_race.py            # MNIST and digits, several minutes
    python graphs/estimator_race.py --quick    # 6000/1000 MNIST rows and digits, about a minute

Writes graphs/out/estimator_race.md and .csv.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import common

DEFAULTS = {"MNIST_TRAIN": 60000, "MNIST_TEST": 10000, "WORKERS": os.cpu_count() or 1, "SEED": 0}
QUICK = {"MNIST_TRAIN": 6000, "MNIST_TEST": 1000}


def _fit(name: str, make, X, y, X_test, y_test) -> dict:
    """Fit (timed) and score one estimator; a line on standard error before and after."""
    print(f"  fitting {name} on {len(X)} rows ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = make().fit(X, y)
    seconds = time.perf_counter() - t0
    accuracy = float(est.score(X_test, y_test))
    warned = any("Maximum iterations" in str(w.message) for w in caught)
    print(f"  {name}: {seconds:.1f} s, {est.n_iter_} epochs, test accuracy {100 * accuracy:.2f} %",
          file=sys.stderr, flush=True)
    return {"estimator": name, "fit seconds": round(seconds, 2), "epochs": int(est.n_iter_),
            "test accuracy %": round(100 * accuracy, 2), "stopped by": "max_iter" if warned else "tol rule"}


def main() -> int:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from threadpoolctl import threadpool_limits

    import ppt_dask as ppt

    mnist = ppt.datasets.mnist(n_train=args.mnist_train, n_test=args.mnist_test)
    X, y = load_digits(return_X_y=True)
    digits = train_test_split(X / 16.0, y, test_size=0.25, random_state=args.seed, stratify=y)
    sets = [("MNIST", mnist.X, mnist.y, mnist.X_test, mnist.y_test), ("digits", *(digits[i] for i in (0, 2, 1, 3)))]
    client = ppt.connect(n_workers=args.workers, dashboard_address=None)
    rows = []
    try:
        for data_name, X, y, X_test, y_test in sets:
            print(f"{data_name}:", file=sys.stderr, flush=True)
            for name, make in (("PPTClassifier()", lambda: ppt.PPTClassifier(random_state=args.seed)),
                               ("MLPClassifier()", lambda: MLPClassifier(random_state=args.seed))):
                with threadpool_limits(args.workers):  # the cluster's cores, for both
                    rows.append({"data": f"{data_name} ({len(X)}/{len(X_test)})",
                                 **_fit(name, make, X, y, X_test, y_test)})
    finally:
        ppt.cluster.close(client)
    for data_name in ("MNIST", "digits"):
        ours, theirs = [r for r in rows if r["data"].startswith(data_name)]
        ratio = ours["fit seconds"] / theirs["fit seconds"]
        ours["time vs MLPClassifier"] = f"{ratio:.2f}x"
        theirs["time vs MLPClassifier"] = "1x"
    common.write_table(args.out, "estimator_race", rows, title="PPTClassifier() and MLPClassifier(), defaults",
                       notes=[f"PPTClassifier on a LocalCluster of {args.workers} worker processes "
                              "(started before the clock); MLPClassifier in one process.",
                              "Goal for PPTClassifier's defaults: on MNIST and on digits at least "
                              "MLPClassifier's test accuracy, in less time."])
    print(common.markdown(rows))
    return 0


if __name__ == "__main__":  # the LocalCluster's worker processes are spawned: they import this file
    sys.exit(main())
