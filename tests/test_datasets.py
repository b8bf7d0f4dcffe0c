"""Tests for ppt_dask.data.datasets: generated sets against their formulas, file readers
against the real MNIST and 5000-digit files (found with find_data_dir; a missing data
directory is a failure, not a skip) and against damaged copies in tmp_path."""

import gzip
import hashlib
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ppt_dask
from ppt_dask.data import datasets, files
from ppt_dask.data.datasets import (
    DATASETS,
    encoder,
    function,
    function_target,
    grow_images,
    load,
    mnist,
    mnist_grow_factor,
    mnist_rows,
    parity,
    random_splits,
    train_test_split,
)
from ppt_dask.data.files import find_data_dir, find_data_file, read_idx


@pytest.fixture(scope="module")
def data_dir():
    return find_data_dir()


@pytest.fixture(scope="module")
def mnist_full(data_dir):
    return mnist(data_dir)


# ------------------------------------------------------------------ generated sets


def test_parity8_all_patterns_and_popcount():
    d = parity(8)
    assert d.name == "parity8" and d.task == "binary"
    assert d.X.shape == (256, 8) and d.X.dtype == np.float64
    assert d.y.shape == (256,) and d.y.dtype == np.int64
    assert d.X_test is None and d.y_test is None
    assert set(np.unique(d.X)) == {-1.0, 1.0}
    codes = (d.X > 0) @ (2 ** np.arange(7, -1, -1))  # row i is i in binary
    np.testing.assert_array_equal(codes, np.arange(256))
    np.testing.assert_array_equal(d.y, [bin(i).count("1") % 2 for i in range(256)])


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, 25])
def test_parity_bad_n_bits(bad):
    with pytest.raises(ValueError, match="n_bits"):
        parity(bad)


def test_encoder_is_identity():
    d = encoder(256)
    assert d.name == "encoder256" and d.task == "multilabel"
    np.testing.assert_array_equal(d.X, np.eye(256))
    np.testing.assert_array_equal(d.y, np.eye(256))
    assert d.X_test is None
    assert encoder(2, dtype=np.float32).X.dtype == np.float32


@pytest.mark.parametrize("bad", [0, 1, 3, 100, 255])
def test_encoder_needs_power_of_two(bad):
    with pytest.raises(ValueError, match=str(bad)):
        encoder(bad)


def test_function_target_hand_computed():
    # f(0,0): both arctan terms vanish.  x = 3 pi / 20 makes sin(10 x) + 1 = 0 and
    # y = pi / 5 makes cos(10 y) - 1 = 0, so f = 1/2 there too.
    assert function_target(0.0, 0.0) == 0.5
    assert function_target(3 * math.pi / 20, math.pi / 5) == pytest.approx(0.5, abs=1e-15)
    # f(0.5, 0.5) by hand: sin 5 = -0.958924, cos 5 = 0.283662, arctan(-0.5) = -0.463648
    # ((1 - 0.958924) + (0.283662 - 1)) * -0.463648 / pi + 0.5 = 0.599658
    assert function_target(0.5, 0.5) == pytest.approx(0.599658, abs=1e-6)
    # f(1, 0): (sin 10 + 1) arctan(-1) / pi + 1/2 = (1 - 0.544021) (-pi/4) / pi + 1/2
    assert function_target(1.0, 0.0) == pytest.approx(0.5 - 0.455979 / 4, abs=1e-6)


def test_function_shapes_noise_and_clean_test_set():
    d = function()
    assert d.name == "function" and d.task == "regression"
    assert d.X.shape == (1024, 2) and d.y.shape == (1024, 1)
    assert d.X_test.shape == (128, 2) and d.y_test.shape == (128, 1)
    for X in (d.X, d.X_test):
        assert X.min() >= 0.0 and X.max() <= 1.0
    residual = d.y[:, 0] - function_target(d.X[:, 0], d.X[:, 1])
    assert np.abs(residual).max() <= 0.05
    assert np.abs(residual).max() > 0.04  # the noise is really there
    np.testing.assert_allclose(d.y_test[:, 0], function_target(d.X_test[:, 0],
                                                               d.X_test[:, 1]))
    assert function(noise=0.0).y[:, 0] == pytest.approx(
        function_target(d.X[:, 0], d.X[:, 1]))


