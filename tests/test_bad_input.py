"""Bad input gets a clear error naming the value, within seconds, before training work."""

import re
import time

import numpy as np
import pytest

import ppt_dask as ppt

from conftest import scheduler_keys


def _xy(n=40):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 3)), rng.integers(0, 3, n)


@pytest.mark.parametrize("value, match", [(np.nan, "NaN"), (np.inf, "inf")])
def test_non_finite_features_are_refused_before_placement(client4, value, match):
    X, y = _xy()
    X[7, 1] = value
    with pytest.raises(ValueError, match=match) as info:
        ppt.enter_data(client4, X, y, n_shards=4)
    assert "7" in str(info.value)  # the row of the first bad value
    assert scheduler_keys(client4) == []  # nothing was sent


def test_mismatched_lengths(client4):
    X, y = _xy()
    with pytest.raises(ValueError, match="40 rows but y has 39"):
        ppt.enter_data(client4, X, y[:-1], n_shards=4)


def test_string_features(client4):
    with pytest.raises(ValueError, match="dtype"):
        ppt.enter_data(client4, np.array([["a", "b"]] * 4), np.zeros(4), n_shards=2)


def test_more_shards_than_rows(client4):
    X, y = _xy(5)
    with pytest.raises(ValueError, match=r"more shards \(6\) than rows \(5\)"):
        ppt.enter_data(client4, X, y, n_shards=6)
    assert scheduler_keys(client4) == []


def test_labels_out_of_range_stop_before_any_round(client4):
    X, y = _xy()
    y[3] = 7
    shards = ppt.enter_data(client4, X, y, n_shards=2)
    with pytest.raises(ValueError, match=r"labels must be integers in \[0, 3\).*\[0, 7\]"):
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(lr=0.1))
    ppt.exit_data(shards)


def test_network_not_matching_the_data(client4):
    X, y = _xy()
    shards = ppt.enter_data(client4, X, y, n_shards=2)
    with pytest.raises(ValueError, match="takes 5 inputs but the data has 3 features"):
        ppt.train(ppt.MLP((5, 4, 3)), shards, ppt.Sync(lr=0.1))
    with pytest.raises(ValueError, match="float32 but the shards hold float64"):
        ppt.train(ppt.MLP((3, 4, 3), dtype="float32"), shards, ppt.Sync(lr=0.1))
    ppt.exit_data(shards)


@pytest.mark.parametrize("kwargs, match", [
    ({"lr": 0}, "lr must be > 0"), ({"lr": -0.1}, "lr must be > 0"),
    ({"lr": float("nan")}, "lr"), ({"momentum": 1.0}, "momentum"),
    ({"l2": -1}, "l2"), ({"block": 0}, "block must be an integer >= 1"),
])
def test_bad_hyper_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ppt.Sync(**kwargs)


def test_block_larger_than_the_data_or_smaller_than_the_shards(client4):
    X, y = _xy()
    shards = ppt.enter_data(client4, X, y, n_shards=4)
    with pytest.raises(ValueError, match=r"block \(41\) is larger than the training set \(40 rows\)"):
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(block=41))
    with pytest.raises(ValueError, match=r"block \(3\) must be at least the number of shards \(4\)"):
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(block=3))
    ppt.exit_data(shards)


@pytest.mark.parametrize("fan_in", [1, 0, 2.5])
def test_fan_in_below_two(client4, fan_in):
    X, y = _xy()
    shards = ppt.enter_data(client4, X, y, n_shards=2)
    with pytest.raises(ValueError, match="fan_in must be an integer >= 2"):
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(), fan_in=fan_in)
    ppt.exit_data(shards)


def test_bad_stop_rule():
    with pytest.raises(ValueError, match="max_epochs"):
        ppt.Stop(max_epochs=0)
    with pytest.raises(ValueError, match="target_error"):
        ppt.Stop(target_error=1.5)


def test_unreachable_scheduler_fails_fast():
    t0 = time.monotonic()
    with pytest.raises(OSError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        ppt.connect("tcp://127.0.0.1:9", timeout=2)
    assert time.monotonic() - t0 < 15


@pytest.mark.parametrize("address", ["http://127.0.0.1:8786", "tcp://", "", "tcp://host/extra path"])
def test_wrong_protocol_or_malformed_address(address):
    with pytest.raises(ValueError, match="scheduler address"):
        ppt.connect(address)


def test_fractional_labels_for_a_softmax(client4):
    X, y = _xy()
    shards = ppt.enter_data(client4, X, y + 0.5, n_shards=2)
    with pytest.raises(ValueError, match="labels must be integers"):
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(lr=0.1))
    ppt.exit_data(shards)


def test_empty_data(client4):
    with pytest.raises(ValueError, match="empty|0 rows|no rows"):
        ppt.enter_data(client4, np.zeros((0, 3)), np.zeros(0), n_shards=1)
    assert scheduler_keys(client4) == []


def test_object_labels(client4):
    X, _ = _xy(4)
    with pytest.raises(ValueError, match="y must be numeric"):
        ppt.enter_data(client4, X, np.array(["a", "b", "c", "d"], dtype=object), n_shards=2)


def test_truncated_idx_file_in_the_data_dir(tmp_path):
    import shutil
    import subprocess
    import sys

    from ppt_dask.data import fetch, files

    # the folder that holds the four files, as ppt.datasets.mnist looks (not merely the first
    # that exists: a fetch that failed offline leaves an empty cache folder behind)
    src = fetch.ensure_mnist(files.data_dir_candidates(), offline=True) / "mnist"
    (tmp_path / "mnist").mkdir()
    for f in src.iterdir():
        shutil.copy(f, tmp_path / "mnist" / f.name)
    images = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[:100_000])
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--data-dir",
                           str(tmp_path), "--quiet"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "train-images-idx3-ubyte.gz" in proc.stderr and time.monotonic() - t0 < 60


def test_a_checkpoint_dir_that_is_a_file_is_refused_before_any_round(client4, tmp_path):
    """It failed with ``[Errno 17] File exists`` at the first checkpoint, after rounds had run."""
    X, y = _xy()
    (tmp_path / "ckpt").write_text("")
    shards = ppt.enter_data(client4, X, y, n_shards=2)
    seen = []
    try:
        for given, where in ((tmp_path / "ckpt", ""), (tmp_path / "ckpt" / "sub", f" ({str(tmp_path / 'ckpt')!r}")):
            with pytest.raises(ValueError, match=rf"^checkpoint_dir '{given}' must be a folder \(made when missing\) "
                                                 rf"to hold checkpoint.npz, but it is a file{re.escape(where)}"):
                ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(lr=0.1), checkpoint_dir=given, progress=seen.append)
        assert seen == []  # not one round ran
        ppt.train(ppt.MLP((3, 4, 3)), shards, ppt.Sync(lr=0.1), ppt.Stop(max_epochs=2),
                  checkpoint_dir=tmp_path / "new" / "ckpt", progress=seen.append)
        assert len(seen) == 2 and (tmp_path / "new" / "ckpt" / "checkpoint.npz").is_file()  # made when missing
    finally:
        ppt.exit_data(shards)
