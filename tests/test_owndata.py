"""Data of one's own: tables (CSV, Parquet) and arrays (.npz, .npy) written by pandas and
pyarrow here, read on the workers (``ppt.datasets.from_table``, ``ppt-dask train PATH``),
predicted back to files (``ppt-dask predict MODEL PATH``), and every bad file refused in
one line before any training work.

The command-line runs use the session's cluster (``--scheduler``), so no test starts one
of its own but the lost-worker and the small-memory tests."""

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.cli.commands import main as cli_main
from ppt_dask.data import tables
from ppt_dask.testing import Slowed


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def frame(n=600, seed=0, labels=("cat", "dog", "eel")):
    """Four numeric features (on different scales), an id column and string labels that
    depend on the features (learnable)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4)) * [1.0, 10.0, 0.1, 3.0] + [0.0, 50.0, -1.0, 2.0]
    score = X[:, 0] + (X[:, 1] - 50) / 10
    label = np.where(score > 0.6, labels[0], np.where(score < -0.6, labels[1], labels[2]))
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    df.insert(0, "id", np.arange(1000, 1000 + n))
    df["kind"] = label
    return df


def pieces(df, k):
    """``df`` in ``k`` runs of rows, in order."""
    bounds = np.linspace(0, len(df), k + 1).astype(int)
    return [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def scaled(df, t):
    """The oracle: the features as the table says it scaled them, computed here with pandas."""
    X = df[list(t.features)].to_numpy(np.float64)
    return ((X - t.scaling["mean"]) / t.scaling["scale"]).astype(t.dtype)


@pytest.fixture(scope="module")
def address(client4):
    return client4.scheduler.address


def one_line_error(proc, *words):
    """A refusal: status 2, one line on stderr naming the problem, no training output."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
    assert "test accuracy" not in proc.stdout and "epochs" not in proc.stdout
    return lines[0]


# ---- the API: what enter_data takes, built on the workers -----------------------------------


