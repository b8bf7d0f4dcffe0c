"""A cluster users start themselves against ppt_dask's own: time to 97% and memory over a long run.

Usage::

    python graphs/own_cluster.py                  # 3 repeats of each run at 2 workers, interleaved; 7500 rounds' memory
    python graphs/own_cluster.py --workers 1,4,8  # the same at 1, 4 and 8 workers (4, 8 oversubscribe 2 cores)
    python graphs/own_cluster.py --quick          # block 1000 once on each cluster; 600 rounds' memory

The plain cluster is what a user starts with distributed's defaults and nothing else set (no
ppt_dask variables, an empty dask configuration): ``dask scheduler`` and ``dask worker ADDRESS
--nworkers 2 --nthreads 1``. Each run is the command line as a user types it, ``ppt-dask train
mnist --workers P FLAGS`` on ppt_dask's LocalCluster (``ppt.connect()``) and with ``--scheduler
ADDRESS`` on the plain one (``--nworkers P``), in turn within each repeat; the table gives medians
of the training time (start-up apart, the run's ``--json`` summary) and their ratio.

The memory run trains sync block 200 on the plain cluster for ``MEMORY_ROUNDS`` rounds through
the public API with its defaults (``ppt.train``: the command line's engine and recorder, in this
process, so that the head is this process), and samples the head's and the scheduler's resident
memory (psutil) every ``SAMPLE_ROUNDS`` rounds; the growth is the least-squares slope of the
samples after the first ``SETTLE_SHARE`` of the rounds (start-up: imports, the first
allocations), in MB per 1000 rounds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import common  # noqa: E402

DEFAULTS = dict(REPEATS=3, RUNS=("block200", "block1000", "preset"), WORKERS=(2,), MEMORY_ROUNDS=7500,
                SAMPLE_ROUNDS=250, SETTLE_SHARE=0.15)
QUICK = dict(REPEATS=1, RUNS=("block1000",), MEMORY_ROUNDS=600, SAMPLE_ROUNDS=50)
FLAGS = {  # what each run adds to `ppt-dask train mnist --workers 2`
    "block200": ("--strategy", "block", "--block", "200", "--lr", "0.1", "--momentum", "0.9", "--dtype", "float32"),
    "block1000": ("--strategy", "block", "--block", "1000", "--lr", "0.5", "--momentum", "0.9", "--dtype", "float32"),
    "preset": (),
}
MEMORY_WORKERS = 2
OURS = ("OMP_", "MKL_", "OPENBLAS_", "MALLOC_", "GLIBC_TUNABLES", "DASK_")  # what a user's shell lacks


def plain_env(folder: Path) -> dict:
    """This environment without thread, malloc and dask settings, with an empty dask configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(OURS)}
    (folder / "dask-config").mkdir(exist_ok=True)
    env["DASK_CONFIG"] = str(folder / "dask-config")
    return env


def start_plain(folder: Path, env: dict, workers: int) -> tuple[str, list]:
    """``dask scheduler`` and ``dask worker ADDRESS --nworkers P --nthreads 1``: the address, the processes."""
    info = folder / "scheduler.json"
    info.unlink(missing_ok=True)
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(info)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 60
    while not info.exists() or not info.read_text().strip():
        if time.monotonic() > deadline:
            stop(procs)
            raise RuntimeError("the scheduler did not start within 60 s")
        time.sleep(0.2)
    address = json.loads(info.read_text())["address"]
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nworkers",
                                   str(workers), "--nthreads", "1", "--host", "127.0.0.1"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address, procs


def stop(procs: list) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def train(folder: Path, env: dict, flags, workers: int, address: str | None) -> dict:
    """One ``ppt-dask train mnist --workers P FLAGS`` (on ``address``, else a LocalCluster); its summary."""
    out = folder / "summary.json"
    where = ("--scheduler", address) if address else ()
    proc = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", "mnist", "--workers", str(workers),
                           *where, *flags, "--quiet", "--json", str(out)],
                          env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"ppt-dask train mnist {' '.join(flags)}: {proc.stderr.strip()[-400:]}")
    return json.loads(out.read_text())


