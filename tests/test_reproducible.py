"""What a seeded run repeats bit for bit (``ppt.train(reproducible=...)``, ``--reproducible``).

"any-p": every logical shard's sums on their own (all of a worker's shards in one batched pass),
added along the fixed shard tree: the same weights on any number of workers. "same-p": a worker's
rows of a round in one pass, one partial a worker, added along a tree over the workers: the same
weights on the same number of workers, through a lost worker and a resume. The oracle is the
serial path run the same way (``train_serial(..., reproducible=, workers=)``); the per-shard
oracle of the batched pass is the strategy's own ``work`` shard by shard.
"""

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.core import model, tree
from ppt_dask.engine.saving import checkpoint

from conftest import scheduler_keys


def _data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


NET = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax")


# ---- the worker's step, without a cluster ----------------------------------------------------


@pytest.mark.parametrize("strategy", [ppt.Sync(lr=0.1, block=24), ppt.Sync(lr=0.1, block=20), ppt.Sync(lr=0.1),
                                      ppt.PPT(lr=0.1, local_epoch=5)],
                         ids=["block-equal-shares", "block-unequal-shares", "epoch", "ppt"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_slots_batched_sums_are_its_shards_work_added_along_the_tree(strategy, dtype):
    """``slot_sums`` (any-p) computes the slot's shards in one pass; each node is bitwise the
    shards' own ``work`` added by the tree, for blocks of every slot of 1, 2, 3 and 8 workers,
    whatever the rounds walk (the shares of block 20 over 8 shards are 2 and 3 rows)."""
    X, y = _data()
    net = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax", dtype=dtype)
    params = net.init_params(1)
    rows = tree.split_rows(len(X), 8)
    shards = [(np.ascontiguousarray(X[a:b], dtype=dtype), y[a:b]) for a, b in rows]
    strategy = strategy.check([b - a for a, b in rows], seed=3)
    for r in (0, 1, 5):
        leaves = [strategy.work(net, params, shard, s, r) for s, shard in enumerate(shards)]
        for p in (1, 2, 3, 8):
            for a, b in tree.split_shards(8, p):
                nodes = tree.decompose(a, b, 2, 8)
                got = strategy.slot_sums(net, params, shards[a:b], range(a, b), r, nodes, 2, 8)
                for node in nodes:
                    want = tree.evaluate(node, leaves.__getitem__, 2, 8)
                    assert all(g.tobytes() == w.tobytes() for g, w in zip(got[node], want)), (r, p, node)


def test_a_slots_one_pass_is_the_sum_over_all_its_rows():
    """``whole`` (same-p): one pass over the slot's rows of the round, their gradient summed over all of
    them (to rounding) and their stats exactly."""
    X, y = _data()
    params = NET.init_params(0)
    shards = [(X[a:b], y[a:b]) for a, b in tree.split_rows(len(X), 8)]
    strategy = ppt.Sync(lr=0.1, block=40).check([12] * 8)
    (node, (grad, stats)), = strategy.slot_sums(NET, params, shards[2:5], range(2, 5), 1, ((0, 1),), 2, 3,
                                                 whole=True).items()
    parts = [strategy.work(NET, params, shards[s], s, 1) for s in range(2, 5)]
    want = sum(p[1] for p in parts)
    assert node == (0, 1) and stats[1:].tolist() == want[1:].tolist() and stats[2] == 15  # rows wrong, rows
    np.testing.assert_allclose(stats[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(grad, sum(p[0] for p in parts), rtol=1e-12)


def test_blocks_larger_than_the_stacking_limit_take_a_pass_each():
    """Past ``model.STACK_ROWS`` rows a block, a pass each: the same per-block bits, and one_pass adds
    the blocks' sums left to right."""
    net = ppt.MLP((3, 4, 2), dtype="float64")
    rng = np.random.default_rng(0)
    n = model.STACK_ROWS + 1
    blocks = [(rng.standard_normal((n, 3)), rng.integers(0, 2, n)) for _ in range(3)]
    params = net.init_params(0)
    each = [net.loss_grad_stats(params, X, Y) for X, Y in blocks]
    for got, want in zip(model.shard_sums(net, params, blocks), each):
        assert got[0].tobytes() == want[0].tobytes() and got[1].tobytes() == want[1].tobytes()
    total = model.one_pass(net, params, blocks)
    assert total[0].tobytes() == ((each[0][0] + each[1][0]) + each[2][0]).tobytes()


# ---- refusals, before any cluster work ----------------------------------------------------------


@pytest.mark.parametrize("strategy, value, message", [
    (ppt.LocalSGD(lr=0.1, block=8), "same-p", r"^reproducible 'same-p' applies to strategy epoch, block, ppt, "
                                              r"not to strategy local$"),
    (ppt.Average(lr=0.1, block=8), "same-p", r"^reproducible 'same-p' applies to strategy epoch, block, ppt, "
                                             r"not to strategy average$"),
    (ppt.Async(lr=0.1), "any-p", r"^reproducible 'any-p' applies to strategy epoch, block, ppt, average, local, "
                                 r"not to strategy async$"),
    (ppt.Sync(lr=0.1), "some-p", r"^reproducible must be one of \('any-p', 'same-p'\), got 'some-p'$"),
])
def test_a_promise_that_does_not_apply_is_refused_in_one_line(threads_client, strategy, value, message):
    X, y = _data()
    shards = ppt.enter_data(threads_client, X, y, n_shards=4)
    try:
        with pytest.raises(ValueError, match=message):
            ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=1), reproducible=value)
    finally:
        ppt.exit_data(shards)
    assert scheduler_keys(threads_client) == []  # refused before any round was sent


def test_each_strategy_says_what_it_promised(threads_client):
    X, y = _data()
    shards = ppt.enter_data(threads_client, X, y, n_shards=4)
    try:
        said = {name: ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=1)).settings["reproducible"]
                for name, strategy in [("block", ppt.Sync(lr=0.1, block=24)), ("ppt", ppt.PPT(lr=0.1, local_epoch=4)),
                                       ("local", ppt.LocalSGD(lr=0.1, block=8, interval=8)),
                                       ("async", ppt.Async(lr=0.1, block=8))]}
    finally:
        ppt.exit_data(shards)
    assert said == {"block": "same-p", "ppt": "same-p", "local": "any-p", "async": None}


