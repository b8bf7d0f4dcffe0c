"""The Benchmarks page's plots and summary, drawn from the tables in graphs/out (no run).

Usage: python graphs/plots.py [--out graphs/out]

Every figure on docs/benchmarks.md is a PNG this script draws from the Markdown tables that
the other scripts of graphs/ wrote, so a plot shows the numbers of its table and nothing
else: time to target against workers beside mpi4py and PyTorch DDP (scaling.md,
block_race_cnn.md), speedup (scaling.md, scaling_presets.md), the exchange's cost a round
against workers (exchange_floor.md), the run-time model's prediction against measurement
(validate_model.md, validate_links.md), and the CPU a round per process where a table of
it exists (round_cpu.md). It also writes summary.md, the page's opening table, each number
with the table and the date it comes from. A table that is missing is skipped, saying so.

matplotlib is the ``[bench]`` extra; the documentation's build only includes the PNGs.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
CORES_NOTE = "shaded: more workers than the machine's cores (oversubscribed)"
COLORS = {"ppt_dask": "#1f77b4", "mpi4py": "#d62728", "PyTorch": "#2ca02c", "other": "#ff7f0e"}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


# ---- reading the tables ----------------------------------------------------------------

def tables(path: Path) -> list[list[dict]]:
    """Every Markdown table of ``path``: a list of rows, each a dict by the header's names."""
    found, lines = [], path.read_text().splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[i + 1]):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            for body in lines[i + 2:]:
                if not body.startswith("|"):
                    break
                rows.append(dict(zip(header, (c.strip() for c in body.strip().strip("|").split("|")))))
            found.append(rows)
    return found


def number(text: str) -> float | None:
    """The first number of a cell ("1.02 [0.95-1.13]" -> 1.02, "4*" -> 4), None if none."""
    match = _NUMBER.search(text or "")
    return float(match.group().replace(",", "")) if match else None


def measured(path: Path) -> str:
    """The date and load average a table was measured at, from its machine line."""
    text = path.read_text()
    date = re.search(r"(20\d\d-\d\d-\d\d)", text)
    load = re.search(r"load average ([\d.]*\d)", text)
    return (date.group(1) if date else "no date in the table") + (f", load {load.group(1)}" if load else "")


def table(out: Path, name: str, first: str) -> list[dict] | None:
    """The first table of ``out/name.md`` whose first column is ``first`` (None: skipped)."""
    path = out / f"{name}.md"
    if not path.exists():
        print(f"{name}.md: not in {out}, skipped (its script writes it)", file=sys.stderr)
        return None
    for rows in tables(path):
        if rows and next(iter(rows[0])) == first:
            return rows
    print(f"{name}.md: no table whose first column is {first!r}, skipped", file=sys.stderr)
    return None


# ---- drawing ------------------------------------------------------------------------------

def _axes(title: str, xlabel: str, ylabel: str, ncols: int = 1):
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 3.8), squeeze=False)
    fig.suptitle(title, fontsize=11)
    for ax in axes[0]:
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    return fig, list(axes[0])


def _shade_oversubscribed(ax, cores: float, top: float) -> None:
    ax.axvspan(cores * 1.35, top * 1.2, color="0.85", zorder=0)


