"""Validate 001's run-time model on this machine: calibrate, then time real training rounds.

Seed 001, section V-B: the constants are measured "by running it on a single processor of
the clusters for a few iterations and by running a small test program" for the
communication; then real runs over block and cluster sizes are compared with the model
(Table VI: mean errors of about 5%). Here: calibrate (ppt_dask.perf.calibrate), run
``ppt.train`` with ``Sync(block=b)`` and its default exchange (streamed rounds) for a few
dozen rounds at each block size and p in {1, 2} workers (and, marked
oversubscribed, 4 workers on the 2 cores), take the median seconds per round after a
warm-up (the loops' own timing, ``result.breakdown()``), and compare with
``perfmodel.round_parts`` for the same exchange and the machine's cores. The serial program
(``serial.train_serial``, eq. (3)) is checked the same way, its runs between the Dask cells', in
a process of its own with the environment of ppt_dask's workers (as the calibration times it).
Every cell runs three times (interleaved), each run until its rounds took ``RUN_SECONDS``: the
error is reported per run, with the median over the runs and its spread (smallest..largest), and
each cell's measured round with its spread, and how well the runs reproduce themselves (each
against the mean of its cell's other runs: the floor under any prediction made once). Before
each run the serial program's process times a
reference call, against the same before and after the calibration: the report gives how fast the
machine was then, and the error with each prediction's compute scaled by it (not in the model,
which cannot know the machine's minute; it shows how much of the error that is).

Usage::

    python graphs/validate_model.py                    # MNIST 784-64-64-10, about 7 minutes
    python graphs/validate_model.py --quick            # about a minute (p in {1, 2} only)
    python graphs/validate_model.py --no-oversubscribed   # skip p = 4 (4 workers, 2 cores)

Writes, under graphs/out/: validate_model.md and .csv (predicted against measured, mean
absolute relative error), validate_model_calibration.json (the constants of this network in
float64, reusable with ``ppt-dask model predict --calibration``; graphs/out/calibration.json,
which the tests and the README's commands read with the float32 MNIST preset, is left alone),
speedup_model.html (predicted speedup against p = 1..64 per block size and against block size
per p, like 001's Figures 2-5).
The timings need a quiet machine: the share of the CPU that other processes used is
recorded with every row, and ``--wait-quiet`` waits (up to a limit) for them to stop.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

import numpy as np

# ---- defaults ----------------------------------------------------------------------------
HIDDEN = (64, 64)  # 784-64-64-10, 001's Digits network (Table IV) with biases
N_TRAIN = 12000  # rows placed on the workers (timing per round does not depend on n)
N_SHARDS = 8  # as `ppt-dask train` uses on 1 or 2 workers
BLOCKS = (64, 256, 1000, 2000, 4000, 8000, 12000)
P_VALUES = (1, 2)  # the cores of this machine
OVERSUBSCRIBED = (4,)  # more workers than cores: shown, not counted in the headline error
ROUNDS, WARMUP, REPEATS = 40, 8, 3  # least rounds timed per run, rounds skipped, runs per cell
# A run goes on until its timed rounds took this long (at most MAX_ROUNDS of them). A numpy call
# of 1,000 rows timed every 0.6 s on this machine, idle: its single timings 6.8-12.7 ms, their
# medians over 18 s 7.6-9.9 ms (one 15.9), the correlation gone after 3 s (2026-11-27): 40
# rounds of a small block, a tenth of a second, catch one moment of the machine.
RUN_SECONDS, MAX_ROUNDS = 1.5, 5000
# The machine's speed beside each run: calls of 1,000 rows timed in the serial program's process
# just before it, against the same before and after the calibration. Not in the model (which
# cannot know the machine's minute): it shows how much of the error is the machine's. Two
# timings of the streamed curve 2.5 minutes apart, each run 1.5 s long, differed by 25% at
# every size; two of 40 rounds, by up to 40% at a size, either way (2026-11-27)
REFERENCE_ROWS, REFERENCE_REPEATS = 1000, 40  # about 0.6 s of calls: a shorter timing is one moment
CALIBRATION_BLOCK = 1000
HEAD_P = (1, 2, 4, 8, 16, 32, 64)  # virtual cluster sizes for Th(p)
WAIT_QUIET = 900  # seconds to wait for quiet in all (full mode): before and between runs
QUIET_OTHERS, RETRIES = 0.10, 3  # retry a run during which others used > 10% of the CPU
PLOT_P = np.arange(1, 65)
PLOT_BLOCKS = (100, 300, 1000, 3000, 10000, 60000)
MNIST_N, MNIST_M = 60000, 10000  # the recommendation is for the whole of MNIST
QUICK = dict(N_TRAIN=4000, BLOCKS=(200, 2000), ROUNDS=14, WARMUP=4, REPEATS=3, RUN_SECONDS=0.3,
             HEAD_P=(1, 2, 4, 8), CALIBRATION_BLOCK=500)
OUT = Path(__file__).resolve().parent / "out"


def load_data(n_train: int, seed: int = 0):
    """MNIST rows if the files are there, else random data of the same shape (the timing
    of a round does not depend on the values)."""
    from ppt_dask.data import datasets

    try:
        d = datasets.mnist(n_train=n_train, n_test=10)
        return d.X, d.y, "mnist"
    except FileNotFoundError:
        rng = np.random.default_rng(seed)
        return rng.random((n_train, 784)), rng.integers(0, 10, n_train), "random 784-d"


def busy_fraction(seconds: float = 1.0) -> float:
    """Share of the machine's CPU time that was busy over ``seconds`` (Linux /proc/stat)."""
    def sample():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, total
    idle0, total0 = sample()
    time.sleep(seconds)
    idle1, total1 = sample()
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


