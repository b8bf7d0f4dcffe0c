"""A run's records in bounded memory: the head's and the collector's per-round records
(ppt_dask.observe.roundlog: the last rounds in full, the older ones in bins) and the run's
history (ppt_dask.engine.history: every round, as columns).

The oracles: the records given (the window reads back as they were, the history as the list
of dicts it replaces), the breakdown of every round in full (the bins keep its totals), and
sizes worked out from the storage rule (bytes a round a column, rows a loop), never read off
a run.
"""

import functools
import math
import random

import numpy as np
import pytest

import ppt_dask as ppt
from ppt_dask.engine.history import History
from ppt_dask.observe import breakdown as bd
from ppt_dask.observe import diagnostics
from ppt_dask.observe.roundlog import MAX_PHASES, NUMBERS, RoundLog

SYNC_PHASES = ("gradient", "transfer", "idle", "reduce", "update", "head")  # a sync loop's order
LOCAL_PHASES = ("idle", "reduce", "gradient", "transfer", "head")  # local SGD's


def record(r: int, loops: int = 2, gen: int = 0, rng=None) -> dict:
    rng = rng or random.Random(r)
    names = SYNC_PHASES if r % 3 else LOCAL_PHASES
    return {"gen": gen, "round": r, "epoch": (r + 1) / 7, "loss": rng.random(), "error_rate": rng.random(),
            "error_estimate": None if r < 5 else rng.random(), "patterns": 200.0,
            "wall_seconds": rng.uniform(0.001, 0.01), "head_seconds": rng.uniform(0, 1e-3),
            "loops": [{"worker": f"tcp://127.0.0.1:{4000 + j}", "at": 0.01 * r,
                       "phases": {name: rng.uniform(0, 0.003) for name in names}, "bytes": 1000 + j}
                      for j in range(loops)]}


def test_the_window_reads_back_as_recorded():
    records = [record(r) for r in range(50)]
    log = RoundLog(window=100)
    log.extend(records)
    assert log.records() == records and log.records(last=3) == records[-3:] and log.bin_rows() == []


