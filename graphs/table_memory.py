"""The head's memory while ``ppt-dask train`` learns from a Parquet table: it must not grow with it.

Writes a table of ROWS rows x COLUMNS float64 features and an integer label (a rule of the
first two features) in a temporary folder, with pyarrow, in row groups of 100,000 rows
written one after another (this script never holds the table either); then runs, as a user
would, ``ppt-dask train FILE --target label --epochs EPOCHS --workers WORKERS --quiet`` and
samples every 0.1 s the peak resident memory of that process (the head: the command, the
client and the LocalCluster's scheduler; ``VmHWM`` in ``/proc/PID/status``) and of its worker
processes. The same for a table of SMALL rows, so the two heads can be compared side by side.

Usage::

    python graphs/table_memory.py            # 2,000,000 x 50 against 20,000 x 50, a few minutes
    python graphs/table_memory.py --quick    # 200,000 x 50 against 2,000 x 50

Writes graphs/out/table_memory.md and .csv.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import common

DEFAULTS = {"ROWS": 2_000_000, "SMALL": 20_000, "COLUMNS": 50, "EPOCHS": 1.0, "WORKERS": 2}
QUICK = {"ROWS": 200_000, "SMALL": 2_000}
GROUP = 100_000  # rows per row group, written one at a time


def write_table(path: Path, rows: int, columns: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = [f"x{i}" for i in range(columns)]
    writer = None
    for start in range(0, rows, GROUP):
        n = min(GROUP, rows - start)
        X = rng.standard_normal((n, columns))
        label = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
        batch = pa.table({**{c: X[:, i] for i, c in enumerate(names)}, "label": label})
        if writer is None:
            writer = pq.ParquetWriter(path, batch.schema)
        writer.write_table(batch)
    writer.close()


def _peak_kib(pid: int) -> int:
    """The process's peak resident set (VmHWM) so far, in KiB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return 0


def train_and_watch(path: Path, args) -> dict:
    """Run the command; the head's and the workers' peak memory and the wall time."""
    import psutil

    script = Path(sys.executable).with_name("ppt-dask")
    cmd = [str(script) if script.exists() else "ppt-dask", "train", str(path), "--target", "label",
           "--epochs", str(args.epochs), "--workers", str(args.workers), "--quiet"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = worker = 0
    workers: dict = {}
    deadline = time.monotonic() + 3600
    while proc.poll() is None and time.monotonic() < deadline:
        head = max(head, _peak_kib(proc.pid))
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                workers[child.pid] = max(workers.get(child.pid, 0), _peak_kib(child.pid))
        except psutil.Error:
            pass
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {err[-2000:]}")
    worker = max(workers.values(), default=0)
    return {"head": head, "worker": worker, "seconds": time.perf_counter() - t0, "output": out}


def main() -> int:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ppt-table-") as folder:
        for n in (args.small, args.rows):
            path = Path(folder) / f"table-{n}.parquet"
            print(f"writing {n:,} x {args.columns} ...", file=sys.stderr, flush=True)
            write_table(path, n, args.columns)
            print(f"training on it ({path.stat().st_size / 2**20:.0f} MiB) ...", file=sys.stderr, flush=True)
            seen = train_and_watch(path, args)
            rows.append({"rows": n, "columns": args.columns, "file MiB": round(path.stat().st_size / 2**20, 1),
                         "shards MiB (float32)": round(n * (args.columns * 4 + 8) / 2**20, 1),
                         "head peak RSS MiB": round(seen["head"] / 1024, 1),
                         "largest worker peak RSS MiB": round(seen["worker"] / 1024, 1),
                         "wall seconds": round(seen["seconds"], 1)})
            print(seen["output"], file=sys.stderr, flush=True)
            path.unlink()
    small, large = rows
    growth = large["head peak RSS MiB"] - small["head peak RSS MiB"]
    common.write_table(args.out, "table_memory", rows, title="The head's memory against the table's size",
                       notes=[f"`ppt-dask train TABLE.parquet --target label --epochs {args.epochs:g} --workers "
                              f"{args.workers} --quiet`; peak resident memory (VmHWM) sampled every 0.1 s.",
                              f"The head grew by {growth:.1f} MiB for {large['rows'] / small['rows']:.0f}x the rows "
                              f"({large['file MiB'] - small['file MiB']:.0f} MiB more file)."])
    print(common.markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
