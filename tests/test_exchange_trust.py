"""An exchange a shared cluster can trust, end to end on real clusters: a foreign process that
knocks on every listener of a run's loops (ppt_dask/engine/wire/handshake.py) neither
gets code run nor changes a bit of the run, and the run's log names it; on a TLS cluster too.

The loops' listeners live while a generation's loops link up: a few milliseconds, usually.
The window is opened on purpose here (:class:`ppt_dask.testing.LateLoop` holds back the last
slot's loop until the stranger has knocked), so every run is knocked on, every time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from test_shm_kills import held

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.testing import LateLoop, Slowed

NET = ppt.MLP((12, 32, 3), hidden="tanh", output="softmax")
SYNC = ppt.Sync(lr=0.2, momentum=0.9, block=32)
ROUNDS = 8

STRANGER = r"""
import json, os, pickle, socket, ssl, struct, sys, threading, time
import dripper  # tests/dripper.py (the caller puts tests/ on the path)

pids = [int(p) for p in sys.argv[1].split(",")]
create, done, out, want = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
tls = json.loads(sys.argv[6]) if len(sys.argv) > 6 else None

def listening():
    return dripper.listening(pids)

class Creates:
    def __reduce__(self):
        return open, (create, "w")

body = pickle.dumps({"sum": Creates()}, protocol=5)
kinds = {"nothing": b"",
         "slot and pickle": struct.pack("!q", 1) + struct.pack("!QQ", 1, len(body)) + body,
         "garbage": os.urandom(300),
         "slot 99": struct.pack("!q32s32s", 99, b"n" * 32, b"p" * 32),
         "slot 0": struct.pack("!q32s32s", 0, b"n" * 32, b"p" * 32),
         "slot 1": struct.pack("!q32s32s", 1, b"n" * 32, b"p" * 32)}
context = None
if tls:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls["ca"])
    context.load_cert_chain(tls["cert"], tls["key"])
    context.check_hostname = False

known, knocked, hits, keep, threads = listening(), set(), [], [], []
open(done + ".ready", "w").close()  # the listeners before the run are known: the run may start

def with_certificate(sock, data):
    keep.append(sock.dup())  # the port stays ours though the handshake fails: no later knock reuses it
    try:
        wrapped = context.wrap_socket(sock)
        wrapped.sendall(data)
        keep.append(wrapped)
    except OSError:
        pass

deadline = time.monotonic() + 90
while len(knocked) < want and time.monotonic() < deadline:
    for target in sorted(listening() - known - knocked)[:want - len(knocked)]:
        knocked.add(target)
        for how in (["plain", "with the certificate"] if tls else ["plain"]):
            for kind, data in kinds.items():
                sock = socket.create_connection(target, timeout=20)
                me = "%s:%d" % sock.getsockname()[:2]
                hits.append({"to": "%s:%d" % target, "from": me, "kind": kind, "how": how})
                if how == "plain":
                    sock.sendall(data)
                    keep.append(sock)
                else:  # its TLS handshake ends when the loop accepts: beside the others
                    threads.append(threading.Thread(target=with_certificate, args=(sock, data)))
                    threads[-1].start()
    time.sleep(0.01)
open(done, "w").close()  # the held loop goes on: the loops link up, the strangers are refused
for t in threads:
    t.join(30)
json.dump(hits, open(out, "w"))
time.sleep(1)
"""


def _data(n=192, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 12))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


def _knocked_run(client, tmp_path, workers: int, pids: list, tls: dict | None = None):
    """A run of ``workers`` slots while the stranger knocks on the listeners of the first
    ``workers - 1`` (the last slot's loop held back until it is done): the result, the
    stranger's connections, the file its pickle would create."""
    created, done, out = tmp_path / "created", tmp_path / "done", tmp_path / "hits.json"
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n" + STRANGER
    args = [sys.executable, "-c", code, ",".join(map(str, pids)), str(created), str(done), str(out),
            str(workers - 1)] + ([json.dumps(tls)] if tls else [])
    X, y = _data()
    shards = ppt.enter_data(client, X, y, n_shards=8, workers=ppt.cluster.worker_addresses(client)[:workers])
    client.register_plugin(LateLoop(workers - 1, str(done)))
    stranger = subprocess.Popen(args)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(f"{done}.ready") and stranger.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.path.exists(f"{done}.ready"), "the stranger did not start"
        result = ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=ROUNDS / SYNC.rounds_per_epoch(len(X))), seed=6)
        assert stranger.wait(120) == 0
    finally:
        stranger.kill()
        stranger.wait(30)
        client.unregister_worker_plugin(LateLoop.name)
        ppt.exit_data(shards)
    return result, json.loads(out.read_text()), created


