"""The algorithms of the sources on the real engine: PPT, averaging, async, stopping rule."""

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms import choose
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.core.stopping import ErrorEstimate
from ppt_dask.data import datasets
from ppt_dask.engine.experiments import repeated_splits
from ppt_dask.testing import Slowed


def _data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


NET = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax")


@pytest.mark.parametrize("strategy, exchange", [
    (ppt.PPT(lr=0.5, momentum=0.3, local_epoch=5), "stream"),
    (ppt.Average(lr=0.2, momentum=0.9, block=4, local_epochs=1.0), "stream"),
    (ppt.Average(lr=0.2, momentum=0.9, block=5, interval=7, momentum_policy="average"), "stream"),
    (ppt.Average(lr=0.2, momentum=0.9, block=5, interval=7, momentum_policy="average"), "all"),
    (ppt.Average(lr=0.5, l2=0.7, sample_fraction=0.9, local_epochs=3), "stream"),
], ids=["ppt", "average-reset", "average-momentum", "average-momentum-one-hop", "average-bootstrap"])
def test_bitwise_identical_on_1_2_4_workers_and_serial(client4, workers4, strategy, exchange):
    X, y = _data()
    rounds = 6
    expected, _ = train_serial(NET, X, y, strategy, rounds=rounds, n_shards=8, seed=5)
    for p in (1, 2, 4):
        shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:p])
        epochs = rounds / strategy.check([12] * 8, 5).rounds_per_epoch(len(X))
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=epochs), seed=5, exchange=exchange,
                           reproducible="any-p")
        ppt.exit_data(shards)
        assert result.rounds == rounds and result.settings["exchange"] == exchange
        assert result.params.tobytes() == expected.tobytes(), f"p={p} differs from serial"


def test_ppt_on_replicated_data_draws_from_the_whole_set(client4, workers4):
    X, y = _data()
    strategy = ppt.PPT(lr=0.5, local_epoch=40)  # larger than any shard of 96/4 rows
    expected, _ = train_serial(NET, X, y, strategy, rounds=4, n_shards=4, seed=2, replicate=True)
    for p in (1, 2):
        shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:p], replicate=True)
        assert shards.replicated and shards.n_rows == 96
        assert len({f.key for f in shards.futures}) == p  # one copy per worker, not per shard
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=4 * 160 / 96), seed=2, reproducible="any-p")
        ppt.exit_data(shards)
        assert result.params.tobytes() == expected.tobytes()


def test_ppt_learns_parity(client4, workers4):
    d = datasets.parity(8)
    shards = ppt.enter_data(client4, d.X, d.y, n_shards=2, workers=workers4[:2], replicate=True)
    net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    result = ppt.train(net, shards, ppt.PPT(lr=2.0, momentum=0.9, local_epoch=64),
                       ppt.Stop(max_epochs=3000, target_error=0.0))
    ppt.exit_data(shards)
    assert result.learned and (net.predict(result.params, d.X) == d.y).all()
    assert "verified_error_rate" in result.history[-1]  # the estimate was checked first


def test_async_learns_parity_on_two_worker_processes_within_the_staleness_bound(client4, workers4):
    """The command line's async preset for parity8 (lr 1.0, momentum 0.8, the default bound of
    8). The order in which the loops' gradients arrive differs from run to run, and so does the
    run: at this bound 40 of 40 runs (seeds 0-39, 2026-11-27, idle machine) learned in 31-90
    epochs; at a bound of 2, which this test had, 29 of 30 in 30-128 and one not in 3000 (6% and
    9% of the two workers' gradients dropped: a plateau of parity's, not a left-out worker), and
    6 of 84 not within 1500-3000 on 11-27. A second run, seeded otherwise, is allowed: both
    failing fails the test."""
    d = datasets.parity(8)
    shards = ppt.enter_data(client4, d.X, d.y, n_shards=4, workers=workers4[:2])
    net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    strategy = ppt.Async(lr=1.0, momentum=0.8)
    assert strategy.staleness == 8
    for seed in (0, 1):
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=3000, target_error=0.0), seed=seed)
        if result.learned:
            break
    ppt.exit_data(shards)
    assert result.learned and (net.predict(result.params, d.X) == d.y).all()
    assert result.settings["exchange"] == "stream"
    assert sum(r["applied"] for r in result.history) > result.rounds / 4  # each took the other's gradients
    # both loops made updates: on two cores shared with the head and two idle workers, one
    # loop made 23% of them in a run (85 of 369), so an eighth each, not a half
    by_loop = [sum(n) for n in zip(*(r["updates"] for r in result.history))]
    assert len(by_loop) == 2 and all(n > result.rounds / 8 for n in by_loop), (by_loop, result.rounds)
    assert {r["worker"] for r in result.history} == {0, 1}  # either replica is reported
    checked = [int(r["epoch"]) for r in result.history if "verified_error_rate" in r]
    assert checked and len(checked) == len(set(checked))  # verified at most once an epoch


