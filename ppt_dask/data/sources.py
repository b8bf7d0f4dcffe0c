"""Where the user's own data is, and reading it one partition at a time.

A *source* is a table (``.csv``/``.tsv``, optionally ``.gz``/``.bz2``/``.xz``/``.zst``;
``.parquet``, one file or a folder of parts) or arrays (``.npz`` holding ``X`` and ``y``, or
a pair of ``.npy`` files), at a local path or any URL fsspec reads (``s3://``, ``gs://``,
``https://`` ... with the backend installed: s3fs, gcsfs, aiohttp). The head reads only
metadata here: a Parquet footer, the first 256 KB of a CSV (Dask's type inference), an
``.npy`` header or a zip directory. The rows are read by :func:`partitions`' tasks, on
whatever runs them (the Dask workers): each gives ``(X, y, y_missing)`` for one block of
rows, ``X`` float64 of shape (rows, n_features) with NaN where a value is missing.

Tables are read with Dask's own readers (``dask.dataframe.read_csv``/``read_parquet``),
which need pandas and pyarrow: the ``[tables]`` extra. Arrays need only numpy and fsspec
(a dependency of Dask). Nothing here imports dask when the module is imported.
"""

from __future__ import annotations

import math
import os
import re
import struct
import zipfile
from dataclasses import dataclass, field, replace

import numpy as np

from ppt_dask.core.validation import error_line

INSTALL_HINT = "pip install 'ppt_dask[tables]'"
COMPRESSIONS = (".gz", ".bz2", ".xz", ".zst")
TABLE_SUFFIXES = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet"}
KNOWN = ".csv or .tsv (optionally .gz, .bz2, .xz, .zst), .parquet (a file or a folder of parts), .npz with X and y"
CSV_BLOCK = 64 * 2**20  # bytes of CSV per partition (Dask's byte ranges; a compressed file is one)
ARRAY_BLOCK = 64 * 2**20  # bytes of an .npy array per partition


@dataclass(frozen=True)
class Source:
    """A data file (or a pair of ``.npy`` files) and how to read it; picklable.

    Parameters
    ----------
    path : str
        As the user gave it (local path or URL); the labels' ``.npy`` for a pair is ``y_path``.
    kind : {"csv", "parquet", "npz", "npy"}
    """

    path: str
    kind: str
    y_path: str | None = None
    storage_options: dict = field(default_factory=dict)

    @property
    def is_table(self) -> bool:
        return self.kind in ("csv", "parquet")

    def name(self) -> str:
        return self.path if self.y_path is None else f"{self.path} and {self.y_path}"


def _fs(path: str, storage_options: dict):
    """(filesystem, path within it) for a local path or URL; a missing backend in one line."""
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(path, **storage_options)
    except ImportError as exc:
        raise ImportError(f"{path}: reading this URL needs fsspec's backend for it ({exc})") from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise ValueError(f"{path}: {exc}") from None


