"""The data sets of the source papers, as numpy arrays.

Generated: n-bit parity (Dahl et al., 2008), the N-log2(N)-N Encoder and the Function
problem (Mörchen, 2004). Read from files: MNIST from the four canonical gzip idx files
(Mörchen, 2004; Sobreira and Carneiro (2024) grow the images to raise granularity) and
the 5000-digit set of Alowaisheq and Dhami, found under a data directory
holding ``mnist/`` and ``digits5000/`` (see :func:`ppt_dask.data.files.find_data_dir`).  `mnist_rows` reads one
block of rows, so Dask workers build their shards from the files and the head never
holds the data.  Every loader returns a `Dataset`; `DATASETS` maps the names a user
types to callables that all accept ``seed``, ``data_dir`` and ``dtype`` (ignoring those
they do not use), so a command line can call ``load(name, **kwargs)``.
Pure numpy and the standard library: importing this module does not import dask.

>>> d = parity(3)
>>> d.X.shape, d.X[1].tolist(), d.y.tolist()
((8, 3), [-1.0, -1.0, 1.0], [0, 1, 1, 0, 1, 0, 0, 1])
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ppt_dask.core.validation import TASKS, check_int_at_least, check_nonneg
from ppt_dask.data import fetch
from ppt_dask.data.files import DATA_ENV, data_dir_candidates, find_data_file, read_idx
from ppt_dask.data.splits import random_splits, train_test_split  # noqa: F401  (ppt.datasets.random_splits)

MNIST_SIDE = 28
MNIST_FILES = {
    "train": ("mnist/train-images-idx3-ubyte.gz", "mnist/train-labels-idx1-ubyte.gz"),
    "test": ("mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz"),
}
DIGITS5000_FILE = "digits5000/digits5000.npz"

# 002 labels its middle experiment "Image Size of 3248" (Figure 7), but 3248 is not a
# square number; the authors' repository README says the grown sets are 56x56 and
# 112x112, i.e. 3136 and 12544 inputs.  We read 3248 as 002's label for 56x56.
PAPER_GROW_ALIASES = {3248: 3136}


@dataclass(frozen=True, eq=False)
class Dataset:
    """A data set: training arrays, optional test arrays, and the learning task.

    X : (n, n_features) float; y : (n,) int64 labels for "classification" and
    "binary", (n, n_outputs) float targets for "regression" and "multilabel".
    X_test, y_test : the same layout, or None when the source has no test set.
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    task: str = "classification"

    def __post_init__(self):
        if self.task not in TASKS:
            raise ValueError(f"unknown task {self.task!r}; valid tasks: {', '.join(TASKS)}")


def _float_dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype must be a floating type such as float64; got {dt}")
    return dt


# --------------------------------------------------------------------------- generated


def parity(n_bits: int = 8, dtype=np.float64) -> Dataset:
    """All 2**n_bits bit patterns and their parity (Dahl et al. (2008): 8-bit parity, 8-100-1 net).

    The paper does not say how FANN coded the bits. The inputs are -1/+1 (FANN's "symmetric"
    coding): with 0/1 inputs a tanh network learns parity far less reliably (in our
    runs, most seeds of random-local-epoch training failed within 3000 rounds; with -1/+1
    all learned). The targets are 0/1, which suit a sigmoid output unit. There is no
    test set: the paper measures learning of the whole set.

    Returns
    -------
    Dataset
        Named ``f"parity{n_bits}"``, task ``"binary"``. ``X``: ``(2**n_bits, n_bits)`` in
        {-1, +1}, row i is i in binary (bit 1 -> +1, bit 0 -> -1), most significant bit
        first. ``y``: ``(2**n_bits,)`` int64, the number of ones modulo 2.
    """
    n_bits = check_int_at_least("n_bits", n_bits, 1)
    if n_bits > 24:
        raise ValueError(f"n_bits={n_bits} would give 2**{n_bits} rows; use at most 24")
    patterns = (np.arange(2**n_bits)[:, None] >> np.arange(n_bits - 1, -1, -1)) & 1
    y = (patterns.sum(axis=1) % 2).astype(np.int64)
    X = (2 * patterns - 1).astype(_float_dtype(dtype))
    return Dataset(f"parity{n_bits}", X, y, task="binary")


