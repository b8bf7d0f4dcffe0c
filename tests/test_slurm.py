"""Slurm deployment through dask-jobqueue, against a real one-node Slurm on this machine.

Each test starts its own Slurm (tests/slurm.py: munged, slurmctld and slurmd from Debian's
packages, with a configuration, key and state in a temporary directory), submits workers as
batch jobs with TLS on, trains parity8 through them, and checks that no job and no job
process is left. The figures (time to start the worker jobs, the run, the recovery from a
``scancel``) are printed: ``pytest -s tests/test_slurm.py`` shows them.

``.ci/run`` installs slurm-wlm and munge; without them (or without root) these tests skip
and say why, and fail when the environment variable CI is set.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.data import datasets
from ppt_dask.deploy import slurm as slurmcluster

import slurm as local_slurm

REPO = Path(__file__).resolve().parents[1]
NET = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")  # the parity8 preset's network


def _say(text: str) -> None:
    print(f"[slurm] {text}", flush=True)


def _unavailable(why: str):
    if os.environ.get("CI"):
        pytest.fail(f"Slurm is needed under CI: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """A running one-node Slurm; afterwards no job, job process or daemon of it is left."""
    why = local_slurm.missing()
    if why:
        _unavailable(why)
    if not __import__("importlib").util.find_spec("dask_jobqueue"):
        _unavailable(slurmcluster.INSTALL_HINT)
    server = local_slurm.LocalSlurm(tmp_path / "slurm")
    try:
        server.start()
    except RuntimeError as exc:
        _unavailable(f"could not start a local Slurm: {exc}")
    monkeypatch.setenv("SLURM_CONF", str(server.conf))  # sbatch, squeue, scancel of dask-jobqueue
    try:
        yield server
        deadline = time.monotonic() + 30
        while (server.jobs() or server.job_processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.jobs() == [], "jobs left in the queue"
        assert server.job_processes() == [], "job processes left"
    finally:
        procs = dict(server.procs)
        server.stop()
        for name, proc in procs.items():
            assert proc.poll() is not None, f"{name} still running"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    out = tmp_path_factory.mktemp("tls") / "certs"
    run = subprocess.run([sys.executable, str(REPO / "deploy" / "make_certs.py"), str(out), "--hosts", "127.0.0.1"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return out


def test_parity8_through_worker_jobs_survives_a_scancel(slurm, certs, tmp_path):
    data = datasets.parity(8)
    strategy = ppt.Sync(lr=2.0, momentum=0.9)
    rounds, cancel_at = 120, 40
    expected, _ = train_serial(NET, data.X, data.y, strategy, rounds=rounds, n_shards=8, seed=0,
                               reproducible="same-p", workers=2)

    t0 = time.perf_counter()
    cluster, client = slurmcluster.start(2, cores=1, memory="1GB", certs_dir=certs, interface="lo",
                                         log_directory=tmp_path, scheduler_port=0, dashboard_address=None,
                                         timeout=120)
    try:
        started = time.perf_counter() - t0
        assert cluster.scheduler_address.startswith("tls://")
        jobs = slurm.jobs()
        assert len(jobs) == 2 and all(name == "ppt-dask-worker" and state == "RUNNING" for _, name, state in jobs)
        workers = client.scheduler_info(n_workers=-1)["workers"]
        job_ids = {slurmcluster.job_of(cluster, w["name"]) for w in workers.values()}
        assert job_ids == {j for j, _, _ in jobs}
        _say(f"2 worker jobs submitted and their workers connected (TLS) in {started:.1f} s")

        victim = slurmcluster.job_of(cluster, sorted(workers.values(), key=lambda w: w["name"])[1]["name"])
        seen = {"cancelled": None, "back": None, "last": -1, "top": -1, "replaying": False}

        def progress(record):
            now, r = time.perf_counter(), record["round"]
            if r == cancel_at and seen["cancelled"] is None:
                slurm.scancel(victim)
                seen["cancelled"] = now
            if seen["cancelled"] is not None and r <= seen["last"]:
                seen["replaying"] = True  # rolled back: the kept round's successors again
            if seen["replaying"] and seen["back"] is None and r > seen["top"]:
                seen["back"] = now - seen["cancelled"]  # a round never reached before the cancel
            seen["last"], seen["top"] = r, max(seen["top"], r) if not seen["replaying"] else seen["top"]

        shards = ppt.enter_data(client, data.X, data.y, n_shards=8)
        t1 = time.perf_counter()
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=rounds), seed=0,
                           checkpoint_every=10, progress=progress)
        run_seconds = time.perf_counter() - t1
        ppt.exit_data(shards)
        assert seen["cancelled"] is not None and seen["replaying"]
        assert victim not in {j for j, _, _ in slurm.jobs()}  # the job is gone from the queue
        assert result.settings["recoveries"] >= 1
        assert [r["round"] for r in result.history] == list(range(rounds))  # replayed, no gaps
        assert result.params.tobytes() == expected.tobytes()  # bitwise as an undisturbed run
        _say(f"parity8, {rounds} full-batch rounds on 2 worker jobs with job {victim} cancelled at round "
             f"{cancel_at}: {run_seconds:.1f} s; rolled back to round "
             f"{result.settings['events'][0].get('rolled_back_to')} and on to new rounds "
             f"{seen['back']:.1f} s after the scancel; weights bitwise equal to the serial run")
    finally:
        t2 = time.perf_counter()
        slurmcluster.stop(cluster, client)
    deadline = time.monotonic() + 30
    while slurm.jobs() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.jobs() == []
    _say(f"stop: every job cancelled and gone in {time.perf_counter() - t2:.1f} s")


def _lines(proc, into: queue.Queue) -> None:
    for line in proc.stdout:
        into.put(line)
    into.put(None)


def _readme_commands() -> dict[str, str]:
    """The commands of deploy/README.md's Slurm section, by their first words."""
    text = (REPO / "deploy" / "README.md").read_text()
    start = text.index("## 9. On a Slurm cluster")
    section = text[start:text.index("\n## ", start)]  # to the next section, whatever it is
    found = {}
    for line in section.splitlines():
        for head in ("python deploy/make_certs.py", "ppt-dask cluster slurm", "ppt-dask predict"):
            if line.startswith(head):
                found[head] = line.strip()
    assert len(found) == 3, found
    return found