def _suffixes(path: str) -> tuple[str, str]:
    """(the kind's suffix, the compression suffix or ""), lower case."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    squeeze = ""
    for c in COMPRESSIONS:
        if name.endswith(c):
            squeeze, name = c, name[: -len(c)]
            break
    dot = name.rfind(".")
    return (name[dot:] if dot > 0 else ""), squeeze


def locate(path, *, y_path=None, storage_options=None) -> Source:
    """The source at ``path``: checked to exist and to be of a kind that is read.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path`` (or at ``y_path``).
    ValueError
        A kind of file that is not read (the message names the kinds that are).
    """
    options = dict(storage_options or {})
    path, y_path = os.fspath(path), (None if y_path is None else os.fspath(y_path))
    for p in (path, y_path):
        if p is None:
            continue
        fs, inner = _fs(str(p), options)
        try:
            there = fs.exists(inner)
        except OSError as exc:  # a URL that cannot be reached
            raise OSError(f"{p}: cannot be reached ({exc})") from None
        if not there:
            raise FileNotFoundError(f"{p}: no such file")
    # a local path as the workers must open it, whatever their working folder
    path, y_path = (p if p is None or "://" in p else os.path.abspath(p) for p in (path, y_path))
    if y_path is not None:
        for p in (path, y_path):
            if _suffixes(p) != (".npy", ""):
                raise ValueError(f"{p}: --x and --y take .npy arrays, got {p!r}")
        return Source(path, "npy", str(y_path), options)
    suffix, squeeze = _suffixes(path)
    fs, inner = _fs(path, options)
    if fs.isdir(inner):
        parts = [p for p in fs.find(inner) if _suffixes(p)[0] in (".parquet", ".pq")]
        if not parts:
            raise ValueError(f"{path}: a folder without .parquet parts; a folder is read as the parts "
                             f"of one Parquet table (files read: {KNOWN})")
        return Source(path, "parquet", None, options)
    if suffix == ".npy":
        raise ValueError(f"{path}: an .npy holds one array; give the rows and the labels as a pair "
                         "(--x X.npy --y y.npy), or both in one .npz (np.savez(path, X=X, y=y))")
    if suffix == ".npz" and not squeeze:
        return Source(path, "npz", None, options)
    if suffix in TABLE_SUFFIXES and (not squeeze or TABLE_SUFFIXES[suffix] == "csv"):
        return Source(path, TABLE_SUFFIXES[suffix], None, options)
    shown = suffix + squeeze or "(no suffix)"
    raise ValueError(f"{path}: unknown kind of file {shown}; read are {KNOWN}, or --x X.npy --y y.npy")


# ---- tables --------------------------------------------------------------------------------


def _dataframe_module():
    try:
        import dask.dataframe as dd
        import pandas  # noqa: F401  (dask imports it too; named for the message)
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"reading tables needs pandas and pyarrow: {INSTALL_HINT} ({error_line(exc)})") from None
    return dd


def read_frame(source: Source, float_columns=()):
    """The table as a lazy dask DataFrame (only metadata read here).

    ``float_columns``: columns read as float64 whatever the first rows hold (a column of
    integers whose later rows are empty or fractional would else not match the sample).
    """
    dd = _dataframe_module()
    try:
        if source.kind == "parquet":
            return dd.read_parquet(source.path, storage_options=source.storage_options or None)
        squeeze = _suffixes(source.path)[1]
        return dd.read_csv(source.path, sep="\t" if _suffixes(source.path)[0] == ".tsv" else ",",
                           blocksize=None if squeeze else CSV_BLOCK, compression="infer",
                           dtype={c: "float64" for c in float_columns} or None,
                           storage_options=source.storage_options or None)
    except (ValueError, OSError, TypeError) as exc:
        raise ValueError(f"{source.path}: not a readable {source.kind} table ({error_line(exc)})") from None
    except Exception as exc:  # pyarrow's and pandas' own parse errors
        raise ValueError(f"{source.path}: not a readable {source.kind} table "
                         f"({type(exc).__name__}: {error_line(exc)})") from None


def csv_has_rows(source: Source) -> bool:
    """Whether a CSV holds a line after its header (reads its first lines only)."""
    import fsspec

    with fsspec.open(source.path, "rt", compression="infer", **source.storage_options) as fh:
        fh.readline()
        return any(line.strip() for line in (fh.readline(), fh.readline()))


def frame_arrays(df, features: list[str], target: str | None):
    """``(X, y, y_missing)`` of one pandas partition: features as float64 (NaN where missing)."""
    X = df[features].to_numpy(dtype=np.float64, na_value=np.nan)
    if target is None:
        return X, np.zeros(len(df)), np.zeros(len(df), dtype=bool)
    column = df[target]
    missing = column.isna().to_numpy()
    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else None
    if kind in ("i", "u", "b"):
        y = column.to_numpy()
    elif kind == "f":
        y = column.to_numpy(dtype=np.float64, na_value=np.nan)
    else:  # text, categories, nullable numbers: the labels as text, None where missing
        y = column.astype("string").to_numpy(dtype=object, na_value=None)
    return X, y, missing


# ---- arrays --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArrayFile:
    """Where an array's bytes are in a file: an ``.npy`` or a member of an ``.npz``.

    ``offset`` is where the rows start; for a compressed member (``deflated``) the rows
    are read by decompressing from the member's start (``member``). A Fortran-ordered
    array (``fortran``, as ``np.save(df.to_numpy())`` writes) is read whole.
    """

    path: str
    shape: tuple
    dtype: str
    offset: int
    member: str | None = None
    deflated: bool = False
    fortran: bool = False
    storage_options: dict = field(default_factory=dict)

    @property
    def row_bytes(self) -> int:
        return int(np.dtype(self.dtype).itemsize * math.prod(self.shape[1:]))


def _npy_header(fh, where: str) -> tuple[tuple, np.dtype, bool, int]:
    """(shape, dtype, Fortran order, bytes of header) of the .npy stream at ``fh``'s position."""
    from numpy.lib import format as npformat

    start = fh.tell()
    try:
        version = npformat.read_magic(fh)
        reader = npformat.read_array_header_1_0 if version == (1, 0) else npformat.read_array_header_2_0
        shape, fortran, dtype = reader(fh)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{where}: not a readable .npy array ({exc})") from None
    if dtype.hasobject:
        raise ValueError(f"{where}: an array of Python objects (it would need pickle); save numbers or text")
    return tuple(shape), dtype, bool(fortran and len(shape) > 1), fh.tell() - start


