"""Shared fixtures: real Dask clusters (worker processes, and threads) and real data."""

import contextlib
import gc
import time

import pytest
from hypothesis import settings

import ppt_dask as ppt

# hypothesis fails an example that runs longer than 200 ms by default: a measure of how fast
# this shared machine was, not of the property. Every property test here runs without that
# deadline (the suite's timeout still ends a hang); a test's own settings add to this profile.
settings.register_profile("ppt-dask", deadline=None)
settings.load_profile("ppt-dask")

# A test that uses one of these fixtures needs that part of the system (a browser, sshd,
# Slurm) and runs long: it gets the marker, so the default suite leaves it out (pyproject's
# addopts) and `bash .ci/run` or `-m browser` etc. runs it. Tests added later get it too.
SYSTEM_FIXTURES = {"browser": "browser", "sshd": "ssh", "slurm": "slurm"}

# `ppt-dask train parity8` flags for a run that lasts long enough to be cut (Ctrl-C, a killed
# head) during its rounds: at lr 0.2, seed 7 learns parity in 3,762 rounds (about 1.8 ms a round
# here: 7 s). The preset's lr 2.0 learns in 233 (0.7 s), which once ended in CI before the
# Ctrl-C meant to cut it ("ppt-dask: interrupted", the run already over).
LASTING_PARITY8 = ("--seed", "7", "--lr", "0.2", "--epochs", "4000")

# How long a nanny may take to bring a SIGKILLed worker back before a test says so: 2-5 s on a
# quiet machine; a new Python importing numpy, torch and distributed on two cores shared with
# other test runs takes several times that. Within pytest's 300 s a test.
RESTART_SECONDS = 180.0


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, marker in SYSTEM_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture(scope="session", autouse=True)
def calibration_cache(tmp_path_factory):
    """`ppt-dask model calibrate` keeps a copy of each calibration in the user's cache, which
    `ppt-dask train` then reads: the tests' own folder, never the user's (the commands the
    tests run inherit it)."""
    import os

    from ppt_dask.cli.runmodel import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("calibration-cache"))
    yield
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """The serial oracle runs with one BLAS thread, as every worker does: a BLAS with
    two threads splits the products differently and the last bits change."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.fixture(scope="session")
def client4():
    """Four single-threaded worker *processes* (oversubscribed on two cores: fine for
    correctness); tests choose 1, 2 or 4 of them through ``enter_data(workers=...)``."""
    # plain tcp (security=False): its address is handed to command lines in other processes
    # (scheduler_address), which the default's TLS credentials, held in this process, would refuse
    client = ppt.connect(n_workers=4, dashboard_address=None, security=False)
    client.wait_for_workers(4, timeout=60)
    yield client
    ppt.cluster.close(client)


@pytest.fixture(scope="session")
def workers4(client4):
    return ppt.cluster.worker_addresses(client4)


@pytest.fixture(scope="session")
def scheduler_address(client4):
    """client4's scheduler, for the command lines the tests run: ``ppt-dask train ...
    --workers 2 --scheduler ADDRESS`` trains on the first two of its workers instead of
    starting a LocalCluster of its own (4-8 s each on two cores), as a user's command does
    on a cluster someone else started. The tests of what the local cluster brings (the
    quick start, Ctrl-C closing it, the worker processes gone) keep starting their own."""
    return client4.scheduler.address


@pytest.fixture(scope="module")
def threads_client():
    """Two worker threads in this process, shared by the tests of a module (each releases
    what it placed; ``scheduler_keys`` checks that where it matters)."""
    client = ppt.connect(n_workers=2, processes=False, dashboard_address=None)
    client.wait_for_workers(2, timeout=60)
    yield client
    ppt.cluster.close(client)


@pytest.fixture(scope="module")
def _processes2():
    client = ppt.connect(n_workers=2, dashboard_address=None)
    client.wait_for_workers(2, timeout=60)
    yield client
    ppt.cluster.close(client)


@pytest.fixture
def client2(_processes2):
    """Two worker processes under nannies (a killed worker comes back on a new port), shared
    by the tests of a module: each test starts with exactly two live workers, however the
    one before left them (a worker killed and restarting, a third one that joined)."""
    client = _processes2
    client.cluster.scale(2)  # closes the extra worker later, on the cluster's loop
    kept = {str(name) for name in client.cluster.worker_spec}
    deadline = time.monotonic() + RESTART_SECONDS
    # two workers listed is not enough: a third worker that scale(2) is about to close, or a
    # worker SIGKILLed by the test before whose loss the scheduler has not yet seen, is listed
    # too (a test placed its shards there, and the scatter failed with KeyError or the shards
    # left mid-run); wait for the two workers the cluster keeps, each answering
    while not _two_kept_and_alive(client, kept):
        assert time.monotonic() < deadline, (f"the shared cluster did not come back to its two workers within "
                                             f"{RESTART_SECONDS} s: {sorted(ppt.cluster.workers(client))}")
        time.sleep(0.1)
    return client


def _two_kept_and_alive(client, kept: set) -> bool:
    import os

    listed = ppt.cluster.workers(client)
    if sorted(str(w["name"]) for w in listed.values()) != sorted(kept):
        return False
    try:  # a killed worker's port refuses at once
        return set(client.run(os.getpid, workers=list(listed))) == set(listed)
    except (OSError, KeyError):
        return False


def scheduler_keys(client, timeout=10.0):
    """Keys the scheduler still holds, once released futures have had time to go."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        keys = client.run_on_scheduler(lambda dask_scheduler: sorted(map(str, dask_scheduler.tasks)))
        if not keys or time.monotonic() > deadline:
            return keys
        time.sleep(0.1)