class OthersMeter:
    """Share of the machine's CPU that processes other than ours used between start and
    stop (Linux /proc): the load this script cannot control, recorded with every row."""

    def __init__(self, pids):
        self.pids = [os.getpid(), *pids]
        self.start()

    @staticmethod
    def _machine():
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        return sum(values) - values[3] - values[4], sum(values)  # busy, total (ticks)

    def _ours(self) -> int:
        ticks = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, IndexError):
                pass
        return ticks

    def start(self) -> None:
        self.t0 = (*self._machine(), self._ours())

    def stop(self) -> float:
        busy, total, ours = (*self._machine(), self._ours())
        return max(0.0, (busy - self.t0[0]) - (ours - self.t0[2])) / max(total - self.t0[1], 1)


def wait_quiet(limit_seconds: float, busy: float = 0.2) -> float:
    """Wait until others leave the cores alone (busy below ``busy``), at most the limit."""
    if limit_seconds <= 0 or not os.path.exists("/proc/stat"):
        return float("nan")
    deadline = time.monotonic() + limit_seconds
    while True:
        now = busy_fraction()
        if now < busy or time.monotonic() > deadline:
            return now
        print(f"waiting for a quiet machine: {now:.0%} busy", file=sys.stderr)


class Quiet:
    """Measure in quiet windows: a measurement during which other processes used more
    than ``QUIET_OTHERS`` of the machine is retried after waiting for quiet, while the
    patience lasts; the quietest attempt is kept, with its share of others' CPU."""

    def __init__(self, patience_seconds: float):
        self.deadline = time.monotonic() + patience_seconds
        self.retried = 0

    def __call__(self, measure, pids=()):
        meter, best = OthersMeter(pids), None
        for _ in range(RETRIES + 1):
            meter.start()
            value = measure()
            others = meter.stop()
            if best is None or others < best[1]:
                best = (value, others)
            left = self.deadline - time.monotonic()
            if others <= QUIET_OTHERS or left <= 0:
                break
            self.retried += 1
            wait_quiet(left)
        return best


def median_round(net, shards, block: int, rounds: int, warmup: int, seconds: float = 0.0) -> tuple[float, float]:
    """Median seconds per round, and the median gradient phase, of ``ppt.train`` with its
    default exchange: the breakdown's rows (the loops' own timing on streamed rounds) after
    ``warmup``, at least ``rounds`` of them and until they took ``seconds``."""
    import ppt_dask as ppt
    from ppt_dask.perf.loops import timed_rows

    strategy = ppt.Sync(lr=0.05, momentum=0.9, block=block)
    most = max(rounds, MAX_ROUNDS) if seconds > 0 else rounds
    rows = timed_rows(net, shards, strategy, most, warmup, seconds, rounds)  # the user's rounds: no call-back
    return (float(np.median([r["wall"] for r in rows])), float(np.median([r["gradient"] for r in rows])))


