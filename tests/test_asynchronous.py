"""The asynchronous strategy: a replica's steps worked by hand, its mailbox, and runs on worker
processes against the serial path (one worker), with checkpoints and the time breakdown."""

import asyncio
import json

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.asynchronous import (
    Gradient,
    Replica,
    dropped_shares,
    left_out,
    staleness,
    step_gradient,
    train_serial,
)
from ppt_dask.core import tree
from ppt_dask.engine.rounds import streamasync
from ppt_dask.engine.saving import checkpoint
from ppt_dask.engine.wire import mailbox
from ppt_dask.observe.breakdown import PHASES
from ppt_dask.testing import Slowed

NET = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax")


def _data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


def _shards(X, y, n_shards):
    return [(X[a:b], y[a:b]) for a, b in tree.split_rows(len(X), n_shards)]


# -- the math, by hand --

def test_staleness_counts_the_gradients_the_sender_had_not_taken():
    assert staleness({0: 5, 1: 3}, {0: 2, 1: 3}) == 3  # three of slot 0's steps since
    assert staleness({0: 5, 1: 3, 2: 1}, {0: 6, 1: 9}) == 1  # ahead on 0 and 1; slot 2's one step
    assert staleness({0: 1}, {}) == 1


def test_dropped_shares_are_each_slots_dropped_steps_over_its_steps_and_name_the_left_out():
    """By hand: slot 0 stepped 4 + 1 times and had 1 dropped, slot 1 stepped 2 times, both dropped."""
    rounds = [{"updates": [4, 1], "dropped_by": [1, 1]}, {"updates": [1, 1], "dropped_by": [0, 1]},
              {"loss": 0.5}]  # a record without the fields (a synchronous run's) counts for nothing
    assert dropped_shares(rounds) == [0.2, 1.0]
    assert dropped_shares([{"loss": 0.5}]) is None
    assert dropped_shares([{"updates": [0, 3], "dropped_by": [0, 0]}]) == [0.0, 0.0]  # no steps: none dropped
    assert left_out([0.2, 0.49], "staleness=2") is None  # under a half: not left out
    line = left_out([0.5, 1.0], "--staleness 2")
    assert line.startswith("worker slot 0 and worker slot 1 had 50%, 100% of their gradients dropped")
    assert "more than --staleness 2 steps behind" in line and "\n" not in line
    assert left_out(None, "staleness=8") is None


def test_a_replica_takes_every_gradient_that_arrives_and_drops_its_own_when_all_others_are_past_it():
    """lr 0.5, momentum 0.5, one weight and one bias of a linear 1-1 network, by hand."""
    net = ppt.MLP((1, 1), output="linear")
    strategy = ppt.Async(lr=0.5, momentum=0.5, staleness=1).check([4, 4])
    a = Replica(strategy, net, strategy.init(np.zeros(2)), slot=0)
    sent = a.own(np.array([4.0, 2.0]), np.array([1.0, 0.0, 2.0]), computed_at={})  # mean gradient [2, 1]
    # v = -0.5 * [2, 1] = [-1, -0.5]; x = v
    assert a.state.params.tolist() == [-1.0, -0.5] and a.clock == {0: 1}
    assert (sent.slot, sent.clock, sent.count) == (0, {}, 2.0)
    assert a.take(Gradient(1, {}, np.array([1.0, 1.0]), 1.0)) == 1  # computed before a's step
    # v = 0.5 * [-1, -0.5] - 0.5 * [1, 1] = [-1, -0.75]; x = [-2, -1.25]
    assert a.state.params.tolist() == [-2.0, -1.25] and a.clock == {0: 1, 1: 1}
    assert a.take(Gradient(1, {0: 1, 1: 1}, np.array([2.0, 0.0]), 1.0)) == 0  # computed after it
    # v = 0.5 * [-1, -0.75] - 0.5 * [2, 0] = [-1.5, -0.375]; x = [-3.5, -1.625]
    assert a.state.params.tolist() == [-3.5, -1.625] and a.clock == {0: 1, 1: 2}
    assert a.heard == {1: {0: 1, 1: 2}}  # the newest clock of slot 1's replica a has heard of
    assert a.take(Gradient(1, {0: 1, 1: 5}, np.zeros(2), 1.0)) == 0  # slot 1 is 4 of its own steps on
    # v = [-0.75, -0.1875]; x = [-4.25, -1.8125]
    assert a.state.params.tolist() == [-4.25, -1.8125] and a.heard == {1: {0: 1, 1: 6}}
    # a gradient of a's computed at {0: 1, 1: 2}: slot 1 has taken 4 more since, over the bound 1
    assert a.own(np.array([8.0, 8.0]), np.array([0.0, 0.0, 1.0]), computed_at={0: 1, 1: 2}) is None
    assert a.state.params.tolist() == [-4.25, -1.8125]  # not applied here either
    assert a.dropped == 1 and a.clock[0] == 1  # not applied here either
    assert a.own(np.zeros(2), np.array([0.0, 0.0, 1.0]), computed_at=dict(a.clock)) is not None
    assert a.clock[0] == 2