def array_file(path: str, storage_options: dict, member: str | None = None) -> ArrayFile:
    """The layout of an ``.npy`` file, or of member ``member`` of an ``.npz``: headers only."""
    fs, inner = _fs(path, storage_options)
    with fs.open(inner, "rb") as fh:
        if member is None:
            shape, dtype, fortran, header = _npy_header(fh, path)
            return ArrayFile(path, shape, dtype.str, header, fortran=fortran, storage_options=storage_options)
        try:
            archive = zipfile.ZipFile(fh)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"{path}: not a readable .npz archive ({exc})") from None
        with archive:
            names = archive.namelist()
            if f"{member}.npy" not in names:
                raise ValueError(f"{path}: no array {member!r} in the archive (it holds "
                                 f"{sorted(n.removesuffix('.npy') for n in names)}); save it as "
                                 "np.savez(path, X=rows, y=labels)")
            info = archive.getinfo(f"{member}.npy")
            with archive.open(info) as stream:
                shape, dtype, fortran, header = _npy_header(stream, f"{path}[{member}]")
            deflated = info.compress_type != zipfile.ZIP_STORED
            offset = header
            if not deflated:  # the rows lie in the file as they are: the local header, then the .npy
                fh.seek(info.header_offset)
                local = fh.read(30)
                name_len, extra_len = struct.unpack("<HH", local[26:30])
                offset = info.header_offset + 30 + name_len + extra_len + header
            return ArrayFile(path, shape, dtype.str, offset, member, deflated, fortran, storage_options)


