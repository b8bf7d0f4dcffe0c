"""The local strategy's streamed rounds: the mailbox on its own, and runs against the serial path."""

import threading
import time
from dataclasses import dataclass

import pytest

import ppt_dask as ppt
from ppt_dask.algorithms import localsgd
from ppt_dask.core import tree
from ppt_dask.engine.rounds import stream
from ppt_dask.engine.wire import mailbox
from ppt_dask.observe.breakdown import PHASES
from ppt_dask.testing import Slowed

from conftest import scheduler_keys
from test_localsgd import NET, STRATEGY, _data

# -- the mailbox, without a cluster --

def test_take_waits_for_every_slot_and_then_empties_the_inbox():
    box = mailbox.Mailbox("test-take")
    try:
        later = threading.Timer(0.1, box.put, (3, 2, {(0, 2): "c"}))
        box.put(3, 1, {(0, 1): "b"})
        later.start()
        t0 = time.perf_counter()
        assert box.take(3, [1, 2], timeout=10) == [{(0, 1): "b"}, {(0, 2): "c"}]
        assert time.perf_counter() - t0 >= 0.05  # it waited for slot 2
        with pytest.raises(TimeoutError, match="round 3 of slots \\[1\\] did not arrive within 0.05 s"):
            box.take(3, [1], timeout=0.05)  # taken once, gone
    finally:
        box.stop()


def test_a_loop_that_runs_too_far_ahead_of_the_head_waits_for_room():
    box = mailbox.Mailbox("test-ahead")
    try:
        for r in range(mailbox.AHEAD):
            box.wait_room(r, timeout=1)
            box.keep(r, {}, {})
        with pytest.raises(TimeoutError, match="the head read no round"):
            box.wait_room(mailbox.AHEAD, timeout=0.05)
        box.release(5)  # the head has read up to round 5: the loop may go on
        box.wait_room(mailbox.AHEAD, timeout=1)
        box.keep(mailbox.AHEAD, {}, {})
        assert min(box._kept) == 5
    finally:
        box.stop()


def test_a_stopped_mailbox_refuses_the_next_round_with_room_or_without():
    box = mailbox.Mailbox("test-stopped-room", ahead=2)
    box.keep(0, {}, {})
    box.stop()
    for r in (1, 5):  # room (the check without the lock), no room (the wait under it)
        with pytest.raises(mailbox.Stopped):
            box.wait_room(r, timeout=1)
    with pytest.raises(mailbox.Stopped):
        box.keep(1, {}, {})


def test_stop_ends_a_waiting_loop_at_once():
    box = mailbox.Mailbox("test-stop")
    threading.Timer(0.1, box.stop).start()
    with pytest.raises(mailbox.Stopped):  # the stop ended the wait: its timeout raises TimeoutError
        box.take(0, [1], timeout=30)
    assert "test-stop" not in mailbox.BOXES


