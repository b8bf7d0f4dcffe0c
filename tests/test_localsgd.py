"""The local strategy: its math against a hand-written oracle, its graph against the serial path."""

import dataclasses
import os
import signal
import time

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms import localsgd, serial
from ppt_dask.engine import roundloop
from ppt_dask.engine.saving import checkpoint
from ppt_dask.testing import Slowed

from conftest import scheduler_keys


def _data(n=192, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


NET = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax", dtype="float64")
STRATEGY = ppt.LocalSGD(lr=0.2, momentum=0.9, block=6, interval=12, pull=0.5)
SMOOTHED = dataclasses.replace(STRATEGY, ema=0.5)  # reports the running mean of the averages
# CoCoD-SGD's correction: from where a shard started its last round, the whole gap (the
# settings the command line chooses for 3 or more workers have this form: one step a round)
COMPENSATED = dataclasses.replace(SMOOTHED, compensate=True, pull=1.0)


def _oracle(net, X, y, n_shards, block, steps, lr, momentum, pull, rounds, params, ema=0.0, compensate=False):
    """The algorithm written out from its description, with the network's own gradient; the
    reported model: the last average, or the running mean of the averages with ``ema``; with
    ``compensate`` the gap to the average of round r - 2 is taken from where the shard started
    round r - 1 (CoCoD-SGD)."""
    rows = np.array_split(np.arange(len(X)), n_shards)
    x = [params.copy() for _ in rows]
    v = [np.zeros_like(params) for _ in rows]
    ends, starts, averages = {}, {}, {}
    for r in range(rounds):
        for s, idx in enumerate(rows):
            if r >= 2:
                x[s] = x[s] + pull * (averages[r - 2] - (starts[r - 1, s] if compensate else ends[r - 2, s]))
            starts[r, s] = x[s]
            for i in range(steps):
                start = ((r * steps + i) * block) % len(idx)
                batch = idx[start:start + block]
                _, grad, _ = net.loss_and_grad(x[s], X[batch], y[batch])
                v[s] = momentum * v[s] - lr * grad / len(batch)
                x[s] = x[s] + v[s]
            ends[r, s] = x[s]
        weights = [steps * block for _ in rows]  # every shard sees k blocks a round
        averages[r] = sum(w * ends[r, s] for s, w in enumerate(weights)) / sum(weights)
    mean = averages[0]
    for r in range(1, rounds):
        mean = ema * mean + (1 - ema) * averages[r]
    return mean


@pytest.mark.parametrize("strategy", [STRATEGY, SMOOTHED, COMPENSATED, dataclasses.replace(COMPENSATED, pull=0.5)],
                         ids=["last-average", "running-mean", "compensated", "compensated-half-pull"])
def test_serial_matches_the_algorithm_written_out(strategy):
    X, y = _data()
    start = NET.init_params(1)
    got, history = serial.train_serial(NET, X, y, strategy, rounds=7, n_shards=4, params=start)
    want = _oracle(NET, X, y, 4, 6, 2, 0.2, 0.9, strategy.pull, 7, start, strategy.ema, strategy.compensate)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert len(history) == 7 and history[-1]["loss"] < history[0]["loss"]


@pytest.mark.parametrize("compensate", [False, True])
def test_one_shard_is_plain_momentum_sgd(compensate):
    """With one shard the average is the shard itself: the pull changes nothing, compensated or not."""
    X, y = _data()
    start = NET.init_params(2)
    a, _ = serial.train_serial(NET, X, y, ppt.LocalSGD(lr=0.1, momentum=0.9, block=8, interval=16, pull=1.0,
                                                       compensate=compensate), rounds=6, params=start)
    b, _ = serial.train_serial(NET, X, y, ppt.Sync(lr=0.1, momentum=0.9, block=8), rounds=12, params=start)
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_compensation_keeps_the_mean_and_leaves_only_the_last_rounds_offsets():
    """Compensated, a shard's offset from the shards' mean at the start of a round is its own
    last round's (the offsets of earlier rounds are closed); the plain correction of the same
    pull leaves some of them. Checked on the state the serial path keeps: the shards' mean is
    the same under both, their spread smaller compensated."""
    X, y = _data()
    spreads = {}
    for strategy in (dataclasses.replace(STRATEGY, pull=1.0), COMPENSATED):
        shards = [(X[i::4], y[i::4]) for i in range(4)]
        checked = strategy.check([len(sx) for sx, _ in shards])
        state, _ = localsgd.train_serial(NET, shards, checked, checked.init(NET.init_params(5)), 12)
        models = [m.params for m in state.opt_state["models"].values()]
        spreads[strategy.compensate] = np.mean([np.linalg.norm(m - np.mean(models, axis=0)) for m in models])
    assert spreads[True] < spreads[False]


ADAM = dataclasses.replace(STRATEGY, solver="adam", lr=0.01, shuffle=True)  # PPTClassifier's on small sets


def test_one_shard_with_adam_is_adam_written_out():
    """Adam's local steps against Kingma & Ba's update written out (with the bias correction
    folded into the step size, as their section 2 and scikit-learn's AdamOptimizer do)."""
    X, y = _data()
    start = NET.init_params(4)
    strategy = ppt.LocalSGD(lr=0.01, momentum=0.9, l2=0.01, block=8, interval=16, solver="adam")
    got, _ = serial.train_serial(NET, X, y, strategy, rounds=6, params=start)
    p, m, v, mask = start.copy(), np.zeros_like(start), np.zeros_like(start), NET.weight_mask()
    for t in range(1, 13):
        rows = slice(((t - 1) * 8) % len(X), ((t - 1) * 8) % len(X) + 8)
        _, grad, _ = NET.loss_and_grad(p, X[rows], y[rows])
        g = (grad + 0.01 * mask * p) / 8
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        p = p - 0.01 * np.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(got, p, rtol=1e-10, atol=1e-12)


def test_a_shuffled_walk_visits_every_row_once_a_pass_in_a_new_order():
    strategy = dataclasses.replace(ADAM, block=7).check([30], seed=5)
    walk = strategy._walk(30, 0)
    rows = np.concatenate([walk(i) for i in range(30)])  # 7 passes of 30 rows in steps of 7
    passes = rows.reshape(7, 30)
    assert all(sorted(p.tolist()) == list(range(30)) for p in passes)
    assert len({tuple(p) for p in passes}) == 7  # a new order each pass
    for k, order in enumerate(passes):  # pass k walks the permutation drawn from (seed, shard, k)
        assert np.array_equal(order, np.random.default_rng([5, 0, k]).permutation(30))
    again = dataclasses.replace(ADAM, block=7).check([30], seed=5)._walk(30, 0)
    assert np.array_equal(np.concatenate([again(i) for i in range(30)]), rows)  # seeded: the same


@pytest.mark.parametrize("bad, match", [
    (dict(solver="lbfgs"), "solver must be 'sgd' or 'adam'"), (dict(shuffle=1), "shuffle must be True or False"),
    (dict(pull=0), "pull must be in"), (dict(pull=1.5), "pull must be in"),
    (dict(block=0), "block"), (dict(interval=-3), "interval"),
    (dict(ema=1.0), "ema must be in"), (dict(ema=-0.1), "ema must be in"), (dict(ema=True), "ema must be in"),
    (dict(compensate="yes"), "compensate must be True or False"),
])
def test_bad_parameters_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        ppt.LocalSGD(**bad)


# the local strategy's two round graphs: one long task per worker (the default), and one task
# per worker per round
EXCHANGES = [("auto", "stream"), ("all", "overlap")]


@pytest.mark.parametrize("strategy", [SMOOTHED, COMPENSATED], ids=["plain", "compensated"])
@pytest.mark.parametrize("exchange, used", EXCHANGES)
def test_on_1_2_4_worker_processes_bitwise_as_serial(client4, workers4, exchange, used, strategy):
    X, y = _data()
    rounds = 9
    expected, history = serial.train_serial(NET, X, y, strategy, rounds=rounds, n_shards=8, seed=3)
    epochs = rounds / strategy.check([24] * 8).rounds_per_epoch(len(X))
    for p in (1, 2, 4):
        shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:p])
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=epochs), seed=3, exchange=exchange)
        ppt.exit_data(shards)
        assert result.rounds == rounds and result.settings["exchange"] == used
        assert result.params.tobytes() == expected.tobytes(), f"p={p} differs from serial"
        assert [h["loss"] for h in result.history] == [h["loss"] for h in history]
    assert scheduler_keys(client4) == []  # nothing left behind on the scheduler


