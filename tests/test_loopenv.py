"""The round loop's process settings (ppt_dask.engine.loopenv): glibc's malloc thresholds and
the BLAS threads made right inside the loop's task, on workers started apart with distributed's
default configuration (``dask worker`` under its nanny, nothing set), and put back after.

The oracles are glibc's rules, not timings: setting any malloc variable fixes both thresholds
(128 KiB where not given), and a block above the mmap threshold is served by its own mmap,
which ``mallinfo2`` counts (:func:`ppt_dask.engine.loopenv.probe_mmapped`).
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.engine import loopenv

KIB = 1024
NANNY_ENV = {"MALLOC_TRIM_THRESHOLD_": "65536"}  # distributed.nanny.pre-spawn-environ's default


def test_no_setting_lets_glibc_adapt_and_nothing_is_changed():
    assert loopenv.malloc_found({}) is None
    assert loopenv.malloc_thresholds(None) is None and loopenv.malloc_changes(None) == {}


def test_the_nannys_trim_threshold_fixes_both_and_the_loop_raises_both():
    found = loopenv.malloc_found({**NANNY_ENV, "PATH": "/bin"})
    assert found == NANNY_ENV
    assert loopenv.malloc_thresholds(found) == {"trim_threshold": 64 * KIB, "mmap_threshold": 128 * KIB}
    assert loopenv.malloc_changes(found) == {name: (old, loopenv.LOOP_MALLOC[name]) for name, old in
                                             (("trim_threshold", 64 * KIB), ("mmap_threshold", 128 * KIB))}


def test_any_malloc_variable_or_tunable_fixes_them():
    for env in ({"MALLOC_TOP_PAD_": "0"}, {"MALLOC_MMAP_MAX_": "65536"},
                {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=4096:glibc.rtld.nns=2"}):
        held = loopenv.malloc_thresholds(loopenv.malloc_found(env))
        assert held["trim_threshold"] == 128 * KIB, env
        assert held["mmap_threshold"] == (4096 if "GLIBC_TUNABLES" in env else 128 * KIB), env
    assert loopenv.malloc_found({"GLIBC_TUNABLES": "glibc.rtld.nns=2"}) is None


def test_ppt_dasks_own_worker_environment_needs_nothing():
    env = {k: v for k, v in ppt.cluster.WORKER_ENV.items() if k.startswith("MALLOC_")}
    assert loopenv.malloc_changes(loopenv.malloc_found(env)) == {}


def test_the_loops_threads():
    assert loopenv.loop_threads({"OMP_NUM_THREADS": "1"}, worker_threads=4, cores=8) == 1
    assert loopenv.loop_threads({}, worker_threads=4, cores=8) == 4
    assert loopenv.loop_threads({}, worker_threads=4, cores=2) == 2
    assert loopenv.loop_threads({"OMP_NUM_THREADS": "many"}, worker_threads=1, cores=2) == 1
    pools = [{"user_api": "blas", "num_threads": 2}, {"user_api": "openmp", "num_threads": 1}]
    assert loopenv.thread_changes(pools, 1) == {"blas": (2, 1)}
    assert loopenv.thread_changes(pools, 2) == {"openmp": (1, 2)}


def test_in_a_process_started_with_the_nannys_variable_the_loop_sets_and_puts_back():
    """A process started with ``MALLOC_TRIM_THRESHOLD_=65536``: a 1 MiB block is mmapped before,
    not while a loop runs, and mmapped again after (the environment's thresholds back)."""
    code = ("import json; from ppt_dask.engine import loopenv as e\n"
            "before = e.probe_mmapped()\n"
            "with e.for_loop(1) as report: during = e.probe_mmapped()\n"
            "print(json.dumps([before, during, e.probe_mmapped(), report['malloc']['set']]))")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}, **NANNY_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    before, during, after, changed = json.loads(out.stdout)
    if before is None:
        pytest.skip("not glibc: no malloc thresholds to set")
    assert (before, during, after) == (True, False, True)
    assert changed == {"trim_threshold": [64 * KIB, 1 << 30], "mmap_threshold": [128 * KIB, 1 << 25]}


