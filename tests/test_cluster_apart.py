"""A cluster someone started apart (``dask scheduler`` and ``dask worker`` processes,
tests/apart.py), as ``ppt-dask train --scheduler ADDRESS`` meets it: the run takes as many
shards as the cluster has workers (not the head's cores), and a scheduler that goes away
(SIGKILLed: as its host going down) ends the run in one line naming it and the checkpoint to
go on from, wherever the run was: placing its data, in its rounds with or without a
checkpoint kept. ``--resume`` from that checkpoint ends bitwise as a run never cut."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

from ppt_dask.cli import commands, presets
from ppt_dask.cli.parser import build_parser

from apart import cluster_apart
from conftest import wait_for_checkpoints

LINE_SECONDS = 300.0  # a line of the head's output: seconds here, far more on a loaded machine


def _head(address: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ppt_dask.cli", "train", *args, "--scheduler", address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _lines(stream, sink: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        sink.put(line)
    sink.put(None)


def _until(proc: subprocess.Popen, starts: str) -> tuple[list, queue.Queue]:
    """The head's stderr lines up to the first that starts with ``starts`` (the head still
    running then), and the queue of the lines that follow (None at the end)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stderr, lines), daemon=True).start()
    seen: list = []
    while not (seen and seen[-1].startswith(starts)):
        line = lines.get(timeout=LINE_SECONDS)
        assert line is not None, f"the head ended (status {proc.wait(30)}) before a line {starts!r}: {seen}"
        seen.append(line)
    return seen, lines


def _rest(proc: subprocess.Popen, lines: queue.Queue) -> list:
    rest = []
    while (line := lines.get(timeout=LINE_SECONDS)) is not None:
        rest.append(line)
    proc.wait(30)
    return rest


def _lost_line(address: str, note: str) -> re.Pattern:
    return re.compile(rf"ppt-dask: error: lost the scheduler at {re.escape(address)} \(host 127\.0\.0\.1\): "
                      rf".+; {note}\n")


def _workers_not_the_heads_cores() -> int:
    return 3 if os.cpu_count() != 3 else 2


def test_the_shard_count_waits_for_the_clusters_workers():
    """Before the connection, --scheduler without --workers settles nothing by the head's
    cores: the settings are checked for one worker, and the cluster's count gives them."""
    args = build_parser().parse_args(["train", "mnist", "--scheduler", "tcp://127.0.0.1:8786"])
    assert commands._workers_known(args) is None
    assert commands._shard_count(args, "local") == 1 and commands._shard_count(args, "block") == 8
    assert commands._shard_count(args, "local", 5) == 5 and commands._shard_count(args, "block", 12) == 12
    s = commands._settings(args, "preset", 5)
    assert {k: s[k] for k in presets.for_shards(presets.PRESETS["mnist"], 5)} == presets.for_shards(
        presets.PRESETS["mnist"], 5)
    local = build_parser().parse_args(["train", "mnist"])  # the LocalCluster it starts: a worker per core
    assert commands._workers_known(local) == (os.cpu_count() or 1)


def test_a_cluster_started_apart_gives_its_workers_not_the_heads_cores(tmp_path):
    """The bug: ``ppt-dask train mnist --scheduler ADDRESS`` took its shard count (one a
    worker, local SGD) from the head's cores, so from 2 cores onto 3 workers it ran 2 shards
    on 2 of them. Now all the cluster's workers, the settings of that many shards (the
    preset's rule), and the first line says so."""
    n = _workers_not_the_heads_cores()
    out = tmp_path / "run.json"
    with cluster_apart(tmp_path / "cluster", workers=n) as cluster:
        proc = _head(cluster.address, "mnist", "--epochs", "0.02", "--json", str(out))
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert err.splitlines()[0] == (f"the cluster at {cluster.address} has {n} workers: {n} shards "
                                   "(--workers, --shards choose others)"), err
    summary = json.loads(out.read_text())
    assert (summary["workers"], summary["shards"]) == (n, n)
    scaled = presets.for_shards(presets.PRESETS["mnist"], n)  # the settings of n shards
    assert scaled and {k: summary[k] for k in scaled} == scaled


