"""Tests of the closed-form run-time model against seed 001 (Moerchen), eq. (3)-(9)."""

import dataclasses
import doctest
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ppt_dask.core.model import STACK_ROWS
from ppt_dask.perf import constants as pc
from ppt_dask.perf import fit as fit
from ppt_dask.perf import model as pm
from ppt_dask.perf import paper001, planning

BAT_FN = paper001.CONSTANTS["bat_cave", "function"]
ANY = dict(reproducible="any-p")  # a gradient call a shard (the hand-computed rounds count calls)
FN = paper001.PROBLEMS["function"]

# 001, Table VII: predicted speedups, function example on Bat Cave; {block: (p=2, p=4, p=8)}.
TABLE_VII = {16: (0.57, 0.36, 0.26), 32: (0.87, 0.64, 0.48),
             64: (1.20, 1.09, 0.88), 128: (1.48, 1.67, 1.54)}


def fn_speedup(p, block, c=BAT_FN):
    return pm.speedup(p, block, FN.n_patterns, FN.n_weights, c, n_test=FN.n_test)


# ------------------------------------------------------------------ Table VII

# Hand computation with Tables II, IV, V (ms; Tw = 0.798 us/weight, Ti = 365.868 us):
#   eq. (3): Tsigma = 1152*0.22 + 1024*0.41 + (1024/b)*(0.07+0.04) + 128*0.001 + 30.9
#            = 704.308 + 112.64/b            -> b=16: 711.348, 32: 707.828, 64: 706.068
#   eq. (4): Tr(p) = 0.000798*16768*log2(p) + 0.365868 = 13.380864*log2(p) + 0.365868
#            -> Tr(2) = 13.746732, Tr(4) = 27.127596, Tr(8) = 40.508460
#   eq. (5): Tpi = 673.408/p + (1024/b)*(Tr(p) + 0.07) + 30.9
#     b=16,p=2: 336.704 + 64*13.816732 + 30.9 = 1251.875 -> S = 0.5682 -> 0.57 (printed 0.57)
#     b=16,p=8:  84.176 + 64*40.578460 + 30.9 = 2712.097 -> S = 0.2623 -> 0.26 (printed 0.26)
#     b=32,p=2: 336.704 + 32*13.816732 + 30.9 =  809.739 -> S = 0.8741 -> 0.87 (printed 0.87)
#     b=64,p=2: 336.704 + 16*13.816732 + 30.9 =  588.672 -> S = 1.1994 -> 1.20 (printed 1.20)
# The other cells come out 0.3667, 0.6618, 0.5007, 1.1129, 0.9238, 1.4749, 1.6918, 1.6038
# against printed 0.36, 0.64, 0.48, 1.09, 0.88, 1.48, 1.67, 1.54: eq. (5) is always a
# little high at p = 4 and 8 (up to 5%, the model's own error in Table VI). No reading of
# the equations fixes that: dividing To by p, keeping Tm in eq. (5), ceil(b/p), an
# undivided test set or Tu/p all match 4 cells or fewer; even a free Tr(p) per p matches at
# most 10 of 12 with the printed constants, and allowing every constant to move within
# its printed rounding, eq. (4)/(5) match at most 5. The table is matched best (9 of 12,
# see the next test) by Tr(p) = Tw*w*log2(p) + Ti*(p-1), which is not what eq. (4) says; so
# the model keeps eq. (4) as printed and the Table VII cells below are those it reproduces.
@pytest.mark.parametrize("block, p", [(16, 2), (16, 8), (32, 2), (64, 2)])
def test_table_vii_cells_reproduced_to_printed_precision(block, p):
    printed = TABLE_VII[block][(2, 4, 8).index(p)]
    assert round(fn_speedup(p, block), 2) == printed


def test_table_vii_every_cell_within_model_error():
    ps, blocks = np.array([2, 4, 8]), np.array(list(TABLE_VII))
    predicted = fn_speedup(ps[None, :], blocks[:, None])
    printed = np.array(list(TABLE_VII.values()))
    assert predicted.shape == (4, 3)
    assert fit.prediction_error(predicted, printed) < 0.03
    assert np.all(np.abs(predicted / printed - 1) < 0.05)


def test_table_vii_readings_compared_by_hand():
    """Which reading of Tr(p) gives which cells (see the comment above)."""
    def s(block, p, ti_factor):
        seq = 704.308 + 112.64 / block
        tr = 13.380864 * math.log2(p) + 0.365868 * ti_factor
        return seq / (673.408 / p + 1024 / block * (tr + 0.07) + 30.9)

    def matches(ti_factor):
        return sum(round(s(b, p, ti_factor(p)), 2) == row[i]
                   for b, row in TABLE_VII.items() for i, p in enumerate((2, 4, 8)))

    assert matches(lambda p: 1) == 4  # eq. (4) as printed: the model
    assert matches(lambda p: p - 1) == 9  # Ti once per partner: not in the paper
    assert round(s(64, 4, 1), 4) == round(fn_speedup(4, 64), 4) == 1.1129


# ------------------------------------------------------------------ worked steps

def test_hand_computed_epoch_eq5():
    # p = 4, b = 64, function on Bat Cave, in ms (eq. (5)):
    #   1152*0.22/4 + 1024*0.41/4 + (1024/64)*(0.07 + 0.000798*16768*2 + 0.365868)
    #   + 128*0.001/4 + 30.9 = 63.36 + 104.96 + 16*27.197596 + 0.032 + 30.9 = 634.413536
    got = pm.epoch_seconds(4, 64, FN.n_patterns, FN.n_weights, BAT_FN, n_test=FN.n_test)
    assert got == pytest.approx(634.413536e-3, rel=1e-12)


