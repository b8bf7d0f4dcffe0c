"""Model files: Result.save, load_model, Model, ppt-dask train --save and ppt-dask predict.

The parity8 model is trained once, by the command line (on the tests' shared scheduler); every
check of the loaded model is against an oracle computed independently: the training set's
true parity, the network's forward pass on the saved weights, or a file built by hand.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.cli import textout
from ppt_dask.data import datasets

CLI = [sys.executable, "-m", "ppt_dask.cli"]
REPO = Path(__file__).resolve().parents[1]
# the guide's commands (docs/guide/first-run.md), run as printed (the test checks that it still prints them)
README_TRAIN = "ppt-dask train parity8 --save m.npz && ppt-dask predict m.npz parity8 --split train"
README_INPUT = "ppt-dask predict m.npz --input X.npy --output y.npy"


def _cli(*args, cwd, timeout=300):
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _shell(command, cwd, timeout=300):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_the_guide_prints_the_commands_run_here():
    text = (REPO / "docs" / "guide" / "first-run.md").read_text()
    assert README_TRAIN in text and README_INPUT in text


@pytest.fixture(scope="module")
def parity_model(tmp_path_factory, scheduler_address):
    """The guide's ``ppt-dask train parity8 --save m.npz && ppt-dask predict ...`` (docs/guide/first-run.md),
    run once, the training on the tests' shared scheduler (tests/test_readme_commands.py runs it as printed)."""
    folder = tmp_path_factory.mktemp("parity")
    shared = f"--save m.npz --workers 2 --scheduler {scheduler_address} --seed 7"  # learned in 233 rounds
    run = _shell(README_TRAIN.replace("--save m.npz", shared, 1), cwd=folder)
    assert run.returncode == 0, run.stderr
    return folder, folder / "m.npz", run.stdout


def test_train_save_then_predict_prints_accuracy_1(parity_model):
    _, _, stdout = parity_model
    assert "saved the model to m.npz" in stdout
    assert "accuracy  1.0000 (256 of 256)" in stdout
    # parity8 has 128 even and 128 odd patterns: a perfect model puts them on the diagonal
    assert "     0   128     0\n     1     0   128" in stdout


def test_predict_json_has_the_scores(parity_model):
    folder, _, _ = parity_model
    run = _cli("predict", "m.npz", "parity8", "--split", "train", "--json", "scores.json", cwd=folder, timeout=60)
    assert run.returncode == 0, run.stderr
    scores = json.loads((folder / "scores.json").read_text())
    assert scores["confusion"] == [[128, 0], [0, 128]] and scores["classes"] == [0, 1]
    assert scores["accuracy"] == 1.0 and scores["rows"] == 256 and scores["split"] == "train"