def test_a_step_takes_the_block_split_over_the_workers_shards_in_one_pass():
    X, y = _data(30)
    shards = _shards(X, y, 3)  # 10 rows each
    params = NET.init_params(0)
    for block, step, rows in [(6, 0, [0, 1, 10, 11, 20, 21]), (6, 1, [2, 3, 12, 13, 22, 23]),
                              (4, 1, [1, 11, 22, 23]), (None, 4, list(range(10, 20)))]:
        strategy = ppt.Async(block=block).check([10] * 3)
        grad, stats = step_gradient(strategy, NET, params, shards, (0, 1, 2), step)
        want_grad, want_stats = NET.loss_grad_stats(params, X[rows], y[rows])
        assert np.allclose(grad, want_grad, rtol=1e-12, atol=1e-14) and stats.tolist() == want_stats.tolist()


def test_a_round_is_about_a_thousand_patterns_of_updates_and_at_least_a_quarter_epoch():
    strategy = ppt.Async(block=100).check([7500] * 8)
    assert strategy.updates_per_round() == 10 and strategy.rounds_per_epoch(60000) == 60
    tiny = ppt.Async().check([64] * 4)  # an update is a whole shard: 64 patterns
    assert tiny.updates_per_round() == 1 and tiny.rounds_per_epoch(256) == 4
    with pytest.raises(ValueError, match="needs disjoint shards"):
        ppt.Async(block=4).check([8, 8], replicated=True)
    with pytest.raises(ValueError, match=r"block \(40\) is larger than the training set \(16 rows\)"):
        ppt.Async(block=40).check([8, 8])


# -- the mailbox, without a cluster --

def test_the_loop_runs_ahead_of_what_the_head_read_and_the_box_keeps_what_the_head_asks_for():
    box = streamasync.AsyncBox("test-async-box", first=0, ahead=4)
    loop = asyncio.new_event_loop()  # the worker's event loop, where the head's calls run
    try:
        for t in range(4):
            box.wait_room(t, timeout=1)
            box.keep(t, ([0.0, 0.0, 1.0], (0, 0, 0), t), f"state {t}", (0.0, {}, 0))
        with pytest.raises(TimeoutError, match="the head read no round"):
            box.wait_room(4, timeout=0.05)
        reply = loop.run_until_complete(box.since(2, keep=[0]))  # read up to 1, of which 0 is still wanted
        assert [t for t, _log, _timing in reply["steps"]] == [2, 3]
        assert sorted(box._kept) == [0, 2, 3]
        assert loop.run_until_complete(box.state(0)) == "state 0"
        box.wait_room(5, timeout=1)  # room: four steps past the first unread one
        with pytest.raises(TimeoutError):
            loop.run_until_complete(box.since(4, timeout=0.05))  # nothing new yet
    finally:
        box.stop()
        loop.close()
    assert "test-async-box" not in mailbox.BOXES


# -- runs on a real cluster --

def test_on_one_worker_a_run_is_the_serial_path_bitwise(client4, workers4):
    """With one worker no gradient is stale: the loop's steps are train_serial's, grouped
    into the head's rounds, whatever the head reads when."""
    X, y = _data()
    strategy = ppt.Async(lr=0.3, momentum=0.5, block=12)
    checked = strategy.check([24] * 4, 3)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:1])
    try:
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=5), seed=3)
    finally:
        ppt.exit_data(shards)
    q = checked.updates_per_round()
    assert q == 2 and result.rounds == 5 * 96 // (12 * q) and result.settings["exchange"] == "stream"
    want, stats = train_serial(NET, _shards(X, y, 4), checked, checked.init(NET.init_params(3)), result.rounds * q)
    assert result.params.tobytes() == want.params.tobytes()
    assert result.state.opt_state["velocity"].tobytes() == want.opt_state["velocity"].tobytes()
    assert [r["loss"] for r in result.history] == [(stats[2 * r][0] + stats[2 * r + 1][0]) / 24
                                                   for r in range(result.rounds)]
    assert all(r["updates"] == [2] and r["worker"] == 0 and r["applied"] == r["dropped"] == 0
               for r in result.history)


