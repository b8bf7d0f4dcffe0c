"""``ppt-dask train TABLE``: a column unique per row that is named like an identifier is said
(it would be trained on as a feature), and ``--keep id`` keeps it out of the features, as
``predict --keep`` carries it through. Real CLI processes on a real LocalCluster."""

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

WARNING = "column 'id' has a different value in every row and looks like an identifier"


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)


def table(n=400, seed=0):
    """Two learnable features, an ``id`` column (1000, 1001, ...) and string labels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    df = pd.DataFrame(X, columns=["a", "b"])
    df.insert(0, "id", np.arange(1000, 1000 + n))
    df["kind"] = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    return df


@pytest.fixture(scope="module")
def address():
    import ppt_dask as ppt

    client = ppt.connect(n_workers=2, dashboard_address=None, security=False)  # its address goes to a command
    yield client.scheduler.address
    ppt.cluster.close(client)


def test_an_id_column_is_said_and_keep_leaves_it_out_of_the_features(tmp_path, address):
    table().to_csv(tmp_path / "t.csv", index=False)
    common = ("train", tmp_path / "t.csv", "--target", "kind", "--scheduler", address, "--epochs", "2", "--quiet")
    plain = cli(*common, "--json", tmp_path / "plain.json")
    assert plain.returncode == 0, plain.stderr
    assert WARNING in plain.stderr and "--keep id" in plain.stderr
    assert json.loads((tmp_path / "plain.json").read_text())["network"][0] == 3  # id, a, b: trained on
    kept = cli(*common, "--keep", "id", "--json", tmp_path / "kept.json")
    assert kept.returncode == 0, kept.stderr
    assert WARNING not in kept.stderr
    assert json.loads((tmp_path / "kept.json").read_text())["network"][0] == 2  # a, b


@pytest.mark.slow
def test_a_unique_column_not_named_like_an_id_and_a_repeated_id_are_not_said(tmp_path, address):
    df = table().rename(columns={"id": "width"})
    df["code"] = np.arange(len(df)) % 7  # named like neither, repeated
    df.to_csv(tmp_path / "t.csv", index=False)
    proc = cli("train", tmp_path / "t.csv", "--target", "kind", "--scheduler", address, "--epochs", "1", "--quiet")
    assert proc.returncode == 0 and "identifier" not in proc.stderr, proc.stderr
    df = table()
    df["id"] = np.arange(len(df)) % 50  # an id that repeats: a category, perhaps; not said
    df.to_csv(tmp_path / "r.csv", index=False)
    proc = cli("train", tmp_path / "r.csv", "--target", "kind", "--scheduler", address, "--epochs", "1", "--quiet")
    assert proc.returncode == 0 and "identifier" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args, words", [
    (["--keep", "nope"], "--keep: {path} has no column 'nope'"),
    (["--keep", "kind"], "--keep kind: that is the --target column"),
    (["--keep", "id", "--features", "id,a"], "--keep and --features both name 'id'"),
])
def test_bad_keep_is_refused_in_one_line_before_the_cluster(tmp_path, args, words):
    table(50).to_csv(tmp_path / "t.csv", index=False)
    proc = cli("train", tmp_path / "t.csv", "--target", "kind", *args, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert words.format(path=tmp_path / "t.csv") in proc.stderr, proc.stderr


def test_keep_applies_to_a_table_only(tmp_path):
    proc = cli("train", "parity8", "--keep", "id", timeout=120)
    assert proc.returncode != 0 and "--keep applies to a table" in proc.stderr, proc.stderr