def test_a_slow_worker_does_not_stall_the_others(client4, workers4):
    """Worker 0's shards sleep 0.4 s a step (the ``Slowed`` test hook): worker 1 keeps making
    updates meanwhile, never waits for worker 0, and drops worker 0's gradients, which reach it
    too stale; worker 0 takes all of worker 1's, which are fresh to it."""
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    strategy = Slowed(ppt.Async(lr=0.2, staleness=3), seconds=0.4, shards=(0, 1))
    seen = []  # worker 0's steps in each round read

    def three_slow_steps(record) -> bool:
        seen.append(record["updates"][0])
        return sum(seen) >= 3
    with pytest.warns(ppt.StaleGradientsWarning, match=r"^worker slot 0 had \d+% of its gradients dropped"):
        result = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=20_000), on_round=three_slow_steps)
    rows = result.breakdown()
    ppt.exit_data(shards)
    by_worker = [sum(r["updates"][w] for r in result.history) for w in (0, 1)]
    assert result.stopped_because == "stopped" and by_worker[0] == 3
    # the fast worker went on while the slow one computed: counted in steps, against the slow
    # worker's own (the applied gradients below say the same step by step), not in steps per
    # second of this machine
    assert by_worker[1] > 5 * by_worker[0], by_worker
    assert all(row["idle"] == 0 for row in rows)  # no loop ever waited for another
    # a round here is one step (Async's q is 1 on 96 rows), so a round with worker 0's step holds
    # that step's own figures: ``applied`` is the fast worker's gradients that reached worker 0
    # while it computed, in order, the newest telling how far the fast worker's clock is past
    # the one worker 0 computed at: one fewer than ``applied``. Worker 0 drops its gradient when
    # that is over the bound of 3, that is when it applied 5 or more (normally 600-900 do). The
    # fast worker's steps the head read between two slow steps are no oracle: the head reads
    # behind the loops by up to a mailbox's window (a CI run failed a check on them: a slow step
    # with 5 or more between was kept; its ``applied`` was not printed, it is now)
    assert all(sum(r["updates"]) == 1 for r in result.history)
    slow = [r for r in result.history if r["updates"][0]]
    stale = [r for r in slow if r["applied"] >= 5]
    assert len(stale) >= 2, [(r["round"], r["applied"], r["dropped"]) for r in slow]
    assert all(r["dropped"] == 1 for r in stale), [(r["round"], r["applied"], r["dropped"]) for r in slow]
    assert all(r["dropped"] == 0 for r in result.history if not r["updates"][0])  # nothing else
    assert sum(r["dropped"] for r in result.history) <= by_worker[0]
    # each slot's share of its steps dropped, the run's summary and its warning: worker 0's
    # counted here from the rounds of its steps (a round is one step)
    share = sum(r["dropped"] for r in slow) / len(slow)
    assert result.dropped_shares() == result.summary()["dropped_shares"] == [share, 0.0]


def test_restarts_try_new_random_weights(client4, workers4):
    d = datasets.parity(8)
    shards = ppt.enter_data(client4, d.X, d.y, n_shards=2, workers=workers4[:2])
    net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    result = ppt.train(net, shards, ppt.Sync(lr=0.01), ppt.Stop(max_epochs=3, target_error=0.0, restarts=2))
    ppt.exit_data(shards)
    assert not result.learned and result.settings["tries"] == 3
    assert [r["try"] for r in result.history] == [0] * 3 + [1] * 3 + [2] * 3
    assert result.history[3]["loss"] != result.history[0]["loss"]  # new weights