def test_a_loop_reads_its_workers_thread_count():
    """``Worker.state.nthreads``, what the loops' threads default to where OMP_NUM_THREADS is unset."""
    from distributed import Client, LocalCluster

    from ppt_dask.engine.rounds.streamloops import worker_threads

    with LocalCluster(n_workers=1, threads_per_worker=3, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        assert client.submit(worker_threads).result(timeout=30) == 3


# ---- a cluster started apart, as a user starts one ------------------------------------

def _plain_env(tmp_path) -> dict:
    """The environment of a user's shell: no thread, malloc or dask settings of ours (the
    test process may hold the OMP_NUM_THREADS that ppt.connect writes), an empty dask config."""
    drop = ("OMP_", "MKL_", "OPENBLAS_", "MALLOC_", "GLIBC_TUNABLES", "DASK_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    (tmp_path / "dask-config").mkdir()
    env["DASK_CONFIG"] = str(tmp_path / "dask-config")
    return env


def _start(tmp_path, *worker_flags):
    env = _plain_env(tmp_path)
    scheduler_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", "127.0.0.1:0",
                               "--scheduler-file", str(scheduler_file)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 60
    while not scheduler_file.exists() or not scheduler_file.read_text().strip():
        assert time.monotonic() < deadline, "the scheduler did not start"
        time.sleep(0.2)
    address = json.loads(scheduler_file.read_text())["address"]
    procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--host",
                                   "127.0.0.1", "--nthreads", "1", *worker_flags],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address, procs


def _stop(procs) -> None:
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a worker without a nanny sat out SIGTERM for 20 s
            proc.kill()
            proc.wait(timeout=20)


def _train(address: str, workers: int):
    client = ppt.connect(address)
    try:
        client.wait_for_workers(workers, timeout=60)
        before = ppt.cluster.worker_report(client)
        data = ppt.datasets.mnist(n_train=2000, dtype="float32")
        shards = ppt.enter_data(client, data.X, data.y, n_shards=workers, dtype="float32")
        net = ppt.MLP((784, 64, 10), hidden="tanh", output="softmax", dtype="float32")  # 196 KiB of W_0
        result = ppt.train(net, shards, ppt.Sync(lr=0.1, block=100), ppt.Stop(max_epochs=1))
        ppt.exit_data(shards)
        return before, result, ppt.cluster.worker_report(client)
    finally:
        client.close()


def test_on_dask_workers_under_their_nanny_the_loop_raises_malloc_thresholds(tmp_path):
    """``dask worker --nworkers 2 --nthreads 1``, distributed's defaults: each loop ran with
    glibc's heap serving its arrays, the run says so once, and the workers have the nanny's
    settings back after."""
    address, procs = _start(tmp_path, "--nworkers", "2")
    try:
        before, result, after = _train(address, 2)
    finally:
        _stop(procs)
    assert len(before) == 2 and result.settings["exchange"] == "stream"
    for settings in before.values():
        assert settings["malloc"] == NANNY_ENV and settings["OMP_NUM_THREADS"] == "1"
        if settings["probe_mmapped"] is None:
            pytest.skip("not glibc: no malloc thresholds to set")
        assert settings["probe_mmapped"] is True and settings["last_loop"] is None
    for settings in after.values():
        loop = settings["last_loop"]
        assert loop["malloc"]["found"] == NANNY_ENV and loop["malloc"]["probe_mmapped"] is False
        assert {k: tuple(v) for k, v in loop["malloc"]["set"].items()} == loopenv.malloc_changes(NANNY_ENV)
        assert loop["threads"] == {"loop": 1, "set": {}} and not loop["failed"]  # the nanny gave BLAS one thread
        assert settings["probe_mmapped"] is True  # the nanny's thresholds are back
    text = result.settings["worker_settings"]
    assert text.startswith("on 2 workers: glibc malloc") and "MALLOC_TRIM_THRESHOLD_=65536" in text


def test_on_a_worker_without_a_nanny_the_loop_gives_blas_the_workers_thread(tmp_path):
    """``dask worker --no-nanny --nthreads 1``: OpenBLAS starts with a thread per core; the loop
    computes with one, and the worker has them all back after."""
    address, procs = _start(tmp_path, "--no-nanny")
    try:
        before, result, after = _train(address, 1)
    finally:
        _stop(procs)
    (settings,) = before.values()
    cores = {pool["threads"] for pool in settings["blas"]}
    assert settings["malloc"] is None  # nothing fixed the thresholds: glibc adapts, nothing is set
    (loop,) = (s["last_loop"] for s in after.values())
    assert loop["malloc"]["set"] == {} and loop["threads"]["loop"] == 1
    if cores == {1}:
        assert loop["threads"]["set"] == {} and result.settings["worker_settings"] == "as found"
    else:
        assert {api: tuple(v) for api, v in loop["threads"]["set"].items()} == {"blas": (max(cores), 1)}
        assert result.settings["worker_settings"] == f"on 1 worker: blas threads {max(cores)} -> 1"
        assert {pool["threads"] for s in after.values() for pool in s["blas"]} == cores


@pytest.mark.slow  # 5 s, a scheduler and a worker process started apart: in CI's full run
def test_a_torchnets_loop_on_a_worker_without_a_nanny(tmp_path):
    """``dask worker --no-nanny``: torch's OpenMP pool and OpenBLAS start with a thread per core;
    the loop of a :class:`ppt_dask.TorchNet` runs with the worker's one thread in each, and the
    network computes with the one thread its ``threads="auto"`` gives where OMP_NUM_THREADS is
    unset (ppt_dask.nets.copies.threads_of)."""
    torch = pytest.importorskip("torch")
    address, procs = _start(tmp_path, "--no-nanny")
    try:
        client = ppt.connect(address)
        try:
            client.wait_for_workers(1, timeout=60)
            rng = np.random.default_rng(0)
            X = rng.standard_normal((200, 8)).astype("float32")
            y = (X[:, 0] > 0).astype(np.int64)
            shards = ppt.enter_data(client, X, y, n_shards=1, dtype="float32")
            net = ppt.TorchNet(lambda: torch.nn.Sequential(torch.nn.Linear(8, 2)), loss="cross_entropy")
            ppt.train(net, shards, ppt.Sync(lr=0.1, block=20), ppt.Stop(max_epochs=1))
            ppt.exit_data(shards)
            (settings,) = ppt.cluster.worker_report(client).values()
        finally:
            client.close()
    finally:
        _stop(procs)
    loop = settings["last_loop"]
    assert loop["threads"]["loop"] == 1 and loop["threads"]["torch"] == 1 and not loop["failed"]
    assert all(new == 1 for _old, new in loop["threads"]["set"].values())
    if os.cpu_count() > 1:  # a pool per core before: both set to one for the loop
        assert set(loop["threads"]["set"]) == {"blas", "openmp"}