def _check(result, hits: list, created, workers: int, kinds: int) -> None:
    X, y = _data()
    # the runs take the default, reproducible='same-p': the serial path of as many workers
    expected, _ = train_serial(NET, X, y, SYNC, rounds=ROUNDS, n_shards=8, seed=6, reproducible="same-p",
                               workers=workers)
    assert result.rounds == ROUNDS and result.settings["exchange"] == "stream"
    assert result.params.tobytes() == expected.tobytes()  # bitwise an undisturbed run's (the serial oracle's)
    assert not created.exists()  # no stranger's pickle was ever unpickled
    refused = {e["from"]: e for e in result.settings["events"] if e["event"] == "refused"}
    loops = {h["to"] for h in hits if h["from"] in refused}  # the listeners that were loops'
    assert len(loops) == workers - 1, (hits, refused)
    mine = [h for h in hits if h["to"] in loops]
    assert len(mine) == (workers - 1) * kinds and {h["from"] for h in mine} <= set(refused), (hits, refused)
    assert {refused[h["from"]]["slot"] for h in mine} == set(range(workers - 1))  # the run's log names every one


@pytest.mark.timeout(300)
def test_a_stranger_knocking_on_every_loop_of_a_four_worker_run_changes_nothing(client4, tmp_path):
    """Worker processes: nothing sent, a slot and a pickle that would create a file, garbage,
    a slot not a peer's, a peer's slot (already linked, or without the secret), on each of
    the listeners of slots 0-2 while slot 3's loop is held back."""
    pids = list(client4.run(os.getpid).values())
    result, hits, created = _knocked_run(client4, tmp_path, 4, pids)
    _check(result, hits, created, 4, kinds=6)
    assert result.settings["allreduce"] == "shared"


@pytest.mark.slow  # 4-6 s each, four worker processes of a TLS cluster: in CI's full run (.ci/run)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("protocol", ["tls://", "wss://"])
def test_a_stranger_with_or_without_the_clusters_certificate_on_a_tls_cluster(tmp_path, protocol):
    """A TLS cluster (worker processes), and one over secure websockets, whose
    loops' links are TLS too (they once were plaintext for wss://): the stranger knocks without
    TLS (the TLS handshake fails) and with the cluster's own certificate, as any of its clients
    holds (TLS passes, the generation's secret does not)."""
    pytest.importorskip("cryptography")
    from distributed import Client, LocalCluster
    from distributed.security import Security

    security = Security.temporary()
    files = {}
    for name, pem in (("ca", security.tls_ca_file), ("cert", security.tls_client_cert),
                      ("key", security.tls_client_key)):
        files[name] = str(tmp_path / f"{name}.pem")
        with open(files[name], "w") as f:
            f.write(pem)
    # worker processes, each its own TLS listener (LateLoop holds the held slot's worker's threads)
    with LocalCluster(n_workers=4, threads_per_worker=1, processes=True, protocol=protocol, security=security,
                      dashboard_address=None) as cluster, Client(cluster, security=security, timeout=60) as client:
        assert cluster.scheduler_address.startswith(protocol)
        pids = list(client.run(os.getpid).values())
        result, hits, created = _knocked_run(client, tmp_path, 4, pids, tls=files)
    _check(result, hits, created, 4, kinds=12)
    plain = {h["from"] for h in hits if h["how"] == "plain"}
    refused = [e["why"] for e in result.settings["events"] if e["event"] == "refused" and e["from"] in plain]
    assert len(refused) == len(plain) and all("TLS" in why or "closed" in why for why in refused), refused


def _dripped_run(client, tmp_path, workers: int, per: int, every: float):
    """A run of ``workers`` slots while a process of its own (tests/dripper.py) holds ``per``
    connections on each of the first ``workers - 1`` loops' listeners, a byte on each every
    ``every`` s (the last slot's loop held back until it holds them all, so the peers' own
    connections come after the strangers'): the result and the strangers' connections."""
    pids = list(client.run(os.getpid).values())
    ready, done, out = tmp_path / "ready", tmp_path / "done", tmp_path / "drips.json"
    X, y = _data()
    shards = ppt.enter_data(client, X, y, n_shards=8, workers=ppt.cluster.worker_addresses(client)[:workers])
    client.register_plugin(LateLoop(workers - 1, str(done)))
    dripper = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "dripper.py"),
                                ",".join(map(str, pids)), str(per), str(every), str(ready), str(done), str(out),
                                str(workers - 1), "240"])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and dripper.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), "the dripper did not start"
        result = ppt.train(NET, shards, SYNC, ppt.Stop(max_epochs=ROUNDS / SYNC.rounds_per_epoch(len(X))), seed=6)
        assert done.exists(), "the dripper never held its connections on every listener"
    finally:
        dripper.terminate()
        dripper.wait(30)
        client.unregister_worker_plugin(LateLoop.name)
        ppt.exit_data(shards)
    return result, json.loads(out.read_text())


