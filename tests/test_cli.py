"""The ppt-dask command line, run as a user runs it (a real subprocess, real clusters: a
LocalCluster it starts, or the tests' shared scheduler named with ``--scheduler``)."""

import json
import os
import subprocess
import sys
import time

import pytest


def run(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def test_parity8_learned_with_two_workers(tmp_path, scheduler_address):
    out = tmp_path / "out.json"
    proc = run("train", "parity8", "--workers", "2", "--json", str(out), "--scheduler", scheduler_address,
               "--seed", "7")  # learned in 233 rounds (seed 0: 448)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    for key in ("dataset", "strategy", "workers", "shards", "epochs", "rounds", "train_loss",
                "train_error_rate", "test_accuracy", "wall_seconds", "head_seconds", "learned"):
        assert key in summary
    assert summary["learned"] is True and summary["train_error_rate"] == 0.0
    assert summary["workers"] == 2 and summary["test_accuracy"] is None
    assert "epoch" in proc.stderr and "s/round" in proc.stderr  # progress was shown
    assert "dropped_shares" not in summary and " dropped " not in proc.stdout  # asynchronous runs only


def test_async_prints_each_workers_share_of_gradients_dropped_and_warns_of_a_left_out_one(tmp_path,
                                                                                        scheduler_address):
    """At ``--staleness 0`` a gradient is dropped whenever the other loop stepped while it was
    computed: each worker's share is printed and kept in --json, and a worker with half or more
    of its gradients dropped (its shards' rows hardly learned) gets one warning line naming the
    flag, not a Python warning (in one run: 7% and 74%)."""
    out = tmp_path / "out.json"
    proc = run("train", "parity8", "--workers", "2", "--strategy", "async", "--staleness", "0", "--epochs", "20",
               "--json", str(out), "--quiet", "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    shares = json.loads(out.read_text())["dropped_shares"]
    assert len(shares) == 2 and all(0 <= share <= 1 for share in shares) and sum(shares) > 0
    row = next(line for line in proc.stdout.splitlines() if line.split()[:1] == ["dropped"])
    assert f"{100 * shares[0]:.1f} % of worker slot 0's, {100 * shares[1]:.1f} % of slot 1's" in row
    left = [i for i, share in enumerate(shares) if share >= 0.5]
    said = [line for line in proc.stderr.splitlines() if line.startswith("ppt-dask: warning: ")]
    assert len(said) == (1 if left else 0), proc.stderr
    if left:
        assert said[0].startswith(f"ppt-dask: warning: {' and '.join(f'worker slot {i}' for i in left)} had ")
        assert "more than --staleness 0 steps behind" in said[0]
    assert "StaleGradientsWarning" not in proc.stderr


def test_mnist_block_learning_short_run(tmp_path, scheduler_address):
    out = tmp_path / "out.json"
    proc = run("train", "mnist", "--workers", "2", "--strategy", "block", "--block", "1000",
               "--epochs", "1", "--json", str(out), "--quiet", "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert summary["rounds"] == 60 and summary["test_accuracy"] > 0.90


def test_mnist_preset_is_local_sgd_in_float32_on_streamed_rounds(tmp_path, scheduler_address):
    """What `ppt-dask train mnist` gives: the local strategy, one shard per worker, float32,
    one long task per worker (the averages sent between workers); one epoch already learns
    (a real test-set accuracy)."""
    out = tmp_path / "out.json"
    proc = run("train", "mnist", "--workers", "2", "--epochs", "1", "--json", str(out), "--quiet",
               "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert summary["strategy"] == "local" and summary["exchange"] == "stream"
    assert summary["shards"] == 2 and summary["block"] == 100
    assert summary["rounds"] == 5 and summary["test_accuracy"] > 0.90  # 60 steps of 100 rows a round
    assert summary["phases"][0]["phase"] == "gradient"  # most of a round computes


def test_mnist_async_preset_short_run_with_a_report(tmp_path, scheduler_address):
    """`ppt-dask train mnist --strategy async` as a user runs it, one epoch: its preset (a
    replica per worker, 100 patterns an update, no momentum, rounds of ten updates), streamed loops that
    never wait for each other, a breakdown and a report; one epoch already learns."""
    out, report = tmp_path / "out.json", tmp_path / "run.html"
    proc = run("train", "mnist", "--workers", "2", "--strategy", "async", "--epochs", "1", "--json", str(out),
               "--report", str(report), "--quiet", "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    assert summary["strategy"] == "async" and summary["exchange"] == "stream"
    assert (summary["block"], summary["lr"], summary["momentum"], summary["shards"]) == (100, 0.5, 0.0, 8)
    assert summary["rounds"] == 60 and summary["test_accuracy"] > 0.90
    phases = {p["phase"]: p for p in summary["phases"]}
    assert phases["gradient"]["seconds"] > 0 and phases["idle"]["seconds"] == 0  # no loop waits for another
    assert "ppt-curves" in report.read_text()


@pytest.mark.slow  # two MNIST runs (10 s quiet, 31 s loaded): CI's full run; local SGD's one-task-per-round
# graph against the streamed rounds, bitwise, stays in the default suite through test_localsgd.py
def test_mnist_preset_on_one_task_per_round_learns_the_same(tmp_path, scheduler_address):
    """`--exchange all` gives the local strategy's one-task-per-round graph, with the same bits."""
    outs = []
    for exchange in ("all", "stream"):
        outs.append(tmp_path / f"{exchange}.json")
        proc = run("train", "mnist", "--workers", "2", "--epochs", "0.4", "--exchange", exchange,
                   "--json", str(outs[-1]), "--quiet", "--scheduler", scheduler_address)
        assert proc.returncode == 0, proc.stderr
    a, b = (json.loads(o.read_text()) for o in outs)
    assert (a["exchange"], b["exchange"]) == ("overlap", "stream")
    assert a["rounds"] == b["rounds"] == 2
    assert a["train_loss"] == b["train_loss"] and a["test_accuracy"] == b["test_accuracy"]


@pytest.mark.parametrize("exchange", ["all", "tree"])
def test_exchange_flag_picks_the_round_graph(tmp_path, exchange, scheduler_address):
    out = tmp_path / "out.json"
    proc = run("train", "parity8", "--workers", "2", "--epochs", "20", "--exchange", exchange,
               "--json", str(out), "--quiet", "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["exchange"] == exchange


@pytest.mark.parametrize("flag, promise, said", [
    ([], "same-p", "the same bits on 2 workers (--reproducible same-p)"),
    (["--reproducible", "any-p"], "any-p", "the same bits on any number of workers (--reproducible any-p)"),
])
def test_the_results_first_line_says_what_the_run_repeats(tmp_path, scheduler_address, flag, promise, said):
    out = tmp_path / "out.json"
    proc = run("train", "parity8", "--workers", "2", "--epochs", "5", *flag, "--json", str(out), "--quiet",
               "--scheduler", scheduler_address)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"parity8: strategy epoch, 2 workers, network 8-100-1, {said}"
    assert json.loads(out.read_text())["reproducible"] == promise


@pytest.mark.parametrize("args, message", [
    (["--lr", "-1"], "lr must be > 0, got -1"),
    (["--fan-in", "1"], "--fan-in: must be >= 2"),
    (["--shards", "300"], "more shards (300) than rows (256)"),
    (["--scheduler", "tcp://127.0.0.1:9"], "cannot reach the Dask scheduler"),
    (["--scheduler", "http://127.0.0.1:9"], "bad scheduler address"),
    (["--epochs", "0"], "--epochs: must be a positive number"),
])
def test_bad_arguments_exit_2_with_a_message_within_seconds(args, message):
    t0 = time.monotonic()
    proc = run("train", "parity8", *args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert time.monotonic() - t0 < 30


def test_missing_data_dir_names_the_file_and_the_remedy(tmp_path):
    # offline: only looks (tests/test_fetch.py fetches from a local mirror)
    proc = run("train", "mnist", "--data-dir", str(tmp_path), timeout=60,
               env={**os.environ, "PPT_DASK_OFFLINE": "1"})
    assert proc.returncode == 2
    assert "train-images-idx3-ubyte.gz" in proc.stderr and "PPT_DASK_DATA" in proc.stderr


DATASETS = ("parity8", "encoder", "function", "mnist", "digits5000")


@pytest.mark.parametrize("dataset", [pytest.param(d, marks=pytest.mark.slow) if d == "mnist" else d  # mnist: 6 s,
                                     for d in DATASETS])  # in CI's full run
def test_every_strategy_runs_on_every_built_in_set(dataset, client4, tmp_path, capsys):
    """``ppt-dask train SET --strategy S`` for every pair, one short run each, with the set's
    and the strategy's presets: none of one strategy's settings reaches another (the mnist
    preset's local-SGD settings once reached the asynchronous strategy: a TypeError). The
    command runs in this process against the session's scheduler, as ``--scheduler`` does."""
    from ppt_dask.cli import main
    from ppt_dask.core.applicability import STRATEGIES

    address = client4.scheduler.address
    epochs = {"mnist": "0.2", "digits5000": "1"}.get(dataset, "2")
    for strategy in STRATEGIES:
        out = tmp_path / f"{strategy}.json"
        status = main(["train", dataset, "--strategy", strategy, "--scheduler", address, "--workers", "2",
                       "--epochs", epochs, "--target-error", "0", "--quiet", "--json", str(out)]
                      if dataset != "function" else  # no target (a regression): as its preset
                      ["train", dataset, "--strategy", strategy, "--scheduler", address, "--workers", "2",
                       "--epochs", epochs, "--quiet", "--json", str(out)])
        err = capsys.readouterr().err
        assert status == 0, (strategy, err)
        summary = json.loads(out.read_text())
        assert summary["strategy"] == strategy and summary["workers"] == 2 and summary["rounds"] >= 1, summary


@pytest.mark.slow  # a long run (CI's full run): moved out of the default suite
def test_train_with_a_calibration_prints_the_model_beside_the_run(tmp_path, scheduler_address):
    """`ppt-dask model calibrate` writes a calibration (and keeps it in the user's cache);
    `ppt-dask train --calibration FILE` prints the predicted and measured median round and
    their ratio, the --json keeps them and the report both; without the flag the cached one
    of the same network is used; a strategy the model does not cover and a calibration of
    another network are refused in one line before any training."""
    import numpy as np

    from ppt_dask.perf import calibrate
    from ppt_dask.perf import model as pm

    env = {**os.environ, "PPT_DASK_CACHE": str(tmp_path / "cache")}
    cal_file = tmp_path / "enc.json"
    proc = run("model", "calibrate", "encoder", "--workers", "2", "--block", "64", "--rounds", "8",
               "--p-values", "1,2", "--out", str(cal_file), "--scheduler", scheduler_address, env=env)
    assert proc.returncode == 0, proc.stderr
    kept = tmp_path / "cache" / "calibration-256-8-256-w4360-float64.json"
    assert kept.is_file() and f"kept in {kept}" in proc.stdout
    train = ("train", "encoder", "--workers", "2", "--strategy", "block", "--block", "64", "--epochs", "25",
             "--quiet", "--scheduler", scheduler_address)
    out, report = tmp_path / "s.json", tmp_path / "r.html"
    proc = run(*train, "--calibration", str(cal_file), "--json", str(out), "--report", str(report), env=env)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(out.read_text())["run_time_model"]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith(f"run-time model ({cal_file}): predicted ") and "predicted/measured" in line, line
    # the prediction is the model's for the run's layout: 2 workers, block 64 over 8 shards,
    # streamed rounds (--exchange auto), a core per worker (a scheduler not started here)
    cal = calibrate.Calibration.load(cal_file)
    assert entry["predicted_round_seconds"] == pm.iteration_seconds(2, 64, 4360, cal.constants, n_shards=8)
    assert entry["rounds"] == "streamed rounds, 2 workers, block 64, a core per worker"
    ratio = entry["predicted_round_seconds"] / entry["measured_round_seconds"]
    assert entry["predicted_over_measured"] == ratio and f"predicted/measured {ratio:.2f}" in line
    assert 1 / 3 < ratio < 3, entry  # a fresh calibration of this machine, loaded as it may be
    page = report.read_text()
    assert "predicted_round_ms" in page and "measured_round_ms" in page
    # the cached calibration of the same network, without the flag
    proc = run(*train, env=env)
    assert proc.returncode == 0 and f"run-time model ({kept}): predicted" in proc.stdout, proc.stderr
    # refused in one line: a strategy the model does not predict, a calibration of another network
    proc = run("train", "encoder", "--strategy", "ppt", "--calibration", str(cal_file), "--epochs", "1", env=env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "ppt-dask: error: --calibration applies to --strategy block, epoch (the run-time model predicts "
        "synchronous rounds), not to --strategy ppt"]
    proc = run("train", "parity8", "--strategy", "block", "--calibration", str(cal_file), "--epochs", "1", env=env)
    assert proc.returncode == 2 and "was calibrated for a network of 4360 parameters, this run's has" in proc.stderr
    proc = run(*train[:8], "--dtype", "float32", "--calibration", str(cal_file), "--epochs", "1", env=env)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"ppt-dask: error: --calibration {cal_file} was calibrated in float64, this run computes in float32: "
        "calibrate with --dtype float32 (or train with --dtype float64)"], proc.stderr
    assert cal.dtype == "float64" and np.isfinite(entry["measured_round_seconds"])