def test_hand_computed_sequential_eq3():
    # 1152*0.22 + 1024*0.41 + (1024/16)*(0.07+0.04) + 128*0.001 + 30.9 = 711.348 ms
    got = pm.sequential_epoch_seconds(16, FN.n_patterns, BAT_FN, n_test=FN.n_test)
    assert got == pytest.approx(711.348e-3, rel=1e-12)


def test_hand_computed_round_with_dask_head():
    c = dataclasses.replace(BAT_FN, th0_seconds=2e-3, th1_seconds=0.5e-3)
    # p = 4, fan-in 2, one shard per worker, one-hop rounds, all to all: 4 steps (each
    # reduces, updates and computes its gradient) -> Th = 2 + 4*0.5 = 4 ms
    assert pm.tasks_per_round(4) == 4
    # ceil(64/4)*(0.22+0.41) + 0.07 + (0.000798*16768*2 + 0.365868) + 4
    #   = 10.08 + 0.07 + 27.127596 + 4 = 41.277596 ms
    got = pm.iteration_seconds(4, 64, FN.n_weights, c)
    assert got == pytest.approx(41.277596e-3, rel=1e-12)
    # an epoch is n/b = 16 such rounds plus the test set and To
    epoch = pm.epoch_seconds(4, 64, FN.n_patterns, FN.n_weights, c, n_test=FN.n_test)
    assert epoch == pytest.approx(16 * 41.277596e-3 + 32 * 0.221e-3 + 30.9e-3, rel=1e-12)


def test_hand_computed_round_with_call_cost_and_quantum():
    # tc = 0.1 ms per gradient call, tq = 5 ms; p = 2 workers over 8 shards, b = 64:
    # each worker holds 4 shards (4 calls) and 32 patterns (shares 8 each)
    c = pm.Constants(0.1e-3, 0.2e-3, 0.05e-3, 0.0, 0.0, 0.0, tc_seconds=0.1e-3, tq_seconds=5e-3)
    #   compute = 4*0.1 + 32*(0.1+0.2) = 10.0 ms > tq; + Tu 0.05 = 10.05 ms (Tr = Th = 0)
    assert pm.iteration_seconds(2, 64, 100, c, n_shards=8, **ANY) == pytest.approx(10.05e-3, rel=1e-12)
    #   b = 8: 4*0.1 + 4*0.3 = 1.6 ms < tq -> 5 ms + 0.05
    assert pm.iteration_seconds(2, 8, 100, c, n_shards=8, **ANY) == pytest.approx(5.05e-3, rel=1e-12)
    #   3 workers over 8 shards hold 2 | 3 | 3 shards; b = 64 gives shares of 8:
    #   the busiest does 3 calls and 24 patterns = 0.3 + 7.2 = 7.5 ms
    assert pm.compute_seconds(3, 64, c, n_shards=8, **ANY) == pytest.approx(7.5e-3, rel=1e-12)
    #   more workers than shards: only 8 work
    assert pm.compute_seconds(16, 64, c, n_shards=8, **ANY) == pm.compute_seconds(8, 64, c, n_shards=8, **ANY)
    # the serial program makes one call per block: eq. (3) + (n/b) tc
    #   n = 128, b = 64: 128*0.3 + 2*(0.05 + 0 + 0.1) = 38.7 ms
    assert pm.sequential_epoch_seconds(64, 128, c) == pytest.approx(38.7e-3, rel=1e-12)


def test_a_round_under_same_p_is_one_call_a_worker():
    # tc = 0.1 ms a call, Tf + Tb = 0.3 ms a pattern, Tu 0.05 ms; 8 shards, b = 64 (8 rows a shard)
    c = pm.Constants(0.1e-3, 0.2e-3, 0.05e-3, 0.0, 0.0, 0.0, tc_seconds=0.1e-3)
    # same-p (the default): a worker's rows of a round in one call, whatever shards it holds
    #   p = 1: 0.1 + 64 * 0.3 = 19.3 ms, as the serial program's call (8 shards or 64)
    for shards in (8, 64):
        assert pm.compute_seconds(1, 64, c, n_shards=shards) == pytest.approx(19.3e-3, rel=1e-12)
    assert pm.compute_seconds(1, 64, c, n_shards=64) == pytest.approx(float(pm.call_seconds(64, c)))
    #   p = 2: 0.1 + 32 * 0.3 = 9.7 ms; any-p: 4 calls, 0.4 + 9.6 = 10.0 ms
    assert pm.compute_seconds(2, 64, c, n_shards=8) == pytest.approx(9.7e-3, rel=1e-12)
    assert pm.compute_seconds(2, 64, c, n_shards=8, **ANY) == pytest.approx(10.0e-3, rel=1e-12)
    assert pm.round_rows(2, 64, 8) == 32 and pm.round_rows(2, 64, 8, "any-p") == 8
    # past STACK_ROWS rows a shard, a call a shard under either promise
    big = 8 * (STACK_ROWS + 1)
    assert pm.compute_seconds(1, big, c, n_shards=8) == pm.compute_seconds(1, big, c, n_shards=8, **ANY)
    with pytest.raises(ValueError, match="reproducible must be one of"):
        pm.compute_seconds(1, 64, c, n_shards=8, reproducible="p")