@pytest.mark.parametrize("kind", ["csv", "parquet", "parts", "csv.gz"])
def test_a_table_becomes_scaled_arrays_on_the_workers(kind, tmp_path, client4):
    df = frame()
    if kind == "parts":  # a folder of Parquet parts, as pyarrow writes a data set
        path = tmp_path / "parts"
        path.mkdir()
        for i, part in enumerate(pieces(df, 3)):
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False), path / f"part-{i}.parquet")
    else:
        path = tmp_path / f"train.{kind}"
        df.to_parquet(path, index=False) if kind == "parquet" else df.to_csv(path, index=False)
    t = ppt.datasets.from_table(path, target="kind", features=["a", "b", "c", "d"], client=client4)
    assert t.task == "classification" and t.classes.tolist() == ["cat", "dog", "eel"]
    assert t.n_rows == len(df) and t.X_test is None and t.features == ("a", "b", "c", "d")
    # the scaling is the whole table's mean and population spread (StandardScaler's)
    np.testing.assert_allclose(t.scaling["mean"], df[["a", "b", "c", "d"]].mean().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(t.scaling["scale"], df[["a", "b", "c", "d"]].std(ddof=0).to_numpy(), rtol=1e-12)
    X, y = client4.compute([t.X, t.y], sync=True)
    assert np.array_equal(X, scaled(df, t))
    assert np.array_equal(t.classes[y], df["kind"].to_numpy())
    if kind == "parts":
        assert len(t.X.chunks[0]) == 3  # one block per part


def test_a_seeded_test_fraction_splits_on_the_workers_the_same_way_each_time(tmp_path, client4):
    df = frame(1000)
    df.to_parquet(tmp_path / "t.parquet", index=False)
    a, b = (ppt.datasets.from_table(tmp_path / "t.parquet", "kind", test_fraction=0.25, seed=3, client=client4)
            for _ in range(2))
    other = ppt.datasets.from_table(tmp_path / "t.parquet", "kind", test_fraction=0.25, seed=4, client=client4)
    assert a.n_rows + a.n_test == 1000 and 200 < a.n_test < 300
    ids_a, ids_b, ids_o = (client4.compute(t.X_test, sync=True)[:, 0] for t in (a, b, other))
    assert np.array_equal(ids_a, ids_b) and not np.array_equal(ids_a, ids_o)
    # the scaling comes from the training rows only (the features include the id here)
    train_ids = client4.compute(a.X, sync=True)[:, 0] * a.scaling["scale"][0] + a.scaling["mean"][0]
    assert abs(a.scaling["mean"][0] - np.mean(train_ids)) < 1e-6


def test_arrays_from_an_npz_and_an_npy_pair_with_a_row_shape(tmp_path, client4):
    rng = np.random.default_rng(1)
    images = rng.random((300, 1, 4, 4))
    labels = (images.mean(axis=(1, 2, 3)) > 0.5).astype(np.int64)
    np.savez(tmp_path / "d.npz", X=images, y=labels)
    np.save(tmp_path / "X.npy", images)
    np.save(tmp_path / "y.npy", labels)
    a = ppt.datasets.from_table(tmp_path / "d.npz", client=client4)
    b = ppt.datasets.from_arrays(tmp_path / "X.npy", tmp_path / "y.npy", client=client4)
    for t in (a, b):
        assert t.row_shape == (1, 4, 4) and t.n_features == 16 and t.classes.tolist() == [0, 1]
        X = client4.compute(t.X, sync=True)
        flat = images.reshape(300, 16)
        assert np.array_equal(X, ((flat - flat.mean(0)) / flat.std(0)).astype(t.dtype)) or \
            np.allclose(X, (flat - flat.mean(0)) / flat.std(0), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="row shape \\(2, 2\\) holds 4 values, but a row has 16 features"):
        ppt.datasets.from_arrays(tmp_path / "X.npy", tmp_path / "y.npy", row_shape=(2, 2))


def test_a_table_served_over_http_is_read_through_its_url(tmp_path, client4):
    df = frame(300)
    df.to_csv(tmp_path / "served.csv", index=False)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/served.csv"
        t = ppt.datasets.from_table(url, target="kind", features=["a", "b"], client=client4)
        X, y = client4.compute([t.X, t.y], sync=True)
        with pytest.raises(FileNotFoundError, match="missing.csv: no such file"):
            ppt.datasets.from_table(url.replace("served", "missing"), target="kind")
    finally:
        server.shutdown()
        server.server_close()
    assert t.name == url and np.array_equal(X, scaled(df, t))
    assert np.array_equal(t.classes[y], df["kind"].to_numpy())


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_shards_of_a_table_are_rebuilt_when_their_worker_is_lost(tmp_path):
    """A worker killed mid-run: its shards are read from the file again on another worker
    (Dask keeps their recipe), and the run ends bitwise as the serial path on the rows."""
    df = frame(400)
    for i, part in enumerate(pieces(df, 4)):
        (tmp_path / "parts").mkdir(exist_ok=True)
        part.to_parquet(tmp_path / "parts" / f"{i}.parquet", index=False)
    client = ppt.connect(n_workers=2, dashboard_address=None)
    try:
        client.wait_for_workers(2, timeout=60)
        t = ppt.datasets.from_table(tmp_path / "parts", "kind", features=["a", "b", "c", "d"], client=client)
        net = ppt.MLP((4, 8, 3), hidden="tanh", output="softmax")
        strategy = Slowed(ppt.Sync(lr=0.3, block=40), seconds=0.02)
        y = np.searchsorted(t.classes, df["kind"].to_numpy())
        expected, _ = train_serial(net, scaled(df, t), y, strategy.inner, rounds=40, n_shards=4, seed=2,
                                   reproducible="same-p", workers=2)
        shards = ppt.enter_data(client, t.X, t.y, n_shards=4)
        address = shards.workers[1]
        pid = client.run(os.getpid, workers=[address])[address]
        killed = {}

        def progress(record):
            if record["round"] == 15 and not killed:
                os.kill(pid, signal.SIGKILL)
                killed["at"] = time.perf_counter()
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=4), seed=2, checkpoint_every=5,
                           progress=progress)
        ppt.exit_data(shards)
    finally:
        ppt.cluster.close(client)
    assert killed and result.settings["recoveries"] >= 1
    assert result.settings["events"][0]["moved"][0]["resent"] is False  # built again from the file
    assert result.params.tobytes() == expected.tobytes()


