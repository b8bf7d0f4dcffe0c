"""Workers x threads (seed 002's hybrid): a gradient call timed at 1, 2 ... threads, the
layouts the cores hold priced by the run-time model, and ``ppt-dask model recommend`` saying
which and why.

The oracles: the model itself (a layout of t threads is the model's epoch with the gradient's
constants divided by the measured speedup, on cores // t slots; a speedup of 1 changes
nothing); the cases where the answer is known (threads that do not speed a call never beat
workers; with a free exchange and threads as fast as workers, the fewer workers win the tie).
"""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.perf import calibrate, paper001
from ppt_dask.perf import model as pm
from ppt_dask.perf import threads as pt

C = dataclasses.replace(paper001.CONSTANTS["bat_cave", "function"], th0_seconds=0.01, th1_seconds=0.0005)
N, W, M = 1024, 16768, 128


def test_thread_counts_double_up_to_the_cores():
    assert pt.thread_counts(1) == [1] and pt.thread_counts(2) == [1, 2]
    assert pt.thread_counts(6) == [1, 2, 4, 6] and pt.thread_counts(16) == [1, 2, 4, 8, 16]


def test_scaling_divides_the_gradient_terms_only():
    assert pt.scaled(C, 1.0) == C
    half = pt.scaled(dataclasses.replace(C, call_rows=(8, 64), call_seconds=(2e-3, 8e-3)), 2.0)
    assert half.tf_seconds == C.tf_seconds / 2 and half.tb_seconds == C.tb_seconds / 2
    assert half.call_seconds == (1e-3, 4e-3) and half.call_rows == (8, 64)
    assert (half.tu_seconds, half.th0_seconds, half.ti_seconds) == (C.tu_seconds, C.th0_seconds, C.ti_seconds)
    with pytest.raises(ValueError, match="speedup must be > 0"):
        pt.scaled(C, 0.0)


def test_each_layout_is_the_models_epoch_with_the_measured_speedup():
    timed = {"rows": 64, "counts": [1, 2, 4], "seconds": [1.0, 0.6, 0.4]}
    options = pt.layouts(N, W, C, 4, timed, [64, 128], n_test=M)
    assert {(o.p, o.threads) for o in options} == {(1, 1), (2, 1), (3, 1), (4, 1), (1, 2), (2, 2), (1, 4)}
    assert [o.epoch_seconds for o in options] == sorted(o.epoch_seconds for o in options)
    for o in options:
        speedup = {1: 1.0, 2: 1 / 0.6, 4: 2.5}[o.threads]
        assert o.thread_speedup == pytest.approx(speedup)
        expected = pm.epoch_seconds(o.p, o.block, N, W, pt.scaled(C, speedup), n_test=M, cores=4 // o.threads)
        assert o.epoch_seconds == expected


def test_threads_that_do_not_speed_a_call_never_win_and_fast_ones_do():
    slow = pt.layouts(N, W, C, 2, {"rows": 64, "counts": [1, 2], "seconds": [1.0, 1.0]}, [128], n_test=M)
    assert slow[0].threads == 1 and slow[0].p == 2  # 001's function: 2 workers pay at block 128
    fast = pt.layouts(N, W, C, 2, {"rows": 64, "counts": [1, 2], "seconds": [1.0, 0.5]}, [128], n_test=M)
    assert (fast[0].p, fast[0].threads) == (1, 2)  # the same halving of the gradient, without the exchange
    words = pt.why(fast[0], fast, {"rows": 64, "counts": [1, 2], "seconds": [1.0, 0.5]}, 2)
    assert "2.00x as fast on 2 threads" in words and "1 x 2 predicts" in words and "2 x 1" in words


def test_bad_timings_are_refused():
    with pytest.raises(ValueError, match="threads timings need counts from 1"):
        pt.layouts(N, W, C, 2, {"rows": 64, "counts": [2], "seconds": [1.0]}, [64])


class _Recording:
    """The MLP, recording the BLAS threads it is allowed and the rows of each gradient call."""

    def __init__(self, net):
        self.net, self.calls = net, []

    def __getattr__(self, name):
        return getattr(self.net, name)

    def loss_grad_stats(self, params, X, y):
        from threadpoolctl import threadpool_info

        self.calls.append(({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}, len(X)))
        return self.net.loss_grad_stats(params, X, y)


def test_a_call_timed_at_one_and_two_threads_in_this_process():
    """What the timings are of, as the docstring says (the times themselves are this minute's):
    each count's calls run with BLAS limited to it, the counts interleaved repeat after repeat
    after a first pass, each called twice in a row (the second timed), ``rows`` rows a call;
    the limits are as they were afterwards."""
    from threadpoolctl import threadpool_info

    net = _Recording(ppt.MLP((16, 32, 4), hidden="tanh", output="softmax"))
    rng = np.random.default_rng(0)
    X, y = rng.random((200, 16)), rng.integers(0, 4, 200)
    before = threadpool_info()
    seconds = pt.time_threads(net, X, y, rows=64, counts=[1, 2], repeats=2)
    assert len(seconds) == 2 and all(np.isfinite(s) and s > 0 for s in seconds)
    assert net.calls == [({t}, 64) for _ in range(2 + 1) for t in (1, 2) for _ in range(2)]
    assert threadpool_info() == before


def test_a_torchnet_is_set_to_each_count_and_the_given_one_left_alone():
    torch = pytest.importorskip("torch")
    net = ppt.TorchNet(lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 3)).double(),
                       row_shape=(1, 6, 6))
    assert pt.with_threads(net, 2).threads == 2 and net.threads == "auto"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "ppt_dask.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("seconds, words", [
    ([1.0, 0.5], "recommended: --workers 1 --threads-per-worker 2: a gradient call of 64 rows runs 2.00x as fast"),
    ([1.0, 1.0], "recommended: --workers 2 --threads-per-worker 1: a gradient call of 64 rows runs 1.00x as fast"),
])
def test_recommend_proposes_workers_by_threads_and_says_why(tmp_path, seconds, words):
    cal = calibrate.Calibration(C, (2, 128, 128, 1), W, N, M, 64, None, 2, 2, 2,
                                threads={"rows": 64, "counts": [1, 2], "seconds": seconds})
    cal.save(tmp_path / "calib.json")
    out = tmp_path / "rec.json"
    run = _run("model", "recommend", "--calibration", str(tmp_path / "calib.json"), "--shards", "none",
               "--blocks", "128", "--json", str(out))
    assert run.returncode == 0, run.stderr
    assert "workers x threads on 2 cores" in run.stdout and words in run.stdout, run.stdout
    hybrid = json.loads(out.read_text())["workers_by_threads"]
    assert hybrid["cores"] == 2 and hybrid["why"] in run.stdout


def test_recommend_says_when_it_cannot_propose_threads(tmp_path):
    calibrate.Calibration(C, (2, 128, 128, 1), W, N, M, 64, None, 2, 2, 2).save(tmp_path / "old.json")
    run = _run("model", "recommend", "--calibration", str(tmp_path / "old.json"), "--blocks", "128")
    assert run.returncode == 0 and "workers x threads: not proposed, the calibration has no thread timings" \
        in run.stdout, run.stdout