def serial_round(net, X, y, block: int, rounds: int, warmup: int) -> float:
    """Median seconds per round of the plain serial program (eq. (3)), one BLAS thread."""
    from threadpoolctl import threadpool_limits

    import ppt_dask as ppt
    from ppt_dask.algorithms import serial

    n = min(len(X), max(block * (rounds + warmup), block))
    with threadpool_limits(1):
        _, history = serial.train_serial(net, X[:n], y[:n], ppt.Sync(lr=0.05, momentum=0.9, block=block),
                                         rounds + warmup)
    return float(np.median([r["wall_seconds"] for r in history[warmup:]]))


def serial_seconds(block: int, c) -> float:
    """The serial program's round as the model predicts it (eq. (3) without the per-epoch term)."""
    from ppt_dask.perf import model as pm

    return pm.sequential_epoch_seconds(block, block, dataclass_replace(c, to_seconds=0.0))


_SERIAL: dict = {}  # in the serial program's own process: the net and the rows


def _serial_start(n_train: int) -> None:
    X, y, _ = load_data(n_train)
    import ppt_dask as ppt

    _SERIAL.update(net=ppt.MLP((X.shape[1], *HIDDEN, 10), hidden="tanh", output="softmax"), X=X, y=y)


def _serial_run(block: int, rounds: int, warmup: int) -> float:
    return serial_round(_SERIAL["net"], _SERIAL["X"], _SERIAL["y"], block, rounds, warmup)


def _reference() -> float:
    from ppt_dask.perf.calls import time_calls

    return time_calls(_SERIAL["net"], _SERIAL["X"], _SERIAL["y"], [REFERENCE_ROWS], repeats=REFERENCE_REPEATS)[0]


class SerialProcess:
    """The serial program (eq. (3)) in a process of its own, started with the environment
    ppt_dask gives its workers (one BLAS thread, their malloc settings), as the calibration
    times its calls on a worker: in this script's process (glibc's default malloc) calls of
    8,000 rows took 66-70 ms against 57-59 ms on a worker, interleaved (2026-11-27). Its runs
    go in between the Dask cells' (the cluster's workers idle meanwhile), so they see the same
    minutes of the machine; ``runs[block]`` collects (seconds, others' share)."""

    def __init__(self, n_train: int, blocks):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from ppt_dask.engine.placement.cluster import WORKER_ENV

        saved = {k: os.environ.get(k) for k in WORKER_ENV}
        os.environ.update(WORKER_ENV)
        try:  # the process starts at the first call, in this environment
            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_serial_start, initargs=(n_train,))
            self.pid = self.pool.submit(os.getpid).result(timeout=300)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.runs: dict = {b: [] for b in blocks}
        self.speeds: dict = {b: [] for b in blocks}
        self.at_calibration: list = []

    def reference(self) -> float:
        """Seconds of a call of ``REFERENCE_ROWS`` rows now (the median of REFERENCE_REPEATS)."""
        return self.pool.submit(_reference).result(timeout=300)

    def speed(self) -> float:
        """The machine now against during the calibration: > 1 slower, < 1 faster."""
        return self.reference() / float(np.mean(self.at_calibration))

    def time(self, block: int, cfg, predicted: float, quiet, pids) -> None:
        """Runs of at least ``cfg["ROUNDS"]`` rounds, as many as ``predicted`` seconds a round
        puts in ``cfg["RUN_SECONDS"]`` (the program's own loop has no stopping callback)."""
        rounds = int(min(MAX_ROUNDS, max(cfg["ROUNDS"], np.ceil(cfg["RUN_SECONDS"] / max(predicted, 1e-6)))))
        call = self.pool.submit
        self.speeds[block].append(self.speed())
        self.runs[block].append(quiet(lambda: call(_serial_run, block, rounds, min(cfg["WARMUP"], 2)).result(
            timeout=600), [*pids, self.pid]))

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