def encoder(n: int = 256, dtype=np.float64) -> Dataset:
    """The Encoder problem of Mörchen (2004) for an N-log2(N)-N network (the paper: 256-8-256).

    The inputs are the N orthonormal basis vectors of R^N and the target of each is the
    input itself; there is no test set (the paper: "the data was not divided").

    Returns
    -------
    Dataset named f"encoder{n}", task "multilabel": X and y both the (n, n) identity.
    """
    n = check_int_at_least("n", n, 2)
    if n & (n - 1):
        raise ValueError(f"n must be a power of two >= 2 (N-log2(N)-N network); got {n}")
    dt = _float_dtype(dtype)
    return Dataset(f"encoder{n}", np.eye(n, dtype=dt), np.eye(n, dtype=dt),
                   task="multilabel")


def function_target(x, y):
    """The Function problem of Mörchen (2004): the surface to learn on [0, 1]^2.

    f(x, y) = (1/pi) (sin(10 x) + 1) arctan(-x) + (1/pi) (cos(10 y) - 1) arctan(-y) + 1/2

    >>> float(function_target(0.0, 0.0))
    0.5
    """
    x = np.asarray(x)
    y = np.asarray(y)
    return ((np.sin(10 * x) + 1) * np.arctan(-x) + (np.cos(10 * y) - 1) * np.arctan(-y)
            ) / np.pi + 0.5


def function(n_train: int = 1024, n_test: int = 128, noise: float = 0.05, seed: int = 0,
             dtype=np.float64) -> Dataset:
    """The Function problem of Mörchen (2004): 1024 noisy training points and 128 test points.

    Points are uniform in [0, 1]^2; the target is `function_target`.  Uniform noise in
    [-noise, noise] is added to the training targets only: the paper adds it "to introduce the
    network to the problem of over-fitting", so the test targets are kept clean and
    measure how well the true surface was learnt.  Random draws, in order, from
    ``np.random.default_rng(seed)``: training points, training noise, test points.

    Returns
    -------
    Dataset named "function", task "regression":
        X : (n_train, 2), y : (n_train, 1); X_test : (n_test, 2), y_test : (n_test, 1),
        or None when n_test is 0.
    """
    n_train = check_int_at_least("n_train", n_train, 1)
    n_test = check_int_at_least("n_test", n_test, 0)
    noise = check_nonneg("noise", noise)
    dt = _float_dtype(dtype)
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 1.0, size=(n_train, 2))
    y = function_target(X[:, 0], X[:, 1]) + rng.uniform(-noise, noise, size=n_train)
    X_test = y_test = None
    if n_test:
        X_test = rng.uniform(0.0, 1.0, size=(n_test, 2))
        y_test = function_target(X_test[:, 0], X_test[:, 1])[:, None].astype(dt)
        X_test = X_test.astype(dt)
    return Dataset("function", X.astype(dt), y[:, None].astype(dt), X_test, y_test,
                   task="regression")


def grow_images(X: np.ndarray, factor: int, side_in: int = MNIST_SIDE) -> np.ndarray:
    """Nearest-neighbour upscaling of square images by an integer `factor` per side.

    Each pixel becomes a factor x factor block, so the number of inputs grows by
    factor**2 while the picture stays the same (Sobreira and Carneiro (2024) grow MNIST this way, 28 -> 56 ->
    112 pixels per side, to raise the work per sample).

    Parameters
    ----------
    X : (n, side_in**2) flattened images, row-major.
    factor : int >= 1.

    Returns
    -------
    (n, (side_in * factor)**2) array of X's dtype.

    >>> grow_images(np.array([[1, 2, 3, 4]]), 2, side_in=2).reshape(4, 4)
    array([[1, 1, 2, 2],
           [1, 1, 2, 2],
           [3, 3, 4, 4],
           [3, 3, 4, 4]])
    """
    factor = check_int_at_least("factor", factor, 1)
    X = np.asarray(X)
    if X.ndim != 2 or X.shape[1] != side_in * side_in:
        raise ValueError(f"X must have shape (n, {side_in * side_in}) for {side_in}x"
                         f"{side_in} images; got {X.shape}")
    if factor == 1:
        return X
    images = X.reshape(-1, side_in, side_in)
    images = np.repeat(np.repeat(images, factor, axis=1), factor, axis=2)
    return images.reshape(X.shape[0], (side_in * factor) ** 2)


