"""Where the time goes: the pure transforms (no cluster, no bokeh), then honesty on a real cluster."""

import json
import math
import statistics
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ppt_dask.observe.breakdown import (
    PHASES,
    TaskRecord,
    bar_columns,
    breakdown,
    curve_columns,
    format_table,
    phase_table,
    summarize,
)
from ppt_dask.observe.trace import trace_events

A, B = "tcp://a:1", "tcp://b:1"


def task(key, worker, sent, done, compute, rnd=0, prefix="ppt-grad", io=(), deps=(), nbytes=100,
         submitted=1.0, gen=0):
    return TaskRecord(key, prefix, "0a1b2c3d", gen, rnd, worker, submitted, sent, done, compute,
                      nbytes, tuple(deps), tuple(io))


def worked_round():
    """One round on two workers, worked out by hand (seconds on the scheduler's clock).

    A: head 0.9-1.0, sent grad 1.0, computes 1.1-1.5; update sent 1.5, fetches 1.53-1.55,
       computes 1.55-1.6.      -> head .1, scheduler .13, gradient .4, transfer .02, update .05
    B: head 0.9-1.0, sent grad 1.0, fetches 1.05-1.1, computes 1.1-1.3, then waits until 1.6
                               -> head .1, scheduler .05, transfer .05, gradient .2, idle .3
    """
    return [task("g0", A, 1.0, 1.5, 0.4),
            task("g1", B, 1.0, 1.3, 0.2, io=[("transfer", 0.05, A)]),
            task("u", A, 1.5, 1.6, 0.05, prefix="ppt-update", io=[("transfer", 0.02, B)],
                 deps=["g0", "g1"], nbytes=8)]


def test_a_round_worked_by_hand():
    heads = [{"gen": 0, "round": 0, "head_seconds": 0.1, "wall_seconds": 0.71, "loss": 0.5,
              "error_rate": 0.25, "patterns": 64, "epoch": 1.0}]
    (row,) = breakdown(worked_round(), heads)
    expected = {"head": 0.1, "scheduler": 0.09, "gradient": 0.3, "transfer": 0.035, "update": 0.025,
                "idle": 0.15, "reduce": 0.0, "evaluate": 0.0, "other": 0.0}
    assert row["wall"] == pytest.approx(0.7)
    for phase, seconds in expected.items():
        assert row[phase] == pytest.approx(seconds, abs=1e-12), phase
    assert row["transfer_bytes"] == 100  # g1's result went from B to A; g0 stayed on A
    assert row["workers"] == 2 and row["loss"] == 0.5 and row["head_submit_seconds"] == 0.1
    assert row["patterns_per_second"] == pytest.approx(64 / 0.71)


def test_the_second_round_starts_where_the_first_ended():
    first = worked_round()
    second = [task("g0'", A, 1.65, 2.0, 0.3, rnd=1, submitted=1.2),
              task("g1'", B, 1.65, 2.1, 0.4, rnd=1, submitted=1.2),
              task("u'", A, 2.1, 2.2, 0.05, rnd=1, prefix="ppt-update", deps=["g0'", "g1'"])]
    rows = breakdown(first + second)
    assert [r["round"] for r in rows] == [0, 1]
    assert rows[1]["wall"] == pytest.approx(0.6)  # 1.6 -> 2.2
    assert rows[1]["head"] == 0.0  # the graph was there before the round began (pipelined)
    # 1.6-1.65: no task of either worker had been sent yet: idle
    # and each worker waits 0.1 s more for the other or for the update
    assert rows[1]["idle"] == pytest.approx(0.15)


