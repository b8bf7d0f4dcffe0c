"""Where the data files are, and reading them: the data directory (found, or named by the
user) and the idx format MNIST ships in. numpy and the standard library only.
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from ppt_dask.data import fetch

DATA_ENV = "PPT_DASK_DATA"
HOW_TO_PROVIDE = (
    f"pass --data-dir DIR or set {DATA_ENV} to a folder holding mnist/ and digits5000/"
)

def data_dir_candidates(data_dir=None) -> list[Path]:
    """The folders `find_data_dir` looks in, in order.

    An explicit `data_dir` is the only candidate; else the folder named by the
    environment variable PPT_DASK_DATA is; else ``../shared/data`` relative to the
    current directory, then ``shared/data`` beside the repository root, then the
    per-user cache folder that MNIST is fetched into (`fetch.user_cache_dir`).  A folder
    the user named is never silently replaced by another one.
    """
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    if os.environ.get(DATA_ENV):
        return [Path(os.environ[DATA_ENV]).expanduser()]
    found = []
    for path in (Path.cwd().parent / "shared" / "data",
                 Path(__file__).resolve().parents[3] / "shared" / "data",  # ppt_dask/data/ -> beside the clone
                 fetch.user_cache_dir()):
        if path.resolve() not in {p.resolve() for p in found}:
            found.append(path)
    return found


def find_data_dir(data_dir=None) -> Path:
    """The data directory: the first of `data_dir_candidates` that exists, resolved.

    Raises FileNotFoundError naming every place looked in and how to provide one.
    """
    candidates = data_dir_candidates(data_dir)
    for path in candidates:
        if path.is_dir():
            return path.resolve()
    raise FileNotFoundError(
        "no data directory found; looked in: "
        + ", ".join(str(p) for p in candidates) + f". {HOW_TO_PROVIDE}"
    )


def find_data_file(relative: str, data_dir=None) -> Path:
    """Path of `relative` (e.g. "mnist/t10k-labels-idx1-ubyte.gz") in a data directory.

    Raises FileNotFoundError naming the file, every path looked at and how to provide it.
    """
    candidates = [p / relative for p in data_dir_candidates(data_dir)]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise FileNotFoundError(
        f"data file {relative} not found; looked for: "
        + ", ".join(str(p) for p in candidates) + f". {HOW_TO_PROVIDE}"
    )


# idx type codes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT"); big-endian.
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4",
               0x0E: ">f8"}
_CHUNK_BYTES = 1 << 20


def _read_prefix(path: Path, n_bytes: int) -> bytearray:
    """The first `n_bytes` of the uncompressed content of `path` (fewer if it ends).

    Gzip files (magic 1f 8b) are inflated only as far as needed; others are read raw.
    """
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            f.seek(0)
            return bytearray(f.read(n_bytes))
        f.seek(0)
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        out = bytearray()
        while len(out) < n_bytes and not inflater.eof:
            chunk = inflater.unconsumed_tail or f.read(_CHUNK_BYTES)
            if not chunk:
                break  # the compressed stream ended early: a truncated file
            out += inflater.decompress(chunk, n_bytes - len(out))
        return out


def read_idx(path, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Records [start, stop) of an idx file, gzip-compressed or not, as an array.

    The header gives type and dimensions; only the bytes up to record `stop` are
    inflated.  A whole-file read (stop=None) also checks that nothing follows the data.
    Returns shape (stop - start, *dims[1:]) in native byte order.  Raises ValueError for
    a bad magic number, a bad row range, or a truncated or corrupt file (naming the file
    and the expected and actual uncompressed byte counts).
    """
    path = Path(path)
    try:
        magic = _read_prefix(path, 4)
        if len(magic) < 4 or magic[0] or magic[1] or magic[2] not in _IDX_DTYPES \
                or magic[3] == 0:
            raise ValueError(
                f"{path}: not an idx file: magic bytes {bytes(magic).hex(' ') or 'none'}, "
                "expected 00 00 <type code> <number of dimensions>"
            )
        header_bytes = 4 + 4 * magic[3]
        header = _read_prefix(path, header_bytes)
        if len(header) < header_bytes:
            raise ValueError(f"{path}: truncated idx file: expected a {header_bytes}-byte "
                             f"header, found {len(header)} bytes")
        dims = struct.unpack(f">{magic[3]}I", header[4:])
        dtype = np.dtype(_IDX_DTYPES[magic[2]])
        n = dims[0]
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise ValueError(f"{path}: rows [{start}, {stop}) are outside the file's "
                             f"{n} records")
        record_items = math.prod(dims[1:])
        record_bytes = record_items * dtype.itemsize
        expected = header_bytes + stop * record_bytes
        data = _read_prefix(path, expected + 1 if stop == n else expected)
    except zlib.error as err:
        raise ValueError(f"{path}: corrupt gzip stream ({err})") from None
    if len(data) < expected:
        raise ValueError(
            f"{path}: truncated or corrupt idx file: the header says {n} records of shape "
            f"{dims[1:]}, so {expected} bytes are expected up to record {stop}, "
            f"but only {len(data)} bytes were found"
        )
    if len(data) > expected:
        raise ValueError(f"{path}: corrupt idx file: more than the {expected} bytes "
                         f"its header announces ({n} records of shape {dims[1:]})")
    out = np.frombuffer(data, dtype=dtype, count=(stop - start) * record_items,
                        offset=header_bytes + start * record_bytes)
    out = out.reshape((stop - start,) + dims[1:])
    if dtype.byteorder == ">" and dtype.itemsize > 1:
        return out.astype(dtype.newbyteorder("="))
    # A partial read keeps the skipped leading rows in `data`; copy to free them.
    return out if start == 0 else out.copy()