@pytest.mark.slow  # 10-20 s, a cluster and a run of the head: in CI's full run (.ci/run)
def test_a_lost_scheduler_in_the_rounds_without_a_checkpoint_ends_in_one_line(tmp_path):
    """The scheduler SIGKILLed once the run is in its rounds (its first progress line): the
    run ends with status 1 and one line naming the scheduler, its host and that no checkpoint
    was kept; then nothing else (no traceback, no log of the client's reconnection)."""
    with cluster_apart(tmp_path / "cluster", workers=2) as cluster:
        proc = _head(cluster.address, "parity8", "--workers", "2", "--seed", "7", "--lr", "0.2", "--epochs", "4000",
                     "--connect-timeout", "2")
        try:
            _, lines = _until(proc, "epoch ")
            cluster.kill_scheduler()
            rest = _rest(proc, lines)
        finally:
            proc.kill()
            proc.wait(30)
    errors = [line for line in rest if not line.startswith("epoch ")]
    assert proc.returncode == 1 and len(errors) == 1, rest
    assert _lost_line(cluster.address, re.escape(
        "no checkpoint was kept (checkpoint_dir, --checkpoint DIR, keeps one to resume from)")).fullmatch(errors[0])


@pytest.mark.slow  # 10-20 s, a cluster and two runs of the head: in CI's full run (.ci/run)
def test_a_lost_scheduler_before_the_first_checkpoint_says_none_yet(tmp_path):
    ck = tmp_path / "ck"
    with cluster_apart(tmp_path / "cluster", workers=2) as cluster:
        proc = _head(cluster.address, "parity8", "--workers", "2", "--seed", "7", "--lr", "0.2", "--epochs", "4000",
                     "--checkpoint", str(ck), "--checkpoint-every", "100000", "--connect-timeout", "2")
        try:
            _, lines = _until(proc, "epoch ")
            cluster.kill_scheduler()
            rest = _rest(proc, lines)
        finally:
            proc.kill()
            proc.wait(30)
    errors = [line for line in rest if not line.startswith("epoch ")]
    assert proc.returncode == 1 and len(errors) == 1, rest
    assert _lost_line(cluster.address, re.escape(f"checkpoint {ck} holds none yet")).fullmatch(errors[0])


@pytest.mark.slow  # 10-20 s: in CI's full run (.ci/run)
def test_a_lost_scheduler_while_the_data_is_placed_ends_in_the_same_line(tmp_path):
    """Killed at the head's first line (right after the connection, before the 60,000 rows of
    MNIST go to the workers): the same one line, status 1, not an OSError's exit 2."""
    with cluster_apart(tmp_path / "cluster", workers=2) as cluster:
        proc = _head(cluster.address, "mnist", "--epochs", "0.05", "--connect-timeout", "2")
        try:
            _, lines = _until(proc, "the cluster at ")
            cluster.kill_scheduler()
            rest = _rest(proc, lines)
        finally:
            proc.kill()
            proc.wait(30)
    errors = [line for line in rest if not line.startswith(("epoch ", "time breakdown"))]
    assert proc.returncode == 1 and len(errors) == 1, rest
    assert _lost_line(cluster.address, re.escape(
        "no checkpoint was kept (checkpoint_dir, --checkpoint DIR, keeps one to resume from)")).fullmatch(errors[0])


def _parity8(*args: str) -> list:
    return ["parity8", "--workers", "2", "--seed", "7", "--lr", "0.2", "--epochs", "1000", "--quiet",
            "--connect-timeout", "2", *args]


@pytest.mark.slow  # 15-30 s, a cluster and three runs of the head: in CI's full run (.ci/run)
def test_a_lost_scheduler_after_the_first_checkpoint_resumes_bitwise(tmp_path, scheduler_address):
    """SIGKILLed once the run has written its first checkpoint: one line naming the scheduler,
    its host and the checkpoint's round, status 1; ``--resume`` from it on another cluster
    ends with the weights of a run never cut, bit for bit."""
    ck = tmp_path / "ck"
    with cluster_apart(tmp_path / "cluster", workers=2) as cluster:
        proc = _head(cluster.address, *_parity8("--checkpoint", str(ck), "--checkpoint-every", "20"))
        try:
            wait_for_checkpoints(ck, proc, count=1)
            cluster.kill_scheduler()
            _, err = proc.communicate(timeout=LINE_SECONDS)
        finally:
            proc.kill()
            proc.wait(30)
    line = _lost_line(cluster.address, re.escape(f"checkpoint {ck} holds round ") + r"(\d+)"
                      + re.escape(" (go on with --resume, resume=True)")).fullmatch(err)
    assert proc.returncode == 1 and line, err
    assert int(line.group(1)) >= 19  # a copy every 20 rounds
    for name, more in (("resumed", ("--checkpoint", str(ck), "--checkpoint-every", "20", "--resume")),
                       ("whole", ())):
        run = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "train", *_parity8(*more),
                              "--save", str(tmp_path / f"{name}.npz"), "--scheduler", scheduler_address],
                             capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr
    resumed, whole = (np.load(tmp_path / f"{name}.npz")["params"] for name in ("resumed", "whole"))
    assert resumed.tobytes() == whole.tobytes()
