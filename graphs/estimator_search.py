"""A 7-fit search on scikit-learn's digits without a client: PPTClassifier against MLPClassifier.

    python graphs/estimator_search.py              # 3 repeats of each, medians
    python graphs/estimator_search.py --repeats 5

``GridSearchCV(est, {"alpha": 7 values}, cv=one 2:1 split)`` with each estimator's defaults
(``random_state=0``), ``n_jobs=1`` and ``n_jobs=2``, every search in a fresh process (the
import and, for n_jobs=2, loky's start counted as a user pays them). Prints one JSON line
per search and the medians. Issue 62's targets: PPTClassifier's n_jobs=1 search within 2x
MLPClassifier's time at the same best accuracy, and n_jobs=2 no slower than n_jobs=1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

ALPHAS = [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 0.3, 1.0]

SEARCH = """
import json, time, warnings
t0 = time.perf_counter()
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.neural_network import MLPClassifier
import ppt_dask as ppt
warnings.simplefilter("ignore")
X, y = load_digits(return_X_y=True); X = X / 16
split = [(np.arange(1200), np.arange(1200, len(X)))]
est = {{"ppt": ppt.PPTClassifier, "mlp": MLPClassifier}}["{name}"](random_state=0)
t = time.perf_counter()
search = GridSearchCV(est, {{"alpha": {alphas}}}, cv=split, n_jobs={n_jobs}).fit(X, y)
print(json.dumps({{"name": "{name}", "n_jobs": {n_jobs}, "search_seconds": time.perf_counter() - t,
                  "process_seconds": time.perf_counter() - t0, "best": search.best_score_,
                  "fits": len(search.cv_results_["params"])}}))
"""


def one(name: str, n_jobs: int) -> dict:
    code = textwrap.dedent(SEARCH.format(name=name, n_jobs=n_jobs, alphas=ALPHAS))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{name} n_jobs={n_jobs}: {done.stderr.strip().splitlines()[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict = {}
    for _ in range(args.repeats):
        for name in ("ppt", "mlp"):
            for n_jobs in (1, 2):
                r = one(name, n_jobs)
                print(json.dumps(r), flush=True)
                runs.setdefault((name, n_jobs), []).append(r)
    for (name, n_jobs), rs in runs.items():
        print(f"{name} n_jobs={n_jobs}: median search {statistics.median(r['search_seconds'] for r in rs):.2f} s, "
              f"process {statistics.median(r['process_seconds'] for r in rs):.2f} s, best accuracy "
              f"{statistics.median(r['best'] for r in rs):.4f} ({len(rs)} runs)")


if __name__ == "__main__":
    main()