@pytest.mark.timeout(300)
def test_forty_dripping_strangers_on_every_loops_listener_cost_no_recovery_and_are_counted(client4, tmp_path):
    """40 connections on each listener of slots 0-2 (more than the handshakes a listener runs
    at once), one byte every 5 s, opened before slot 3's loop connects: the loops link at the
    first try (no recovery: the newcomers shut the oldest strangers' handshakes), the run is
    bitwise an undisturbed one, and its events count every stranger on every listener. (Before:
    the strangers held every handshake, the peers' connections were closed, each generation's
    link-up failed after 30 s and the run recovered again and again.)"""
    result, drips = _dripped_run(client4, tmp_path, 4, per=40, every=5.0)
    X, y = _data()
    expected, _ = train_serial(NET, X, y, SYNC, rounds=ROUNDS, n_shards=8, seed=6, reproducible="same-p", workers=4)
    events = result.settings["events"]
    assert not [e for e in events if e["event"] == "recovered"], events
    assert result.rounds == ROUNDS and result.params.tobytes() == expected.tobytes()
    per_slot: dict = {}
    for e in (e for e in events if e["event"] == "refused"):  # the first ones named, the rest counted in one
        more = e["why"].split(" more refused", 1)[0]
        per_slot[e["slot"]] = per_slot.get(e["slot"], 0) + (int(more) if more.isdigit() else 1)
    # slots 0-2 for sure; slot 3's listener too when the dripper found it before slot 3 linked
    assert {0, 1, 2} <= set(per_slot) and set(per_slot.values()) == {40}, (per_slot, events)
    assert len(drips) == 40 * len(per_slot), (len(drips), per_slot)


# ---- kills: nothing of a run left in /dev/shm -------------------------------------------

HEAD = r"""
import sys
import numpy as np
import ppt_dask as ppt
from distributed import Client
from ppt_dask.testing import Slowed

if __name__ == "__main__":
    client = Client(sys.argv[1], timeout=60)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((192, 12))
    y = (X[:, 0] > 0).astype(np.int64)
    shards = ppt.enter_data(client, X, y, n_shards=6)
    net = ppt.MLP((12, 32, 2), hidden="tanh", output="softmax")
    print("training", flush=True)
    ppt.train(net, shards, Slowed(ppt.Sync(lr=0.2, block=32), seconds=2.0, shards=(5,)), ppt.Stop(max_epochs=2))
"""
SLOW = 1.5  # seconds the last slot's loop takes a round: the others' segments wait, named, that long


@pytest.fixture
def client3():
    """Three worker processes of a test's own: a kill may leave a surviving worker out of the
    cluster for good (distributed's "Cannot remove replica ... in state 'long-running'", when
    the scheduler drops a replica of the start state a loop still reads), so no test inherits
    what another's kill did."""
    client = ppt.connect(n_workers=3, dashboard_address=None, security=False)  # a head of another process joins it
    client.wait_for_workers(3, timeout=120)
    yield client
    ppt.cluster.close(client)


def _pids(client) -> set:
    return set(client.run(os.getpid).values())


def _segments_of(pids: set) -> set:
    """The segments in /dev/shm made by these processes (never anyone else's)."""
    from ppt_dask.engine.wire import sharedmem
    return {n for n in os.listdir(sharedmem.SHM_DIR) if (sharedmem.creator(n) or (0, 0, -1))[2] in pids}


def _kill_at_first_segment(makers: set, victim: int, timeout: float = 120.0):
    """A thread that SIGKILLs ``victim`` the moment a segment of one of ``makers`` appears (a
    generation's first round, before its readers have mapped it); what it saw."""
    import signal
    import threading

    seen: dict = {}

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _segments_of(makers) | held(makers)  # named (before) or held by its writer, unnamed
            if found:
                os.kill(victim, signal.SIGKILL)
                seen["segments"] = found
                return
            time.sleep(0.002)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, seen