def measure(net, X, y, cfg, p_values, cal, rows, quiet, serial, oversubscribed=False):
    """Append one row per (p, block): measured and predicted seconds per round, and the
    machine's speed before each run (``serial.speed()``); unless ``oversubscribed``, the
    serial program's runs (a :class:`SerialProcess`) in between."""
    import ppt_dask as ppt
    from ppt_dask.perf import model as pm

    c = cal.constants
    client = ppt.connect(n_workers=max(p_values), dashboard_address=None)
    try:
        addresses = ppt.cluster.worker_addresses(client)
        pids = list(client.run(os.getpid).values())
        placed = {p: ppt.enter_data(client, X, y, N_SHARDS, workers=addresses[:p]) for p in p_values}
        times = {(p, b): [] for p in p_values for b in cfg["BLOCKS"]}
        grads = {(p, b): [] for p in p_values for b in cfg["BLOCKS"]}
        others = {(p, b): [] for p in p_values for b in cfg["BLOCKS"]}
        speeds = {(p, b): [] for p in p_values for b in cfg["BLOCKS"]}
        for _ in range(cfg["REPEATS"]):  # interleaved, so a noisy minute spreads over cells
            for b in cfg["BLOCKS"]:
                for p in p_values:
                    speeds[p, b].append(serial.speed())
                    (value, grad), busy = quiet(lambda p=p, b=b: median_round(
                        net, placed[p], b, cfg["ROUNDS"], cfg["WARMUP"], cfg["RUN_SECONDS"]), pids)
                    times[p, b].append(value)
                    grads[p, b].append(grad)
                    others[p, b].append(busy)
                if not oversubscribed:
                    serial.time(b, cfg, serial_seconds(b, c), quiet, pids)
        for shards in placed.values():
            ppt.exit_data(shards)
    finally:
        ppt.cluster.close(client)
    for (p, b), ts in times.items():
        parts = pm.round_parts(p, b, net.n_params, c, n_shards=N_SHARDS, cores=os.cpu_count())
        terms = {k: float(parts[k]) for k in ("compute", "update", "exchange", "head")}
        rows.append(dict(program="dask", p=p, block=b, oversubscribed=oversubscribed,
                         streamed=bool(parts["streamed"]), runs=[float(t) for t in ts],
                         measured=float(np.median(ts)), predicted=sum(terms.values()),
                         measured_compute=float(np.median(grads[p, b])), speeds=speeds[p, b],
                         others=float(np.mean(others[p, b])), **terms))


def run_errors(rows: list[dict], at_speed: bool = False) -> list[float]:
    """The mean absolute prediction error of each run (run i: every row's i-th measurement);
    ``at_speed``: each prediction's compute times the machine's speed before the run."""
    from ppt_dask.perf import fit as modelfit

    def predicted(r, i):
        return r["predicted"] + (r["speeds"][i] - 1) * r["compute"] if at_speed else r["predicted"]
    n = min(len(r["runs"]) for r in rows)
    return [modelfit.prediction_error([predicted(r, i) for r in rows], [r["runs"][i] for r in rows])
            for i in range(n)]


def repeat_errors(rows: list[dict]) -> list[float]:
    """How well the runs reproduce themselves: for each run i, the mean absolute relative error
    of every row's mean over its other runs, taken as the prediction of its run i. A model
    calibrated once, before the runs, cannot be expected to do better than this; on this
    machine, for the Dask rows with p <= 2, 10.4%, 18.2% and 9.7% in three validations
    (2026-11-27), beside the model's 10.0%, 18.4% and 8.8%."""
    from ppt_dask.perf import fit as modelfit

    n = min(len(r["runs"]) for r in rows)
    if n < 2:
        return []
    return [modelfit.prediction_error([np.mean([r["runs"][j] for j in range(n) if j != i]) for r in rows],
                                      [r["runs"][i] for r in rows]) for i in range(n)]