def streamed_heads():
    """Two streamed rounds on two workers' loops, worked out by hand (each loop's own seconds).

    Round 0: A 0.01 idle, 0.30 gradient, 0.02 transfer; B 0.10 gradient, 0.20 head
             -> means: idle .005, gradient .2, transfer .01, head .1; wall .315
    Round 1: A 0.05 idle, 0.01 reduce, 0.25 gradient; B 0.01 reduce, 0.30 gradient
    """
    loop = ("ppt-loop-0a1b2c3d-g0-r0", 0)
    return loop, [
        {"gen": 0, "round": 0, "head_seconds": 0.002, "wall_seconds": 0.3, "loss": 0.7, "patterns": 40,
         "loops": [{"worker": A, "at": 0.0, "phases": {"idle": 0.01, "gradient": 0.3, "transfer": 0.02},
                    "bytes": 800},
                   {"worker": B, "at": 0.0, "phases": {"gradient": 0.1, "head": 0.2}, "bytes": 800}]},
        {"gen": 0, "round": 1, "head_seconds": 0.0, "wall_seconds": 0.31, "loss": 0.6, "patterns": 40,
         "loops": [{"worker": A, "at": 0.33, "phases": {"idle": 0.05, "reduce": 0.01, "gradient": 0.25},
                    "bytes": 800},
                   {"worker": B, "at": 0.3, "phases": {"reduce": 0.01, "gradient": 0.3}, "bytes": 800}]}]


def test_streamed_rounds_worked_by_hand_a_row_each_from_the_loops_timing():
    loop, heads = streamed_heads()
    # the loop tasks themselves (one per worker for the whole run) make no row of their own
    tasks = [task(str((loop[0], 0)), A, 1.0, 1.7, 0.65, prefix="ppt-loop"),
             task(str((loop[0], 1)), B, 1.0, 1.7, 0.61, prefix="ppt-loop")]
    rows = breakdown(tasks, heads)
    assert [r["round"] for r in rows] == [0, 1]
    expected = [{"idle": 0.005, "gradient": 0.2, "transfer": 0.01, "head": 0.1, "reduce": 0.0},
                {"idle": 0.025, "reduce": 0.01, "gradient": 0.275, "transfer": 0.0, "head": 0.0}]
    for row, want in zip(rows, expected):
        for phase, seconds in want.items():
            assert row[phase] == pytest.approx(seconds, abs=1e-12), phase
        assert row["wall"] == pytest.approx(sum(row[p] for p in PHASES))
        assert row["scheduler"] == 0.0 and row["streamed"] and row["workers"] == 2
        assert row["transfer_bytes"] == 1600
    assert rows[0]["wall"] == pytest.approx(0.315) and rows[1]["wall"] == pytest.approx(0.31)
    assert rows[0]["patterns_per_second"] == pytest.approx(40 / 0.3) and rows[1]["loss"] == 0.6
    table = phase_table(rows)
    assert "scheduler" not in [e["phase"] for e in table]  # no hop: left out, not a zero
    assert next(e for e in table if e["phase"] == "transfer")["description"].startswith("sending")
    assert summarize(rows)["streamed"] and summarize(rows)["rounds"] == 2


def test_streamed_rounds_on_the_trace_lie_inside_their_loop_task():
    loop, heads = streamed_heads()
    tasks = [task(str((loop[0], 0)), A, 1.0, 2.0, 0.7, prefix="ppt-loop"),  # A's loop computes 1.3-2.0
             task(str((loop[0], 1)), B, 1.0, 2.0, 0.9, prefix="ppt-loop")]  # B's 1.1-2.0
    events = trace_events(tasks, heads)["traceEvents"]
    spans = [e for e in events if e.get("cat") == "streamed round"]
    tid = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["tid"]}
    # A's round 1 starts 0.33 s into A's loop: 1.3 + 0.33 = 1.63 (origin: the first sent, 1.0)
    a1 = [e for e in spans if e["tid"] == tid[A] and e["args"]["round"] == 1]
    assert [e["name"] for e in a1] == ["idle", "reduce", "gradient"]
    assert a1[0]["ts"] == pytest.approx(0.63e6) and a1[2]["dur"] == pytest.approx(0.25e6)
    assert a1[1]["ts"] == pytest.approx(a1[0]["ts"] + a1[0]["dur"])  # the phases follow one another
    b0 = [e for e in spans if e["tid"] == tid[B] and e["args"]["round"] == 0]
    assert [e["name"] for e in b0] == ["gradient", "head"] and b0[0]["ts"] == pytest.approx(0.1e6)
    losses = [e["args"]["loss"] for e in events if e["ph"] == "C"]
    assert losses == [0.7, 0.6]  # the loss counter, once per round


