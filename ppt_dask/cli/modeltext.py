"""``ppt-dask model``'s text: the tables and lines it prints and the JSON it writes (pure)."""

from __future__ import annotations

import json

import numpy as np

from ppt_dask.perf import model as perfmodel

# ---- formatting (pure) -----------------------------------------------------------------


def grid_table(blocks, ps, values, fmt: str) -> str:
    """A Markdown table: one row per block size, one column per cluster size."""
    head = "| block | " + " | ".join(f"p={p}" for p in ps) + " |"
    rule = "|---:|" + "---:|" * len(ps)
    rows = [f"| {b} | " + " | ".join(fmt.format(v) for v in row) + " |"
            for b, row in zip(blocks, np.asarray(values))]
    return "\n".join([head, rule, *rows])


def constants_table(c: perfmodel.Constants) -> str:
    """The constants in milliseconds, as 001 prints them in Tables II, III and V."""
    names = {"tf_seconds": "Tf (forward, per pattern)", "tb_seconds": "Tb (backward, per pattern)",
             "tu_seconds": "Tu (update)", "tm_seconds": "Tm (copy of the weights)",
             "ts_seconds": "Ts (squared error, per test pattern)", "to_seconds": "To (per epoch)",
             "tw_seconds_per_weight": "Tw (per weight per tree level)",
             "ti_seconds": "Ti (per reduction)", "ta_seconds": "Ta (weight averaging)",
             "th0_seconds": "th0 (head, per round)", "th1_seconds": "th1 (head, per task)",
             "tc_seconds": "tc (per gradient call)", "tq_seconds": "tq (shortest gradient phase)"}
    names.update({"tl0_seconds": "tl0 (streamed round, the loop's own)",
                  "tl1_seconds": "tl1 (streamed, per other worker)",
                  "tlw_seconds_per_weight": "tlw (streamed, per weight per other worker)"})
    rows = [f"| {label} | {getattr(c, f) * 1e3:.6g} |" for f, label in names.items()]
    table = "\n".join(["| constant | ms |", "|---|---:|", *rows])
    if c.stream_lag_ratio:
        table += (f"\n\nStreamed rounds of 2 or more workers also wait for the slowest loop: "
                  f"{c.stream_lag_ratio:.3g} x the gradient phase (stream_lag_ratio).")
    if c.stream_rows:
        more = c.stream_more_seconds or c.stream_first_seconds
        factor = c.stream_shared_factor or (1.0,) * len(c.stream_rows)
        table += "\n".join(["", "", "Streamed rounds' gradient phase (ms; interpolated between these call sizes)", "",
                            "| rows | first call of a round | each further call | x with all workers at once |",
                            "|---:|---:|---:|---:|",
                            *(f"| {int(r)} | {a * 1e3:.4g} | {m * 1e3:.4g} | {f:.2f} |"
                              for r, a, m, f in zip(c.stream_rows, c.stream_first_seconds, more, factor))])
    if not c.call_rows:
        return table
    n = len(c.call_rows)
    first, more = c.call_task_seconds or c.call_seconds, c.call_more_seconds or c.call_seconds
    factor = c.call_shared_factor or (1.0,) * n
    curve = [f"| {int(r)} | {a * 1e3:.4g} | {t * 1e3:.4g} | {m * 1e3:.4g} | {f:.2f} |"
             for r, a, t, m, f in zip(c.call_rows, c.call_seconds, first, more, factor)]
    return "\n".join([table, "", "Call curve (ms)", "", "| rows | one call (serial) | first call of a task "
                      "(in rounds) | each further call of a task | x with all workers at once |",
                      "|---:|---:|---:|---:|---:|", *curve])


def model_kw(s: dict) -> dict:
    return dict(n_test=s["m"], fan_in=s["fan_in"], n_shards=s["n_shards"], exchange=s["exchange"],
                cores=s["cores"])


def rounds_line(s: dict, ps, blocks) -> str:
    """Which rounds the numbers predict (streamed or a round graph, and with what terms), on
    how many cores, and where the gradient's cost leaves the sizes the calibration timed."""
    from ppt_dask.perf import curves

    c, ps = s["c"], np.asarray(ps)
    parts = perfmodel.round_parts(ps, 1, s["w"], c, s["fan_in"], n_shards=s["n_shards"], exchange=s["exchange"])
    on = np.atleast_1d(parts["streamed"])
    said = []
    if on.any():
        at = ps_text(ps[on]) if not on.all() else "every p"
        if np.atleast_1d(parts["graph_for_stream"]).any():
            said.append(f"streamed rounds at {at} (--exchange {s['exchange']}), but these constants have no "
                        "streamed terms: the one-hop graph's stand in (calibrate again to time the links)")
        else:
            said.append(f"streamed rounds at {at} (--exchange {s['exchange']}: one loop per worker, the "
                        "exchange from the links floor tl0 + m tl1 + v tlw, m messages of v values a loop)")
    if not on.all():
        at = ps_text(ps[~on]) if on.any() else "every p"
        graph = "the one-hop graph" if s["exchange"] in ("auto", "all", "doubling") else "the tree graph"
        said.append(f"{graph} at {at} (eq. (4) Tr(p) and the head Th(p))")
    cores = s["cores"]
    where = ("a core per worker" if cores is None else
             f"the workers share {cores} cores (rounds of more workers serialize)"
             + ("" if s.get("cores_given") else "; --cores for a larger cluster"))
    line = "predicts " + "; ".join(said) + f"; {where}"
    timed = curves.measured_rows(c, streamed=bool(on.any()) and perfmodel.has_stream_terms(c))
    if timed:
        rows = np.asarray(perfmodel.round_rows(ps[:, None], np.asarray(blocks)[None, :], s["n_shards"]))
        rows = rows[rows >= 1]
        if rows.min() < timed[0] or rows.max() > timed[1]:
            line += (f"; the gradient was timed for calls of {timed[0]}..{timed[1]} rows, calls of "
                     f"{int(rows.min())}..{int(rows.max())} asked: outside, the per-pattern line Tf + Tb")
    return line + "."


def ps_text(ps) -> str:
    ps = [int(p) for p in ps]
    if len(ps) > 2 and ps == list(range(ps[0], ps[-1] + 1)):
        return f"p = {ps[0]}..{ps[-1]}"
    return "p = " + ", ".join(map(str, ps))


def problem(s: dict) -> dict:
    return {"n_patterns": s["n"], "n_weights": s["w"], "n_test": s["m"], "n_shards": s["n_shards"],
            "fan_in": s["fan_in"], "constants": perfmodel.constants_to_dict(s["c"])}


def problem_line(s: dict) -> str:
    layout = "one shard per worker" if s["n_shards"] is None else f"{s['n_shards']} shards"
    return (f"n = {s['n']} patterns, m = {s['m']} test, w = {s['w']} weights, {layout}, "
            f"fan-in {s['fan_in']}")


def write_json(path, data) -> None:
    if path:
        with open(path, "w") as fh:
            json.dump(data, fh, indent=2, default=float)