def test_a_loop_keeps_fewer_rounds_for_the_head_of_a_large_model():
    """What a loop keeps for the head (a state a round) stays under KEEP_BYTES: all AHEAD rounds
    for the MNIST network, fewer for a large one, never under 4 (the head reads half of it)."""
    import numpy as np

    from ppt_dask.algorithms.strategies import ModelState

    small = ModelState(np.zeros(55_050, np.float32), {"velocity": np.zeros(55_050, np.float32)})
    large = ModelState(np.zeros(25_000_000, np.float32), {"velocity": np.zeros(25_000_000, np.float32)})
    assert stream.rounds_ahead(small, "sync", 4) == mailbox.AHEAD
    assert stream.rounds_ahead(large, "sync", 4) == max(4, stream.KEEP_BYTES // (2 * 25_000_000 * 4))
    assert stream.rounds_ahead(large, "local", 4) == 4
    box = mailbox.Mailbox("test-ahead-small", ahead=4)
    try:
        for r in range(4):
            box.wait_room(r, timeout=1)
            box.keep(r, {}, {})
        with pytest.raises(TimeoutError, match="the head read no round"):
            box.wait_room(4, timeout=0.05)
    finally:
        box.stop()


# -- runs on a real cluster --

def test_stopping_mid_generation_keeps_the_state_of_that_round(client4, workers4):
    """``on_round`` stops at a round inside the loops' run: the state the head builds from the
    mailboxes is bitwise the serial state after that round, every shard's model included."""
    X, y = _data()
    shards_rows = [(X[a:b], y[a:b]) for a, b in tree.split_rows(len(X), 4)]
    strategy = STRATEGY.check([48] * 4)
    start = NET.init_params(0)
    want, _ = localsgd.train_serial(NET, shards_rows, strategy, strategy.init(start), 6)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    try:
        result = ppt.train(NET, shards, STRATEGY, ppt.Stop(max_epochs=20), on_round=lambda rec: rec["round"] == 5)
    finally:
        ppt.exit_data(shards)
    assert result.settings["exchange"] == "stream" and result.rounds == 6
    assert result.state.round == 5 and result.params.tobytes() == want.params.tobytes()
    got, expected = result.state.opt_state, want.opt_state
    assert sorted(got["averages"]) == sorted(expected["averages"]) == [4, 5]
    for r in (4, 5):
        assert got["averages"][r].tobytes() == expected["averages"][r].tobytes()
    for s, model in expected["models"].items():
        assert got["models"][s].params.tobytes() == model.params.tobytes()
        assert got["models"][s].velocity.tobytes() == model.velocity.tobytes()
    assert scheduler_keys(client4) == []  # the loops and the mailboxes are gone


FRAMING = 512  # bytes of a message beyond its arrays' (a tagged partial of two arrays: 215-249)


def test_the_breakdown_has_a_row_per_streamed_round_from_the_loops_own_timing(client4, workers4, tmp_path):
    X, y = _data(960)
    shards = ppt.enter_data(client4, X, y, n_shards=2, workers=workers4[:2])
    slowed = Slowed(STRATEGY, seconds=0.02)  # 20 ms of "gradient" per shard and round
    try:
        result = ppt.train(NET, shards, slowed, ppt.Stop(max_epochs=1))
    finally:
        ppt.exit_data(shards)
    rows = result.breakdown()
    assert result.settings["exchange"] == "stream"
    # one row per round, as for a round graph (not one per loop task)
    assert [(r["gen"], r["round"]) for r in rows] == [(0, r) for r in range(result.rounds)]
    for row, record in zip(rows, result.history):
        assert row["streamed"] and row["workers"] == 2 and row["scheduler"] == 0
        assert row["gradient"] >= 0.02 * 0.99  # each loop slept 20 ms in its shard's steps
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"])  # the phases tile the round
        assert row["loss"] == record["loss"] and row["patterns"] == record["patterns"]
        # each loop sent its round's partial sums (weights times patterns, and stats) whole to
        # the other (two loops: no reduce-scatter): their bytes, and the message's framing
        # (a header of frame lengths and the pickle's few hundred bytes: tests/test_links.py)
        payload = NET.n_params * 8 + 3 * 8
        assert 2 * payload < row["transfer_bytes"] <= 2 * (payload + FRAMING)
    # the loops' rounds follow one another: a round's wall is about the head's time per round
    loop_seconds = sum(r["wall"] for r in rows)
    assert loop_seconds <= result.wall_seconds
    summary, table = result.diagnostics.summary(), result.diagnostics.table()
    assert summary["rounds"] == result.rounds and summary["streamed"] and summary["workers"] == 2
    assert [e["phase"] for e in table if e["phase"] == "scheduler"] == []  # no hop: not shown as a zero
    gradient = sum(row["gradient"] for row in rows)
    row_gradient = next(e for e in table if e["phase"] == "gradient")
    assert row_gradient["ms_per_round"] == pytest.approx(1e3 * gradient / result.rounds)
    assert 0 < summary["percent_not_gradient"] < 100
    # the trace: one span per phase that took time, per round, on each worker's track
    trace = result.diagnostics.trace()["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X" and e["cat"] == "streamed round"]
    assert {e["name"] for e in spans} <= set(PHASES)
    assert {e["args"]["round"] for e in spans if e["name"] == "gradient"} == set(range(result.rounds))
    assert len([e for e in spans if e["name"] == "gradient"]) == 2 * result.rounds
    loops = [e for e in trace if e["ph"] == "X" and e["name"] == "ppt-loop"]
    assert len(loops) == 2
    for loop in loops:  # each round's spans lie inside its worker's loop task
        mine = [e for e in spans if e["tid"] == loop["tid"]]
        assert min(e["ts"] for e in mine) >= loop["ts"] - 1
        assert max(e["ts"] + e["dur"] for e in mine) <= loop["ts"] + loop["dur"] + 1e3  # 1 ms of rounding


@dataclass(frozen=True)
class _Failing(localsgd.LocalSGD):
    """Local SGD whose shard 1 fails at round 3 (a bug in a strategy, say)."""

    def local_round(self, net, model, average, shard, s, r):
        if s == 1 and r == 3:
            raise ArithmeticError("shard 1 cannot go on")
        return super().local_round(net, model, average, shard, s, r)


def test_a_loop_that_fails_ends_the_run_with_its_error_not_a_hang(threads_client):
    X, y = _data()
    shards = ppt.enter_data(threads_client, X, y, n_shards=2)
    strategy = _Failing(lr=0.2, momentum=0.9, block=6, interval=12, pull=0.5)
    t0 = time.perf_counter()
    try:
        with pytest.raises(Exception, match="shard 1 cannot go on"):
            ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=20))
    finally:
        ppt.exit_data(shards)
    assert time.perf_counter() - t0 < 60


@pytest.mark.timeout(180)
def test_streamed_rounds_over_tls_end_bitwise_as_over_tcp(threads_client):
    """A cluster that speaks TLS: the loops' links listen with the worker's server-side context
    and connect with its client-side one (a client context on the listener failed with
    'IOStream is not idle; cannot convert to SSL' on every ssh and Slurm deployment; the
    asynchronous loops open the same links). The TLS run's weights equal the TCP run's."""
    pytest.importorskip("cryptography")  # Security.temporary makes its certificates with it
    from distributed import Client, LocalCluster
    from distributed.security import Security

    X, y = _data()
    net = ppt.MLP((X.shape[1], 8, 3), hidden="tanh", output="softmax")

    def run(client):
        shards = ppt.enter_data(client, X, y, n_shards=4, workers=list(client.scheduler_info()["workers"])[:2])
        try:
            return ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=6), seed=3, exchange="stream")
        finally:
            ppt.exit_data(shards)

    security = Security.temporary()
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tls://", security=security,
                      dashboard_address=None) as cluster, Client(cluster, security=security, timeout=60) as client:
        assert cluster.scheduler_address.startswith("tls://")
        over_tls = run(client)
    over_tcp = run(threads_client)
    assert over_tls.rounds == over_tcp.rounds == 6
    assert (over_tls.params == over_tcp.params).all()