def test_only_rounds_the_head_completed_get_a_row():
    tasks = worked_round() + [task("g9", A, 2.0, 2.5, 0.4, rnd=1)]  # round 1 was cancelled
    rows = breakdown(tasks, [{"gen": 0, "round": 0, "head_seconds": 0.0}])
    assert [r["round"] for r in rows] == [0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.floats(0, 5), st.floats(0, 2),
                          st.floats(0, 1), st.floats(0, 0.5), st.sampled_from(["ppt-grad", "ppt-reduce",
                                                                                "ppt-update", "ppt-x"])),
                min_size=1, max_size=25))
def test_phases_add_up_to_the_wall_time_and_none_is_negative(specs):
    tasks = []
    for i, (w, rnd, sent, length, compute_share, io, prefix) in enumerate(specs):
        tasks.append(task(f"k{i}", f"w{w}", sent, sent + length, compute_share * length, rnd=rnd,
                          prefix=prefix, io=[("transfer", io * length, None)], submitted=sent * 0.5))
    for row in breakdown(tasks):
        assert all(row[p] >= -1e-12 for p in PHASES)
        assert sum(row[p] for p in PHASES) == pytest.approx(row["wall"], abs=1e-9)


def test_phase_table_summary_and_columns():
    rows = breakdown(worked_round(), [{"gen": 0, "round": 0, "head_seconds": 0.1, "loss": 1.0}])
    table = phase_table(rows)
    assert [e["phase"] for e in table][:2] == ["gradient", "idle"]
    assert sum(e["percent"] for e in table) == pytest.approx(100.0)
    assert table[-1]["cumulative_seconds"] == pytest.approx(0.7)
    assert "ms/round" in format_table(table)
    s = summarize(rows)
    assert s["percent_not_gradient"] == pytest.approx(100 * (1 - 0.3 / 0.7))
    assert s["median_head_submit_ms"] == pytest.approx(100.0)
    cols = bar_columns(rows)
    assert cols["reduce"] == [pytest.approx(25.0)]  # reduce + update, in ms
    assert sum(cols[n][0] for n in ("gradient", "reduce", "other", "transfer", "scheduler", "head", "idle")) \
        == pytest.approx(cols["wall_ms"][0])
    assert math.isnan(curve_columns([{"round": 0, "loss": None}])["loss"][0])


def test_trace_has_a_track_per_worker_plus_the_head_and_is_json():
    heads = [{"gen": 0, "round": 0, "head_seconds": 0.1, "loss": 0.5}]
    trace = trace_events(worked_round(), heads, {"network": "5-8-2"})
    text = json.dumps(trace, allow_nan=False)
    events = json.loads(text)["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"head", A, B}
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    submit = next(e for e in spans if e["tid"] == 0)
    assert submit["ts"] == 0 and submit["dur"] == pytest.approx(1e5)  # 0.9 -> 1.0 s
    grad = next(e for e in spans if e["args"].get("key") == "g0")
    assert grad["ts"] == pytest.approx(2e5) and grad["dur"] == pytest.approx(4e5)  # 1.1 -> 1.5 s


def test_records_and_transforms_do_without_bokeh_and_the_transforms_without_dask():
    code = ("import sys, ppt_dask, ppt_dask.observe.diagnostics, ppt_dask.observe.breakdown; "
            "print('bokeh' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
    import ast

    import ppt_dask.observe.breakdown
    tree = ast.parse(open(ppt_dask.observe.breakdown.__file__).read())
    imported = {n.module if isinstance(n, ast.ImportFrom) else a.name
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in (n.names if isinstance(n, ast.Import) else [None])}
    assert not {m for m in imported if m and m.split(".")[0] in ("dask", "distributed", "bokeh", "numpy")}


def test_only_the_dashboard_module_imports_bokeh():
    import pathlib

    import ppt_dask
    package = pathlib.Path(ppt_dask.__file__).parent
    users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                   if "import bokeh" in p.read_text() or "from bokeh" in p.read_text())
    assert users == ["observe/dashboard.py"]


def test_collector_memory_is_bounded():
    from ppt_dask.observe.diagnostics import Collector

    c = Collector(max_tasks=50, max_runs=2)
    for run in ("00000001", "00000002", "00000003"):
        log = c.run_log(run)
    for i in range(120):
        log.add_task(task(f"k{i}", A, i, i + 1, 0.5))
    assert list(c.runs) == ["00000002", "00000003"]
    assert len(log.tasks) == 50 and log.dropped == 70 and log.tasks[0].key == "k70"


def test_a_result_without_task_records_keeps_its_history():
    from ppt_dask.observe.diagnostics import records_of

    class Finished:  # what a loop that records nothing on the scheduler returns
        history = [{"try": 0, "round": 0, "loss": 0.7, "wall_seconds": 0.1}]
        settings = {"workers": 2}
        diagnostics = None

    records = records_of(Finished())
    assert records.tasks == [] and records.rows() == [] and records.heads[0]["loss"] == 0.7
    assert records.trace()["traceEvents"] == []


# ---- on a real cluster --------------------------------------------------------------------


def _data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 6))
    return X, (X[:, 0] + X[:, 1] > 0).astype(np.int64)