def test_adam_with_shuffled_passes_on_2_worker_processes_bitwise_as_serial(client4, workers4):
    X, y = _data()
    expected, history = serial.train_serial(NET, X, y, ADAM, rounds=7, n_shards=4, seed=3)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    result = ppt.train(NET, shards, ADAM, ppt.Stop(max_epochs=7 / ADAM.check([48] * 4).rounds_per_epoch(len(X))),
                       seed=3)
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()
    assert [h["loss"] for h in result.history] == [h["loss"] for h in history]


@pytest.mark.parametrize("exchange, used", EXCHANGES)
def test_on_threads_bitwise_as_serial(threads_client, exchange, used):
    X, y = _data()
    expected, _ = serial.train_serial(NET, X, y, STRATEGY, rounds=5, n_shards=4)
    shards = ppt.enter_data(threads_client, X, y, n_shards=4)
    epochs = 5 / STRATEGY.check([48] * 4).rounds_per_epoch(len(X))
    result = ppt.train(NET, shards, STRATEGY, ppt.Stop(max_epochs=epochs), exchange=exchange)
    assert result.settings["exchange"] == used
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()


def test_other_exchanges_are_refused_before_any_work(client4, workers4):
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    try:
        with pytest.raises(ValueError, match="exchange 'tree' applies to strategy epoch.*not to strategy local"):
            ppt.train(NET, shards, STRATEGY, ppt.Stop(max_epochs=1), exchange="tree")
    finally:
        ppt.exit_data(shards)


