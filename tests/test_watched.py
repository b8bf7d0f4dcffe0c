"""Synchronous loops that apply the stopping rule themselves, and a head that reads them by time.

The oracle is the head's own rule: an ``on_round`` call-back that never stops the run makes the
head apply the rule on every round it reads (ppt_dask/engine/checks.py ``check_round``), as it
did before the loops decided; the loops' run must stop at the same round, with the same
verifications, the same history and the same weights, bit for bit.
"""

import math
import time

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.core.stopping import RoundRule
from ppt_dask.engine.rounds import watched
from ppt_dask.engine.wire import mailbox
from ppt_dask.testing import Slowed


def _run(client, workers, data, strategy, stop, head_rule: bool, net=None):
    shards = ppt.enter_data(client, data.X, data.y, n_shards=4, workers=workers)
    net = net or ppt.MLP((data.X.shape[1], 16, int(data.y.max()) + 1), hidden="tanh", output="softmax")
    try:
        return ppt.train(net, shards, strategy, stop, on_round=(lambda record: False) if head_rule else None)
    finally:
        ppt.exit_data(shards)


def _same(a, b):
    assert a.stopped_because == b.stopped_because
    assert len(a.history) == len(b.history)
    for x, y in zip(a.history, b.history):
        assert x["round"] == y["round"] and x["loss"] == y["loss"] and x["error_rate"] == y["error_rate"]
        assert x.get("verified_error_rate") == y.get("verified_error_rate")
    assert np.array_equal(a.params, b.params)


@pytest.fixture(scope="module")
def digits():
    d = ppt.datasets.mnist(n_train=2000, n_test=1000)
    return d


@pytest.mark.parametrize("n", [1, 2])
def test_loops_that_stop_themselves_stop_where_the_head_would_with_a_test_set(client4, workers4, digits, n):
    """The windowed estimate screens, each loop counts its part of the test set, the counts ride
    with the next round's sums: the same round, verifications and weights as the head's rule."""
    stop = ppt.Stop(max_epochs=6, target_error=0.2, test=(digits.X_test, digits.y_test))
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=200)
    ours = _run(client4, workers4[:n], digits, strategy, stop, head_rule=False)
    head = _run(client4, workers4[:n], digits, strategy, stop, head_rule=True)
    assert ours.learned, ours.stopped_because  # a run that stops on a verification, not at max_epochs
    assert sum("verified_error_rate" in h for h in ours.history) >= 1
    _same(ours, head)


def test_loops_verify_on_the_training_set_where_no_test_set_is_given(client4, workers4, digits):
    stop = ppt.Stop(max_epochs=6, target_error=0.2, check_every=0.5)
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=200)
    ours = _run(client4, workers4[:2], digits, strategy, stop, head_rule=False)
    head = _run(client4, workers4[:2], digits, strategy, stop, head_rule=True)
    assert ours.learned
    _same(ours, head)


def test_a_diverging_run_keeps_the_weights_before_the_loss_that_was_not_finite(client4, workers4):
    d = ppt.datasets.function()
    net = ppt.MLP((2, 16, 1), hidden="tanh", output="linear")
    stop, strategy = ppt.Stop(max_epochs=500), ppt.Sync(lr=50.0, momentum=0.9)
    ours = _run(client4, workers4[:2], d, strategy, stop, head_rule=False, net=net)
    head = _run(client4, workers4[:2], d, strategy, stop, head_rule=True, net=net)
    assert ours.stopped_because.startswith("diverged at round") and np.isfinite(ours.params).all()
    _same(ours, head)


def test_the_head_reads_by_time_not_by_round(client4, workers4, digits):
    """A run of many short rounds: the head's reads of slot 0 are far fewer than the rounds (one
    every READ_SECONDS at most, the last one and the start apart), whatever the rounds cost."""
    calls = []
    original = watched.WatchedRounds._read

    def counted(self, asks, wait):
        calls.extend(j for j, *_ in asks if j == 0)
        return original(self, asks, wait)

    watched.WatchedRounds._read = counted
    try:
        result = _run(client4, workers4[:2], digits, ppt.Sync(lr=0.1, block=40), ppt.Stop(max_epochs=4), False)
    finally:
        watched.WatchedRounds._read = original
    assert len(result.history) == 200
    assert len(calls) <= result.wall_seconds / watched.READ_SECONDS + 3