# ---- the promises through a resume ----------------------------------------------------------------


def test_same_p_resumed_from_a_checkpoint_ends_as_one_run_and_the_other_promise_is_refused(client4, workers4,
                                                                                            tmp_path):
    """same-p on 2 workers: 4 rounds, a checkpoint, 4 more resumed, bitwise the serial 8 rounds run the
    same way; a resume under the other promise is refused (its rounds would add otherwise)."""
    X, y = _data()
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=24)
    expected, _ = train_serial(NET, X, y, strategy, rounds=8, n_shards=8, seed=2, reproducible="same-p", workers=2)
    shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:2])
    try:
        ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=1), seed=2, checkpoint_dir=tmp_path)
        with pytest.raises(ValueError, match="belongs to another run; reproducible: checkpoint has 'same-p', "
                                             "this run has 'any-p'"):
            ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=2), seed=2, checkpoint_dir=tmp_path, resume=True,
                      reproducible="any-p")
        resumed = ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=2), seed=2, checkpoint_dir=tmp_path,
                            resume=True)
    finally:
        ppt.exit_data(shards)
    assert [r["round"] for r in resumed.history] == list(range(8))
    assert resumed.params.tobytes() == expected.tobytes()
    assert np.load(tmp_path / checkpoint.FILE)["params"].tobytes() == expected.tobytes()


def test_any_p_resumed_on_another_number_of_workers_ends_as_one_run(client4, workers4, tmp_path):
    """any-p: 4 rounds on 2 workers, resumed on 4 workers for 4 more, bitwise the serial 8 rounds."""
    X, y = _data()
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=24)
    expected, _ = train_serial(NET, X, y, strategy, rounds=8, n_shards=8, seed=2)
    two = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:2])
    ppt.train(NET, two, strategy, ppt.Stop(max_epochs=1), seed=2, checkpoint_dir=tmp_path, reproducible="any-p")
    ppt.exit_data(two)
    four = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4)
    try:
        resumed = ppt.train(NET, four, strategy, ppt.Stop(max_epochs=2), seed=2, checkpoint_dir=tmp_path,
                            resume=True, reproducible="any-p")
    finally:
        ppt.exit_data(four)
    assert resumed.settings["workers"] == 4 and resumed.params.tobytes() == expected.tobytes()


def test_same_p_differs_from_any_p_only_by_rounding(client4, workers4):
    """The two promises compute the same rows and sums (one pass, or shard by shard): the weights
    after a few rounds agree to rounding, and the rounds' counts of wrong rows exactly."""
    X, y = _data()
    strategy = ppt.Sync(lr=0.3, momentum=0.9, block=24)
    shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:2])
    try:
        runs = {promise: ppt.train(NET, shards, strategy, ppt.Stop(max_epochs=2), seed=1, reproducible=promise)
                for promise in ("same-p", "any-p")}
    finally:
        ppt.exit_data(shards)
    same, anyp = runs["same-p"], runs["any-p"]
    np.testing.assert_allclose(same.params, anyp.params, rtol=1e-9, atol=1e-12)
    assert [r["error_rate"] for r in same.history] == [r["error_rate"] for r in anyp.history]


def test_a_strategy_with_a_work_of_its_own_is_run_shard_by_shard():
    """A subclass that computes its own ``work`` (the links-floor probe of ppt_dask.perf.loops, say)
    is not replaced by the batched pass: its shards' work, added along the tree, or left to right
    for a slot's one leaf."""
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Counted(ppt.Sync):
        def work(self, net, params, shard, s, r):
            return np.full(2, float(s)), np.array([0.0, 0.0, 1.0])

    strategy = Counted(block=8).check([4] * 4)
    shards = [(np.zeros((4, 5)), np.zeros(4, int))] * 4
    got = strategy.slot_sums(NET, None, shards, range(4), 0, [(2, 0)], 2, 4)
    assert got[(2, 0)][0].tolist() == [6.0, 6.0] and got[(2, 0)][1][2] == 4
    whole = strategy.slot_sums(NET, None, shards[1:3], range(1, 3), 0, [(0, 1)], 2, 2, whole=True)
    assert whole[(0, 1)][0].tolist() == [3.0, 3.0]
