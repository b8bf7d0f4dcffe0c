"""Validate the communication term of 001's model (eq. (4)) under slower links.

Seed 001 measured two clusters, Bat Cave on 100 Mbit/s and Messner on 1 Gbit/s Ethernet
(Table V: Tw, Ti). Here both are built on this one machine: every worker runs in its own
Linux network namespace, joined to the host's by a veth pair whose two ends are
rate-limited (``tc``: ``netem rate R delay D`` where the kernel has netem, else ``tbf
rate R`` and no delay), so a byte from one worker to another crosses two limited links, as
through a switch. The scheduler and the head stay in the host's namespace. For each link
the model is calibrated on that cluster (:func:`ppt_dask.perf.calibrate.calibrate`: Tw and Ti
fitted there), then real ``Sync(block=b)`` rounds of MNIST 784-64-64-10 on 2 workers are
timed and compared with the prediction.

Usage (as root: namespaces and qdiscs need CAP_NET_ADMIN)::

    python graphs/validate_links.py               # unlimited, 1 Gbit/s, 100 Mbit/s
    python graphs/validate_links.py --quick       # 100 Mbit/s only, fewer rounds

Where namespaces or rate limits are not allowed it prints ``skipped: <why>`` and exits 0.
Everything it creates (namespaces ``pptl-*``, their veth pairs, the scheduler and worker
processes, ``net.ipv4.ip_forward``) is removed or restored on the way out.
Writes graphs/out/validate_links.md and .csv.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from netns import has_netem, qdisc, sh, why_not  # noqa: E402

DEFAULTS = dict(LINKS=("none", "1gbit", "100mbit"), DELAY="0.2ms", BLOCKS=(1000, 4000, 8000),
                N_TRAIN=8192, ROUNDS=14, WARMUP=4, CAL_ROUNDS=12)
QUICK = dict(LINKS=("100mbit",), BLOCKS=(1000, 8000), ROUNDS=8, WARMUP=3, CAL_ROUNDS=8)
N_WORKERS, N_SHARDS = 2, 8
SUBNET = "10.213.{}.{}"  # worker i: host side .1, namespace side .2
START_TIMEOUT = 60


@contextlib.contextmanager
def links(n_workers: int, rate: str, delay: str, netem: bool):
    """Namespaces ``pptl-<token>-<i>`` joined to the host by limited veth pairs; yields
    the workers' addresses. Removes all of it, and restores ip_forward, on exit."""
    taken = [line for line in sh("ip", "route").stdout.splitlines()
             if any(line.startswith(SUBNET.format(i, 0) + "/") for i in range(1, n_workers + 1))]
    if taken:  # a run killed before its clean-up: new links there would not be reached
        stale = [n for n in sh("ip", "netns", "list").stdout.split() if n.startswith("pptl-")]
        raise RuntimeError(f"the links' subnets are routed already ({'; '.join(taken)}), by an earlier "
                           f"run that did not clean up? remove its namespaces: ip netns del {' '.join(stale)}")
    token = uuid.uuid4().hex[:4]
    names = [f"pptl-{token}-{i}" for i in range(n_workers)]
    forward = Path("/proc/sys/net/ipv4/ip_forward")
    before = forward.read_text().strip()
    try:
        forward.write_text("1")  # worker to worker goes through the host, like a switch
        for i, ns in enumerate(names, start=1):
            host, peer = f"pl{token}h{i}", f"pl{token}w{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", ns)
            sh("ip", "addr", "add", SUBNET.format(i, 1) + "/24", "dev", host)
            sh("ip", "link", "set", host, "up")
            sh("ip", "addr", "add", SUBNET.format(i, 2) + "/24", "dev", peer, ns=ns)
            sh("ip", "link", "set", peer, "up", ns=ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ip", "route", "add", "default", "via", SUBNET.format(i, 1), ns=ns)
            if rate != "none":
                sh("tc", "qdisc", "add", "dev", host, "root", *qdisc(rate, delay, netem))
                sh("tc", "qdisc", "add", "dev", peer, "root", *qdisc(rate, delay, netem), ns=ns)
        yield names, [SUBNET.format(i, 2) for i in range(1, n_workers + 1)]
    finally:
        for ns in names:
            sh("ip", "netns", "del", ns, check=False)  # takes its veth pair with it
        forward.write_text(before)


@contextlib.contextmanager
def cluster(names, ips, workdir: Path):
    """A scheduler in the host's namespace and one single-threaded worker per namespace."""
    from ppt_dask.engine.placement.cluster import WORKER_ENV

    file = workdir / "scheduler.json"
    procs = []
    log = open(workdir / "cluster.log", "w")
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "0.0.0.0", "--port", "0",
             "--dashboard-address", "127.0.0.1:0", "--preload", "ppt_dask.observe.dashboard",
             "--scheduler-file", str(file)], stdout=log, stderr=log))
        deadline = time.monotonic() + START_TIMEOUT
        while not file.exists():
            if time.monotonic() > deadline or procs[0].poll() is not None:
                raise RuntimeError(f"the scheduler did not start; see {workdir / 'cluster.log'}")
            time.sleep(0.2)
        time.sleep(0.3)  # the file is written in one go, but let it land
        port = json.loads(file.read_text())["address"].rsplit(":", 1)[1]
        env = {**os.environ, **WORKER_ENV}
        for i, (ns, ip) in enumerate(zip(names, ips), start=1):
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, "-m", "distributed.cli.dask_worker",
                 f"tcp://{SUBNET.format(i, 1)}:{port}", "--host", ip, "--nthreads", "1", "--no-nanny",
                 "--no-dashboard", "--name", f"w{i}"], stdout=log, stderr=log, env=env))
        import ppt_dask as ppt

        client = ppt.connect(f"tcp://127.0.0.1:{port}")
        client.wait_for_workers(len(names), timeout=START_TIMEOUT)
        try:
            yield client
        finally:
            client.close()
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=15)
        log.close()


