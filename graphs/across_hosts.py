"""Time to 97% on MNIST across three hosts, at 1 Gbit/s and at 100 Mbit/s, beside a LocalCluster.

The hosts are those of deploy/README.md's section 10 (tests/hosts.py: network namespaces on a
bridge, each with its own address, sshd and empty data folder, a link limited by ``tc tbf``);
the cluster is ``ppt-dask cluster ssh`` over them with TLS, one worker a host, started once.
Three clusters: the hosts with every link at 1 Gbit/s, the same at 100 Mbit/s (the rate is
set between runs), and a LocalCluster of 3 worker processes. On each, two commands as a user
types them, to their passing 97% test check (``seconds``: the command's ``wall time``):

* ``ppt-dask train mnist --workers 3`` (on the hosts with ``--scheduler tls://10.77.0.11:8786
  --security CERTS``): the preset, local SGD on streamed rounds;
* the same with ``--strategy block``: synchronous rounds, those the run-time model predicts,
  run with ``--calibration`` of that cluster at that rate.

Before the races ``ppt-dask model calibrate mnist`` on each cluster writes its calibration
(1-3 minutes each; none with ``--quick`` or ``--cal-rounds 0``, and no model column). The
six contenders take turns in every repeat. The table has the medians, the exchange's share
of the workers' time (the phases ``transfer``, ``reduce`` and ``idle`` of ``--json``'s
breakdown: the page's bars) and the model's round beside the measured one.

Usage (as root: namespaces and qdiscs need CAP_NET_ADMIN; OpenSSH's sshd)::

    python graphs/across_hosts.py              # about 12 minutes on 2 cores
    python graphs/across_hosts.py --quick      # one repeat, no calibration: about 2 minutes

Where the hosts cannot be made it prints ``skipped: <why>`` and exits 0. The hosts and every
process on them are removed on the way out, whatever happened.
Writes graphs/out/across_hosts.md and .csv.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import common  # noqa: E402
import hosts as testhosts  # noqa: E402  (tests/hosts.py: the test hosts)

REPO = Path(__file__).resolve().parents[1]
DEFAULTS = dict(REPEATS=3, RATES=("1gbit", "100mbit"), CAL_ROUNDS=8, TIMEOUT=600)
QUICK = dict(REPEATS=1, CAL_ROUNDS=0)  # 0: no calibration (1-3 minutes a cluster), no model column
LOCAL = "LocalCluster, 3 workers"
COMMANDS = {  # what follows `ppt-dask train mnist` (and the cluster's flags, --workers 3)
    "ppt-dask train mnist": [],  # the preset: local SGD, streamed (the model does not predict it)
    "ppt-dask train mnist --strategy block": ["--strategy", "block"],  # synchronous: the model's rounds
}
EXCHANGE = ("transfer", "reduce", "idle")  # the breakdown's phases of the exchange
RATE_WORDS = {"1gbit": "1 Gbit/s", "100mbit": "100 Mbit/s"}


def ppt_dask(*args, cache: Path, timeout: float) -> str:
    """``ppt-dask ARGS`` (stdout), its last lines in the error when it fails. ``cache``: the
    folder of kept calibrations (``PPT_DASK_CACHE``), the script's own, so that a run is
    modelled by the calibration of its own cluster or not at all, never by one kept before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env["PPT_DASK_CACHE"] = str(cache)
    run = subprocess.run([sys.executable, "-m", "ppt_dask.cli", *map(str, args)], capture_output=True, text=True,
                         env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    if run.returncode:
        raise RuntimeError(f"ppt-dask {' '.join(map(str, args))} exited with {run.returncode}: {run.stderr[-1500:]}")
    return run.stdout


def start_cluster(folder: Path, made) -> tuple[subprocess.Popen, str]:
    """``ppt-dask cluster ssh`` over the hosts (section 10's command) until stopped; its address."""
    command = [sys.executable, "-m", "ppt_dask.cli", "cluster", "ssh", str(folder / "hosts"),
               "--certs", str(folder / "certs"), *made.ssh_flags()]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    seen = []
    for line in proc.stdout:  # "scheduler  tls://10.77.0.11:8786", ..., "Ctrl-C stops the cluster."
        seen.append(line)
        if line.startswith("Ctrl-C"):
            address = next(w.split()[1] for w in seen if w.startswith("scheduler "))
            return proc, address
    raise RuntimeError("ppt-dask cluster ssh did not start: " + "".join(seen)[-2000:])


def stop_cluster(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def exchange_share(summary: dict) -> float:
    """The exchange's percent of the workers' time, from the breakdown of ``--json``."""
    return sum(p["percent"] for p in summary.get("phases") or [] if p["phase"] in EXCHANGE)


def race(args, folder: Path, made, address: str, work: Path) -> dict:
    tls = ["--scheduler", address, "--security", folder / "certs"]
    clusters = {f"3 hosts, {RATE_WORDS.get(r, r)}": (r, tls) for r in args.rates}
    clusters[LOCAL] = (None, [])
    calibration: dict = {}
    for name, (rate, where) in clusters.items():  # the model's terms, on each cluster at its rate
        if not args.cal_rounds:
            break
        if rate:
            made.set_rate(rate)
        t0 = time.monotonic()
        calibration[name] = work / f"cal-{rate or 'local'}.json"
        ppt_dask("model", "calibrate", "mnist", *where, "--workers", 3, "--rounds", args.cal_rounds,
                 "--p-values", "1,2,3", "--out", calibration[name], cache=work / "cache", timeout=args.timeout)
        print(f"calibrated {name} in {time.monotonic() - t0:.0f} s", flush=True)
    turns = [(name, command) for name in clusters for command in COMMANDS]
    runs: dict = {turn: [] for turn in turns}
    for repeat in range(args.repeats):
        for name, command in turns[repeat % len(turns):] + turns[:repeat % len(turns)]:
            rate, where = clusters[name]
            if rate:
                made.set_rate(rate)
            out = work / "summary.json"
            model = ["--calibration", calibration[name]] if name in calibration and COMMANDS[command] else []
            ppt_dask("train", "mnist", *where, "--workers", 3, *COMMANDS[command], "--quiet", "--json", out,
                     *model, cache=work / "cache", timeout=args.timeout)
            s = json.loads(out.read_text())
            runs[name, command].append(s)
            m = s.get("run_time_model") or {}
            print(f"repeat {repeat} {name:22s} {command:28s} {s['wall_seconds']:7.2f} s {s['epochs']:5.2f} epochs "
                  f"{100 * s['test_accuracy']:.2f}% exchange {exchange_share(s):.1f}%"
                  + (f" model/measured {m['predicted_over_measured']:.2f}" if m.get("predicted_over_measured") else ""),
                  flush=True)
    return runs


def rows_of(runs: dict) -> list[dict]:
    rows = []
    for (name, command), mine in runs.items():
        local = runs[LOCAL, command]
        models = [s.get("run_time_model") or {} for s in mine]
        modelled = all(m.get("predicted_round_seconds") for m in models)
        rows.append({
            "cluster": name, "command": f"`{command}`",
            "seconds (median)": statistics.median(s["wall_seconds"] for s in mine),
            "epochs (median)": statistics.median(s["epochs"] for s in mine),
            "reached 97%": f"{sum(bool(s['learned']) for s in mine)}/{len(mine)}",
            "x LocalCluster (median)": statistics.median(s["wall_seconds"] / o["wall_seconds"]
                                                         for s, o in zip(mine, local)),
            "round ms (median)": 1e3 * statistics.median(s["median_round_seconds"] for s in mine),
            "exchange % (median)": statistics.median(exchange_share(s) for s in mine),
            "model round ms": 1e3 * statistics.median(m["predicted_round_seconds"] for m in models)
            if modelled else None,
            "model / measured (median)": statistics.median(m["predicted_over_measured"] for m in models)
            if modelled and all(m.get("predicted_over_measured") for m in models) else None,
        })
    return rows


def main():
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    reason = testhosts.why_not()
    if reason:
        print(f"skipped: the test hosts are network namespaces: {reason}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder, work = Path(tmp) / "ppth", Path(tmp) / "work"
        work.mkdir()
        with testhosts.hosts(folder, n=3) as made:
            subprocess.run([sys.executable, str(REPO / "deploy" / "make_certs.py"), str(folder / "certs"),
                            "--hosts", *made.addresses], check=True, capture_output=True, timeout=60)
            cluster, address = start_cluster(folder, made)
            try:
                runs = race(args, folder, made, address, work)
            finally:
                stop_cluster(cluster)
                made.set_rate(testhosts.RATE)
    path = common.write_table(
        args.out, "across_hosts", rows_of(runs), title="MNIST to 97% across 3 hosts and on a LocalCluster",
        notes=[f"seconds: the command's `wall time`, medians of {args.repeats} repeats, contenders in turn",
               "3 hosts: network namespaces on one machine (tests/hosts.py), one worker each, links limited "
               "by tc tbf at both ends; their processes share this machine's cores with the LocalCluster's",
               "exchange %: the breakdown's transfer + reduce + idle phases, of the workers' time (--json)",
               "model: `--calibration` of `ppt-dask model calibrate mnist` on that cluster at that rate"])
    print(path.read_text())


if __name__ == "__main__":
    main()