def _plain_log(ax, axis: str = "y") -> None:
    """Log scale with plain numbers on the ticks (2, 5, 10, not 2 x 10^0)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator

    target = ax.yaxis if axis == "y" else ax.xaxis
    if (ax.get_yscale() if axis == "y" else ax.get_xscale()) == "log" and target.get_scale() == "log":
        base = getattr(target.get_transform(), "base", 10)
        if base == 10:
            target.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FormatStrFormatter("%g"))
    target.set_minor_formatter(FormatStrFormatter(""))


def _save(fig, out: Path, name: str, source: str) -> Path:
    width = int(fig.get_figwidth() * 19)  # characters of 7-point text across the figure
    lines = textwrap.wrap(source, width)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, color="0.35")
    fig.tight_layout(rect=(0, 0.035 * len(lines) + 0.01, 1, 1))
    path = out / f"{name}.png"
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)
    return path


def _log2_x(ax, ps) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps)
    ax.set_xticklabels([str(int(p)) for p in ps])


def time_to_target(out: Path) -> Path | None:
    """Seconds to the target against workers: ppt_dask beside mpi4py (MNIST, synchronous
    block 1000, the same algorithm and target) and beside PyTorch DDP (a small CNN, block 128)."""
    mnist, cnn = table(out, "scaling", "command"), table(out, "block_race_cnn", "race")
    if mnist is None and cnn is None:
        return None
    fig, (left, right) = _axes("Time to target against workers (same algorithm, same cores)", "workers p",
                               "seconds", ncols=2)
    if mnist:
        ps = [number(r["p"]) for r in mnist]
        left.plot(ps, [number(r["seconds"]) for r in mnist], "o-", color=COLORS["ppt_dask"],
                  label="ppt-dask train (block 1000)")
        left.plot(ps, [number(r["mpi4py s"]) for r in mnist], "s--", color=COLORS["mpi4py"],
                  label="mpi4py Allreduce, same SGD")
        over = [p for p, r in zip(ps, mnist) if r.get("oversubscribed") == "yes"]
        if over:
            _shade_oversubscribed(left, min(over) / 2, max(ps))
        left.set_yscale("log")
        _plain_log(left)
        _log2_x(left, ps)
        left.set_title("MNIST to 97 % test accuracy", fontsize=10)
        left.legend(fontsize=8)
    if cnn:
        default = [r for r in cnn if "same-p" in r["contender"]]
        peers = [r for r in cnn if r["contender"].startswith("PyTorch")]
        right.plot([number(r["p"]) for r in default], [number(r["seconds"]) for r in default], "o-",
                   color=COLORS["ppt_dask"], label="ppt-dask train --model (block 128)")
        right.plot([number(r["p"]) for r in peers], [number(r["seconds"]) for r in peers], "s--",
                   color=COLORS["PyTorch"], label="PyTorch loop (p = 1), DDP gloo (p = 2)")
        _log2_x(right, sorted({number(r["p"]) for r in cnn}))
        right.set_ylim(bottom=0)
        right.set_title("small CNN, 2 epochs", fontsize=10)
        right.legend(fontsize=8)
    source = "; ".join(f"graphs/out/{n}.md ({measured(out / f'{n}.md')})" for n, t in
                       (("scaling", mnist), ("block_race_cnn", cnn)) if t)
    return _save(fig, out, "plot_time_to_target", source + "; " + CORES_NOTE)


def speedup(out: Path) -> Path | None:
    """Time at p = 1 over time at p, to the same target: the synchronous block-1000 run and
    mpi4py's (scaling.md), the MNIST preset, local SGD (scaling_presets.md)."""
    mnist, presets = table(out, "scaling", "command"), table(out, "scaling_presets", "network")
    if mnist is None and presets is None:
        return None
    fig, (ax,) = _axes("Speedup to the same target over one worker", "workers p", "time at p = 1 / time at p")
    ps: list[float] = []
    if mnist:
        ps = [number(r["p"]) for r in mnist]
        ax.plot(ps, [1 / number(r["x p1"]) for r in mnist], "o-", color=COLORS["ppt_dask"],
                label="ppt-dask, synchronous block 1000")
        mpi = [number(r["mpi4py s"]) for r in mnist]
        ax.plot(ps, [mpi[0] / m for m in mpi], "s--", color=COLORS["mpi4py"], label="mpi4py, same SGD")
        over = [p for p, r in zip(ps, mnist) if r.get("oversubscribed") == "yes"]
        if over:
            _shade_oversubscribed(ax, min(over) / 2, max(ps))
    if presets:
        pp = [number(r["p"]) for r in presets]
        ax.plot(pp, [1 / number(r["time / p = 1's"]) for r in presets], "^-", color=COLORS["other"],
                label="ppt-dask train mnist (preset: local SGD)")
        ps = sorted(set(ps) | set(pp))
    ax.plot(ps, ps, ":", color="0.5", label="ideal (p)")
    ax.set_yscale("log", base=2)
    _plain_log(ax)
    _log2_x(ax, ps)
    ax.legend(fontsize=8)
    source = "; ".join(f"graphs/out/{n}.md ({measured(out / f'{n}.md')})" for n, t in
                       (("scaling", mnist), ("scaling_presets", presets)) if t)
    return _save(fig, out, "plot_speedup", source + "; " + CORES_NOTE)