def test_a_mailbox_hands_the_head_the_rows_since_its_last_read_and_the_end_at_once():
    box = mailbox.Mailbox("test-watch", first=0, ahead=mailbox.RECORDS_AHEAD)
    import asyncio

    async def head():  # the worker's event loop, where the actor's calls run
        first = await box.watch(2, 0.0)
        asyncio.get_running_loop().call_later(0.1, box.end, {"outcome": "max_epochs", "round": 4, "last": 4})
        t0 = time.perf_counter()
        second = await box.watch(5, 30.0)  # no row past 4: the end wakes it, long before 30 s
        return first, second, time.perf_counter() - t0

    try:
        for r in range(5):
            box.record(r, np.full(4, float(r)))
        first, second, waited = asyncio.run(head())
        assert first["first"] == 2 and first["rows"][:, 0].tolist() == [2.0, 3.0, 4.0] and first["end"] is None
        assert second["end"]["outcome"] == "max_epochs" and len(second["rows"]) == 0 and waited < 20
    finally:
        box.stop()


def test_the_rule_counts_as_the_head_does():
    """RoundRule against ErrorEstimate by hand: screening, the next check, a loss not finite."""
    rule = RoundRule(rounds_per_epoch=4, target_error=0.25, window_patterns=8, check_every=0.5, screen=True,
                     exact_stats=False, next_check=-math.inf)
    verdicts = [rule.after(r, 1.0, w, 4) for r, w in enumerate([4, 2, 0, 0, 0, 0])]
    # estimates: 1.0 (window not full), 0.75, 0.25 -> check (epoch 0.75, next 1.25), 0.0 (epoch 1.0 < 1.25),
    # 0.0 (epoch 1.25 -> check), 0.0 (epoch 1.5 < 1.75)
    assert verdicts == ["go", "go", "check", "go", "check", "go"]
    assert rule.after(6, float("inf"), 0, 4) == "diverged"
    assert rule.learned(1, 4) and not rule.learned(2, 4)


@pytest.fixture(scope="module")
def client3():
    """Three worker processes of their own, with nannies: one of them is stopped and restarted."""
    client = ppt.connect(n_workers=3, dashboard_address=None)
    client.wait_for_workers(3, timeout=60)
    yield client
    ppt.cluster.close(client)


@pytest.mark.slow
def test_a_worker_that_hangs_is_named_restarted_and_the_run_ends_as_undisturbed(client3):
    """One of three workers' processes SIGSTOPped mid-run, never resumed (the loop's worker alive
    to the scheduler, its sockets open, silent): within the run's bound the head names it,
    restarts it, and the run ends with the weights of the undisturbed run (the serial path of
    the same three slots), instead of waiting ten minutes."""
    import os
    import signal

    from ppt_dask.algorithms.serial import train_serial

    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64)
    net = ppt.MLP((6, 8, 2), hidden="tanh", output="softmax")
    strategy = Slowed(ppt.Sync(lr=0.3, momentum=0.9, block=60), seconds=0.01)
    rounds = 120
    expected, _ = train_serial(net, X, y, strategy.inner, rounds=rounds, n_shards=6, seed=1, reproducible="same-p",
                               workers=3)
    pids = client3.run(os.getpid)
    shards = ppt.enter_data(client3, X, y, n_shards=6)
    victim = shards.slot_workers()[1]
    stopped = []

    def progress(record):
        if record["round"] >= 30 and not stopped:
            os.kill(pids[victim], signal.SIGSTOP)
            stopped.append(pids[victim])
    try:
        with pytest.warns(RuntimeWarning, match=f"made no progress .*worker {victim} \\(slot 1\\)"):
            result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=rounds / 10), seed=1, progress=progress,
                               hang_seconds=3.0)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)  # restarted already, or not: nothing stopped is left behind
            except ProcessLookupError:
                pass
        ppt.exit_data(shards)
    assert stopped and result.settings["recoveries"] >= 1
    assert victim in result.settings["events"][0]["error"]
    assert [r["round"] for r in result.history] == list(range(rounds))
    assert result.params.tobytes() == expected.tobytes()


def test_a_run_on_one_cluster_is_not_stalled_by_another_clusters_default_client(client4, workers4, digits):
    """A second client made later (another cluster's, the default one now): the run's mailboxes
    are called through the run's client, not the default. (Before: the mailboxes' handles took
    the default client, their calls went to a scheduler that does not know them, and the run
    waited forever.) distributed's Actor still has the attributes ppt_dask binds."""
    from distributed import Client, LocalCluster

    from ppt_dask.engine.wire import mailbox

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as other, Client(other) as default:
        from distributed import get_client

        assert get_client() is default  # the other cluster's client is the default now
        ours = _run(client4, workers4[:2], digits, ppt.Sync(lr=0.3, momentum=0.9, block=200),
                    ppt.Stop(max_epochs=1), head_rule=False)
    assert len(ours.history) == 10
    handle = mailbox.Mailbox.__new__(mailbox.Mailbox)  # any object: bound() sets what distributed's Actor has
    from distributed.actor import Actor

    actor = Actor(mailbox.Mailbox, "tcp://127.0.0.1:1", "k")
    assert hasattr(actor, "_client") and hasattr(actor, "_future")
    del handle