def median_round(net, shards, block, rounds, warmup) -> float:
    import ppt_dask as ppt

    result = ppt.train(net, shards, ppt.Sync(lr=0.05, momentum=0.9, block=block),
                       ppt.Stop(max_epochs=(rounds + warmup) * block / shards.n_rows))
    return float(np.median([h["wall_seconds"] for h in result.history[warmup:]]))


def one_link(rate: str, args, netem: bool, data, workdir: Path) -> list[dict]:
    import ppt_dask as ppt
    from ppt_dask.perf import calibrate
    from ppt_dask.perf import model as pm

    X, y = data
    net = ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax")
    rows = []
    with links(N_WORKERS, rate, args.delay, netem) as (names, ips), cluster(names, ips, workdir) as client:
        t0 = time.perf_counter()
        cal = calibrate.calibrate(client, net, X, y, block=1000, n_shards=N_SHARDS, p_values=(1, 2, 4, 8),
                                  rounds=args.cal_rounds, repeats=5)
        c = cal.constants
        shards = ppt.enter_data(client, X, y, N_SHARDS)
        for b in args.blocks:
            measured = median_round(net, shards, b, args.rounds, args.warmup)
            predicted = pm.iteration_seconds(N_WORKERS, b, net.n_params, c, n_shards=N_SHARDS)
            rows.append({"link": rate, "delay": args.delay if (netem and rate != "none") else "-",
                         "block": b, "measured_ms": 1e3 * measured, "predicted_ms": 1e3 * predicted,
                         "error": f"{predicted / measured - 1:+.1%}",
                         "exchange_ms": 1e3 * float(pm.round_parts(N_WORKERS, b, net.n_params, c,
                                                                   n_shards=N_SHARDS)["exchange"]),
                         "Tw_us_per_weight": 1e6 * c.tw_seconds_per_weight, "Ti_ms": 1e3 * c.ti_seconds,
                         "elapsed_s": time.perf_counter() - t0})
            print(f"{rate}: block {b}: measured {1e3 * measured:.1f} ms, predicted {1e3 * predicted:.1f} ms",
                  file=sys.stderr, flush=True)
        ppt.exit_data(shards)
    return rows


def main() -> int:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    reason = why_not()
    if reason:
        print(f"skipped: {reason}")
        return 0
    netem = has_netem()
    # a SIGTERM (a CI run cancelled, say) unwinds like Ctrl-C, so the namespaces are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from ppt_dask.data import datasets
    from ppt_dask.perf import fit as modelfit

    d = datasets.mnist(n_train=args.n_train, n_test=10)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"pptl-{uuid.uuid4().hex[:6]}"
    workdir.mkdir()
    rows = []
    try:
        for rate in args.links:
            rows += one_link(rate, args, netem, (d.X, d.y), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    limited = [r for r in rows if r["link"] != "none"]
    error = modelfit.prediction_error([r["predicted_ms"] for r in limited], [r["measured_ms"] for r in limited])
    delay_note = (f"netem: rate and {args.delay} delay on each end" if netem else
                  "rate only (tc tbf): this kernel has no netem (CONFIG_NET_SCH_NETEM), so the "
                  f"{args.delay} delay of the issue is not applied")
    notes = [f"{N_WORKERS} workers, each in its own network namespace; {args.n_train} MNIST rows in "
             f"{N_SHARDS} shards; median of rounds {args.warmup}..{args.warmup + args.rounds}; "
             f"{delay_note}.",
             f"Mean absolute prediction error on the limited links: {error:.1%}.",
             "Tw is seconds per weight per tree level (001 Table V: Bat Cave, 100 Mbit/s, 0.798 us; "
             "Messner, 1 Gbit/s, 0.230 us); one level here moves the weights twice (a gradient to the "
             "update, the new weights back), so at rate R the floor is 2 * 8 bytes / R per weight."]
    common.write_table(args.out, "validate_links", rows, title="Run-time model under slower links", notes=notes)
    print((args.out / "validate_links.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