def mnist_grow_factor(grow: int | None) -> int:
    """Upscaling factor per side for a requested number of MNIST inputs.

    784 -> 1, 3136 -> 2 (56x56), 12544 -> 4 (112x112), in general (28 k)**2 -> k.
    3248, the label Sobreira and Carneiro (2024) give their 56x56 set (see PAPER_GROW_ALIASES), also gives 2.
    """
    if grow is None:
        return 1
    grow = check_int_at_least("grow", grow, MNIST_SIDE * MNIST_SIDE)
    n_inputs = PAPER_GROW_ALIASES.get(grow, grow)
    side = math.isqrt(n_inputs)
    if side * side != n_inputs or side % MNIST_SIDE:
        raise ValueError(
            f"grow={grow} is not a number of inputs MNIST can be grown to: use "
            "(28 k)**2 for an integer k, e.g. 784, 3136 (56x56), 12544 (112x112), "
            "or 3248 (the paper's label for 56x56)"
        )
    return side // MNIST_SIDE


def mnist_rows(data_dir=None, split: str = "train", start: int = 0,
               stop: int | None = None, dtype=np.float64, grow: int | None = None,
               row_shape: tuple | None = None):
    """Rows [start, stop) of the MNIST train or test split, as a worker builds a shard.

    Inflates each gzip file only up to row `stop` and returns only the requested rows.
    ``row_shape`` gives each row another shape holding the same pixels, ``(1, 28, 28)`` for
    a convolutional network (a view: no copy).

    Returns
    -------
    X : (stop - start, 784 * factor**2) array of `dtype`, pixels / 255 in [0, 1]
        (or ``(stop - start, *row_shape)``).
    y : (stop - start,) int64 labels 0..9.
    """
    if split not in MNIST_FILES:
        raise ValueError(f"split must be 'train' or 'test'; got {split!r}")
    dt = _float_dtype(dtype)
    factor = mnist_grow_factor(grow)
    images_file, labels_file = (find_data_file(f, data_dir) for f in MNIST_FILES[split])
    images = read_idx(images_file, start, stop)
    labels = read_idx(labels_file, start, stop)
    if images.shape[1:] != (MNIST_SIDE, MNIST_SIDE) or images.dtype != np.uint8:
        raise ValueError(f"{images_file}: expected 28x28 uint8 images; got "
                         f"{images.shape[1:]} {images.dtype}")
    if labels.ndim != 1 or labels.shape[0] != images.shape[0] or labels.max(initial=0) > 9:
        raise ValueError(f"{labels_file}: expected {images.shape[0]} labels 0..9 to "
                         f"match {images_file}; got shape {labels.shape}")
    X = grow_images(images.reshape(len(images), MNIST_SIDE**2), factor).astype(dt)
    X /= 255
    if row_shape is not None:
        X = X.reshape(len(X), *row_shape)
    return X, labels.astype(np.int64)


def mnist_dir(data_dir=None, offline: bool | None = None) -> Path:
    """The data folder holding the four MNIST files, fetched there if missing (`fetch`).

    They are fetched into `data_dir` (or PPT_DASK_DATA) when the user named a folder,
    else into the per-user cache folder; ``offline=True`` (or PPT_DASK_OFFLINE=1) only
    looks.
    """
    named = data_dir is not None or bool(os.environ.get(DATA_ENV))
    candidates = data_dir_candidates(data_dir)
    target = candidates[0] if named else fetch.user_cache_dir()
    return fetch.ensure_mnist(candidates, target, offline=offline).resolve()


def mnist(data_dir=None, dtype=np.float64, n_train: int | None = None,
          n_test: int | None = None, grow: int | None = None,
          offline: bool | None = None) -> Dataset:
    """MNIST, 60000 training and 10000 test images (the Digits of Mörchen (2004); Sobreira and Carneiro (2024)).

    The four files are fetched from the mirrors when missing (`mnist_dir`).

    Parameters
    ----------
    n_train, n_test : take only the first rows of each split (quick runs).
    grow : number of inputs to grow the 28x28 images to, by nearest-neighbour
        upscaling (`mnist_grow_factor`): 3136 or 3248 -> 56x56, 12544 -> 112x112.
    offline : only look for the files, never fetch (default: PPT_DASK_OFFLINE).

    Returns
    -------
    Dataset named "mnist" (or f"mnist{side}x{side}" when grown), task "classification":
        X : (n_train, 784 * factor**2) in [0, 1]; y : (n_train,) int64 0..9;
        X_test, y_test likewise.
    """
    side = MNIST_SIDE * mnist_grow_factor(grow)
    data_dir = mnist_dir(data_dir, offline)
    X, y = mnist_rows(data_dir, "train", 0, n_train, dtype, grow)
    X_test, y_test = mnist_rows(data_dir, "test", 0, n_test, dtype, grow)
    name = "mnist" if side == MNIST_SIDE else f"mnist{side}x{side}"
    return Dataset(name, X, y, X_test, y_test, task="classification")