# ---- the command line: train, save, predict ---------------------------------------------------


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_train_a_classifier_on_csv_with_string_labels_and_predict_to_each_kind(tmp_path, address):
    frame(800, seed=0).to_csv(tmp_path / "train.csv", index=False)
    test = frame(300, seed=1)
    test.to_csv(tmp_path / "test.csv", index=False)
    proc = cli("train", tmp_path / "train.csv", "--target", "kind", "--features", "a,b,c,d", "--test",
               tmp_path / "test.csv", "--scheduler", address, "--workers", "2", "--quiet",
               "--save", tmp_path / "m.npz", "--json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["network"] == [4, 100, 3] and summary["strategy"] == "local"
    assert (summary["lr"], summary["block"], summary["shards"]) == (0.001, 200, 1)  # Adam on a small table
    assert summary["test_accuracy"] > 0.9, summary  # on the test file's rows, on the workers
    model = ppt.load_model(tmp_path / "m.npz")
    assert model.classes.tolist() == ["cat", "dog", "eel"]
    assert model.preprocessing["features"] == ["a", "b", "c", "d"] and model.preprocessing["target"] == "kind"
    oracle = model.predict(test[["a", "b", "c", "d"]].to_numpy())  # the model's numpy path, raw rows
    assert abs(np.mean(oracle == test["kind"].to_numpy()) - summary["test_accuracy"]) < 1e-9
    assert model.predict(test[["d", "id", "c", "b", "a"]]).tolist() == oracle.tolist()  # a frame: by column name
    with pytest.raises(ValueError, match="scales its inputs itself"):
        ppt.PPTClassifier.from_model(model)  # the estimator would skip the table's scaling
    test.drop(columns=["kind"]).to_parquet(tmp_path / "new.parquet", index=False)
    for out in ("p.csv", "p.parquet", "p.npy"):
        keep = ["--keep", "id"] if not out.endswith(".npy") else []
        proc = cli("predict", tmp_path / "m.npz", tmp_path / "new.parquet", "--output", tmp_path / out, *keep)
        assert proc.returncode == 0, proc.stderr
        assert f"wrote     300 predictions to {tmp_path / out}" in proc.stdout
        if out.endswith(".npy"):
            assert np.load(tmp_path / out).tolist() == oracle.tolist()
            continue
        got = pd.read_csv(tmp_path / out) if out.endswith(".csv") else pd.read_parquet(tmp_path / out)
        assert list(got.columns) == ["id", "prediction"]
        assert got["id"].tolist() == test["id"].tolist() and got["prediction"].tolist() == oracle.tolist()
    proc = cli("predict", tmp_path / "m.npz", tmp_path / "test.csv", "--output", tmp_path / "q.csv")
    assert proc.returncode == 0 and f"accuracy  {summary['test_accuracy']:.4f}" in proc.stdout, proc.stdout


def test_train_a_regressor_on_parquet_reports_test_r2(tmp_path, address):
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"u": rng.normal(size=2000), "v": rng.normal(5, 10, size=2000)})
    df["price"] = 1000 + 30 * df.u + 2 * df.v + rng.normal(size=2000)
    df.to_parquet(tmp_path / "r.parquet", index=False)
    proc = cli("train", tmp_path / "r.parquet", "--target", "price", "--test-fraction", "0.2",
               "--scheduler", address, "--workers", "2", "--quiet", "--save", tmp_path / "r.npz",
               "--json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert "test R^2" in proc.stdout and summary["test_accuracy"] is None
    assert summary["test_r2"] > 0.99  # the noise leaves about 0.9993 to learn
    model = ppt.load_model(tmp_path / "r.npz")
    pred = model.predict(df[["u", "v"]].to_numpy())  # targets back in their own units
    r2 = 1 - np.sum((df.price - pred) ** 2) / np.sum((df.price - df.price.mean()) ** 2)
    assert r2 > 0.99 and abs(np.mean(pred) - df.price.mean()) < 5
    proc = cli("predict", tmp_path / "r.npz", tmp_path / "r.parquet", "--output", tmp_path / "p.npy")
    assert proc.returncode == 0 and f"r2        {r2:.4f}" in proc.stdout, proc.stdout


def test_train_on_an_npy_pair_and_predict_an_npz(tmp_path, address):
    rng = np.random.default_rng(3)
    X = rng.random((400, 2, 3))
    y = (X.sum(axis=(1, 2)) > 3).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    np.savez(tmp_path / "new.npz", X=X[:50])
    proc = cli("train", "--x", tmp_path / "X.npy", "--y", tmp_path / "y.npy", "--scheduler", address,
               "--workers", "2", "--quiet", "--save", tmp_path / "m.npz")
    assert proc.returncode == 0, proc.stderr
    model = ppt.load_model(tmp_path / "m.npz")
    assert model.preprocessing["row_shape"] == [2, 3] and model.n_features == 6
    proc = cli("predict", tmp_path / "m.npz", tmp_path / "new.npz", "--output", tmp_path / "p.npy")
    assert proc.returncode == 0, proc.stderr
    assert np.load(tmp_path / "p.npy").tolist() == model.predict(X[:50]).tolist()  # shaped rows taken too


# ---- bad files: one line, status 2, before any training work ----------------------------------


def test_bad_files_are_refused_in_one_line_before_the_cluster(tmp_path, capsys):
    df = frame(100)
    df.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "t.xlsx").write_text("not read")
    df.assign(city="x").to_csv(tmp_path / "text.csv", index=False)
    df.drop(columns=["d"]).to_csv(tmp_path / "other.csv", index=False)
    cases = [
        (["train", tmp_path / "t.xlsx", "--target", "kind"], ["t.xlsx: unknown kind of file .xlsx", ".parquet"]),
        (["train", tmp_path / "t.csv", "--target", "species"], ["t.csv: no column 'species'", "'kind'"]),
        (["train", tmp_path / "t.csv"], ["t.csv: name the label column with --target"]),
        (["train", tmp_path / "text.csv", "--target", "kind"], ["text.csv: feature column 'city' is not numeric"]),
        (["train", tmp_path / "t.csv", "--target", "kind", "--test", tmp_path / "other.csv"],
         ["other.csv: the test file's columns differ from", "no column 'd'"]),
        (["train", tmp_path / "t.csv", "--target", "kind", "--test", tmp_path / "t.csv", "--test-fraction", "0.2"],
         ["--test and --test-fraction"]),
    ]
    # one as users run it (a process of its own: its status), the others through the same main
    # in this process (0.6 s of imports each saved); one line each and nothing else on stderr:
    # a cluster started would have printed its live page's line
    one_line_error(cli("train", tmp_path / "nope.csv", "--target", "kind"), "nope.csv: no such file")
    for args, words in cases:
        status = cli_main([str(a) for a in args])
        out, err = capsys.readouterr()
        one_line_error(subprocess.CompletedProcess(args, status, out, err), *words)