def test_load_model_in_a_new_process_without_a_cluster(parity_model):
    _, path, _ = parity_model
    code = f"""
import sys, numpy as np
import ppt_dask as ppt
from distributed import get_client
m = ppt.load_model({str(path)!r})
d = ppt.datasets.parity(8)
y = (d.X > 0).sum(axis=1) % 2            # the oracle: count the +1 bits
assert m.score(d.X, y) == 1.0 and (m.predict(d.X) == y).all()
p = m.predict_proba(d.X)
assert p.shape == (256, 2) and np.allclose(p.sum(axis=1), 1) and ((p[:, 1] > 0.5) == y).all()
try:
    get_client()
    sys.exit("a client exists")
except ValueError:
    pass
print(m.task, m.summary["dataset"], m.summary["learned"], m.settings["workers"])
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["binary", "parity8", "True", "2"]


def test_saved_weights_and_summary_are_the_run_s(parity_model):
    _, path, stdout = parity_model
    model = ppt.load_model(path)
    # the saved summary prints exactly the result lines the run printed
    assert stdout.startswith(textout.result_lines(model.summary) + "\n"), stdout
    assert model.summary["dataset"] == "parity8" and model.summary["learned"] is True
    assert model.summary["network"] == [8, 100, 1] and model.settings["seed"] == 7
    assert model.net == ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    with np.load(path, allow_pickle=False) as archive:  # the file holds only plain arrays
        assert sorted(archive.files) == ["classes", "meta", "params"]
        assert archive["params"].dtype == np.float64 and archive["meta"].dtype == np.uint8
        meta = json.loads(archive["meta"].tobytes())
    assert meta["format"] == "ppt_dask.model" and meta["network"]["sizes"] == [8, 100, 1]
    X = datasets.parity(8).X
    assert np.array_equal(model.predict_proba(X)[:, 1:], model.net.forward(model.params, X))


def test_predict_input_output_arrays(parity_model):
    folder, _, _ = parity_model
    X = datasets.parity(8).X[::5]
    np.save(folder / "X.npy", X)
    run = _shell(README_INPUT, cwd=folder, timeout=60)
    assert run.returncode == 0, run.stderr
    assert np.array_equal(np.load(folder / "y.npy"), (X > 0).sum(axis=1) % 2)


def _bad_files(folder, good):
    X = np.zeros((3, 7))
    np.save(folder / "wide.npy", X)
    nan = np.ones((3, 8))
    nan[1, 2] = np.nan
    np.save(folder / "nan.npy", nan)
    (folder / "text.npz").write_text("not a model\n")
    np.savez(folder / "other.npz", weights=np.zeros(3))
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    (folder / "flipped.npz").write_bytes(bytes(raw))


@pytest.mark.parametrize("args, message", [
    (["M", "--input", "wide.npy", "--output", "y.npy"],
     "--input wide.npy: X has 7 features per row, but the model takes 8"),
    (["M", "--input", "nan.npy", "--output", "y.npy"],
     "X has 1 non-finite entry (NaN or inf); the first is X[1, 2] = nan"),
    (["text.npz", "parity8"], "text.npz: not a ppt_dask model file (not an .npz archive)"),
    (["other.npz", "parity8"], "other.npz: not a ppt_dask model file (arrays ['weights']"),
    (["flipped.npz", "parity8"], "flipped.npz: not a readable ppt_dask model file"),
    (["M", "mnist"], "mnist has 784 features per row, but the model takes 8"),
    (["M", "parity8", "--split", "test"], "parity8 has no test set; use --split train"),
    (["M"], "give a DATASET to score on, or --input X.npy"),
    (["M", "parity8", "--output", "y.npy"], "--output applies to --input"),
    (["M", "--input", "wide.npy", "--output", "y.npy", "--split", "train"], "--split applies to a DATASET"),
])
def test_bad_predict_input_is_one_line_naming_it(parity_model, tmp_path, args, message):
    _, good, _ = parity_model
    _bad_files(tmp_path, good)
    run = _cli("predict", *[str(good) if a == "M" else a for a in args], cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "y.npy").exists()


def _model(output="softmax", sizes=(4, 5, 3), classes=None, seed=0):
    net = ppt.MLP(sizes, hidden="tanh", output=output)
    return ppt.Model(net, net.init_params(seed) * 3, classes,
                     {"seed": seed, "note": (1, 2)}, {"dataset": "made", "epochs": np.float64(2.5)})


def test_string_classes_round_trip_and_confusion_counts(tmp_path):
    model = _model(classes=np.array(["cat", "dog", "emu"]))
    path = model.save(tmp_path / "m.npz")
    back = ppt.load_model(path)
    X = np.random.default_rng(1).standard_normal((200, 4))
    out = model.net.forward(model.params, X).argmax(axis=1)  # the oracle: the forward pass
    assert np.array_equal(back.predict(X), np.array(["cat", "dog", "emu"])[out])
    assert back.settings == {"seed": 0, "note": [1, 2]} and back.summary["epochs"] == 2.5
    y = np.array(["cat", "dog", "emu"])[np.random.default_rng(2).integers(0, 3, 200)]
    counts = back.confusion(X, y)
    truth = {(t, p): 0 for t in range(3) for p in range(3)}
    for t, p in zip(np.searchsorted(["cat", "dog", "emu"], y), out):
        truth[(t, p)] += 1
    assert counts.tolist() == [[truth[(t, p)] for p in range(3)] for t in range(3)]
    assert back.score(X, y) == pytest.approx(np.trace(counts) / 200)


def test_regression_model_scores_r2(tmp_path):
    model = _model(output="linear", sizes=(2, 6, 1))
    back = ppt.load_model(model.save(tmp_path / "r.npz"))
    X = np.random.default_rng(3).uniform(size=(100, 2))
    y = datasets.function_target(X[:, 0], X[:, 1])
    pred = model.net.forward(model.params, X).ravel()
    assert np.array_equal(back.predict(X), pred)
    r2 = 1 - np.sum((y - pred) ** 2) / np.sum((y - y.mean()) ** 2)
    assert back.score(X, y) == pytest.approx(r2, rel=1e-12)
    with pytest.raises(ValueError, match="a regression model has no classes"):
        back.confusion(X, y)


def _rewrite(path, out, **changes):
    with np.load(path, allow_pickle=False) as a:
        arrays = {k: a[k] for k in a.files}
    meta = json.loads(arrays["meta"].tobytes())
    for key, value in changes.items():
        if key == "params":
            arrays["params"] = value
        else:
            meta[key] = value
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(out, **arrays)
    return out


def test_other_version_and_tampered_weights_are_refused_with_the_reason(tmp_path):
    model = _model()
    path = model.save(tmp_path / "m.npz")
    newer = _rewrite(path, tmp_path / "v3.npz", format_version=3, ppt_dask_version="9.0")
    with pytest.raises(ValueError, match=r"format version 3 \(written by ppt_dask 9.0\); this ppt_dask reads "
                                         r"versions 1, 2"):
        ppt.load_model(newer)
    older = ppt.load_model(_rewrite(path, tmp_path / "v1.npz", format_version=1))  # before input scaling
    assert older.preprocessing is None and np.array_equal(older.params, model.params)
    params = model.params.copy()
    params[7] += 1e-9  # a valid zip whose weights no longer match the checksum
    tampered = _rewrite(path, tmp_path / "t.npz", params=params)
    with pytest.raises(ValueError, match="corrupted model file"):
        ppt.load_model(tampered)
    with zipfile.ZipFile(tmp_path / "pickled.npz", "w") as z:  # an object array needs pickle
        for name in ("params", "classes", "meta"):
            with z.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, np.array([{"x": 1}], dtype=object))
    with pytest.raises(ValueError, match="not a readable ppt_dask model file"):
        ppt.load_model(tmp_path / "pickled.npz")
    with pytest.raises(FileNotFoundError, match="no model file"):
        ppt.load_model(tmp_path / "absent.npz")
    with pytest.raises(ValueError, match="does not exist"):
        model.save(tmp_path / "no" / "m.npz")


def test_estimator_from_a_binary_model_gives_the_same_probabilities(parity_model):
    _, path, _ = parity_model
    model = ppt.load_model(path)
    clf = ppt.PPTClassifier.from_model(path)
    X = datasets.parity(8).X
    assert clf.classes_.tolist() == [0, 1] and clf.n_features_in_ == 8
    assert np.allclose(clf.predict_proba(X), model.predict_proba(X), rtol=0, atol=1e-12)
    assert np.array_equal(clf.predict(X), model.predict(X))
    again = pickle.loads(pickle.dumps(clf))  # scikit-learn's convention: estimators pickle
    assert np.array_equal(again.predict_proba(X), clf.predict_proba(X))
    assert again.get_params() == clf.get_params()
    with pytest.raises(ValueError, match="a binary model cannot become a PPTRegressor"):
        ppt.PPTRegressor.from_model(model)


def test_estimator_from_softmax_and_regression_models(tmp_path):
    clf_model = _model(classes=np.array([3, 5, 9]))
    clf = ppt.PPTClassifier.from_model(clf_model.save(tmp_path / "c.npz"), max_iter=5)
    X = np.random.default_rng(4).standard_normal((50, 4))
    assert np.array_equal(clf.predict(X), clf_model.predict(X)) and clf.max_iter == 5
    assert np.array_equal(clf.predict_proba(X), clf_model.predict_proba(X))
    reg_model = _model(output="linear", sizes=(4, 3, 2))
    reg = pickle.loads(pickle.dumps(ppt.PPTRegressor.from_model(reg_model)))
    assert np.array_equal(reg.predict(X), reg_model.predict(X))
    multi = _model(output="sigmoid", sizes=(4, 3, 2))
    with pytest.raises(ValueError, match="a multilabel model cannot become a PPTClassifier"):
        ppt.PPTClassifier.from_model(multi)


@pytest.mark.filterwarnings("ignore:Maximum iterations")
def test_fitted_estimator_pickles_and_predicts_the_same(client4, workers4):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((300, 5))
    y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    clf = ppt.PPTClassifier(hidden_layer_sizes=(8,), max_iter=5, random_state=0).fit(X, y)
    again = pickle.loads(pickle.dumps(clf))
    assert np.array_equal(again.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(again.predict(X), clf.predict(X)) and again.n_iter_ == clf.n_iter_