def digits5000(data_dir=None, dtype=np.float64, test_fraction: float | None = None,
               seed: int = 0) -> Dataset:
    """The 5000 handwritten digits of Alowaisheq and Dhami: 20x20 images unrolled column-major, 500 per class.

    The set has no fixed test set (the paper draws random 70/30 splits, see `random_splits`).
    With `test_fraction` set, the Dataset carries one `train_test_split` of it.

    Returns
    -------
    Dataset named "digits5000", task "classification":
        X : (5000, 400) in about [0, 1]; y : (5000,) int64 0..9 (0 is the digit zero).
    """
    path = find_data_file(DIGITS5000_FILE, data_dir)
    with np.load(path) as archive:
        missing = {"X", "y"} - set(archive.files)
        if missing:
            raise ValueError(f"{path}: missing arrays {sorted(missing)}; found "
                             f"{archive.files}")
        X = archive["X"].astype(_float_dtype(dtype))
        y = archive["y"].astype(np.int64)
    if test_fraction is None:
        return Dataset("digits5000", X, y)
    X, X_test, y, y_test = train_test_split(X, y, test_fraction, seed)
    return Dataset("digits5000", X, y, X_test, y_test)


# --------------------------------------------------------------------------- registry
# Every entry takes the common keywords seed, data_dir and dtype, ignoring those it has
# no use for, plus the options of the function it wraps.


def _parity8(*, seed=0, data_dir=None, dtype=np.float64):
    return parity(8, dtype=dtype)


def _encoder(*, seed=0, data_dir=None, dtype=np.float64, n=256):
    return encoder(n, dtype=dtype)


def _function(*, seed=0, data_dir=None, dtype=np.float64, **options):
    return function(seed=seed, dtype=dtype, **options)


def _mnist(*, seed=0, data_dir=None, dtype=np.float64, **options):
    return mnist(data_dir=data_dir, dtype=dtype, **options)


def _digits5000(*, seed=0, data_dir=None, dtype=np.float64, **options):
    return digits5000(data_dir=data_dir, dtype=dtype, seed=seed, **options)


DATASETS = {
    "parity8": _parity8,
    "encoder": _encoder,
    "function": _function,
    "mnist": _mnist,
    "digits5000": _digits5000,
}


def from_table(path, target=None, **kwargs):
    from ppt_dask.data import tables  # its readers load dask when they run, not here

    return tables.from_table(path, target, **kwargs)


def _from_table_doc() -> str:
    """``from_table``'s docstring: the reader's own, with its parameters (the module that
    holds it has no page in the reference), under a line of what it is for here."""
    from ppt_dask.data import tables  # numpy and the package only: no dask at import

    return ("A table (CSV, Parquet) or ``.npz`` of one's own, read on the Dask workers: what\n"
            "    :func:`ppt_dask.enter_data` takes (``data.X``, ``data.y``), with its classes, scaling\n"
            "    and test rows. Tables need the ``[tables]`` extra (pandas, pyarrow).\n\n"
            + tables.from_table.__doc__.split("\n", 1)[1].lstrip("\n"))


from_table.__doc__ = _from_table_doc()


def from_arrays(x, y, **kwargs):
    """Rows and labels from two ``.npy`` files, read on the workers (:func:`from_table`)."""
    from ppt_dask.data import tables

    return tables.from_arrays(x, y, **kwargs)


def load(name: str, **kwargs) -> Dataset:
    """``DATASETS[name](**kwargs)``, with a ValueError listing the names for a bad one."""
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid names: "
                         f"{', '.join(sorted(DATASETS))}")
    return DATASETS[name](**kwargs)