def checkpoint_round(directory):
    """The round the checkpoint in ``directory`` holds, or None while there is none (it is
    written to a temporary file and renamed, so a file there is whole)."""
    import json

    import numpy as np

    from ppt_dask.engine.saving import checkpoint

    path = directory / checkpoint.FILE
    if not path.exists():
        return None
    with np.load(path) as ck:
        return json.loads(ck["header"].tobytes())["round"]


def wait_for_checkpoints(directory, process, count: int = 2, timeout: float = 120.0) -> list:
    """Wait until ``process`` has written checkpoints of ``count`` different rounds in
    ``directory``, and is still running: it went on training past a copy it wrote, so a
    signal sent now lands during its rounds (an event, not a fixed delay). The rounds seen."""
    deadline = time.monotonic() + timeout
    seen: list = []
    while len(seen) < count:
        assert process.poll() is None, f"the run ended (status {process.returncode}) after checkpoints {seen}"
        assert time.monotonic() < deadline, f"checkpoints {seen} in {timeout} s, waited for {count}"
        r = checkpoint_round(directory)
        if r is not None and r not in seen:
            seen.append(r)
        time.sleep(0.05)
    return seen


def sigkill_at(client, at_round: int, slot: int = 1):
    """A progress callback that SIGKILLs the process of the ``slot``-th worker at round
    ``at_round``, and the dict that records when (``killed_at``)."""
    import os
    import signal

    address = ppt.cluster.worker_addresses(client)[slot]
    pid = client.run(os.getpid, workers=[address])[address]
    state = {"killed_at": None}

    def progress(record):
        if record["round"] == at_round and state["killed_at"] is None:
            os.kill(pid, signal.SIGKILL)
            state["killed_at"] = time.perf_counter()
    return progress, state


@contextlib.contextmanager
def own_shm(client=None):
    """This run's ``/dev/shm`` segments apart from every other process's: the loops of this
    process (and of ``client``'s workers, restarted ones too) make theirs in a folder of
    ``/dev/shm`` of their own (the same tmpfs, so the same room and the same identity for
    every loop); yields a function that lists the segments there. ``/dev/shm`` itself holds
    other runs' segments, which come and go while a test runs. The folder goes afterwards."""
    import shutil
    import uuid
    from pathlib import Path

    from ppt_dask.engine.wire import sharedmem

    from shmfolder import ShmFolder

    folder = Path("/dev/shm") / f"ppt-test-{uuid.uuid4().hex[:12]}"
    folder.mkdir(mode=0o700)
    before, plugin = sharedmem.SHM_DIR, ShmFolder(str(folder))
    sharedmem.SHM_DIR = str(folder)
    try:
        if client is not None:
            client.register_plugin(plugin)
        yield lambda: sorted(p.name for p in folder.iterdir())
    finally:
        sharedmem.SHM_DIR = before
        if client is not None:
            client.unregister_worker_plugin(plugin.name)
        shutil.rmtree(folder, ignore_errors=True)
