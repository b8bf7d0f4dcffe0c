"""Asynchronous training on MNIST from the command line: against synchronous SGD, and through a
lost worker.

Usage::

    python graphs/async_race.py              # about 10 minutes on 2 cores
    python graphs/async_race.py --quick      # one repeat of each, about 2 minutes

Each contender is ``ppt-dask train mnist --workers 2 ...`` as a user types it, run as a
subprocess against one LocalCluster this script starts (``--scheduler``), so that a worker
can be killed from outside: the clock is the command's own ``wall time`` (training, to the
passing test-set check at 97%). Contenders, in turn in every repeat (interleaved):

* ``async``: ``--strategy async``, its preset;
* ``async, a worker killed``: the same, and at its first progress line (the end of round 1)
  one of the two workers is SIGKILLed (its nanny starts it again; the run goes on, its
  shards placed again). ``--kill-epoch E`` kills at the first line at or past epoch ``E``
  instead; the lines come every 2 s, so a run that ends sooner is never killed, and the
  script stops with that said;
* ``block 200``: ``--strategy block --block 200 --lr 0.1 --momentum 0.9``, synchronous SGD on
  streamed rounds with the batch of two asynchronous updates (the issue's race);
* ``block``: ``--strategy block``, the synchronous strategy's own preset (block 1000).

Prints the medians of the repeats and the ratio of each to ``async`` repeat by repeat.
Writes ``OUT/async_race.md`` and ``.csv``.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import common  # graphs/common.py

# ---- defaults ----------------------------------------------------------------------------
REPEATS = 3
KILL_EPOCH = 0.0  # a worker is killed at the first progress line at or past this epoch
TIMEOUT_SECONDS = 600.0
CONTENDERS = {
    "async": ["--strategy", "async"],
    "async, a worker killed": ["--strategy", "async"],
    "block 200": ["--strategy", "block", "--block", "200", "--lr", "0.1", "--momentum", "0.9"],
    "block": ["--strategy", "block"],
}
QUICK = dict(REPEATS=1)


def run(address: str, flags: list, kill_epoch: float | None, client) -> dict:
    """One ``ppt-dask train mnist`` against the cluster; with ``kill_epoch``, SIGKILL the second
    worker's process once the command's progress (a plain line at round 1, then every 2 s)
    passes that epoch; a run that ends before is an error, not a race without a kill."""
    import ppt_dask as ppt

    worker = ppt.cluster.worker_addresses(client)[1]
    pid = client.run(os.getpid, workers=[worker])[worker]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "summary.json"
        cmd = [sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--workers", "2", "--scheduler", address,
               "--json", str(out), *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        killed, tail = False, []
        for line in proc.stderr:  # "epoch 2.13/10 (21 %)  ..." every 2 s
            tail = (tail + [line])[-20:]
            words = line.split()
            if kill_epoch is not None and not killed and words[:1] == ["epoch"]:
                if float(words[1].split("/")[0]) >= kill_epoch:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
        if proc.wait(timeout=TIMEOUT_SECONDS):
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}: {''.join(tail)[-1000:]}")
        s = json.loads(out.read_text())
    if kill_epoch is not None and not killed:
        raise RuntimeError(f"{' '.join(cmd)} ended before a progress line reached epoch {kill_epoch}: "
                           "no worker was killed (a smaller --kill-epoch kills sooner)")
    return {"seconds": s["wall_seconds"], "epochs": s["epochs"], "test_accuracy": s["test_accuracy"],
            "learned": s["learned"], "recoveries": s.get("recoveries", 0), "killed": killed}


def main():
    args = common.arguments(__doc__, dict(REPEATS=REPEATS, KILL_EPOCH=KILL_EPOCH), QUICK)
    client = common.start(2, security=False)  # the command lines below take its address: plain tcp
    address = client.scheduler.address
    runs: dict = {name: [] for name in CONTENDERS}
    for repeat in range(args.repeats):
        order = list(CONTENDERS)[repeat % len(CONTENDERS):] + list(CONTENDERS)[:repeat % len(CONTENDERS)]
        for name in order:
            client.wait_for_workers(2, timeout=120)  # a killed worker is back
            r = run(address, CONTENDERS[name], args.kill_epoch if "killed" in name else None, client)
            runs[name].append(r)
            print(f"repeat {repeat} {name:24s} {r['seconds']:7.2f} s {r['epochs']:5.2f} epochs "
                  f"{100 * r['test_accuracy']:.2f}% recoveries {r['recoveries']}"
                  + (" (killed)" if r["killed"] else ""), flush=True)
    rows = []
    for name, mine in runs.items():
        ratios = [m["seconds"] / a["seconds"] for m, a in zip(mine, runs["async"])]
        rows.append({"contender": f"`ppt-dask train mnist --workers 2 {' '.join(CONTENDERS[name])}`"
                     + (f" (a worker SIGKILLed at epoch {args.kill_epoch:g})" if "killed" in name else ""),
                     "seconds (median)": statistics.median(m["seconds"] for m in mine),
                     "epochs (median)": statistics.median(m["epochs"] for m in mine),
                     "test accuracy (min)": min(m["test_accuracy"] for m in mine),
                     "reached 97%": f"{sum(m['learned'] for m in mine)}/{len(mine)}",
                     "x async (median)": statistics.median(ratios),
                     "recoveries": sum(m["recoveries"] for m in mine)})
    path = common.write_table(args.out, "async_race", rows, title="Asynchronous training on MNIST, p = 2",
                              notes=["seconds: the command's `wall time` (training, to the passing 97% check); "
                                     f"medians of {args.repeats} interleaved repeats",
                                     "x async: the contender's time over the asynchronous preset's, repeat by "
                                     "repeat, then the median"])
    print(path.read_text())
    client.close()


if __name__ == "__main__":
    main()
