"""The engine end to end on real LocalClusters: placement, rounds, determinism."""

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.algorithms.serial import train_serial
from ppt_dask.data import datasets, files
from ppt_dask.engine.result import Outcome

from conftest import scheduler_keys


def _data(n=96, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64) + (X[:, 3] > 1)
    return X, y


def test_shards_are_placed_in_contiguous_blocks_and_released(client4, workers4):
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:2])
    held = shards.who_has()  # the scheduler's own view
    assert all(held[s] == (workers4[0],) for s in range(4))
    assert all(held[s] == (workers4[1],) for s in range(4, 8))
    assert [i.stop - i.start for i in shards.info] == [12] * 8
    ppt.exit_data(shards)
    assert scheduler_keys(client4) == []


def test_a_round_never_moves_shards(client4, workers4):
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    before = shards.who_has()
    net = ppt.MLP((5, 4, 3), hidden="tanh", output="softmax")
    ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3))
    assert shards.who_has() == before  # still one copy each, where it was placed
    ppt.exit_data(shards)


@pytest.mark.parametrize("exchange", ["stream", "all"])
@pytest.mark.parametrize("strategy", [ppt.Sync(lr=0.5, momentum=0.9, l2=0.01),
                                      ppt.Sync(lr=0.3, momentum=0.5, block=24)],
                         ids=["epoch", "block"])
def test_bitwise_identical_on_1_2_4_workers_and_serial(client4, workers4, strategy, exchange):
    """reproducible="any-p": streamed rounds (one loop per worker, sums sent loop to loop) and the
    one-hop graph give the serial path's bits at any number of workers."""
    X, y = _data()
    net = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax", dtype="float64")
    expected, _ = train_serial(net, X, y, strategy, rounds=10, n_shards=8, seed=3)
    rounds = {}
    for p in (1, 2, 4):
        shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:p])
        epochs = 10 / strategy.rounds_per_epoch(len(X))
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=epochs), seed=3, exchange=exchange,
                           reproducible="any-p")
        ppt.exit_data(shards)
        rounds[p] = result.rounds
        assert result.settings["exchange"] == exchange and result.settings["reproducible"] == "any-p"
        assert result.params.tobytes() == expected.tobytes(), f"p={p} differs from serial"
    assert rounds == {1: 10, 2: 10, 4: 10}


SAME_P = {"epoch": ppt.Sync(lr=0.5, momentum=0.9, l2=0.01), "block": ppt.Sync(lr=0.3, momentum=0.5, block=24),
          "ppt": ppt.PPT(lr=0.5, momentum=0.3, local_epoch=5)}
# each strategy and each transport once in the default suite (0.7-1 s a case); all nine in CI's full run
SAME_P_QUICK = {("block", "stream"), ("epoch", "tree"), ("ppt", "all")}


@pytest.mark.parametrize("strategy, exchange", [
    pytest.param(SAME_P[name], exchange, id=f"{name}-{exchange}",
                 marks=() if (name, exchange) in SAME_P_QUICK else pytest.mark.slow)
    for name in SAME_P for exchange in ("stream", "all", "tree")])
def test_same_p_gives_its_serial_bits_on_1_2_3_4_workers(client4, workers4, strategy, exchange):
    """reproducible="same-p" (the default for these strategies): each worker computes its rows of a
    round in one pass and the workers' sums are added along the tree over the workers; at each p
    the weights are bitwise the serial path's run the same way with p slots, on every transport.
    p = 3 holds 3, 3 and 2 of the 8 shards (unequal slots, and a tree over 3 leaves)."""
    X, y = _data()
    net = ppt.MLP((5, 7, 3), hidden="tanh", output="softmax", dtype="float64")
    for p in (1, 2, 3, 4):
        expected, _ = train_serial(net, X, y, strategy, rounds=6, n_shards=8, seed=3, reproducible="same-p",
                                   workers=p)
        shards = ppt.enter_data(client4, X, y, n_shards=8, workers=workers4[:p])
        epochs = 6 / strategy.check([12] * 8, 3).rounds_per_epoch(len(X))
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=epochs), seed=3, exchange=exchange)
        ppt.exit_data(shards)
        assert result.rounds == 6 and result.settings["reproducible"] == "same-p"
        assert result.params.tobytes() == expected.tobytes(), f"p={p} differs from its serial run"