def _slow_run(client, progress=None, rounds: int = 4):
    X, y = _data()
    shards = ppt.enter_data(client, X, y, n_shards=6)
    strategy = Slowed(SYNC, seconds=SLOW, shards=(5,))  # the last slot's round 0 comes late
    try:
        return ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=rounds / SYNC.rounds_per_epoch(len(X))), seed=6,
                         checkpoint_every=1, progress=progress)
    finally:
        ppt.exit_data(shards)


def _bitwise_serial(result, rounds: int = 4, workers: int = 3) -> None:
    X, y = _data()
    expected, _ = train_serial(NET, X, y, SYNC, rounds=rounds, n_shards=6, seed=6, reproducible="same-p",
                               workers=workers)
    assert result.rounds == rounds and result.params.tobytes() == expected.tobytes()


@pytest.mark.slow  # 19 s (the next generation waits for the killed worker's return): in CI's full run
@pytest.mark.timeout(300)
def test_a_worker_killed_while_its_first_segment_is_named_leaves_nothing_after_the_next_generation(client3):
    before = _pids(client3)
    victim = client3.run(os.getpid)[ppt.cluster.worker_addresses(client3)[0]]
    watcher, seen = _kill_at_first_segment({victim}, victim)
    try:
        result = _slow_run(client3)
    finally:
        watcher.join(5)
    assert seen.get("segments"), "the worker was not killed with a segment of its own named"
    assert result.settings["recoveries"] >= 1 and result.settings["allreduce"] == "shared"
    _bitwise_serial(result)
    assert _segments_of(before | _pids(client3)) == set()  # the killed worker's swept by the next generation


@pytest.mark.slow  # 20 s: in CI's full run
@pytest.mark.timeout(300)
def test_a_worker_killed_at_round_one_leaves_nothing(client3):
    from conftest import sigkill_at
    before = _pids(client3)
    progress, killed = sigkill_at(client3, at_round=1, slot=1)
    result = _slow_run(client3, progress=progress)
    assert killed["killed_at"] is not None and result.settings["recoveries"] >= 1
    _bitwise_serial(result)
    assert _segments_of(before | _pids(client3)) == set()


@pytest.mark.slow  # 7 s, a head process started and killed: in CI's full run
@pytest.mark.timeout(300)
def test_the_head_killed_in_round_zero_leaves_nothing_once_the_next_run_started(client3, tmp_path):
    workers = _pids(client3)
    head = subprocess.Popen([sys.executable, "-c", HEAD, client3.scheduler.address], stdout=subprocess.PIPE,
                            text=True)
    watcher, seen = _kill_at_first_segment(workers, head.pid)
    try:
        head.wait(120)
    finally:
        head.kill()
        head.wait(30)
        head.stdout.close()
        watcher.join(5)
    assert seen.get("segments"), "the head was not killed while the loops' segments were named"
    result = _slow_run(client3)  # the next run, on the same workers
    _bitwise_serial(result)
    assert _segments_of(workers | _pids(client3)) == set()


@pytest.mark.timeout(300)
def test_no_room_in_dev_shm_rolls_back_to_the_socket_algorithms_with_one_warning(client3):
    """One worker may not make a file past 64 KiB (``RLIMIT_FSIZE``: its segment finds no room,
    as in a full /dev/shm): the generation rolls back, the run goes on over the links with one
    warning, and ends bitwise the serial path's."""
    import resource
    import warnings

    net = ppt.MLP((12, 512, 3), hidden="tanh", output="softmax")  # 8.2k float64 weights: 66 kB a segment's place
    X, y = _data()
    expected, _ = train_serial(net, X, y, SYNC, rounds=ROUNDS, n_shards=6, seed=6, reproducible="same-p",
                               workers=3)
    worker = ppt.cluster.worker_addresses(client3)[1]
    client3.run(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 2**10, resource.RLIM_INFINITY)),
                workers=[worker])
    shards = ppt.enter_data(client3, X, y, n_shards=6)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = ppt.train(net, shards, SYNC, ppt.Stop(max_epochs=ROUNDS / SYNC.rounds_per_epoch(len(X))), seed=6)
    finally:
        ppt.exit_data(shards)
        client3.run(lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2),
                    workers=[worker])
    told = [w for w in caught if "shared-memory exchange is no longer possible" in str(w.message)]
    assert len(told) == 1, [str(w.message) for w in caught]
    assert result.settings["recoveries"] == 1 and "no room" in result.settings["events"][0]["error"]
    assert result.settings["allreduce"] in ("direct", "scatter")
    assert result.params.tobytes() == expected.tobytes()