def test_bins_keep_the_totals_of_every_round_in_full():
    """3000 rounds through a window of 100 and at most 20 bins: the phase table and the summary
    of bins + window are those of every round's row (``breakdown`` of all the records)."""
    records = [record(r, gen=r // 1000) for r in range(3000)]
    log = RoundLog(window=100, max_bins=20)
    log.extend(records)
    assert len(log.bins) <= 20 and 100 <= len(log) <= 200
    assert sum(b["rounds"] for b in log.bin_heads()) + len(log) == 3000
    full = bd.breakdown([], records)
    mine = log.bin_rows() + bd.breakdown([], log.records())
    want, got = bd.summarize(full), bd.summarize(mine)
    assert got["rounds"] == want["rounds"] == 3000 and got["workers"] == 2
    for key in ("wall_seconds", "percent_not_gradient", "patterns_per_second"):
        assert got[key] == pytest.approx(want[key], rel=1e-9), key
    for a, b in zip(sorted(bd.phase_table(full), key=lambda e: e["phase"]),
                    sorted(bd.phase_table(mine), key=lambda e: e["phase"])):
        assert a["phase"] == b["phase"] and b["seconds"] == pytest.approx(a["seconds"], rel=1e-9, abs=1e-12)
    losses = sum(h["loss"] * h["rounds"] for h in log.bin_heads()) + sum(h["loss"] for h in log.records())
    assert losses == pytest.approx(sum(h["loss"] for h in records), rel=1e-9)
    firsts = [b["first_round"] for b in log.bin_heads()]
    assert firsts == sorted(firsts) and firsts[0] == 0  # the bins cover the run in order
    assert log.bin_heads()[0]["error_estimate"] == pytest.approx(
        np.mean([h["error_estimate"] for h in records[5:log.bin_heads()[0]["rounds"]]]))  # None: not counted


def _bound(window: int, max_bins: int, loops: int) -> int:
    """The rule: up to 2 * window rounds in full, each 2 ids (8 bytes), the head's numbers
    (8 bytes each) and a loop count (4 bytes), and as many loop rows (4 + MAX_PHASES floats),
    which grow by doubling (at most twice what they hold); max_bins bins of 5 + 2 per number
    + 1 per phase of the breakdown + 2 floats."""
    rounds = 2 * window
    full = rounds * (2 * 8 + len(NUMBERS) * 8 + 4)
    loop_rows = 2 * rounds * loops * (4 + MAX_PHASES) * 8
    bins = max_bins * (5 + 2 * len(NUMBERS) + len(bd.PHASES) + 2) * 8
    return full + loop_rows + bins


def test_a_long_run_of_records_stays_within_the_rules_size():
    log = RoundLog(window=200, max_bins=50)
    sizes = []
    for r in range(20_000):
        log.add(record(r, loops=4))
        if r + 1 in (2_000, 20_000):
            sizes.append(log.nbytes)
    assert sizes[0] == sizes[1] <= _bound(200, 50, 4)  # flat: 18,000 more rounds, not a byte more
    assert log.nbytes <= log.max_bytes(4) == _bound(200, 50, 4)
    assert len(log.bins) <= 50 and log.total == 20_000


def test_history_reads_as_the_list_of_dicts_it_keeps():
    records = [{"try": 0, "gen": 0, "round": r, "epoch": r / 10, "loss": 1 / (r + 1),
                "error_estimate": None if r < 3 else 0.25, "patterns": 64.0} for r in range(40)]
    records[5]["verified_error_rate"] = 0.125
    records[7]["updates"] = [1, 2]
    history = History(records)
    assert history == records and list(history) == records and history[-2:] == records[-2:]
    history[-1] = {**records[-1], "verified_error_rate": 0.5}
    assert history[-1]["verified_error_rate"] == 0.5
    del history[30:]
    assert history == records[:30] and history.pop() == records[29] and len(history) == 29
    assert list(history.column("round")) == list(range(29))
    assert math.isnan(history.column("error_estimate")[0]) and history.column("error_estimate")[3] == 0.25
    history[:] = records[:2]
    assert history == records[:2]


def test_a_long_history_stays_within_its_columns():
    """Every round of 100,000 (the engine's fields, a test-set check now and then): the columns
    and their presence flags, 9 bytes a field a round, at most twice the rounds' room."""
    history = History()
    fields = ("try", "gen", "round", "epoch", "loss", "error_rate", "error_estimate", "patterns", "wall_seconds",
              "head_seconds", "elapsed_seconds", "verified_error_rate")
    n = 100_000
    for r in range(n):
        rec = {name: float(r) for name in fields[3:-1]}
        rec.update({"try": 0, "gen": 0, "round": r})
        if r % 1000 == 0:
            rec["verified_error_rate"] = 0.5
        history.append(rec)
    assert history.nbytes <= 2 * n * len(fields) * 9 and not history._extra
    assert history[n - 1]["round"] == n - 1 and history[1000]["verified_error_rate"] == 0.5


# ---- a real run ------------------------------------------------------------------------

def test_a_run_longer_than_the_windows_keeps_bounded_records_on_head_and_scheduler(client4, workers4):
    """1,200 streamed rounds on 2 workers, the head's window 100 rounds, the collector's 300:
    the breakdown still covers every round, each side holds at most its rule's bytes, and the
    rounds never went into the scheduler's event log."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 6))
    y = (X[:, 0] > 0).astype(np.int64)
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    recorder = functools.partial(diagnostics.Recorder, max_rounds=100)
    try:
        result = ppt.train(ppt.MLP((6, 4, 2)), shards, ppt.Sync(lr=0.1, block=4), ppt.Stop(max_epochs=12),
                           recorder=recorder)
    finally:
        ppt.exit_data(shards)
    rounds = len(result.history)
    assert rounds == 1200 and result.settings["exchange"] == "stream"
    records = result.diagnostics
    assert 100 <= len(records.heads) <= 200 and records.binned_rows
    assert sum(r.get("rounds", 1) for r in result.breakdown()) == rounds
    assert bd.summarize(result.breakdown())["rounds"] == rounds

    def on_scheduler(dask_scheduler, run):
        log = dask_scheduler.plugins[diagnostics.NAME].runs[run].heads
        events = [e for _t, e in dask_scheduler.get_events(diagnostics.TOPIC)
                  if isinstance(e, dict) and e.get("run") == run]
        return len(log), log.total, len(log.bins), log.nbytes, log.max_bytes(2), len(events)

    held, total, bins, nbytes, bound, events = client4.run_on_scheduler(on_scheduler, run=records.run)
    window = diagnostics.SCHEDULER_WINDOW
    assert total == rounds and window <= held <= 2 * window and 0 < bins <= max(2, window // 5)
    assert nbytes <= bound == _bound(window, max(2, window // 5), 2)
    assert events == 1  # the run's announcement only: the rounds went to the collector's handler


def test_a_block_of_rounds_keeps_what_a_record_a_round_keeps():
    """RoundLog.add_block (the head's batch of streamed rounds, columns) against RoundLog.add of
    the same rounds as dicts: the same records in full and the same bins, across folds."""
    from ppt_dask.core.roundblock import Block

    rng, n, p = random.Random(3), 90, 3
    records = [record(r, loops=p, rng=rng) for r in range(n)]
    for rec in records:  # one phase order a block (the sync loops')
        for loop in rec["loops"]:
            loop["phases"] = {name: loop["phases"].get(name, 0.001) for name in SYNC_PHASES}
    by_dict, by_block = RoundLog(window=16, max_bins=5), RoundLog(window=16, max_bins=5)
    by_dict.extend(records)
    for a in range(0, n, 25):  # blocks of 25 rounds, the last one short
        part = records[a:a + 25]
        nums = np.array([[math.nan if rec[k] is None else rec[k] for k in NUMBERS] for rec in part])
        loops = np.array([[[loop["at"], loop["bytes"], *loop["phases"].values()] for loop in rec["loops"]]
                          for rec in part])
        by_block.extend([Block(0, [rec["round"] for rec in part], nums, loops,
                               [loop["worker"] for loop in part[0]["loops"]], SYNC_PHASES)])
    assert by_block.records() == by_dict.records()
    np.testing.assert_array_equal(by_block.bins, by_dict.bins)
    assert by_block.total == by_dict.total == n
