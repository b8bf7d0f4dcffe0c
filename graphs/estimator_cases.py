"""Where scikit-learn and dask-ml users put PPTClassifier: each case in a fresh process, each
with a time limit, and how each ended (issue 62's table).

    python graphs/estimator_cases.py            # every case, 120 s each
    python graphs/estimator_cases.py search2    # one case by name

A case prints one JSON line with what it measured (``seconds``: its own timing of the
call); this script prints the case, how it ended (ok, error, timeout), the process's wall
seconds and that line, or the last line of its error. The timed comparison of the 7-fit
search with MLPClassifier's is graphs/estimator_search.py. Digits are
scikit-learn's ``load_digits`` (1797 rows), the rest ``make_classification``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
import time

LIMIT_SECONDS = 120  # the limit for every case

HEAD = """
import json, time, warnings
import numpy as np
warnings.simplefilter("ignore")
from sklearn.datasets import load_digits, make_classification
import ppt_dask as ppt
X, y = load_digits(return_X_y=True); X = X / 16
GRID = {"alpha": [1e-4, 1e-3, 1e-2, 1e-1, 1.0, 3.0, 10.0]}
def out(**kw): print(json.dumps(kw), flush=True)
"""

CASES = {
    "search2": """
from sklearn.model_selection import GridSearchCV
t = time.perf_counter()
est = ppt.PPTClassifier(random_state=0, max_iter=50)
gs = GridSearchCV(est, {"alpha": GRID["alpha"][:4]}, n_jobs=2, cv=3).fit(X, y)
out(seconds=time.perf_counter() - t, best=gs.best_score_)
""",
    "cross_val2": """
from sklearn.model_selection import cross_val_score
t = time.perf_counter()
s = cross_val_score(ppt.PPTClassifier(random_state=0, max_iter=50), X, y, n_jobs=2, cv=3)
out(seconds=time.perf_counter() - t, mean=float(s.mean()))
""",
    "joblib_dask": """
import joblib
from sklearn.model_selection import GridSearchCV
if __name__ == "__main__":
    client = ppt.connect(n_workers=2)
    t = time.perf_counter()
    with joblib.parallel_backend("dask"):
        gs = GridSearchCV(ppt.PPTClassifier(random_state=0, max_iter=50), {"alpha": GRID["alpha"][:2]}, cv=2).fit(X, y)
    out(seconds=time.perf_counter() - t, best=gs.best_score_)
    client.close()
""",
    "incremental_client": """
import dask.array as da
from dask_ml.wrappers import Incremental
if __name__ == "__main__":
    client = ppt.connect(n_workers=2)
    Xd, yd = da.from_array(X, chunks=450), da.from_array(y, chunks=450)
    t = time.perf_counter()
    inc = Incremental(ppt.PPTClassifier(random_state=0)).fit(Xd, yd, classes=np.arange(10))
    out(seconds=time.perf_counter() - t, accuracy=float(inc.score(Xd, yd)))
    client.close()
""",
    "incremental_no_client": """
import dask.array as da
from dask_ml.wrappers import Incremental
from sklearn.neural_network import MLPClassifier
Xd, yd = da.from_array(X, chunks=450), da.from_array(y, chunks=450)
t = time.perf_counter()
inc = Incremental(ppt.PPTClassifier(random_state=0)).fit(Xd, yd, classes=np.arange(10))
seconds = time.perf_counter() - t
mlp = Incremental(MLPClassifier(random_state=0)).fit(Xd, yd, classes=np.arange(10))
out(seconds=seconds, accuracy=float(inc.score(Xd, yd)), mlp_accuracy=float(mlp.score(Xd, yd)))
""",
    "search1": """
from sklearn.model_selection import GridSearchCV
split = [(np.arange(1200), np.arange(1200, 1797))]
t = time.perf_counter()
gs = GridSearchCV(ppt.PPTClassifier(random_state=0), GRID, n_jobs=1, cv=split).fit(X, y)
out(seconds=time.perf_counter() - t, best=gs.best_score_, where=gs.best_estimator_.placement_)
""",
    "frame_predict": """
import dask.dataframe as dd, pandas as pd
df = dd.from_pandas(pd.DataFrame(X, columns=[f"p{i}" for i in range(64)], index=np.arange(len(X)) * 10), npartitions=3)
ys = dd.from_pandas(pd.Series(y, index=df.index.compute()), npartitions=3)
clf = ppt.PPTClassifier(random_state=0, max_iter=30).fit(df, ys)
p = clf.predict(df)
out(kind=type(p).__name__, index_kept=bool((p.compute().index == df.index.compute()).all()),
    proba=type(clf.predict_proba(df)).__name__, score=clf.score(df, ys))
""",
    "sample_weight": """
w = np.where(y == 3, 10.0, 1.0)
a = ppt.PPTClassifier(random_state=0, max_iter=20).fit(X, y)
b = ppt.PPTClassifier(random_state=0, max_iter=20).fit(X, y, sample_weight=w)
out(changed=bool(not np.array_equal(a.params_, b.params_)),
    recall3=[float((m.predict(X)[y == 3] == 3).mean()) for m in (a, b)])
""",
    "early_stopping": """
clf = ppt.PPTClassifier(random_state=0, early_stopping=True, validation_fraction=0.2).fit(X, y)
out(n_iter=clf.n_iter_, scores=len(clf.validation_scores_), best=clf.best_validation_score_)
""",
    "proba64": """
clf = ppt.PPTClassifier(random_state=0, max_iter=5).fit(X, y)
out(dtype=str(clf.predict_proba(X).dtype))
""",
    "n_iter": """
a = ppt.PPTClassifier(random_state=0, max_iter=10, tol=0, warm_start=True).fit(X, y)
first = a.n_iter_
a.fit(X, y)
b = ppt.PPTClassifier(random_state=0)
counts = [b.partial_fit(X, y, classes=np.arange(10)).n_iter_ for _ in range(3)]
out(warm=[first, a.n_iter_], partial=counts)
""",
    "multilabel": """
Y = np.c_[y % 2, y > 4, y == 0].astype(int)
clf = ppt.PPTClassifier(random_state=0, max_iter=50).fit(X, Y)
out(shape=list(clf.predict(X).shape), score=clf.score(X, Y))
""",
}


def run(name: str, limit: float) -> dict:
    code = HEAD + textwrap.dedent(CASES[name])
    t = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"case": name, "ended": f"timeout after {limit:g} s"}
    seconds = round(time.perf_counter() - t, 1)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return {"case": name, "ended": "ok", "process_seconds": seconds, **json.loads(lines[-1])}
    error = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"case": name, "ended": "error", "process_seconds": seconds, "error": error[:300]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", choices=[[], *CASES], help="case names (default: all)")
    parser.add_argument("--limit", type=float, default=LIMIT_SECONDS, help="seconds a case may take")
    args = parser.parse_args()
    for name in args.cases or CASES:
        print(json.dumps(run(name, args.limit)), flush=True)


if __name__ == "__main__":
    main()