def test_unaligned_blocks_and_fan_in_3_still_match_serial(client4, workers4):
    X, y = _data(n=70)
    net = ppt.MLP((5, 6, 3), hidden="relu", output="softmax")
    strategy = ppt.Sync(lr=0.2, momentum=0.9)
    expected, _ = train_serial(net, X, y, strategy, rounds=5, n_shards=7, seed=1, fan_in=3)
    shards = ppt.enter_data(client4, X, y, n_shards=7, workers=workers4[:3])
    result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=5), seed=1, fan_in=3, reproducible="any-p")
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()


def test_pipelining_does_not_change_the_result(client4, workers4):
    X, y = _data()
    net = ppt.MLP((5, 4, 3))
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    a = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=6), pipeline=0, exchange="all")
    b = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=6), pipeline=3, exchange="all")
    streamed = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=6))  # runs ahead by itself
    ppt.exit_data(shards)
    assert streamed.settings["exchange"] == "stream" and a.settings["exchange"] == "all"
    assert a.params.tobytes() == b.params.tobytes() == streamed.params.tobytes()
    assert [r["loss"] for r in a.history] == [r["loss"] for r in b.history] == [r["loss"] for r in streamed.history]


def test_history_records_loss_error_wall_and_head_time(client4, workers4):
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    result = ppt.train(ppt.MLP((5, 4, 3)), shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=4))
    ppt.exit_data(shards)
    assert [r["round"] for r in result.history] == [0, 1, 2, 3]
    for r in result.history:
        assert r["patterns"] == len(X) and 0 <= r["error_rate"] <= 1
        assert r["wall_seconds"] > 0 and 0 < r["head_seconds"] < r["elapsed_seconds"]
    assert result.head_seconds == pytest.approx(sum(r["head_seconds"] for r in result.history))


def test_parity8_is_learned_on_processes(client4, workers4):
    d = datasets.parity(8)
    shards = ppt.enter_data(client4, d.X, d.y, n_shards=8, workers=workers4[:2])
    net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    result = ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9),
                       ppt.Stop(max_epochs=2000, target_error=0.0), seed=7)  # learned in 233 rounds (seed 0: 448)
    ppt.exit_data(shards)
    assert result.learned and result.stopped_because == "target_error"
    assert result.outcome is Outcome.TARGET_ERROR
    assert (net.predict(result.params, d.X) == d.y).all()  # all 256 patterns right


def test_a_threads_cluster_gives_the_same_weights(threads_client):
    X, y = _data()
    net = ppt.MLP((5, 4, 3))
    expected, _ = train_serial(net, X, y, ppt.Sync(lr=0.5), rounds=5, n_shards=4, reproducible="same-p", workers=2)
    shards = ppt.enter_data(threads_client, X, y, n_shards=4)
    result = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=5))
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()


def test_a_result_shows_in_a_notebook_as_a_line_and_its_curves(threads_client):
    """``Result._repr_html_``: what the run did in one line (the result's own figures), then
    its loss and error per round drawn, one point a round."""
    import re

    X, y = _data()
    shards = ppt.enter_data(threads_client, X, y, n_shards=2)
    try:
        result = ppt.train(ppt.MLP((5, 4, 3)), shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=4))
    finally:
        ppt.exit_data(shards)
    page = result._repr_html_()
    line = page.split("</p>")[0]
    assert f"{result.rounds} rounds" in line and f"train error {result.train_error_rate:.4f}" in line
    assert ("not learned" in line) == (not result.learned) and result.stopped_because in line
    assert page.count("<svg") == 2
    assert all(len(points.split()) == result.rounds for points in re.findall(r'points="([^"]*)"', page))


def test_shards_built_on_the_workers_from_a_source(client4, workers4, tmp_path):
    """The head passes a loader; each worker reads its own rows of the MNIST files."""
    import functools
    data_dir = files.find_data_dir()
    loader = functools.partial(datasets.mnist_rows, str(data_dir), "train")
    shards = ppt.enter_source(client4, loader, n_rows=600, n_shards=4, workers=workers4[:2])
    X, y = datasets.mnist_rows(data_dir, "train", 0, 600)
    net = ppt.MLP((784, 8, 10))
    expected, _ = train_serial(net, X, y, ppt.Sync(lr=0.5), rounds=3, n_shards=4, reproducible="same-p", workers=2)
    result = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3))
    assert shards.source == "loader"
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()