def _run(client, workers, delay, slots=None, rounds=7, exchange="auto"):
    import ppt_dask as ppt
    from ppt_dask.testing import slow_gradients

    X, y = _data()
    shards = ppt.enter_data(client, X, y, n_shards=8, workers=workers)
    net = ppt.MLP((6, 8, 2), hidden="tanh", output="softmax")
    strategy = slow_gradients(ppt.Sync(lr=0.5), shards, delay, slots=slots)
    try:
        result = ppt.train(net, shards, strategy, ppt.Stop(max_epochs=rounds), exchange=exchange)
    finally:
        ppt.exit_data(shards)
    rows = result.breakdown()[1:]  # round 0 also pays for placing the first weights
    assert len(rows) == rounds - 1
    return result, rows


def _round_end(tasks, r: int) -> float:
    """When the scheduler heard the last of round ``r``'s tasks (its clock): a round's end."""
    return max(t.done for t in tasks if t.round == r and t.prefix != "ppt-loop")


@pytest.mark.parametrize("exchange", ["tree", "all", "stream"])
def test_breakdown_is_honest_with_a_known_compute_cost(client4, workers4, exchange):
    """Each gradient task sleeps 0.15 s: the reported gradient time holds that cost, and the
    rows tile the run's rounds, checked against the run's own timings.

    The rows of task graphs cover, on the scheduler's clock, the time from the end of
    round 0 to the end of the last round (the last report of their tasks); the rows of
    streamed rounds the loops' own clocks, on which each round starts where the one before
    ended. Either way no time is lost between rounds nor counted twice, and the rounds lie
    inside the run the head timed. (The test compared the parts with the head's clock within
    5% and the gradient with the sleep within 10%: the head reads a round a message or, on
    the one-hop graph, a final update after it ends, and with a busy core that put the
    parts 10.8% under the head's wall in one of twelve runs, four of each exchange.)"""
    delay = 0.15
    result, rows = _run(client4, workers4, delay, rounds=13, exchange=exchange)
    records = result.diagnostics
    for r in rows:
        assert sum(r[p] for p in PHASES) == pytest.approx(r["wall"], rel=1e-9)
    wall = sum(r["wall"] for r in rows)
    if exchange == "stream":
        heads = {h["round"]: h["loops"] for h in records.heads}
        spans = []
        for j in range(4):  # each loop: its rounds follow one another on its own clock
            timings = [heads[r["round"]][j] for r in rows]
            for a, b in zip(timings, timings[1:]):
                assert b["at"] == pytest.approx(a["at"] + sum(a["phases"].values()), abs=1e-9)
            spans.append(timings[-1]["at"] + sum(timings[-1]["phases"].values()) - timings[0]["at"])
        assert wall == pytest.approx(sum(spans) / 4, rel=1e-9)
    else:
        assert wall == pytest.approx(_round_end(records.tasks, rows[-1]["round"]) - _round_end(records.tasks, 0),
                                     rel=1e-9)
    assert wall < result.wall_seconds  # the rounds lie inside the run (durations, one host)
    # the sleep is the gradient's: each worker slept 0.15 s in each round's gradient. A
    # streamed row holds each loop's gradient phase whole; a row of a task graph ends at its
    # round's last report, so a gradient task of the next round that started before that
    # report (beside the round's stats pick) has that part in the row before: over the rows
    # the workers lose at most round 0's part, one round's gradient
    grads = [r["gradient"] for r in rows]
    if exchange == "stream":
        assert min(grads) >= delay
    else:
        assert sum(grads) >= (len(rows) - 1) * delay
    # counted once, checked against the records' own sums (not the clock): a streamed row's
    # gradient is the mean of its loops' gradient phases; a graph's rows over the workers hold
    # at most the gradient parts of all the run's tasks (rows start after round 0). A sleep
    # counted twice (or summed over the workers) shows 2 (or 4) times them
    n_workers = rows[0]["workers"]
    if exchange == "stream":
        for r in rows:
            loops = heads[r["round"]]
            assert r["gradient"] == pytest.approx(statistics.mean(t["phases"]["gradient"] for t in loops), rel=1e-9)
    else:
        parts = sum(b - a for t in records.tasks for a, b, phase in t.compute_parts() if phase == "gradient")
        assert sum(grads) * n_workers <= parts * (1 + 1e-9)
    all_share = sum(grads) / wall
    assert summarize(rows)["percent_not_gradient"] == pytest.approx(100 * (1 - all_share))
    # the recorder's own head time (a figure for the reader, 0.01-0.3 ms a round measured with a
    # busy core): its calls come between the head's reads of the rounds, whose walls its records
    # sum (all but the last batch's calls, which follow the last read)
    assert 0 < records.head_cost_seconds * len(records.heads) < sum(h["wall_seconds"] for h in records.heads)
    head_wall = sum(r["head_wall_seconds"] for r in rows)
    print(f"gradient {statistics.median(grads) / delay:.4f} of the sleep (median); parts {wall:.4f} s, "
          f"head measured {head_wall:.4f} s; recorder {1e3 * records.head_cost_seconds:.3f} ms a round")