def spread(values) -> str:
    """The median of ``values`` (fractions) with their spread, as the report prints them."""
    return f"{np.median(values):.1%} (runs: {', '.join(f'{v:.1%}' for v in values)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small run, under a minute")
    parser.add_argument("--no-oversubscribed", action="store_true",
                        help=f"skip p = {OVERSUBSCRIBED} (more workers than cores; skipped with --quick)")
    parser.add_argument("--wait-quiet", type=float, default=None, metavar="SECONDS",
                        help="wait up to this long in all for other processes to leave the cores, "
                             f"before the start and to retry noisy runs (default {WAIT_QUIET} s; "
                             "0 with --quick)")
    parser.add_argument("--out", type=Path, default=OUT, help="output folder")
    args = parser.parse_args(argv)
    cfg = {k: v for k, v in globals().items() if k.isupper()}
    cfg["MODE"] = "quick" if args.quick else "full"
    if args.quick:
        cfg.update(QUICK)
    args.out.mkdir(parents=True, exist_ok=True)

    import ppt_dask as ppt
    from ppt_dask.perf import calibrate
    from ppt_dask.perf import model as pm

    X, y, source = load_data(cfg["N_TRAIN"])
    net = ppt.MLP((X.shape[1], *HIDDEN, 10), hidden="tanh", output="softmax")
    patience = args.wait_quiet if args.wait_quiet is not None else 0 if args.quick else WAIT_QUIET
    quiet = Quiet(patience)
    busy = wait_quiet(patience)
    t_start = time.perf_counter()

    serial = SerialProcess(cfg["N_TRAIN"], cfg["BLOCKS"])
    serial.at_calibration.append(serial.reference())
    client = ppt.connect(n_workers=max(P_VALUES), dashboard_address=None)
    try:
        cal, cal_others = quiet(lambda: calibrate.calibrate(
            client, net, X, y, block=cfg["CALIBRATION_BLOCK"], n_shards=N_SHARDS, n_test=0,
            rounds=max(cfg["ROUNDS"] // 2, 10), p_values=cfg["HEAD_P"], repeats=5 if args.quick else 9),
            list(client.run(os.getpid).values()))
    finally:
        ppt.cluster.close(client)
    serial.at_calibration.append(serial.reference())
    cal.measurements["others_share"] = cal_others
    cal.save(args.out / "validate_model_calibration.json")
    c = cal.constants

    rows: list[dict] = []
    try:
        measure(net, X, y, cfg, P_VALUES, cal, rows, quiet, serial)
        if not (args.quick or args.no_oversubscribed):
            measure(net, X, y, cfg, OVERSUBSCRIBED, cal, rows, quiet, serial, oversubscribed=True)
    finally:
        serial.close()
    serial_rows = []
    for b, seen in serial.runs.items():
        seq = serial_seconds(b, c)
        runs = [float(m) for m, _ in seen]
        serial_rows.append(dict(program="serial", p=1, block=b, oversubscribed=False, streamed=False, runs=runs,
                                measured=float(np.median(runs)), predicted=seq, measured_compute=float("nan"),
                                speeds=serial.speeds[b],
                                others=float(np.mean([o for _, o in seen])), compute=pm.call_seconds(b, c),
                                update=c.tu_seconds + c.tm_seconds, exchange=0.0, head=0.0))
    rows[:0] = serial_rows  # the report lists the serial program first
    elapsed = time.perf_counter() - t_start
    cfg["RETRIED"], cfg["CAL_OTHERS"] = quiet.retried, cal_others

    headline = [r for r in rows if r["program"] == "dask" and not r["oversubscribed"]]
    over = [r for r in rows if r["oversubscribed"]]
    serial_only = [r for r in rows if r["program"] == "serial"]
    errors = (run_errors(headline), run_errors(serial_only), run_errors(over) if over else None)
    cfg["AT_SPEED"] = (run_errors(headline, True), run_errors(serial_only, True),
                       run_errors(over, True) if over else None)
    cfg["REPEAT"] = (repeat_errors(headline), repeat_errors(serial_only), repeat_errors(over) if over else None)
    cfg["SPEEDS"] = [v for r in rows for v in r["speeds"]]
    cfg["SPEED_AT_CALIBRATION"] = serial.at_calibration
    report = render(rows, cal, net, source, errors, busy, elapsed, cfg)
    from common import by_authors  # graphs/, the script's own folder: the papers by their authors

    (args.out / "validate_model.md").write_text(by_authors(report))
    with open(args.out / "validate_model.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows([{**r, "runs": ";".join(f"{v:.6g}" for v in r["runs"]),
                           "speeds": ";".join(f"{v:.4g}" for v in r["speeds"])} for r in rows])
    plot(c, net.n_params, args.out / "speedup_model.html")
    print(report)
    return 0


def dataclass_replace(c, **changes):
    import dataclasses
    return dataclasses.replace(c, **changes)