def test_checkpoint_and_resume_go_on_from_the_round_they_hold(client4, workers4, tmp_path):
    """One worker: stopped at round 6 with a checkpoint and resumed, the run ends with the
    bits of the uninterrupted one. Two workers: the resumed run continues the round numbers
    from the checkpoint's replica and its history."""
    X, y = _data()
    strategy = ppt.Async(lr=0.3, momentum=0.5, block=12)
    stop = ppt.Stop(max_epochs=5)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:1])
    try:
        whole = ppt.train(NET, shards, strategy, stop, seed=2)
        cut = ppt.train(NET, shards, strategy, stop, seed=2, checkpoint_dir=tmp_path / "one",
                        on_round=lambda record: record["round"] == 6)
        assert cut.rounds == 7 and checkpoint.load(tmp_path / "one", _meta(strategy, shards))["round"] == 6
        resumed = ppt.train(NET, shards, strategy, stop, seed=2, checkpoint_dir=tmp_path / "one", resume=True)
    finally:
        ppt.exit_data(shards)
    assert [r["round"] for r in resumed.history] == list(range(whole.rounds))
    assert resumed.params.tobytes() == whole.params.tobytes()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    try:
        ppt.train(NET, shards, strategy, stop, seed=2, checkpoint_dir=tmp_path / "two",
                  on_round=lambda record: record["round"] == 6)
        saved = checkpoint.load(tmp_path / "two", _meta(strategy, shards))
        resumed = ppt.train(NET, shards, strategy, stop, seed=2, checkpoint_dir=tmp_path / "two", resume=True)
    finally:
        ppt.exit_data(shards)
    assert [r["round"] for r in resumed.history] == list(range(whole.rounds))
    assert resumed.history[:7] == saved["history"]
    assert resumed.train_error_rate < resumed.history[0]["error_rate"]  # it went on learning


def _meta(strategy, shards):
    """What a checkpoint of these runs says about them (the trainer's own description)."""
    checked = strategy.check([i.stop - i.start for i in shards.info], 2)
    return {"network": list(NET.sizes), "hidden": NET.hidden, "output": NET.output, "loss": NET.loss,
            "dtype": NET.dtype, "strategy": repr(checked), "rows": shards.n_rows, "shards": shards.n_shards,
            "fan_in": 2, "seed": 2}


def test_the_breakdown_has_a_row_per_round_and_no_loop_ever_waits_for_another(client4, workers4, tmp_path):
    X, y = _data(480)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    slowed = Slowed(ppt.Async(lr=0.2, momentum=0.5, block=20), seconds=0.002)  # per shard a step
    try:
        result = ppt.train(NET, shards, slowed, ppt.Stop(max_epochs=2))
    finally:
        ppt.exit_data(shards)
    rows = result.breakdown()
    q = slowed.check([120] * 4).updates_per_round()
    assert [(r["gen"], r["round"]) for r in rows] == [(0, r) for r in range(result.rounds)]
    for row, record in zip(rows, result.history):
        assert row["streamed"] and row["idle"] == 0 and row["scheduler"] == 0  # no barrier, no hop
        assert row["workers"] == sum(1 for n in record["updates"] if n)  # a timing per loop that stepped
        assert sum(record["updates"]) == q and row["patterns"] == 20 * q
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"])
        assert row["gradient"] >= 0.004 * q / row["workers"] * 0.99  # 2 ms per shard, two shards a step
    assert sum(r["applied"] for r in result.history) > 0  # the loops took each other's gradients
    summary = result.diagnostics.summary()
    assert summary["rounds"] == result.rounds and summary["streamed"]
    trace = result.diagnostics.trace()["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X" and e["cat"] == "streamed round"]
    assert {e["args"]["round"] for e in spans if e["name"] == "gradient"} == set(range(result.rounds))
    result.report(tmp_path / "async.html")
    assert "ppt-curves" in (tmp_path / "async.html").read_text()
    json.dumps(list(result.history))  # the records are plain data (they go into checkpoints)