def test_a_straggler_shows_as_idle_on_the_other_workers(client4, workers4):
    """Slot 0 sleeps 0.15 s in each round's gradient; the three others wait for its sums:
    idle on the others, as long as slot 0's gradient and send less their own, checked
    against the loops' own timings of each round (the test took 0.9 of 3/4 of the sleep as
    the least idle: with a busy core the others' own gradients ate into that, 0.94 seen)."""
    delay = 0.15
    result, rows = _run(client4, workers4, delay, slots=[0], rounds=5)
    assert all(r["workers"] == 4 and r["streamed"] for r in rows)
    loops_of = {h["round"]: h["loops"] for h in result.diagnostics.heads}
    loops = [loops_of[r["round"]] for r in rows]
    # the mean over the workers, from the loops' own records: slot 0's sleep and the others' real
    # (tiny) gradients, one worker's sleep (a quarter of the four), not four
    for r, timing in zip(rows, loops):
        assert r["gradient"] == pytest.approx(sum(t["phases"]["gradient"] for t in timing) / 4, rel=1e-9)
        assert r["gradient"] >= delay / 4
    g0 = [timing[0]["phases"] for timing in loops]  # the loops come in slot order: slot 0's first
    assert all(p["gradient"] >= delay for p in g0)

    def busy(phases):  # what a loop did in a round beside waiting: its phases but idle
        return sum(v for k, v in phases.items() if k != "idle")
    for j in (1, 2, 3):
        other = [timing[j]["phases"] for timing in loops]
        waited = sum(p["idle"] for p in other)
        # what the others could not do without slot 0's sums: its gradient and its send, less
        # their own gradient and send. Exactly, by the loops' own sums (each loop's phases tile
        # its rounds): the others' idle is that, plus slot 0's own idle and the difference of
        # the rest of their phases, plus how far apart the loops' rounds began and ended, which
        # no loop's clock can say (a message apart, a descheduling on a loaded machine: 7% of it
        # seen with a busy core) but which is less than a round, as no loop starts a round
        # before every loop sent the sums of the one before
        expected = sum(a["gradient"] + a["transfer"] - b["gradient"] - b["transfer"] for a, b in zip(g0, other))
        apart = sum(p["idle"] + busy(p) - p["gradient"] - p["transfer"] - busy(q) + q["gradient"] + q["transfer"]
                    for p, q in zip(g0, other))
        assert abs(waited - expected - apart) < max(busy(p) + p["idle"] for p in g0), (j, waited, expected, apart)
        # and it shows as idle, not as the others' own work: most of what slot 0's gradients
        # took beyond theirs (a loop's send, adds and update are milliseconds against the sleep)
        assert waited > 0.5 * sum(a["gradient"] - b["gradient"] for a, b in zip(g0, other)), (j, waited)