def test_target_is_verified_on_the_test_set(client4, workers4):
    X, y = _data(200)
    shards = ppt.enter_data(client4, X[:150], y[:150], n_shards=4, workers=workers4[:2])
    result = ppt.train(NET, shards, ppt.Sync(lr=0.5, momentum=0.9, block=30),
                       ppt.Stop(max_epochs=200, target_error=0.2, test=(X[150:], y[150:])))
    ppt.exit_data(shards)
    assert result.learned
    assert result.history[-1]["verified_error_rate"] <= 0.2
    assert result.test_accuracy == pytest.approx(1 - result.history[-1]["verified_error_rate"])


def test_error_estimate_window():
    e = ErrorEstimate(window_patterns=100)
    for wrong in (50, 0, 0):
        e.add(wrong, 50)
    assert e.full and e.rate == 0.0
    e.add(10, 50)
    assert e.rate == pytest.approx(10 / 100)


def test_repeated_splits_report_mean_and_spread(client4, workers4):
    d = datasets.digits5000()
    X, y = d.X[::10], d.y[::10]  # 500 digits: a quick run
    net = ppt.MLP((400, 25, 10), hidden="sigmoid", output="softmax")
    out = repeated_splits(client4, net, X, y, ppt.Average(lr=2.0, l2=0.6987, sample_fraction=0.9,
                                                          local_epochs=5),
                          ppt.Stop(), n_splits=3, checkpoints=(10, 40), workers=workers4[:2])
    assert out["accuracy"].shape == (3, 2) and len(out["wall_seconds"]) == 3
    assert out["mean"][1] > 0.6 and np.all(out["std"] > 0)  # splits differ
    assert out["mean"][1] > out["mean"][0]  # accuracy at epoch 40 from weights pulled then


@pytest.mark.parametrize("make, match", [
    (lambda: ppt.PPT(local_epoch=0), "local_epoch must be an integer >= 1"),
    (lambda: ppt.Average(interval=0), "interval must be an integer >= 1"),
    (lambda: ppt.Average(interval=-3), "interval"),
    (lambda: ppt.Average(local_epochs=0), "local_epochs must be > 0"),
    (lambda: ppt.Average(momentum_policy="local"), "momentum_policy must be one of"),
    (lambda: ppt.Async(staleness=-1), "staleness must be an integer >= 0"),
    (lambda: choose.make("hogwild"), "unknown strategy 'hogwild'"),
])
def test_bad_strategy_parameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_local_epoch_larger_than_a_shard_is_refused_before_any_round(client4, workers4):
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    with pytest.raises(ValueError, match=r"local_epoch \(30\) is larger than the smallest shard \(24 rows\)"):
        ppt.train(NET, shards, ppt.PPT(local_epoch=30))
    ppt.exit_data(shards)


def test_a_run_continued_from_its_state_equals_one_run(client4, workers4):
    """Momentum survives: 3 + 3 rounds from Result.state give the weights of 6 rounds."""
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=24)
    whole = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=6 * 24 / 96), seed=4)
    first = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=3 * 24 / 96), seed=4)
    assert first.state.round == 2 and first.state.opt_state["velocity"].any()
    second = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=3 * 24 / 96), initial_state=first.state)
    ppt.exit_data(shards)
    assert [r["round"] for r in second.history] == [3, 4, 5]
    assert second.params.tobytes() == whole.params.tobytes()


def test_async_verifies_at_most_once_an_epoch(client4, workers4):
    """A test set the network cannot pass (flipped labels) while its training error is under
    the target: every verification fails, and the loop must still check once an epoch at most."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 4))
    y = (X[:, 0] > 0).astype(float)  # learnable at once; the flipped labels never pass
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    net = ppt.MLP((4, 8, 1), hidden="tanh", output="sigmoid")
    result = ppt.train(net, shards, ppt.Async(lr=0.5, staleness=1),
                       ppt.Stop(max_epochs=12, target_error=0.3, window_epochs=1, test=(X, 1 - y)))
    ppt.exit_data(shards)
    checked = [int(r["epoch"]) for r in result.history if "verified_error_rate" in r]
    assert not result.learned and len(checked) >= 3, checked
    assert len(checked) == len(set(checked)), checked  # one check per epoch at most