def round_cost(out: Path) -> Path | None:
    """Milliseconds a round of the exchange alone (MNIST's 55,050 weights) against workers,
    over ppt_dask's links, its mailboxes, a one-hop task graph and mpi4py's Allreduce."""
    rows = table(out, "exchange_floor", "p")
    if rows is None:
        return None
    rows = [r for r in rows if number(r["floats"]) and number(r["floats"]) > 1000]
    fig, (ax,) = _axes("The exchange's cost a round against workers (MNIST's weights)", "workers p",
                       "ms a round (exchange alone)")
    ps = [number(r["p"]) for r in rows]
    for column, style, color in (("links (streamed rounds)", "o-", COLORS["ppt_dask"]),
                                 ("mailbox (actor)", "v-", "#9467bd"),
                                 ("one-hop graph", "^-", COLORS["other"]),
                                 ("mpi4py Allreduce", "s--", COLORS["mpi4py"])):
        pairs = [(p, number(r[column])) for p, r in zip(ps, rows) if number(r.get(column, ""))]
        ax.plot([p for p, _ in pairs], [v for _, v in pairs], style, color=color, label=column)
    _shade_oversubscribed(ax, 2, max(ps))
    ax.set_yscale("log")
    _plain_log(ax)
    _log2_x(ax, ps)
    ax.legend(fontsize=8)
    return _save(fig, out, "plot_round_cost",
                 f"graphs/out/exchange_floor.md ({measured(out / 'exchange_floor.md')}); {CORES_NOTE}")


def model_against_measurement(out: Path) -> Path | None:
    """The run-time model's predicted round against the measured one, every cell of
    validate_model.md (serial and Dask rounds by block and p) and validate_links.md."""
    cells, links = table(out, "validate_model", "program"), table(out, "validate_links", "link")
    if cells is None and links is None:
        return None
    fig, (ax,) = _axes("The run-time model: predicted against measured round", "measured ms a round",
                       "predicted ms a round")
    points: list[float] = []
    kinds = ((cells, "measured ms (spread of runs)", lambda r: f"{r['program']}, p = {r['p']}", "o"),
             (links, "measured_ms", lambda r: f"2 workers, link {r['link']}", "s"))
    for rows, key, label_of, marker in kinds:
        if not rows:
            continue
        predicted_key = "predicted ms" if key.startswith("measured ms") else "predicted_ms"
        groups: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            m, p = number(r[key]), number(r[predicted_key])
            if m and p:
                groups.setdefault(label_of(r), []).append((m, p))
        for label, pairs in groups.items():
            ax.scatter([m for m, _ in pairs], [p for _, p in pairs], marker=marker, s=18, label=label)
            points += [v for pair in pairs for v in pair]
    low, high = min(points) * 0.7, max(points) * 1.4
    ax.plot([low, high], [low, high], ":", color="0.4", label="prediction = measurement")
    ax.fill_between([low, high], [low * 0.8, high * 0.8], [low * 1.2, high * 1.2], color="0.9", zorder=0,
                    label="within 20 %")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.legend(fontsize=7, loc="upper left")
    source = "; ".join(f"graphs/out/{n}.md ({measured(out / f'{n}.md')})" for n, t in
                       (("validate_model", cells), ("validate_links", links)) if t)
    return _save(fig, out, "plot_model", source)