@pytest.mark.slow  # 8 s, five runs: in CI's full run (.ci/run), out of the default suite's few minutes
def test_bad_rows_are_refused_after_the_survey_before_training(tmp_path, address):
    df = frame(100)
    gaps = df.copy()
    gaps.loc[[3, 7, 9], "b"] = np.nan
    gaps.loc[5, "kind"] = None
    gaps.to_csv(tmp_path / "gaps.csv", index=False)
    df.iloc[:0].to_csv(tmp_path / "empty.csv", index=False)
    df.assign(kind="cat").to_parquet(tmp_path / "one.parquet", index=False)
    late = pd.concat([df.assign(a=df.a.astype(object))] * 300, ignore_index=True)  # text far down a column
    late.loc[len(late) - 2, "a"] = "oops"
    late.to_csv(tmp_path / "late.csv", index=False)
    common = ["--target", "kind", "--scheduler", address, "--workers", "2", "--quiet"]
    one_line_error(cli("train", tmp_path / "gaps.csv", *common),
                   "gaps.csv: missing values in 'b' (3 rows), 'kind' (1 row)", "--dropna")
    one_line_error(cli("train", tmp_path / "empty.csv", *common), "empty.csv: the table has no rows")
    one_line_error(cli("train", tmp_path / "one.parquet", *common), "one.parquet: the labels ('kind') hold one class",
                   "'cat'")
    one_line_error(cli("train", tmp_path / "late.csv", *common), "late.csv: column 'a'", "'oops'")
    proc = cli("train", tmp_path / "gaps.csv", *common, "--dropna", "--epochs", "1", "--json", tmp_path / "s.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "s.json").read_text())["epochs"] > 0  # the 96 complete rows trained


def test_a_table_too_large_for_the_workers_memory_is_refused(tmp_path):
    import dask
    import distributed  # noqa: F401  (its configuration loaded before it is changed below)

    # its identifier column renamed: a name like "id" is said on stderr first (train --keep), this is the refusal alone
    frame(2000).rename(columns={"id": "code"}).to_parquet(tmp_path / "big.parquet", index=False)
    # the workers report 64 KiB each; with the memory manager off nothing pauses or spills
    with dask.config.set({"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
                          "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}):
        client = ppt.connect(n_workers=2, processes=False, dashboard_address=None, memory_limit="64KiB",
                             protocol="tcp://", host="127.0.0.1")  # an address the command can reach
    try:
        proc = cli("train", tmp_path / "big.parquet", "--target", "kind", "--scheduler", client.scheduler.address,
                   "--quiet")
    finally:
        ppt.cluster.close(client)
    line = one_line_error(proc, "big.parquet: too large for the workers' memory", "2,000 rows x 5 features",
                          "2 workers of 64.0 KiB each")
    assert "54.7 KiB as float32" in line and line.endswith("use fewer features")  # 2000 x (5 x 4 + 8) bytes


def test_without_pandas_a_table_names_the_extra_to_install(tmp_path):
    frame(10).to_csv(tmp_path / "t.csv", index=False)
    code = ("import sys; sys.modules['pandas'] = None\n"  # as if pandas were not installed
            "from ppt_dask.cli.commands import main\n"
            f"sys.exit(main(['train', {str(tmp_path / 't.csv')!r}, '--target', 'kind']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "pip install 'ppt_dask[tables]'" in proc.stderr


def test_arrays_need_no_pandas(tmp_path):
    """The [tables] extra is for tables: an .npz is read with numpy and fsspec alone."""
    X = np.random.default_rng(0).random((50, 3))
    np.savez(tmp_path / "d.npz", X=X, y=(X[:, 0] > 0.5).astype(np.int64))
    code = ("import sys; sys.modules['pandas'] = None; sys.modules['pyarrow'] = None\n"
            "import numpy as np, ppt_dask as ppt\n"
            f"t = ppt.datasets.from_table({str(tmp_path / 'd.npz')!r})  # dask's local scheduler: no cluster\n"
            "print(t.n_rows, t.classes.tolist(), float(np.abs(t.X.compute().mean(axis=0)).max()) < 1e-12)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["50", "[0,", "1]", "True"]


@pytest.mark.parametrize("args, words", [
    (["train", "parity8", "--target", "y"], "--target applies to a table (.csv, .parquet), not to a built-in data set"),
    (["train", "parity8", "--test-fraction", "0.2"], "--test-fraction applies to a table"),
    (["train", "d.npz", "--features", "a,b"], "--features applies to a table (.csv, .parquet), not to arrays"),
    (["train", "t.csv", "--target", "kind", "--data-dir", "."], "--data-dir applies to a built-in data set"),
    (["train", "t.csv", "--target", "kind", "--splits", "3"], "--splits applies to a built-in data set"),
    (["train", "--x", "X.npy"], "--x and --y go together"),
    (["predict", "m.npz", "t.csv", "--output", "p.npy", "--keep", "id"], "--keep applies to a .csv or .parquet output"),
    (["predict", "m.npz", "t.csv", "--output", "p.txt"], "unknown suffix .txt"),
    (["predict", "m.npz", "parity8", "--keep", "id"], "--keep applies to a table of your own"),
    (["train", "mnst"], "unknown data set 'mnst': not a built-in set"),
    (["predict", "m.npz", "mnst", "--output", "p.csv"], "unknown data set 'mnst': not a built-in set"),
    (["train", "parity8", "--solver", "adam"], "--solver applies to --strategy local, not to --strategy epoch"),
])
def test_a_data_flag_that_does_not_apply_is_refused(args, words, tmp_path):
    frame(20).to_csv(tmp_path / "t.csv", index=False)
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    one_line_error(proc, words)


def test_the_table_preset_is_the_estimators_defaults():
    from ppt_dask.cli.presets import TABLE
    from ppt_dask.sklearn import base

    est = ppt.PPTClassifier()
    assert (TABLE["strategy"], TABLE["lr"], TABLE["batch"], TABLE["steps"], TABLE["adam_lr"], TABLE["adam_batch"]) == (
        est.strategy, base.LOCAL_LR, base.AUTO_BATCH["local"], base.LOCAL_STEPS, base.ADAM_LR, base.ADAM_BATCH)
    assert est.solver == "auto" and TABLE["solver"] is None  # both: Adam on a set of fewer than 60 x 100 rows
    assert (TABLE["hidden"], TABLE["activation"], TABLE["momentum"], TABLE["l2"], TABLE["epochs"], TABLE["tol"],
            TABLE["n_iter_no_change"], TABLE["dtype"]) == (
        est.hidden_layer_sizes, est.activation, est.momentum, est.alpha, est.max_iter, est.tol,
        est.n_iter_no_change, ppt.PPTClassifier._default_dtype)


def test_check_fits_counts_the_rows_bytes_against_the_smallest_worker():
    t = tables.Table("t.csv", None, None, None, None, "classification", np.array([0, 1]), ("a", "b"), "y",
                     {}, (2,), 1000, 0, 0, "float64")
    assert t.nbytes() == 1000 * (2 * 8 + 8)
    tables.check_fits(t, [10 * t.nbytes(), 10 * t.nbytes()])  # fits
    tables.check_fits(t, [0, 0])  # no limits: nothing to check
    with pytest.raises(ValueError, match="too large for the workers' memory"):
        tables.check_fits(t, [t.nbytes(), 100 * t.nbytes()])  # the smallest worker decides


# ---- the estimator: pandas and dask DataFrames ----------------------------------------------


@pytest.mark.slow  # 4 s: in CI's full run (.ci/run), out of the default suite's few minutes
def test_the_estimator_takes_pandas_and_dask_frames_and_checks_their_columns(client4):
    import dask.dataframe as dd

    df = frame(400)
    X, y = df[["a", "b", "c", "d"]], df["kind"]
    clf = ppt.PPTClassifier(random_state=0, max_iter=20, tol=0).fit(X, y)
    assert clf.feature_names_in_.tolist() == ["a", "b", "c", "d"] and clf.classes_.tolist() == ["cat", "dog", "eel"]
    with pytest.raises(ValueError, match="The feature names should match those that were passed during fit"):
        clf.predict(X.rename(columns={"d": "e"}))
    dX, dy = dd.from_pandas(X, npartitions=3), dd.from_pandas(y, npartitions=3)
    dclf = ppt.PPTClassifier(random_state=0, max_iter=20, tol=0).fit(dX, dy)
    assert dclf.feature_names_in_.tolist() == ["a", "b", "c", "d"]
    # the same rows in the same order: the same weights as from pandas
    assert np.array_equal(dclf.params_, clf.params_)
    pred = dclf.predict(dX)
    assert hasattr(pred, "compute") and pred.compute().tolist() == clf.predict(X).tolist()
    assert dclf.score(dX, dy) == clf.score(X, y)
    with pytest.raises(ValueError, match="The feature names should match"):
        dclf.predict(dX[["a", "b", "d", "c"]])
    clf.fit(X.to_numpy(), y)  # refitted on an array: the names go
    assert not hasattr(clf, "feature_names_in_")