def render(rows, cal, net, source, errors, busy, elapsed, cfg) -> str:
    from ppt_dask.cli.modeltext import constants_table, grid_table
    from ppt_dask.perf import model as pm
    from ppt_dask.perf import planning

    c, w = cal.constants, net.n_params
    lines = [f"# Run-time model of 001 against measured rounds ({cfg['MODE']} run)",
             "",
             f"Network {'-'.join(map(str, net.sizes))} (w = {w}) on {cfg['N_TRAIN']} {source} rows in "
             f"{N_SHARDS} shards; {os.cpu_count()} cores; median of the rounds after the first {cfg['WARMUP']} "
             f"(at least {cfg['ROUNDS']}, and {cfg['RUN_SECONDS']:g} s of them) of {cfg['REPEATS']} run(s) "
             "per cell; machine "
             + ("not checked" if busy != busy else f"{busy:.0%} busy") + " before the start; "
             f"{elapsed:.0f} s in all; {cfg['RETRIED']} noisy run(s) retried; other processes used "
             f"{cfg['CAL_OTHERS']:.0%} of the CPU during the calibration.",
             "",
             f"**Mean absolute prediction error, Dask rounds with p <= {max(P_VALUES)} workers, median of "
             f"{len(errors[0])} run(s): {spread(errors[0])}** (serial program, eq. (3): {spread(errors[1])}"
             + ("" if errors[2] is None else f"; oversubscribed p = {OVERSUBSCRIBED} on {os.cpu_count()} "
                f"cores, not in the headline: {spread(errors[2])}") + "). Rounds: "
             + ("streamed (ppt.train's default)" if all(r["streamed"] for r in rows if r["program"] == "dask")
                else "as ppt.train's default exchange runs them") + ".",
             "",
             "How well the runs reproduce themselves (each run against the mean of the other runs of "
             "its cell, the best a prediction made once could do; the floor under the error above): "
             f"Dask p <= {max(P_VALUES)} {spread(cfg['REPEAT'][0])}, serial {spread(cfg['REPEAT'][1])}"
             + ("" if cfg["REPEAT"][2] is None else f", oversubscribed {spread(cfg['REPEAT'][2])}") + ".",
             "",
             f"The machine's speed before each run (a call of {REFERENCE_ROWS} rows timed in the serial "
             "program's process, against the same before and after the calibration: "
             + ", ".join(f"{v * 1e3:.2f}" for v in cfg["SPEED_AT_CALIBRATION"]) + " ms) was "
             f"{min(cfg['SPEEDS']):.2f}..{max(cfg['SPEEDS']):.2f} times the calibration's (median "
             f"{np.median(cfg['SPEEDS']):.2f}). With each prediction's compute times that ratio, which "
             "the model cannot know beforehand: Dask p <= "
             f"{max(P_VALUES)} {spread(cfg['AT_SPEED'][0])}, serial {spread(cfg['AT_SPEED'][1])}"
             + ("" if cfg["AT_SPEED"][2] is None else f", oversubscribed {spread(cfg['AT_SPEED'][2])}")
             + ": the rest of the error is the model's (and the runs' own noise).",
             "",
             "| program | p | block | measured ms (spread of runs) | predicted ms | error | compute "
             "| measured compute | rest | measured rest | update | exchange | head | others |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        tag = " (oversubscribed)" if r["oversubscribed"] else ""
        rest, seen = r["predicted"] - r["compute"], r["measured_compute"]
        shown = "-" if seen != seen else f"{seen * 1e3:.2f}"
        shown_rest = "-" if seen != seen else f"{(r['measured'] - seen) * 1e3:.2f}"
        runs = f" ({min(r['runs']) * 1e3:.2f}..{max(r['runs']) * 1e3:.2f})" if len(r["runs"]) > 1 else ""
        lines.append(f"| {r['program']}{tag} | {r['p']} | {r['block']} | {r['measured'] * 1e3:.2f}{runs} | "
                     f"{r['predicted'] * 1e3:.2f} | {(r['predicted'] / r['measured'] - 1):+.1%} | "
                     f"{r['compute'] * 1e3:.2f} | {shown} | {rest * 1e3:.2f} | {shown_rest} | "
                     f"{r['update'] * 1e3:.2f} | {r['exchange'] * 1e3:.2f} | "
                     f"{r['head'] * 1e3:.2f} | {r['others']:.0%} |")
    lines += ["", "Predicted parts in ms (perfmodel.round_parts): compute = the busiest worker's gradient "
              "phase, interpolated between the call sizes the calibration timed in the same kind of "
              "rounds (streamed loops, or round-graph tasks and at least tq), times its shared factor at "
              "p >= 2 and p / cores beyond the cores; rest = predicted minus compute; update = Tu; "
              "exchange = on streamed rounds the links floor Tl(p) = tl0 + (p-1)(tl1 + tlw w) plus, at "
              "p >= 2, the wait for the slowest loop (stream_lag_ratio x compute), on a graph "
              "Tr(p) (eq. (4)); head = Th(p) (0 on streamed rounds). Measured: the median over the runs "
              "of each run's median round (the breakdown's rows: the loops' own timing), the spread the "
              "smallest and largest run; measured compute = the median gradient phase; measured rest = "
              "measured minus that. Others = share of the machine's CPU used by processes other than "
              "this script and its cluster during the row.", "",
              "## Calibrated constants", "", constants_table(c), ""]
    blocks, ps = np.array(PLOT_BLOCKS), np.array([2, 4, 8, 16, 32, 64])
    kw = dict(n_test=MNIST_M)
    lines += [f"## Predicted speedup for MNIST (n = {MNIST_N}, m = {MNIST_M}), like 001 Table VII", "",
              grid_table(blocks, ps, pm.speedup(ps[None, :], blocks[:, None], MNIST_N, w, c, **kw), "{:.2f}"), ""]
    lines += ["## Recommendation for MNIST 784-64-64-10", ""]
    for p_max, cores in ((8, os.cpu_count()), (64, None)):
        where = (f"on this machine ({cores} cores: more workers serialize)" if cores
                 else "on a cluster of single-core workers")
        best = planning.recommend(MNIST_N, w, c, p_max, cores=cores, **kw)
        p_best, _, s_best = planning.best_workers(blocks, MNIST_N, w, c, p_max, cores=cores, **kw)
        smallest = {p: planning.min_block_for_speedup(p, MNIST_N, w, c, cores=cores, **kw)
                    for p in (2, 4, 8, 16, 32, 64) if p <= p_max}
        lines.append(f"- {where}, p <= {p_max}: least time per epoch with block {best.block} on {best.p} workers "
                     f"({best.epoch_seconds:.3g} s per epoch, speedup {best.speedup:.2f}); best workers per block "
                     + ", ".join(f"b={b}: p={p} (S={s:.2f})" for b, p, s in zip(blocks, p_best, s_best))
                     + "; smallest block with any speedup: "
                     + ", ".join(f"p={p}: {b}" for p, b in smallest.items()))
    return "\n".join(lines) + "\n"


def plot(c, n_weights: int, path: Path) -> None:
    """Predicted speedup against p per block, and against block per p (001 Figs. 2-5)."""
    from bokeh.io import output_file, save
    from bokeh.layouts import column
    from bokeh.palettes import Category10
    from bokeh.plotting import figure

    from ppt_dask.perf import model as pm

    by_p = figure(title="Predicted speedup S(p), MNIST 784-64-64-10, one line per block size",
                  x_axis_label="workers p", y_axis_label="speedup", x_axis_type="log", width=800, height=400)
    for colour, b in zip(Category10[10], PLOT_BLOCKS):
        s = pm.speedup(PLOT_P, b, MNIST_N, n_weights, c, n_test=MNIST_M)
        by_p.line(PLOT_P, s, legend_label=f"block {b}", color=colour, line_width=2)
    by_p.line(PLOT_P, PLOT_P, color="grey", line_dash="dashed", legend_label="linear")
    by_p.y_range.end = 1.2 * float(np.max(pm.speedup(PLOT_P, MNIST_N, MNIST_N, n_weights, c, n_test=MNIST_M)))
    by_p.legend.location = "top_left"

    blocks = np.unique(np.geomspace(16, MNIST_N, 200).astype(int))
    by_b = figure(title="Predicted speedup against block size, one line per cluster size (like 001 Figs. 2, 4, 5)",
                  x_axis_label="block size", y_axis_label="speedup", x_axis_type="log", width=800, height=400)
    for colour, p in zip(Category10[10], (2, 4, 8, 16, 32, 64)):
        by_b.line(blocks, pm.speedup(p, blocks, MNIST_N, n_weights, c, n_test=MNIST_M),
                  legend_label=f"{p} workers", color=colour, line_width=2)
    by_b.line(blocks, np.ones(blocks.size), color="grey", line_dash="dashed")
    by_b.legend.location = "top_left"
    output_file(path, title="ppt_dask: predicted speedup (001 eq. (7))")
    save(column(by_p, by_b))


if __name__ == "__main__":
    sys.exit(main())