@pytest.mark.parametrize("exchange, compensate, every", [("auto", False, 5), ("all", False, 5), ("auto", True, 5),
                                                    ("auto", True, None)])
def test_a_worker_killed_mid_run_ends_bitwise_as_undisturbed(client2, exchange, compensate, every):
    X, y = _data(400)
    local = ppt.LocalSGD(lr=0.1, momentum=0.9, block=10, interval=20, ema=0.5, compensate=compensate,
                         pull=1.0 if compensate else 0.5)
    strategy = Slowed(local, seconds=0.01)
    rounds = 40
    expected, _ = serial.train_serial(NET, X, y, strategy.inner, rounds=rounds, n_shards=4, seed=1)
    address = ppt.cluster.worker_addresses(client2)[1]
    pid = client2.run(os.getpid, workers=[address])[address]
    killed = {}

    # the default (every None) keeps its first copy after round KEEP_ROUNDS - 1 and its next not
    # before round 2 KEEP_ROUNDS - 1: a kill between them rolls back to the first
    first = roundloop.KEEP_ROUNDS - 1
    at = 17 if every else first + 6
    assert every or first < at < 2 * roundloop.KEEP_ROUNDS - 1 and at < rounds

    def progress(record):
        if record["round"] == at and not killed:
            os.kill(pid, signal.SIGKILL)
            killed["at"] = time.perf_counter()

    shards = ppt.enter_data(client2, X, y, n_shards=4)
    epochs = rounds / strategy.check([100] * 4, 1).rounds_per_epoch(len(X))
    try:
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=epochs), seed=1,
                           checkpoint_every=every, progress=progress, exchange=exchange)
    finally:
        ppt.exit_data(shards)
    assert killed and result.settings["recoveries"] >= 1
    if every is None:  # the shards' models went with the worker: back to the head's first copy
        assert result.settings["events"][0]["rolled_back_to"] == first
    assert [r["round"] for r in result.history] == list(range(rounds))  # replayed, no gaps
    assert result.params.tobytes() == expected.tobytes()


@pytest.mark.parametrize("exchange, strategy", [("auto", SMOOTHED), ("all", SMOOTHED), ("auto", COMPENSATED)],
                         ids=["stream", "all", "stream-compensated"])
def test_checkpoint_and_resume_end_bitwise_as_one_run(client4, workers4, tmp_path, exchange, strategy):
    X, y = _data()
    per_epoch = strategy.check([48] * 4).rounds_per_epoch(len(X))
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    try:
        whole = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=12 / per_epoch), exchange="all")
        ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=6 / per_epoch), checkpoint_dir=tmp_path,
                  checkpoint_every=3, exchange=exchange)
        saved = np.load(tmp_path / checkpoint.FILE)
        assert any(name.startswith("local.") for name in saved.files)  # every shard's own model
        assert "local.mean" in saved.files  # and the running mean the reported model continues
        resumed = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=12 / per_epoch),
                            checkpoint_dir=tmp_path, resume=True, exchange=exchange)
    finally:
        ppt.exit_data(shards)
    assert resumed.history[0]["round"] == 0 and resumed.rounds == 12
    assert resumed.params.tobytes() == whole.params.tobytes()


@pytest.mark.parametrize("strategy", [SMOOTHED, dataclasses.replace(SMOOTHED, solver="adam", lr=0.01), COMPENSATED],
                         ids=["sgd", "adam", "compensated"])
def test_shard_models_round_trip_through_a_checkpoint(tmp_path, strategy):
    X, y = _data()
    state, _ = localsgd.train_serial(NET, [(X[:96], y[:96]), (X[96:], y[96:])], strategy.check([96, 96]),
                                     strategy.init(NET.init_params(0)), 3)
    checkpoint.save(tmp_path, state, round_index=2, attempt=0, history=[], meta={"m": 1})
    back = checkpoint.load(tmp_path, {"m": 1})["state"]
    assert back.params.tobytes() == state.params.tobytes()
    for s, model in state.opt_state["models"].items():
        other = back.opt_state["models"][s]
        assert other.params.tobytes() == model.params.tobytes()
        assert other.velocity.tobytes() == model.velocity.tobytes()
        assert [a.tobytes() for a in other.sent] == [a.tobytes() for a in model.sent]
        assert other.steps == model.steps and (other.second is None) == (model.second is None)
        assert model.second is None or other.second.tobytes() == model.second.tobytes()
    assert sorted(back.opt_state["averages"]) == [1, 2]
    assert back.opt_state["mean"].tobytes() == state.opt_state["mean"].tobytes()