def round_cpu(out: Path) -> Path | None:
    """The CPU a round takes per process (head, scheduler, each worker) against workers, from
    round_cpu.md where a script has written it: columns ``p`` and any whose name holds "CPU"."""
    rows = table(out, "round_cpu", "p")
    if rows is None:
        return None
    columns = [c for c in rows[0] if "cpu" in c.lower()]
    if not columns:
        print("round_cpu.md: no column that names CPU, skipped", file=sys.stderr)
        return None
    fig, (ax,) = _axes("CPU a round per process against workers", "workers p", "CPU ms a round")
    ps = [number(r["p"]) for r in rows]
    for column in columns:
        ax.plot(ps, [number(r[column]) for r in rows], "o-", label=column)
    _log2_x(ax, sorted(set(ps)))
    ax.legend(fontsize=8)
    return _save(fig, out, "plot_round_cpu", f"graphs/out/round_cpu.md ({measured(out / 'round_cpu.md')})")


PLOTS = (time_to_target, speedup, round_cost, model_against_measurement, round_cpu)


# ---- the summary -------------------------------------------------------------------------

def summary(out: Path) -> Path:
    """summary.md: the page's opening table, each line a ratio read from one table."""
    lines = ["| question | answer | from | measured |", "|---|---|---|---|"]

    def add(question: str, answer: str, name: str) -> None:
        lines.append(f"| {question} | {answer} | `graphs/out/{name}.md` | {measured(out / f'{name}.md')} |")

    peers = out / "peers.md"
    if peers.exists():
        match = re.search(r"\*\*(.+?): ([\d.]+)x the time\*\*", peers.read_text())
        if match:
            add("MNIST to 97 %, `ppt-dask train mnist` at p = 2 (its preset, local SGD) against mpi4py's "
                "synchronous SGD tuned on the same grid, same cores",
                f"{match.group(2)}x mpi4py's time (a different algorithm: see the table)", "peers")
    scaling = table(out, "scaling", "command")
    if scaling:
        for r in scaling:
            if r["oversubscribed"] != "yes" and number(r["p"]) > 1:
                add(f"MNIST to 97 %, synchronous SGD block 1000, p = {r['p']}, against mpi4py with the same "
                    "algorithm and target",
                    f"{r['x mpi4py']}x mpi4py's time; {r['x p1']}x its own time at p = 1", "scaling")
    small = table(out, "block_race_mnist", "race")
    if small:
        for r in small:
            if "same-p" in r["contender"] and number(r["p"]) > 1:
                peer = next((q for q in small if q["contender"].startswith("mpi4py") and q["p"] == r["p"]), None)
                add(f"MNIST to 97 %, synchronous SGD block 200, p = {r['p']}, against mpi4py with the same "
                    "algorithm, rows a step and stopping rule",
                    f"{r['x peer']}x mpi4py's time, in {r['epochs']} epochs to mpi4py's "
                    f"{peer['epochs'] if peer else '?'}", "block_race_mnist")
    cnn = table(out, "block_race_cnn", "race")
    if cnn:
        for r in cnn:
            if "same-p" in r["contender"] and number(r["p"]) > 1:
                add(f"a small CNN, block 128, 2 epochs, p = {r['p']}, against PyTorch DDP (gloo) on the same cores",
                    f"{r['x peer']}x DDP's time", "block_race_cnn")
    model = out / "validate_model.md"
    if model.exists():
        match = re.search(r"\*\*Mean absolute prediction error, Dask rounds with p <= 2 workers[^:]*: ([\d.]+%)",
                          model.read_text())
        if match:
            add("the run-time model's error on a round, Dask rounds at p <= 2", match.group(1), "validate_model")
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"the tables' folder, where the PNGs go (default {OUT})")
    args = parser.parse_args()
    summary(args.out)
    drawn = [plot(args.out) for plot in PLOTS]
    print(f"{sum(p is not None for p in drawn)} of {len(PLOTS)} plots drawn", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