@pytest.mark.parametrize("exchange, names", [
    ("tree", {"ppt-grad", "ppt-update", "ppt-weights", "ppt-stats"}),  # reduce tasks, then update
    ("all", {"ppt-grad", "ppt-update", "ppt-stats"}),  # fused tasks, the last update, the log
])
def test_trace_and_records_of_a_real_run(client4, workers4, tmp_path, exchange, names):
    result, _ = _run(client4, workers4[:2], 0.0, rounds=4, exchange=exchange)
    records = result.diagnostics
    prefixes = {t.prefix for t in records.tasks}
    assert names <= prefixes, prefixes
    assert {t.worker for t in records.tasks if t.prefix == "ppt-grad"} == set(workers4[:2])
    path = tmp_path / "trace.json"
    result.trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert tracks == {"head", *(t.worker for t in records.tasks)}  # the update may run elsewhere
    assert sum(1 for e in events if e.get("name") == "submit round") == 4


def test_fused_tasks_time_their_own_parts(client4, workers4):
    """The one-hop task records its reduce, update and gradient seconds through the one module
    that touches distributed's worker internals; the breakdown splits the task by them."""
    from ppt_dask.engine.rounds import taskmeta

    assert client4.submit(taskmeta.applies, pure=False).result(timeout=60) is True
    assert taskmeta.applies() is False  # not inside a task
    result, rows = _run(client4, workers4, 0.02, rounds=6, exchange="all")
    fused = [t for t in result.diagnostics.tasks if t.prefix == "ppt-grad" and (t.round or 0) > 0]
    assert fused and all({"reduce", "update", "gradient"} <= dict(t.phases).keys() for t in fused)
    for t in fused:
        phases = dict(t.phases)
        assert phases["gradient"] >= 0.9 * 0.02  # each worker's gradient work is slowed by 0.02 s
        assert sum(phases.values()) <= t.compute * 1.05 + 1e-3
    assert all(r["update"] > 0 and r["reduce"] > 0 for r in rows)


def test_the_engine_records_only_through_the_recorder_it_is_given(client4, workers4, tmp_path):
    """The engine imports no diagnostics: its own ``train`` without a recorder records nothing
    (and says so when asked for a report or a trace); ``ppt.train`` gives it the collector's
    recorder, whose records cover the same run's tasks, an asynchronous run's as any other's."""
    import ppt_dask as ppt
    from ppt_dask.engine.trainer import train as engine_train

    X, y = _data()
    shards = ppt.enter_data(client4, X, y, n_shards=4, workers=workers4[:2])
    net = ppt.MLP((6, 8, 2), hidden="tanh", output="softmax")
    try:
        bare = engine_train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3))
        recorded = ppt.train(net, shards, ppt.Sync(lr=0.5), ppt.Stop(max_epochs=3))
        updates = ppt.train(net, shards, ppt.Async(lr=0.5, block=40), ppt.Stop(max_epochs=2))
    finally:
        ppt.exit_data(shards)
    assert np.array_equal(bare.params, recorded.params)  # recording changes nothing it computes
    assert bare.diagnostics is None and bare.breakdown() == []
    for write in (bare.report, bare.trace):
        with pytest.raises(ValueError, match="without a recorder"):
            write(tmp_path / "x")
    assert len(recorded.breakdown()) == 3 and {t.prefix for t in recorded.diagnostics.tasks} >= {"ppt-loop"}
    assert len(updates.breakdown()) == len(updates.diagnostics.heads) == len(updates.history) > 0
    assert {t.prefix for t in updates.diagnostics.tasks} >= {"ppt-loop"}
    updates.report(tmp_path / "async.html")
    assert "ppt-curves" in (tmp_path / "async.html").read_text()