def test_deploy_readme_slurm_commands_as_printed(slurm, tmp_path):
    """make_certs, ppt-dask cluster slurm, its printed train line (+ --save), ppt-dask predict."""
    commands = _readme_commands()
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "SLURM_CONF": str(slurm.conf), "HOME": str(home),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def shell(command, **kw):
        return subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, **kw)

    made = shell(commands["python deploy/make_certs.py"], cwd=REPO, timeout=60)
    assert made.returncode == 0 and (home / "ppt-certs" / "worker-key.pem").is_file(), made.stderr
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen(["bash", "-c", f"exec {commands['ppt-dask cluster slurm']}"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=work)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc, lines), daemon=True).start()
    out, train_line = [], None
    try:
        deadline = time.monotonic() + 150
        while train_line is None and time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            out.append(line)
            if line.startswith("train "):
                train_line = line.split(None, 1)[1].strip()
        assert train_line, "".join(out)
        assert any(line.startswith("workers    2 in 2 jobs") for line in out), "".join(out)
        _say("".join(out).strip())
        assert len(slurm.jobs()) == 2
        train = shell(f"{train_line} --quiet --save model.npz", cwd=work, timeout=300)
        assert train.returncode == 0, train.stderr
        assert train.stdout.startswith("parity8: strategy epoch, 2 workers,"), train.stdout
        assert "stopped       target reached" in train.stdout, train.stdout
        predict = shell(commands["ppt-dask predict"], cwd=work, timeout=60)
        assert predict.returncode == 0, predict.stderr
        assert "accuracy  1.0000 (256 of 256)" in predict.stdout, predict.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    assert proc.returncode == 0 and rest[-1].strip() == "stopped", "".join(rest)
    assert sorted(p.name for p in work.glob("slurm-*.out"))  # the jobs wrote where the README says


@pytest.mark.parametrize("flag, value, message", [
    ("--memory", "lots", "memory must be a size such as 2GB or 500MiB, got 'lots'"),
    ("--jobs", "0", "jobs must be an integer >= 1, got 0"),
    ("--walltime", "2h", "walltime must be Slurm's [D-]HH:MM:SS"),
])
def test_bad_slurm_arguments_are_refused_before_any_job(tmp_path, certs, flag, value, message):
    args = {"--jobs": "1", "--cores": "1", "--memory": "1GB", flag: value}
    argv = [a for k, v in args.items() for a in (k, v)]
    run = subprocess.run([sys.executable, "-m", "ppt_dask.cli", "cluster", "slurm", *argv, "--certs", str(certs)],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "SLURM_CONF": "/nonexistent"})
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