def test_hand_computed_round_with_a_call_curve():
    # a bare call: 1 ms at 100 rows, 3 ms at 400; the first call of a task 1.4 and 3.4 ms;
    # all workers computing at once: 1.5x
    c = pm.Constants(1e-5, 1e-5, 0.1e-3, 0.0, 0.0, 0.0, tq_seconds=0.5e-3, call_rows=[100, 400],
                     call_seconds=[1e-3, 3e-3], call_task_seconds=[1.4e-3, 3.4e-3], call_shared_factor=[1.5, 1.5])
    assert pm.call_seconds(250, c) == pytest.approx(2e-3)           # interpolated
    assert pm.call_seconds(800, c) == pytest.approx(6e-3)           # last cost per row: 7.5 us
    # below the smallest call timed: 001's line tc + r (Tf + Tb) through it (tc = 0 here)
    assert pm.call_seconds(10, c) == pytest.approx(1e-3 * 10 / 100)
    assert pm.call_seconds(0, c) == 0.0
    assert pm.task_seconds(250, 1, c) == pytest.approx(2.4e-3)
    assert pm.task_seconds(250, 3, c) == pytest.approx(2.4e-3 + 2 * 2e-3)
    assert pm.task_seconds(250, 3, c, workers=2) == pytest.approx(1.5 * (2.4e-3 + 2 * 2e-3))
    # further calls of a task from their own curve when it is measured
    more = dataclasses.replace(c, call_more_seconds=[1.2e-3, 3.6e-3])
    assert pm.task_seconds(250, 3, more) == pytest.approx(2.4e-3 + 2 * 2.4e-3)
    # p = 1 over 8 shards, b = 1600: one task of 8 calls of 200 rows (+ Tu 0.1 ms)
    one = 1.4e-3 + 2e-3 / 3 + 7 * (1e-3 + 2e-3 / 3)  # task(200) + 7 call(200)
    assert pm.iteration_seconds(1, 1600, 100, c, n_shards=8, **ANY) == pytest.approx(one + 0.1e-3)
    # p = 2: 4 calls of 200 rows on each worker, 1.5x slower together
    assert pm.compute_seconds(2, 1600, c, n_shards=8, **ANY) == pytest.approx(
        1.5 * (1.4e-3 + 2e-3 / 3 + 3 * (1e-3 + 2e-3 / 3)))
    # the serial program makes one bare call of b rows per block: n/b * (call(b) + Tu)
    assert pm.sequential_epoch_seconds(400, 800, c) == pytest.approx(2 * (3e-3 + 0.1e-3))
    # JSON keeps the curve (lists in, tuples kept)
    assert pm.constants_from_dict(pm.constants_to_dict(c)) == c


@pytest.mark.parametrize("curve, match", [
    (dict(call_rows=[100, 50], call_seconds=[1, 2]), "call_rows must be increasing integers"),
    (dict(call_rows=[100], call_seconds=[1, 2]), r"need one value per entry of call_rows \(1\)"),
    (dict(call_rows=[100], call_seconds=[float("nan")]), "call_seconds must hold finite numbers"),
    (dict(call_rows=[1.5], call_seconds=[1]), "call_rows must be increasing integers"),
    (dict(call_rows=[1], call_seconds=[1], call_task_seconds=[1, 2]), "call_task_seconds \\(2\\)"),
    (dict(call_rows=[1], call_seconds=[1], call_more_seconds=[1, 2]), "call_more_seconds \\(2\\)"),
    (dict(call_rows=[1], call_seconds=[1], call_shared_factor=[0.5]), "call_shared_factor must be >= 1"),
])
def test_bad_call_curve(curve, match):
    with pytest.raises(ValueError, match=match):
        pm.Constants(0, 0, 0, 0, 0, 0, **curve)


def test_hand_computed_weight_averaging_eq9():
    c = dataclasses.replace(BAT_FN, ta_seconds=0.05e-3)
    # p = 4, local block 4, averaging every 512 patterns, in ms (eq. (9)):
    #   (1152/4)*0.22 + (1024/4)*0.41 + (1024/4)*(0.07+0.04) + (1024/512)*(0.05 + 27.127596)
    #   + (128/4)*0.001 + 30.9 = 63.36 + 104.96 + 28.16 + 54.355192 + 0.032 + 30.9
    got = pm.averaging_epoch_seconds(4, 4, 512, FN.n_patterns, FN.n_weights, c, n_test=FN.n_test)
    assert got == pytest.approx(281.767192e-3, rel=1e-12)
    seq = 704.308 + 112.64 / 4
    assert pm.averaging_speedup(4, 4, 512, FN.n_patterns, FN.n_weights, c, n_test=FN.n_test) \
        == pytest.approx(seq / 281.767192, rel=1e-12)


# ------------------------------------------------------------------ paper data

def test_paper_network_sizes_match_table_iv():
    for problem in paper001.PROBLEMS.values():
        assert pm.count_weights(problem.layers, biases=False) == problem.n_weights
    assert pm.count_weights((2, 128, 128, 1)) == 16768 + 128 + 128 + 1


def test_paper_constants_units():
    assert len(paper001.CONSTANTS) == 6
    assert paper001.CONSTANTS["messner", "digits"].to_seconds == pytest.approx(40.2181)
    # 001: for digits "more than half of the run time is constant" (To of eq. (3))
    dig = paper001.PROBLEMS["digits"]
    for cluster in ("bat_cave", "messner"):
        c = paper001.CONSTANTS[cluster, "digits"]
        seq = pm.sequential_epoch_seconds(dig.n_patterns, dig.n_patterns, c, n_test=dig.n_test)
        assert c.to_seconds > seq / 2