def test_shards_from_a_dask_array(client4, workers4):
    import dask.array as da
    X, y = _data()
    dX, dy = da.from_array(X, chunks=(30, 5)), da.from_array(y, chunks=30)
    shards = ppt.enter_data(client4, dX, dy, n_shards=4, workers=workers4[:2])
    net = ppt.MLP((5, 4, 3))
    expected, _ = train_serial(net, X, y, ppt.Sync(lr=0.5), rounds=3, n_shards=4)
    result = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3), reproducible="any-p")
    held = shards.who_has()
    ppt.exit_data(shards)
    assert result.params.tobytes() == expected.tobytes()
    assert all(held[s] == (workers4[0],) for s in (0, 1)) and all(held[s] == (workers4[1],) for s in (2, 3))


def _aligned(shard):
    return all(a.flags.aligned for a in shard)


def test_scattered_shards_are_aligned_on_the_workers(client4, workers4):
    """Scattered arrays can arrive at any byte offset; matmul on them ran 1.5x slower."""
    X, y = _data(n=4000)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    # each check runs on its shard's worker (a shard fetched to another worker arrives anyhow)
    label_of = {s: label for label, a, b in shards.worker_blocks() for s in range(a, b)}
    checks = [client4.submit(_aligned, f, pure=False, resources={label_of[s]: 1})
              for s, f in enumerate(shards.futures)]
    assert client4.gather(checks) == [True] * 4
    del checks
    ppt.exit_data(shards)


@pytest.mark.parametrize("strategy", [ppt.Sync(lr=0.1, block=16), ppt.Async(lr=0.1, block=16, staleness=2)],
                         ids=["sync", "async"])
def test_unscreened_checks_come_every_check_every_epochs(client4, workers4, strategy):
    """Stop(screen=False) tests the weights every check_every epochs whatever the training
    estimate says; screened (000's rule), a target the estimate never reaches is never tested."""
    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    try:
        runs = {screen: ppt.train(ppt.MLP((5, 4, 3)), shards, strategy,
                                  ppt.Stop(max_epochs=3, target_error=0.0, test=(X, y), check_every=0.5,
                                           screen=screen), seed=2)
                for screen in (False, True)}
    finally:
        ppt.exit_data(shards)
    checked = [r for r in runs[False].history if "verified_error_rate" in r]
    assert all(r["error_estimate"] > 0 for r in runs[True].history)  # so screening never lets one through
    assert not any("verified_error_rate" in r for r in runs[True].history)
    epochs = [r["epoch"] for r in checked]
    assert len(checked) >= 5 and epochs[0] >= 0.5 - 1e-9
    # each check is the first record at least check_every epochs after the one before
    all_epochs = [r["epoch"] for r in runs[False].history]
    expected, due = [], 0.5
    for e in all_epochs:
        if e >= due - 1e-9 and len(expected) < len(epochs):
            expected.append(e)
            due = e + 0.5
    assert epochs == expected
    assert all(0 < r["verified_error_rate"] <= 1 for r in checked)  # target 0 is never met here


def test_progress_true_shows_the_run_false_shows_nothing_and_other_values_are_refused(threads_client, capsys):
    """``progress=True``: the one display (ppt_dask.progress); here standard error is not a
    terminal, so plain lines: the /ppt link, epochs of the total, patterns per second, time
    left, loss and error, and why the run stopped. It changes nothing the run computes."""
    X, y = _data()
    net, stop = ppt.MLP((5, 4, 3)), ppt.Stop(max_epochs=3)
    shards = ppt.enter_data(threads_client, X, y, n_shards=2)
    try:
        with pytest.raises(ValueError, match=r"^progress must be True .* got 3$"):
            ppt.train(net, shards, ppt.Sync(lr=0.5), stop, progress=3)
        quiet = ppt.train(net, shards, ppt.Sync(lr=0.5), stop, progress=False)
        assert capsys.readouterr().err == ""
        shown = ppt.train(net, shards, ppt.Sync(lr=0.5), stop, progress=True)
    finally:
        ppt.exit_data(shards)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"time breakdown, live: {ppt.cluster.page_url(threads_client)}"
    assert lines[1].startswith("epoch 1.00/3 (33 %)  ") and " patterns/s, " in lines[1] and " left  loss " in lines[1]
    assert lines[-1].startswith("epoch 3.00/3 (100 %)  max epochs after ") and "error " in lines[-1]
    assert quiet.params.tobytes() == shown.params.tobytes()
