"""The preset MNIST run with strangers dripping on every loop's listener, beside the same run undisturbed.

Usage::

    python graphs/drip_linkup.py             # 4 workers, 40 connections a listener, 1 byte / 5 s; 3 tries each
    python graphs/drip_linkup.py --quick     # 1 try each
    python graphs/drip_linkup.py --workers 2 --per 40 --every 5 --tries 5

Each try runs ``ppt-dask train mnist --workers W --json PATH`` as a user does (its own
LocalCluster), once undisturbed and once with ``tests/dripper.py`` beside it: a local process
that watches the command's worker processes and, on each listening port they open once their
own Dask ports are up (the loops' listeners), opens ``--per`` connections and sends one byte on
each every ``--every`` seconds, as a stranger holding the link-up would. The two runs of a
try go one after the other (interleaved), and the table gives each one's wall time, the
strangers the run's events counted (``refused``), its recoveries, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIPPER = HERE.parent / "tests" / "dripper.py"


def _workers_of(pid: int, n: int, timeout: float = 120.0) -> list:
    """The pids of the ``n`` worker processes under ``pid`` once each listens (their Dask ports up)."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:  # the command ended
            return []
        found = []
        for p in children:
            try:
                if any(c.status == psutil.CONN_LISTEN for c in p.net_connections(kind="tcp")):
                    found.append(p)
            except psutil.Error:  # a process that came and went
                pass
        if len(found) >= n:
            return [p.pid for p in found]
        time.sleep(0.05)
    return []


def one(workers: int, per: int, every: float, drip: bool, folder: Path) -> dict:
    out = folder / f"run-{drip}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--workers", str(workers), "--json", str(out),
           "--quiet"]
    t0 = time.perf_counter()
    run = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dripper = None
    if drip:
        pids = _workers_of(run.pid, workers)
        time.sleep(1.0)  # their Dask ports are known to the dripper before it looks for new ones
        names = [str(folder / f"{n}-{time.monotonic_ns()}") for n in ("ready", "done", "drips")]
        dripper = subprocess.Popen([sys.executable, str(DRIPPER), ",".join(map(str, pids)), str(per), str(every),
                                    *names, str(workers), "600"])
    try:
        _, err = run.communicate(timeout=900)
    finally:
        if dripper is not None:
            dripper.terminate()
            dripper.wait(30)
    seconds = time.perf_counter() - t0
    summary = json.loads(out.read_text()) if out.exists() else {}
    # the loops log their refusals once a listener, counted ("worker slot 0 refused 40 connections ...")
    refused = sum(int(m) for m in re.findall(r"worker slot \d+ refused (\d+) connection", err))
    return {"drip": drip, "seconds": seconds, "rc": run.returncode, "refused": refused,
            "lost": len(re.findall(r"could not link|LinkLost|lost", err)),
            "rounds": summary.get("rounds"), "error": err.strip().splitlines()[-1] if run.returncode else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--per", type=int, default=40, help="connections a listener")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between a connection's bytes")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one try each")
    args = parser.parse_args()
    tries = 1 if args.quick else args.tries
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(tries):
            for drip in (False, True):
                row = one(args.workers, args.per, args.every, drip, Path(tmp))
                row["load"] = os.getloadavg()[0]
                rows.append(row)
                print(f"try {i + 1} {'dripped' if drip else 'undisturbed'}: {row['seconds']:.1f} s, rc {row['rc']}, "
                      f"refused {row['refused']} (the loops' log), lines of a lost link {row['lost']}, "
                      f"rounds {row['rounds']}, load {row['load']:.1f} "
                      f"{row['error']}", flush=True)
    for drip in (False, True):
        times = [r["seconds"] for r in rows if r["drip"] == drip]
        print(f"{'dripped' if drip else 'undisturbed'}: median {statistics.median(times):.1f} s of {len(times)}")


if __name__ == "__main__":
    main()