def test_function_seeded():
    a, b, c = function(seed=3), function(seed=3), function(seed=4)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    np.testing.assert_array_equal(a.X_test, b.X_test)
    assert not np.array_equal(a.X, c.X)
    assert function(n_test=0).X_test is None


def test_function_bad_arguments():
    with pytest.raises(ValueError, match="noise"):
        function(noise=-0.1)
    with pytest.raises(ValueError, match="n_train"):
        function(n_train=0)
    with pytest.raises(ValueError, match="int32"):
        function(dtype=np.int32)


# ------------------------------------------------------------------ data directory


def test_missing_data_dir_names_places_and_env(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as info:
        find_data_dir(missing)
    assert str(missing) in str(info.value) and "PPT_DASK_DATA" in str(info.value)
    with pytest.raises(FileNotFoundError) as info:
        mnist(data_dir=missing, offline=True)  # only looks (tests/test_fetch.py fetches)
    message = str(info.value)
    assert "train-images-idx3-ubyte.gz" in message and str(missing) in message
    assert "PPT_DASK_DATA" in message and "--data-dir" in message


def test_env_var_and_relative_fallback(monkeypatch, tmp_path, data_dir):
    monkeypatch.setenv("PPT_DASK_DATA", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="empty"):
        find_data_file("digits5000/digits5000.npz")
    monkeypatch.setenv("PPT_DASK_DATA", str(data_dir))
    assert find_data_dir() == data_dir
    # Without the variable: ../shared/data from the current folder, wherever the clone sits
    monkeypatch.delenv("PPT_DASK_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert find_data_dir() == (tmp_path / "shared" / "data").resolve()
    # then shared/data beside the repository root, then the per-user cache MNIST is fetched
    # into (named only: whether they exist depends on the machine)
    beside_clone = Path(ppt_dask.__file__).resolve().parents[2] / "shared" / "data"
    assert files.data_dir_candidates()[1:] == [beside_clone, tmp_path / "cache" / "ppt_dask"]


# ------------------------------------------------------------------ MNIST


def test_mnist_shapes_range_and_labels(mnist_full):
    d = mnist_full
    assert d.name == "mnist" and d.task == "classification"
    assert d.X.shape == (60000, 784) and d.X_test.shape == (10000, 784)
    assert d.X.dtype == np.float64
    assert d.X.min() == 0.0 and d.X.max() == 1.0
    assert d.X_test.min() == 0.0 and d.X_test.max() == 1.0
    for y, n in ((d.y, 60000), (d.y_test, 10000)):
        assert y.dtype == np.int64 and set(np.unique(y)) == set(range(10))
        assert np.bincount(y).sum() == n
    assert d.y[:5].tolist() == [5, 0, 4, 1, 9]  # the canonical first training labels


@pytest.mark.parametrize("name", ["train-labels-idx1-ubyte", "t10k-labels-idx1-ubyte",
                                  "t10k-images-idx3-ubyte"])
def test_mnist_bytes_match_sha256sums(data_dir, name):
    sums = dict(line.split()[::-1] for line in
                (data_dir / "mnist" / "SHA256SUMS.uncompressed").read_text().splitlines())
    path = data_dir / "mnist" / f"{name}.gz"
    assert hashlib.sha256(gzip.open(path).read()).hexdigest() == sums[name]
    # The parser sees exactly those bytes: rebuild the file from header and array.
    array = read_idx(path)
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    assert hashlib.sha256(header + array.tobytes()).hexdigest() == sums[name]


@pytest.mark.parametrize("split,start,stop", [("train", 0, 7), ("train", 31000, 31500),
                                              ("test", 9990, 10000), ("test", 5, 5)])
def test_mnist_rows_equals_slice_of_full_load(mnist_full, data_dir, split, start, stop):
    X_full, y_full = ((mnist_full.X, mnist_full.y) if split == "train"
                      else (mnist_full.X_test, mnist_full.y_test))
    X, y = mnist_rows(data_dir, split, start, stop)
    np.testing.assert_array_equal(X, X_full[start:stop])
    np.testing.assert_array_equal(y, y_full[start:stop])


def test_mnist_first_rows_and_bad_ranges(mnist_full, data_dir):
    d = mnist(data_dir, dtype=np.float32, n_train=100, n_test=20)
    assert d.X.shape == (100, 784) and d.X.dtype == np.float32
    np.testing.assert_allclose(d.X, mnist_full.X[:100], rtol=1e-6)
    np.testing.assert_array_equal(d.y_test, mnist_full.y_test[:20])
    with pytest.raises(ValueError, match="70000"):
        mnist_rows(data_dir, "test", 0, 70000)
    with pytest.raises(ValueError, match="valid"):
        mnist_rows(data_dir, "valid", 0, 1)


def test_truncated_idx_raises_naming_file_and_bytes(tmp_path, data_dir):
    raw = gzip.open(data_dir / "mnist" / "train-labels-idx1-ubyte.gz").read()
    short = tmp_path / "mnist" / "train-labels-idx1-ubyte.gz"
    short.parent.mkdir()
    short.write_bytes(gzip.compress(raw[:1000]))  # a complete gzip of a short idx file
    with pytest.raises(ValueError, match=r"train-labels-idx1-ubyte\.gz") as info:
        read_idx(short)
    assert "60008" in str(info.value) and "1000" in str(info.value)
    # Reading only rows inside the surviving part still works...
    assert read_idx(short, 0, 10).tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    # ...and mnist_rows past it names the damaged file.
    os.symlink(data_dir / "mnist" / "train-images-idx3-ubyte.gz",
               tmp_path / "mnist" / "train-images-idx3-ubyte.gz")
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte"):
        mnist_rows(tmp_path, "train", 0, 2000)


def test_cut_gzip_stream_and_bad_magic(tmp_path, data_dir):
    packed = (data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ValueError, match=r"cut\.gz.*10008 bytes are expected"):
        read_idx(cut)
    flipped = bytearray(packed)
    flipped[len(packed) // 2] ^= 0xFF
    (tmp_path / "flipped.gz").write_bytes(flipped)
    with pytest.raises(ValueError, match=r"flipped\.gz"):
        read_idx(tmp_path / "flipped.gz")
    plain = tmp_path / "plain-idx1"  # uncompressed idx files are read too
    plain.write_bytes(gzip.decompress(packed))
    np.testing.assert_array_equal(read_idx(plain), read_idx(data_dir / "mnist" /
                                                           "t10k-labels-idx1-ubyte.gz"))
    plain.write_bytes(gzip.decompress(packed) + b"\0")
    with pytest.raises(ValueError, match="more than the 10008 bytes"):
        read_idx(plain)
    junk = tmp_path / "junk"
    junk.write_bytes(b"PK\x03\x04 not an idx file")
    with pytest.raises(ValueError, match="junk.*magic"):
        read_idx(junk)


# ------------------------------------------------------------------ grow (002)


def test_grow_images_block_structure():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 256, size=(3, 784), dtype=np.uint8)
    big = grow_images(X, 4)
    assert big.shape == (3, 12544) and big.dtype == np.uint8
    images, grown = X.reshape(3, 28, 28), big.reshape(3, 112, 112)
    for di in range(4):
        for dj in range(4):
            np.testing.assert_array_equal(grown[:, di::4, dj::4], images)
    assert grow_images(X, 1) is X
    with pytest.raises(ValueError, match="784"):
        grow_images(X[:, :700], 2)


@pytest.mark.parametrize("grow,factor", [(None, 1), (784, 1), (3136, 2), (3248, 2),
                                         (12544, 4), (28224, 6)])
def test_mnist_grow_factor(grow, factor):
    assert mnist_grow_factor(grow) == factor


@pytest.mark.parametrize("bad", [1000, 3249, 100, 12545])
def test_mnist_grow_factor_rejects(bad):
    with pytest.raises(ValueError, match=str(bad)):
        mnist_grow_factor(bad)


def test_mnist_grown_to_3248_and_12544(mnist_full, data_dir):
    for grow, side in ((3248, 56), (12544, 112)):
        d = mnist(data_dir, n_train=5, n_test=3, grow=grow)
        assert d.name == f"mnist{side}x{side}" and d.X.shape == (5, side * side)
        assert d.X_test.shape == (3, side * side)
        f = side // 28
        np.testing.assert_array_equal(d.X.reshape(5, side, side)[:, ::f, ::f],
                                      mnist_full.X[:5].reshape(5, 28, 28))


# ------------------------------------------------------------------ 5000 digits (004)


def test_digits5000(data_dir):
    d = load("digits5000", data_dir=data_dir)
    assert d.name == "digits5000" and d.task == "classification"
    assert d.X.shape == (5000, 400) and d.X.dtype == np.float64
    assert np.isfinite(d.X).all() and d.X_test is None
    assert d.y.dtype == np.int64 and np.bincount(d.y).tolist() == [500] * 10
    s = load("digits5000", data_dir=data_dir, test_fraction=0.3, seed=1)
    assert s.X.shape == (3500, 400) and s.X_test.shape == (1500, 400)


def test_train_test_split_partitions_and_is_seeded():
    X = np.arange(100.0).reshape(50, 2)
    y = np.arange(50)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, 0.3, seed=5)
    assert len(y_te) == 15 and len(y_tr) == 35
    assert sorted(np.concatenate([y_tr, y_te]).tolist()) == list(range(50))
    np.testing.assert_array_equal(X_tr[:, 0], 2 * y_tr)  # rows stay paired
    np.testing.assert_array_equal(train_test_split(X, y, 0.3, seed=5)[3], y_te)
    splits = list(random_splits(X, y, n_splits=3, seed=5))
    assert len(splits) == 3
    np.testing.assert_array_equal(splits[0][3], y_te)  # split i is seeded seed + i
    assert not np.array_equal(splits[1][3], y_te)
    for bad in (0.0, 1.0, 0.001, float("nan")):
        with pytest.raises(ValueError, match="test_fraction"):
            train_test_split(X, y, bad)


# ------------------------------------------------------------------ registry


def test_registry_and_load():
    assert set(DATASETS) == {"parity8", "encoder", "function", "mnist", "digits5000"}
    common = dict(seed=2, data_dir=None, dtype=np.float32)
    assert load("parity8", **common).X.shape == (256, 8)
    assert load("encoder", **common).X.shape == (256, 256)
    assert load("encoder", n=8).X.shape == (8, 8)
    f = load("function", **common)
    assert f.X.dtype == np.float32
    np.testing.assert_array_equal(f.X, function(seed=2, dtype=np.float32).X)
    with pytest.raises(ValueError, match="digits5000, encoder, function, mnist, parity8"):
        load("cifar10")


def test_dataset_rejects_unknown_task():
    with pytest.raises(ValueError, match="ranking"):
        datasets.Dataset("x", np.zeros((1, 1)), np.zeros(1), task="ranking")


def test_import_does_not_import_dask():
    # In a fresh interpreter (the package's front imports nothing until a name is used).
    code = (
        "import sys\n"
        "import ppt_dask.data.datasets, ppt_dask.core.validation\n"
        "loaded = [m for m in sys.modules if m == 'dask' or m.startswith('dask.')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