def race(args, folder: Path, env: dict, workers: int) -> list[dict]:
    """Each run at ``workers`` on a plain cluster of as many workers and on a LocalCluster, in turn."""
    address, procs = start_plain(folder, env, workers)
    times: dict = {(run, where): [] for run in args.runs for where in ("local", "plain")}
    summaries: dict = {}
    try:
        for repeat in range(args.repeats):
            for run in args.runs:
                for where in ("local", "plain"):  # in turn, so that the machine's load falls on both
                    summary = train(folder, env, FLAGS[run], workers, address if where == "plain" else None)
                    times[run, where].append(summary["wall_seconds"])
                    summaries[run, where] = summary
                    print(f"p={workers} repeat {repeat} {run} {where}: {summary['wall_seconds']:.2f} s, "
                          f"{summary['rounds']} rounds, test accuracy {summary['test_accuracy']:.4f}", file=sys.stderr)
    finally:
        stop(procs)
    rows = []
    for run in args.runs:
        local, plain = (statistics.median(times[run, w]) for w in ("local", "plain"))
        rows.append({"run": " ".join((f"ppt-dask train mnist --workers {workers}", *FLAGS[run])),
                     "rounds": summaries[run, "plain"]["rounds"], "LocalCluster s": local, "plain cluster s": plain,
                     "plain / LocalCluster": plain / local,
                     "repeats": args.repeats, "plain worker settings": summaries[run, "plain"].get("worker_settings")})
    return rows


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of (round, bytes) points, in MB per 1000 rounds."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx * 1000 / 1e6 if sxx else float("nan")


def memory(args, address: str, scheduler_pid: int) -> list[dict]:
    """Sync block 200 for MEMORY_ROUNDS rounds on the plain cluster; the head's and scheduler's RSS."""
    import psutil

    import ppt_dask as ppt

    head, scheduler = psutil.Process(), psutil.Process(scheduler_pid)
    samples: list = []

    def sample(record: dict) -> None:
        if (record["round"] + 1) % args.sample_rounds == 0:
            samples.append((record["round"] + 1, head.memory_info().rss, scheduler.memory_info().rss))

    client = ppt.connect(address)
    try:
        client.wait_for_workers(MEMORY_WORKERS, timeout=120)
        data = ppt.datasets.mnist(dtype="float32")
        shards = ppt.enter_data(client, data.X, data.y, n_shards=8, dtype="float32")
        net = ppt.MLP((784, 64, 64, 10), hidden="tanh", output="softmax", dtype="float32")
        epochs = args.memory_rounds * 200 / len(data.X)
        # progress, not on_round: a call-back that may stop the run at any round makes the head apply the rule
        result = ppt.train(net, shards, ppt.Sync(lr=0.1, momentum=0.9, block=200), ppt.Stop(max_epochs=epochs),
                           progress=sample)
        ppt.exit_data(shards)
    finally:
        client.close()
    settled = [s for s in samples if s[0] > args.settle_share * args.memory_rounds]
    rows = []
    for i, who in ((1, "head (this process: ppt.train)"), (2, "scheduler (dask scheduler)")):
        rows.append({"process": who, "rounds": len(result.history), "samples": len(settled),
                     "RSS at first sample MB": settled[0][i] / 1e6, "RSS at last sample MB": settled[-1][i] / 1e6,
                     "growth MB per 1000 rounds": slope([(s[0], s[i]) for s in settled])})
    return rows


RACE_NOTES = [
    "seconds: training (the command's wall time, start-up apart), median of the repeats, the runs in turn "
    "within each repeat; to 97% test accuracy",
    "plain cluster: `dask scheduler` + `dask worker ADDRESS --nworkers P --nthreads 1`, distributed's default "
    "configuration (its nanny sets MALLOC_TRIM_THRESHOLD_=65536 and OMP_NUM_THREADS=1), nothing of ppt_dask's set; "
    "'plain worker settings' is what the round loops set there for their duration (the run's own words)"]


def main() -> None:
    args = common.arguments(__doc__, DEFAULTS, QUICK)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = plain_env(folder)
        rows = [row for p in args.workers for row in race(args, folder, env, p)] if args.runs else []
        address, procs = start_plain(folder, env, MEMORY_WORKERS)
        try:
            kept = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith(OURS)}  # this head: a user's shell
            try:
                mem = memory(args, address, procs[0].pid)
            finally:
                os.environ.update(kept)
        finally:
            stop(procs)
    if rows:
        common.write_table(args.out, "own_cluster", rows, notes=RACE_NOTES,
                           title="ppt-dask train mnist on a plain `dask worker` cluster and on ppt_dask's LocalCluster")
    common.write_table(args.out, "own_cluster_memory", mem,
                       title=f"Resident memory over {args.memory_rounds} rounds of sync block 200 on the plain cluster",
                       notes=[f"growth: least-squares slope of the RSS sampled every {args.sample_rounds} rounds "
                              f"after the first {args.settle_share:.0%} of the rounds (start-up)",
                              "the head is this script's process running ppt.train with its defaults (the command "
                              "line's engine and recorder), not the command line"])


if __name__ == "__main__":
    main()