def test_no_speedup_below_block_about_50():
    # 001 sec. V-C: up to b = 32 several processors are slower than one; at b = 64 two
    # processors win slightly; "with block sizes up to almost 50 no speedup".
    assert 32 < planning.min_block_for_speedup(2, FN.n_patterns, FN.n_weights, BAT_FN,
                                         n_test=FN.n_test) <= 64
    for p in (4, 8):
        assert 32 < planning.min_block_for_speedup(p, FN.n_patterns, FN.n_weights, BAT_FN,
                                             n_test=FN.n_test) <= 128
    # with no communication and no overhead the parallel program wins from b = 2 on;
    # at b = 1 one worker does all the work while the other three idle: speedup 1
    free = pm.Constants(1e-3, 1e-3, 0.0, 0.0, 0.0, 0.0)
    assert planning.min_block_for_speedup(4, 64, 100, free) == 2
    slow = dataclasses.replace(BAT_FN, ti_seconds=100.0)
    assert planning.min_block_for_speedup(2, 64, 100, slow) is None


def test_recommend():
    best = planning.recommend(FN.n_patterns, FN.n_weights, BAT_FN, 8, blocks=[4, 8, 16, 32, 64],
                        n_test=FN.n_test)
    assert (best.block, best.p) == (64, 2)  # Table VII: at b = 64 only p = 2 is fastest
    assert best.speedup == pytest.approx(1.1994, abs=1e-4)
    assert best.efficiency == pytest.approx(best.speedup / 2)
    cells = dict(re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", best._repr_html_()))  # a notebook's table
    assert cells == {"block": "64", "workers": "2", "seconds an epoch": f"{best.epoch_seconds:.3g}",
                     "speedup": "1.2", "efficiency": f"{best.efficiency:.2f}"}
    small = planning.recommend(FN.n_patterns, FN.n_weights, BAT_FN, 8, blocks=[16, 32],
                         n_test=FN.n_test)
    assert small.p == 1  # below b ~ 50 one processor is fastest
    grid = planning.recommend(FN.n_patterns, FN.n_weights, BAT_FN, 64, n_test=FN.n_test)
    assert grid.block == FN.n_patterns and grid.p <= 64  # learning by epoch is cheapest
    ps, bs = np.arange(1, 65)[:, None], np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
    t = pm.epoch_seconds(ps, bs, FN.n_patterns, FN.n_weights, BAT_FN, n_test=FN.n_test)
    assert grid.epoch_seconds == pytest.approx(t.min())


def test_grid_for_figures_is_vectorised():
    dig, c = paper001.PROBLEMS["digits"], paper001.CONSTANTS["bat_cave", "digits"]
    ps, bs = np.arange(1, 65)[:, None], np.arange(1, 4097)[None, :]
    s = pm.speedup(ps, bs, dig.n_patterns, dig.n_weights, c, n_test=dig.n_test)
    e = pm.efficiency(ps, bs, dig.n_patterns, dig.n_weights, c, n_test=dig.n_test)
    assert s.shape == e.shape == (64, 4096)
    assert s[7, 999] == pm.speedup(8, 1000, dig.n_patterns, dig.n_weights, c, n_test=dig.n_test)
    assert np.allclose(e, s / ps)


# ------------------------------------------------------------------ properties

seconds = st.floats(0.0, 1e-2)
positive_seconds = st.floats(1e-7, 1e-2)


@st.composite
def constants(draw):
    return pm.Constants(*(draw(seconds) for _ in range(6)), tw_seconds_per_weight=draw(seconds),
                        ti_seconds=draw(seconds), ta_seconds=draw(seconds),
                        th0_seconds=draw(seconds), th1_seconds=draw(seconds))


sizes = dict(p=st.integers(1, 64), block=st.integers(1, 256), n_weights=st.integers(1, 10**5),
             fan_in=st.integers(2, 8))


@settings(deadline=None)
@given(c=constants(), tw=seconds, **sizes)
def test_time_falls_as_bandwidth_rises(c, tw, p, block, n_weights, fan_in):
    fast, slow = sorted([c.tw_seconds_per_weight, tw])
    t = [pm.epoch_seconds(p, block, 256, n_weights,
                          dataclasses.replace(c, tw_seconds_per_weight=x), fan_in=fan_in)
         for x in (fast, slow)]
    assert t[0] <= t[1]


@settings(deadline=None)
@given(c=constants(), extra=st.integers(0, 10**5), **sizes)
def test_time_rises_with_weights(c, extra, p, block, n_weights, fan_in):
    t = [pm.iteration_seconds(p, block, w, c, fan_in=fan_in) for w in (n_weights, n_weights + extra)]
    assert t[0] <= t[1]


@settings(deadline=None)
@given(tf=positive_seconds, tb=seconds, ts=seconds, tu=seconds, tc=seconds, tq=seconds,
       p=st.integers(1, 32), block=st.integers(1, 128), rounds=st.integers(1, 8),
       m=st.integers(0, 100), n_shards=st.one_of(st.none(), st.integers(1, 16)))
def test_speedup_at_most_p_without_communication(tf, tb, ts, tu, tc, tq, p, block, rounds, m,
                                                 n_shards):
    # To = Tr = Th = 0 and Tm = 0 (else the parallel program, which skips Tm, could
    # beat p); both programs run the same n/b rounds. A worker makes at least the one
    # gradient call per round the serial program makes, and tq only slows it down.
    c = pm.Constants(tf, tb, tu, 0.0, ts, 0.0, tc_seconds=tc, tq_seconds=tq)
    n = block * rounds
    assert pm.speedup(p, block, n, 100, c, n_test=m, n_shards=n_shards) <= p * (1 + 1e-12)


@settings(deadline=None)
@given(tf=positive_seconds, tb=seconds, ts=seconds, p=st.integers(1, 32),
       q=st.integers(1, 16), rounds=st.integers(1, 8), s=st.integers(0, 8))
def test_speedup_is_p_when_block_divides_evenly(tf, tb, ts, p, q, rounds, s):
    c = pm.Constants(tf, tb, 0.0, 0.0, ts, 0.0)
    block = p * q
    assert pm.speedup(p, block, block * rounds, 100, c, n_test=p * s) == pytest.approx(p, rel=1e-12)


@given(c=constants(), n_weights=st.integers(1, 10**6), fan_in=st.integers(2, 16))
def test_reduce_free_on_one_worker(c, n_weights, fan_in):
    assert pm.reduce_seconds(1, n_weights, c, fan_in) == 0.0


@settings(deadline=None)
@given(p=st.integers(1, 10**6), fan_in=st.integers(2, 16))
def test_tree_levels_is_ceil_log(p, fan_in):
    levels = pm.tree_levels(p, fan_in)
    assert fan_in**levels >= p and (levels == 0 or fan_in ** (levels - 1) < p)
    if p <= 256:
        assert pm.tasks_per_round(p, fan_in, exchange="tree") >= p + 3 + max(levels - 1, 0)


@settings(deadline=None)
@given(tw=st.floats(1e-9, 1e-5), ti=st.floats(1e-6, 1e-1), fan_in=st.integers(2, 4),
       ps=st.lists(st.integers(2, 64), min_size=3, max_size=12),
       ws=st.lists(st.integers(1, 10**5), min_size=3, max_size=12))
def test_fit_reduce_recovers_noise_free(tw, ti, fan_in, ps, ws):
    k = min(len(ps), len(ws))
    p, w = np.array(ps[:k]), np.array(ws[:k])
    x = w * pm.tree_levels(p, fan_in)
    assume(np.ptp(x) > 0.01 * x.max())
    y = tw * x + ti
    got_tw, got_ti = fit.fit_reduce(p, w, y, fan_in=fan_in)
    assert got_tw == pytest.approx(tw, rel=1e-6)
    assert got_ti == pytest.approx(ti, rel=1e-6, abs=1e-6 * y.max())


@given(th0=st.floats(0, 1e-2), th1=st.floats(0, 1e-3),
       tasks=st.lists(st.integers(2, 500), min_size=2, max_size=10, unique=True))
def test_fit_head_recovers_noise_free(th0, th1, tasks):
    y = th0 + th1 * np.array(tasks)
    got = fit.fit_head(tasks, y)
    assert got == pytest.approx((th0, th1), rel=1e-6, abs=1e-9)
    if y.min() > 1e-6:
        assert fit.fit_head(tasks, y, relative=True) == pytest.approx((th0, th1), rel=1e-5, abs=1e-9)


@given(level=st.floats(1e-5, 1e-2), lag=st.floats(0, 0.5),
       phases=st.lists(st.floats(1e-4, 0.2), min_size=2, max_size=9, unique=True))
def test_fit_lag_recovers_noise_free(level, lag, phases):
    g = np.array(phases)
    assume(np.ptp(g) > 0.05 * g.max())
    assert fit.fit_lag(g, level + lag * g) == pytest.approx((level, lag), rel=1e-5, abs=1e-9)


def test_fit_lag_beats_a_flat_level_and_refuses_what_it_cannot_fit():
    # the calibration's MNIST rounds at p = 2 (graphs/out, 2026-11-27): the wait grows with
    # the gradient phase; the fit's relative error of the rounds is below the flat median's
    g = np.array([1.913, 2.085, 3.076, 4.442, 6.566, 9.78, 21.983, 43.043, 61.949]) * 1e-3
    rest = np.array([0.861, 1.285, 1.036, 1.03, 1.139, 1.132, 1.454, 2.59, 4.292]) * 1e-3
    level, lag = fit.fit_lag(g, rest)
    assert 0 < lag < 0.1 and 0 < level < 1.3e-3

    def error(predicted_rest):
        return float(np.mean(np.abs(predicted_rest - rest) / (g + rest)))
    assert error(level + lag * g) < error(np.full(g.size, np.median(rest)))
    with pytest.raises(ValueError, match="need two distinct gradient phases"):
        fit.fit_lag([1e-3, 1e-3], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="lengths differ: gradient 2, rest 1"):
        fit.fit_lag([1e-3, 2e-3], [1e-3])
    with pytest.raises(ValueError, match="rest_seconds must be finite seconds >= 0"):
        fit.fit_lag([1e-3, 2e-3], [1e-3, -1.0])


def test_fits_stay_non_negative():
    # times that fall with w*log2(p) would give a negative Tw: clamp to 0, Ti = mean
    tw, ti = fit.fit_reduce([2, 4, 8], [100, 100, 100], [3.0, 2.0, 1.0])
    assert tw == 0.0 and ti == pytest.approx(2.0)
    # a line through a negative intercept: Ti = 0, Tw by least squares through the origin
    tw, ti = fit.fit_reduce([2, 2, 2], [1, 2, 3], [0.5, 1.5, 2.5])
    assert ti == 0.0 and tw == pytest.approx((0.5 + 3.0 + 7.5) / 14)
    th0, th1 = fit.fit_head([2, 4, 6], [0.2, 0.1, 0.0])
    assert th1 == 0.0 and th0 == pytest.approx(0.1)


@pytest.mark.parametrize("fan_in", [2, 3, 4])
def test_tasks_per_round_counts_the_real_round_graph(fan_in):
    from ppt_dask.core import tree
    from ppt_dask.engine.rounds import graph

    def real(p, s):
        blocks = [(f"w{w}", a, b) for w, (a, b) in enumerate(tree.split_shards(s, p)) if b > a]
        plan = graph.make_plan(blocks, s, fan_in)
        g, _ = graph.round_graph(plan, [None] * s, len, len, None, None, 0, tag="t")
        return len(dict(g))

    for p in range(1, 19):
        for s in (p, 8, 13, 32):
            assert pm.tasks_per_round(p, fan_in, n_shards=s, exchange="tree") == real(p, s), (p, s)
    assert pm.tasks_per_round(64, fan_in, exchange="tree") == real(64, 64)
    ps = np.array([[1, 2], [4, 64]])
    assert pm.tasks_per_round(ps, fan_in).shape == (2, 2)


@pytest.mark.parametrize("fan_in", [2, 3])
def test_tasks_per_round_counts_the_one_hop_rounds(fan_in):
    """The default graph: the tasks OneHopRounds.submit builds for a round after the first
    (the head's stats pick comes once per batch, not per round)."""
    from ppt_dask.algorithms.strategies import Sync
    from ppt_dask.core import tree
    from ppt_dask.engine.rounds import choose, graph, onehop

    class Built(onehop.OneHopRounds):
        def _send(self, layers, wanted):
            self.layers = layers
            return [None] * len(wanted)

    class Start:
        key = "start"

    def real(p, s):
        blocks = [(f"w{w}", a, b) for w, (a, b) in enumerate(tree.split_shards(s, p)) if b > a]
        plan = graph.make_plan(blocks, s, fan_in)
        exchange = choose.choose_graph(plan)  # the per-round graph "auto" of the model counts
        built = Built(None, plan, [type("F", (), {"key": f"shard-{i}"})() for i in range(s)],
                      Sync(lr=0.1), None, "t-g0", Start(), 0, exchange)
        built.submitted = 0  # round 0 sent: count round 1, the steady state
        built.submit(1, 1)
        return sum(not key.startswith("ppt-stats") for key in built.layers)

    for p in range(1, 18):
        for s in (p, 8, 16, 13):
            assert pm.tasks_per_round(p, fan_in, n_shards=s) == real(p, s), (p, s)
    assert pm.tasks_per_round(16, fan_in) == real(16, 16)
    from ppt_dask.perf import tasks
    assert tasks.DOUBLING_FROM == choose.DOUBLING_FROM


@settings(deadline=None)
@given(slope=st.floats(1e-7, 1e-3), fixed=st.floats(0, 1e-2),
       rows=st.lists(st.integers(1, 5000), min_size=2, max_size=8, unique=True))
def test_fit_per_pattern_recovers_noise_free(slope, fixed, rows):
    y = slope * np.array(rows) + fixed
    got_slope, got_fixed = fit.fit_per_pattern(rows, y)
    assert got_slope == pytest.approx(slope, rel=1e-6)
    assert got_fixed == pytest.approx(fixed, rel=1e-6, abs=1e-9)


def test_constants_json_round_trip():
    c = dataclasses.replace(BAT_FN, th0_seconds=1e-3, tc_seconds=2e-5, tq_seconds=3e-3)
    assert pm.constants_from_dict(pm.constants_to_dict(c)) == c
    with pytest.raises(ValueError, match=r"unknown constants \['tx_seconds'\]"):
        pm.constants_from_dict({**pm.constants_to_dict(c), "tx_seconds": 1.0})
    with pytest.raises(ValueError, match=r"missing constants \['tb_seconds'\]"):
        pm.constants_from_dict({"tf_seconds": 1.0, "tu_seconds": 0, "tm_seconds": 0,
                                "ts_seconds": 0, "to_seconds": 0})


def test_best_workers_per_block():
    blocks = [16, 32, 64, 128, 1024]
    p, t, s = planning.best_workers(blocks, FN.n_patterns, FN.n_weights, BAT_FN, 32, n_test=FN.n_test)
    assert p.shape == t.shape == s.shape == (5,)
    assert list(p[:2]) == [1, 1]  # below b ~ 50 one processor is fastest (001 sec. V-C)
    assert p[2] == 2 and p[3] >= 4 and p[4] >= p[3]  # more workers pay off as b grows
    for b, pb, tb in zip(blocks, p, t):
        grid = pm.epoch_seconds(np.arange(1, 33), b, FN.n_patterns, FN.n_weights, BAT_FN,
                                n_test=FN.n_test)
        assert tb == pytest.approx(grid.min()) and pb == 1 + int(np.argmin(grid))


def test_prediction_error():
    assert fit.prediction_error([1.1, 0.9, 2.0], [1.0, 1.0, 2.0]) == pytest.approx(0.2 / 3)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("call, match", [
    (lambda: pm.reduce_seconds(0, 10, BAT_FN), "p must be an integer >= 1, got 0"),
    (lambda: pm.iteration_seconds(2, 0, 10, BAT_FN), "block must be an integer >= 1, got 0"),
    (lambda: pm.iteration_seconds(2.5, 4, 10, BAT_FN), "p must be an integer >= 1, got 2.5"),
    (lambda: pm.speedup(np.array([2, -1]), 4, 64, 10, BAT_FN), "p must be .* got -1$"),
    (lambda: pm.epoch_seconds(2, 128, 64, 10, BAT_FN), "block must be <= n_patterns = 64, got 128"),
    (lambda: pm.reduce_seconds(2, 10, BAT_FN, fan_in=1), "fan_in must be an integer >= 2, got 1"),
    (lambda: pm.tree_levels(4, fan_in=2.0), "fan_in must be an integer >= 2, got 2.0"),
    (lambda: pm.Constants(1e-3, -1e-3, 0, 0, 0, 0), "tb_seconds .* got -0.001"),
    (lambda: pm.Constants(1e-3, 1e-3, 0, 0, 0, 0, ti_seconds=float("nan")), "ti_seconds .* nan"),
    (lambda: fit.fit_reduce([1, 2], [10, 10], [1.0, 2.0]), "p_values .* got 1"),
    (lambda: fit.fit_reduce([2, 2], [10, 10], [1.0, 2.0]), "cannot separate"),
    (lambda: fit.fit_head([3, 4], [1.0, -2.0]), "seconds must be finite"),
    (lambda: fit.prediction_error([1.0], [0.0]), "measured must be finite and > 0"),
    (lambda: planning.recommend(64, 10, BAT_FN, 0), "p_max must be an integer >= 1, got 0"),
])
def test_bad_input_names_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ------------------------------------------------------------------ the module itself

@pytest.mark.parametrize("module", [pm, pc], ids=["model", "constants"])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_pure_numpy_no_dask_or_bokeh():
    path = Path(pm.__file__)
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('perfmodel', {str(path)!r})\n"
        "mod = sys.modules['perfmodel'] = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mod)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'bokeh')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(deadline=None)
@given(tc=seconds, k=positive_seconds, e=st.floats(0.5, 1.0), extra=seconds, slow=st.floats(1.0, 2.0),
       p=st.integers(1, 32), block=st.integers(1, 256), rounds=st.integers(1, 4),
       n_shards=st.one_of(st.none(), st.integers(1, 16)))
def test_speedup_at_most_p_with_a_concave_call_curve(tc, k, e, extra, slow, p, block, rounds, n_shards):
    # a call costs tc + k rows^e (e <= 1: splitting a block never makes it cheaper), a task's
    # first call costs more (extra >= 0), and workers computing together are slower
    # (slow >= 1): no speedup above p
    rows = np.array([1, 2, 4, 16, 64, 256])
    call = tc + k * rows.astype(float) ** e
    c = pm.Constants(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, call_rows=rows, call_seconds=call,
                     call_task_seconds=call + extra, call_shared_factor=np.full(rows.size, slow))
    n = block * rounds
    assert pm.speedup(p, block, n, 100, c, n_shards=n_shards) <= p * (1 + 1e-9)


def test_hand_computed_streamed_round_beside_the_graph_and_oversubscribed():
    # streamed loops: a call's first 1 ms at 100 rows, 3 ms at 400, each further 0.8 / 2.8 ms,
    # 1.2x with all workers computing; links: 0.05 ms a round, 1 ms and 10 ns a weight per peer
    c = pm.Constants(1e-5, 1e-5, 0.1e-3, 0.0, 0.0, 0.0, tw_seconds_per_weight=1e-8, ti_seconds=1e-4,
                     th0_seconds=2e-3, th1_seconds=1e-4, tl0_seconds=0.05e-3, tl1_seconds=1e-3,
                     tlw_seconds_per_weight=1e-8, stream_rows=[100, 400], stream_first_seconds=[1e-3, 3e-3],
                     stream_more_seconds=[0.8e-3, 2.8e-3], stream_shared_factor=[1.2, 1.2])
    # p = 2 over 8 shards, block 1600: 4 calls of 200 rows on each loop
    compute = 1.2 * ((1e-3 + 2e-3 / 3) + 3 * (0.8e-3 + 2e-3 / 3))
    links = 0.05e-3 + 2 * 1e-3 + 1e-8 * 2 * 1000  # one host: two hops (a token in, one out), the p w values added
    parts = pm.round_parts(2, 1600, 1000, c, n_shards=8, **ANY)
    assert parts["streamed"] and not parts["graph_for_stream"] and parts["head"] == 0.0
    assert parts["compute"] == pytest.approx(compute) and parts["exchange"] == pytest.approx(links)
    assert pm.iteration_seconds(2, 1600, 1000, c, n_shards=8, **ANY) == pytest.approx(compute + 0.1e-3 + links)
    assert pm.links_seconds(1, 1000, c) == pytest.approx(0.05e-3)  # one loop sends nothing
    # exchange="all", the one-hop graph: 001's line (no graph curve), eq. (4), Th over 2 tasks
    graph = 4 * 200 * 2e-5 + 0.1e-3 + (1e-8 * 1000 + 1e-4) + (2e-3 + 2 * 1e-4)
    assert pm.iteration_seconds(2, 1600, 1000, c, n_shards=8, **ANY, exchange="all") == pytest.approx(graph)
    # "auto" streams at every p, 8 and 12 workers too; on one host (the calibration's) through
    # shared memory at any size: for a small network two hops a round whatever p, and loop 0
    # adds p w values; for a large one k adders, each with k - 1 + p - 1 tokens and p w / k values
    for p in (8, 12, 16):
        assert pm.round_parts(p, 1600, 1000, c, n_shards=16, **ANY)["streamed"]
        assert pm.links_seconds(p, 10**4, c) == pytest.approx(0.05e-3 + 2 * 1e-3 + p * 10**4 * 1e-8)
        k = -(-(p - 1) * 8 * 10**5 // (4 * 2**20))  # 0.8 MB of sums a loop: the others' cut in 4 MiB parts
        assert 1 < k <= p and pm.allreduce_terms(p, 10**5) == (k - 1 + p - 1, pytest.approx(p * 10**5 / k))
    # across hosts: from 3 loops on, 8-byte sums of 1000 values over 256 KiB a loop go by a
    # pairwise reduce-scatter and all-gather: 2 (p - 1) messages of 2 (p - 1) / p w values in
    # all (whole sums to every other loop would be (p - 1) w)
    assert pm.allreduce_terms(3, 1000, shared=False) == (2, 2000.0)  # 16 kB: direct
    for p in (8, 12):
        assert pm.allreduce_terms(p, 10**5, shared=False) == (2 * (p - 1), pytest.approx(2 * (p - 1) / p * 10**5))
    assert pm.allreduce_terms(8, 10**5, algorithm="halving") == (6, pytest.approx(2 * 7 / 8 * 10**5))
    # 4 workers on 2 cores: the loops time-slice, compute and exchange take twice as long
    one_each = pm.round_parts(4, 1600, 1000, c, n_shards=8, **ANY)
    shared = pm.round_parts(4, 1600, 1000, c, n_shards=8, **ANY, cores=2)
    assert shared["compute"] == pytest.approx(2 * one_each["compute"])
    assert shared["exchange"] == pytest.approx(2 * one_each["exchange"])
    assert pm.round_parts(2, 1600, 1000, c, n_shards=8, **ANY, cores=2)["compute"] == pytest.approx(compute)
    # a calibration without streamed terms charges streamed rounds the graph's, and says so
    old = dataclasses.replace(c, tl0_seconds=0.0, tl1_seconds=0.0, tlw_seconds_per_weight=0.0)
    assert pm.round_parts(2, 1600, 1000, old, n_shards=8, **ANY)["graph_for_stream"]
    assert pm.iteration_seconds(2, 1600, 1000, old, n_shards=8, **ANY) == pytest.approx(graph)
    # the wait for the slowest loop: a share of the gradient phase, from 2 loops on
    lagged = dataclasses.replace(c, stream_lag_ratio=0.05)
    assert pm.round_parts(2, 1600, 1000, lagged, n_shards=8, **ANY)["exchange"] == pytest.approx(links + 0.05 * compute)
    assert pm.round_parts(1, 1600, 1000, lagged, n_shards=8, **ANY)["exchange"] == pytest.approx(0.05e-3)
    over = pm.round_parts(4, 1600, 1000, lagged, n_shards=8, **ANY, cores=2)
    assert over["exchange"] == pytest.approx(shared["exchange"] + 0.05 * shared["compute"])
    assert pm.round_parts(2, 1600, 1000, lagged, n_shards=8, **ANY, exchange="all")["exchange"] == pytest.approx(
        1e-8 * 1000 + 1e-4)  # the graph's rounds keep eq. (4)
    assert pm.lag_seconds([1, 2, 3], 0.01, lagged) == pytest.approx([0.0, 5e-4, 5e-4])
    with pytest.raises(ValueError, match="stream_lag_ratio must be a finite number >= 0, got -0.1"):
        dataclasses.replace(c, stream_lag_ratio=-0.1)
    with pytest.raises(ValueError, match="cores must be an integer >= 1, got 0"):
        pm.iteration_seconds(2, 1600, 1000, c, n_shards=8, **ANY, cores=0)
    with pytest.raises(ValueError, match="exchange must be one of"):
        pm.iteration_seconds(2, 1600, 1000, c, exchange="mpi")


def test_recommend_never_proposes_more_workers_than_the_cores_pay_for():
    """A machine of 2 cores: 3 to 6 workers time-slice them (the rounds and the test pass
    serialize), so no block makes them pay; with a core per worker more do. (Streamed rounds,
    p < 8: the constants here have no round-graph terms for the doubling graph from 8 on.)"""
    from ppt_dask.perf import planning

    c = pm.Constants(1e-5, 2e-5, 0.2e-3, 0.0, 1e-6, 5e-3, tl0_seconds=0.02e-3, tl1_seconds=0.5e-3,
                     tlw_seconds_per_weight=1e-9, stream_rows=[8, 512], stream_first_seconds=[0.3e-3, 16e-3],
                     stream_more_seconds=[0.25e-3, 15.5e-3], stream_shared_factor=[1.2, 1.2])
    for blocks in ([1000], [8000], [60000], None):
        on_two = planning.recommend(60000, 55050, c, 6, blocks, n_test=10000, n_shards=8, cores=2)
        assert on_two.p <= 2, (blocks, on_two)
        p, _, _ = planning.best_workers([1000, 8000, 60000], 60000, 55050, c, 6, n_test=10000, n_shards=8, cores=2)
        assert (p <= 2).all(), p
    assert planning.recommend(60000, 55050, c, 6, [60000], n_test=10000, n_shards=8).p > 2