def array_rows(a: ArrayFile, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of an array file (runs where the rows are wanted: a worker)."""
    if a.fortran:  # the columns lie one after another: read all, take the rows
        whole = array_rows(replace(a, fortran=False, shape=a.shape[::-1]), 0, a.shape[-1])
        return whole.T[start:stop]
    fs, inner = _fs(a.path, a.storage_options)
    n = (stop - start) * a.row_bytes
    with fs.open(inner, "rb") as fh:
        if not a.deflated:
            fh.seek(a.offset + start * a.row_bytes)
            data = fh.read(n)
        else:  # deflate cannot seek: read from the member's start
            with zipfile.ZipFile(fh) as archive, archive.open(f"{a.member}.npy") as stream:
                stream.seek(a.offset + start * a.row_bytes)
                data = stream.read(n)
    if len(data) != n:
        raise ValueError(f"{a.path}: truncated array (rows {start}:{stop} need {n} bytes, read {len(data)})")
    return np.frombuffer(data, dtype=a.dtype).reshape(stop - start, *a.shape[1:])


def arrays_rows(x: ArrayFile, y: ArrayFile, start: int, stop: int):
    """``(X, y, y_missing)`` of rows ``[start, stop)``: X flattened to float64."""
    X = array_rows(x, start, stop).reshape(stop - start, -1).astype(np.float64)
    labels = array_rows(y, start, stop)
    if labels.dtype.kind == "f":
        missing = np.isnan(labels) if labels.ndim == 1 else np.isnan(labels).any(axis=1)
    else:
        missing = np.zeros(len(labels), dtype=bool)
    if labels.dtype.kind in "US":
        labels = labels.astype(str).astype(object)
    return X, labels, missing


def array_pair(source: Source) -> tuple[ArrayFile, ArrayFile]:
    """The rows' and the labels' array files of an ``.npz`` or an ``.npy`` pair, checked."""
    if source.kind == "npz":
        x, y = (array_file(source.path, source.storage_options, m) for m in ("X", "y"))
    else:
        x, y = (array_file(p, source.storage_options) for p in (source.path, source.y_path))
    if len(x.shape) < 2:
        raise ValueError(f"{x.path}: the rows must be an array of 2 or more dimensions, got shape {x.shape}")
    if np.dtype(x.dtype).kind not in "biuf":
        raise ValueError(f"{x.path}: the rows must be numbers, got dtype {np.dtype(x.dtype)}")
    if len(y.shape) not in (1, 2) or y.shape[0] != x.shape[0]:
        raise ValueError(f"{source.name()}: X has {x.shape[0]} rows (shape {x.shape}) but y has shape "
                         f"{y.shape}; y must hold one label (or a row of targets) per row")
    if np.dtype(y.dtype).kind not in "biufUS":
        raise ValueError(f"{y.path}: the labels must be numbers or text, got dtype {np.dtype(y.dtype)}")
    return x, y


def row_blocks(n_rows: int, row_bytes: int, whole: bool) -> list[tuple[int, int]]:
    """Partitions of an array: about ``ARRAY_BLOCK`` bytes each; one for an array read
    ``whole`` (compressed: each partition would decompress from the start; Fortran order)."""
    if whole or n_rows == 0:
        return [(0, n_rows)]
    per = max(1, ARRAY_BLOCK // max(1, row_bytes))
    return [(a, min(a + per, n_rows)) for a in range(0, n_rows, per)]


class Partitions:
    """The partitions of a source, each read by :meth:`read` where it is called (a worker).

    A table's partitions are those of its lazy dask DataFrame (computed there with the
    synchronous scheduler); an array's are blocks of rows (:func:`row_blocks`). A plain
    class, not a dataclass: ``dask.delayed`` looks inside dataclasses for collections,
    and the DataFrame here must travel as a value, not become a dependency.
    """

    def __init__(self, where: str, frame=None, features=(), target=None, arrays=(), blocks=()):
        self.where, self.frame, self.features, self.target = where, frame, tuple(features), target
        self.arrays, self.blocks = tuple(arrays), tuple(blocks)

    def __dask_tokenize__(self):
        frame = None if self.frame is None else self.frame._name  # Dask's token of the expression
        return (type(self).__name__, self.where, frame, self.features, self.target, self.arrays, self.blocks)

    @property
    def n(self) -> int:
        return self.frame.npartitions if self.frame is not None else len(self.blocks)

    def read(self, i: int):
        """``(X, y, y_missing)`` of partition ``i``."""
        if self.frame is not None:
            df = self.frame.partitions[i].compute(scheduler="sync")
            return frame_arrays(df, list(self.features), self.target)
        return arrays_rows(*self.arrays, *self.blocks[i])


_MISMATCH = re.compile(r"^\|\s*(\S.*?)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|\s*$", re.M)


def explain(exc: BaseException, where: str) -> Exception:
    """A read error of a partition as one line naming the file (and the column, when known)."""
    text = str(exc)
    if "Mismatched dtypes" in text:  # Dask's CSV reader: a column differs from the first rows
        rows = [m for m in _MISMATCH.findall(text) if m[0] != "Column"]
        if rows:
            column, found, expected = rows[0]
            value = re.search(r"could not convert string to float: ('.*?')", text)
            more = f" such as {value.group(1)}" if value else ""
            return ValueError(f"{where}: column {column!r} holds {found} values{more} further down, where "
                              f"the first rows hold {expected}; encode it as numbers or leave it out "
                              "(--features)")
    value = re.search(r"could not convert string to float: ('.*?')", text)
    if value:
        return ValueError(f"{where}: a feature column holds text ({value.group(1)}) further down; encode it "
                          "as numbers or leave it out (--features)")
    if text.startswith(where):
        return ValueError(text.splitlines()[0])
    return ValueError(f"{where}: cannot be read ({type(exc).__name__}: {error_line(exc)})")
