"""What every graphs/ script shares: arguments, tables (Markdown + CSV), figures (bokeh
HTML + PNG), the machine line, and the run-time model's constants for this cluster.

Tables go to ``OUT/<name>.md`` and ``OUT/<name>.csv``; figures to ``OUT/<name>.html``
(bokeh, JavaScript from the CDN, so the file stays small) and, where a headless chromium
and chromedriver are installed, ``OUT/<name>.png`` (a screenshot of the same plot).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import os
import platform
import re
import shlex
import sys
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "out"
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


# ---- arguments -------------------------------------------------------------------------

def _parse_like(default):
    if isinstance(default, bool):
        return lambda text: text.lower() in ("1", "true", "yes")
    if isinstance(default, tuple):
        kind = type(default[0]) if default else int
        return lambda text: tuple(kind(t) for t in text.split(",") if t.strip())
    return type(default)


def arguments(doc: str, defaults: dict, quick: dict) -> argparse.Namespace:
    """argparse over the script's defaults block: ``--name VALUE`` for each entry (tuples
    as ``1,2,4``), ``--quick`` (the ``quick`` values, unless given explicitly), ``--out``
    and ``--no-png``. Attribute names are the lower-case keys."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    for key, value in defaults.items():
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
        parser.add_argument("--" + key.lower().replace("_", "-"), dest=key.lower(), default=None,
                            type=_parse_like(value), help=f"default {shown}")
    parser.add_argument("--quick", action="store_true", help="a small run, under a minute")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default {OUT})")
    parser.add_argument("--no-png", action="store_true", help="skip the PNG screenshots")
    args = parser.parse_args()
    for key, value in defaults.items():
        if getattr(args, key.lower()) is None:
            setattr(args, key.lower(), quick.get(key, value) if args.quick else value)
    args.png = not (args.no_png or args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    return args


# ---- provenance ------------------------------------------------------------------------

def machine() -> str:
    """CPU, cores, memory, date and load: printed under every table."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
        with open("/proc/meminfo") as fh:
            mem = int(next(line.split()[1] for line in fh if line.startswith("MemTotal"))) / 2**20
    except (OSError, StopIteration):
        mem = float("nan")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    today = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, {platform.system()}; {today}; load average {load:.1f}"


def command() -> str:
    """The command line that made the output, relative to the repository."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(Path(__file__).resolve().parents[1])
    except ValueError:
        pass
    return " ".join(["python", str(script), *map(shlex.quote, sys.argv[1:])])


# ---- tables ----------------------------------------------------------------------------

# the sources by their authors in what the tables show (the scripts and the CSV columns keep
# the papers' file numbers: paper001_blocks.py, "001 p=2"); the Concepts page lists them
AUTHORS = {"000": "Dahl et al. (2008)", "001": "Mörchen (2004)", "002": "Sobreira and Carneiro (2024)",
           "003": "the Stack Exchange thread (2015)", "004": "Alowaisheq and Dhami"}
_PAPER_NUMBER = re.compile(r"(?<![\w.,/-])(00[0-4])(?![\w.])")


def by_authors(text: str) -> str:
    """``text`` with each paper's file number ("000 s", "001's Table VII") as its authors."""
    return _PAPER_NUMBER.sub(lambda m: AUTHORS[m.group(1)], text)


def cell(value) -> str:
    """A table cell: 3 significant digits for floats, blank for None/NaN."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.3g}"
        digits = 0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2 if abs(v) >= 1 or v == 0 else 3
        return f"{v:,.{digits}f}"
    return str(value)


def markdown(rows: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def write_table(out: Path, name: str, rows: list[dict], *, title: str, notes=(), columns=None) -> Path:
    """``out/name.csv`` (raw values) and ``out/name.md`` (title, machine, command, notes)."""
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    with open(out / f"{name}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    text = [f"### {title}", "", markdown(rows, columns), "",
            f"Machine: {machine()}.  ", f"Command: `{command()}`"]
    text += ["", *[f"- {n}" for n in notes]] if notes else []
    path = out / f"{name}.md"
    path.write_text(by_authors("\n".join(text) + "\n"))
    print(f"wrote {path}", file=sys.stderr)
    return path


# ---- figures ---------------------------------------------------------------------------

def figure(title: str, x_label: str, y_label: str, *, x_log=False, y_log=False, width=620, height=380):
    """A bokeh figure whose legend sits to the right of the plot, clear of the data."""
    from bokeh.models import Legend
    from bokeh.plotting import figure as bokeh_figure
    fig = bokeh_figure(title=title, width=width, height=height, x_axis_label=x_label, y_axis_label=y_label,
                       x_axis_type="log" if x_log else "linear", y_axis_type="log" if y_log else "linear",
                       tools="pan,wheel_zoom,box_zoom,reset,save,hover")
    fig.add_layout(Legend(label_text_font_size="8pt", spacing=0, click_policy="hide"), "right")
    return fig


def line(fig, x, y, label: str, i: int, *, dash="solid", points=False):
    """One series; ``points=True`` draws markers only (measured), else a line (model)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    color = COLORS[i % len(COLORS)]
    if points:
        fig.scatter(x, y, legend_label=label, color=color, size=8)
    else:
        fig.line(x, y, legend_label=label, color=color, line_width=2, line_dash=dash)


def save_figure(out: Path, name: str, layout, title: str, png: bool = True) -> Path:
    """``out/name.html`` (bokeh, CDN JavaScript) and, when possible, ``out/name.png``."""
    from bokeh.embed import file_html
    from bokeh.resources import CDN
    path = out / f"{name}.html"
    path.write_text(file_html(layout, CDN, title=title))
    print(f"wrote {path}", file=sys.stderr)
    if png:
        try:
            _png(layout, out / f"{name}.png")
        except Exception as exc:  # no browser here: the HTML is the figure
            print(f"no PNG for {name} ({type(exc).__name__}: {exc})", file=sys.stderr)
    return path


def _png(layout, path: Path) -> None:
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium must not look for drivers online
    from bokeh.io import export_png
    from bokeh.io.webdriver import create_chromium_webdriver
    driver = create_chromium_webdriver(["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
    try:
        export_png(layout, filename=str(path), webdriver=driver)
    finally:
        driver.quit()
    print(f"wrote {path}", file=sys.stderr)


# ---- the cluster and the run-time model ------------------------------------------------

def one_thread():
    """Context: one BLAS thread on the head, as every worker has (for serial timings)."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(1)


def start(workers: int, security=None):
    """A LocalCluster of ``workers`` single-threaded processes (no dashboard), waited for;
    ``security=False`` for one whose address other processes (a command line) are given."""
    import ppt_dask as ppt
    client = ppt.connect(n_workers=workers, dashboard_address=None, security=security)
    client.wait_for_workers(workers, timeout=120)
    return client


def addresses(client, p: int) -> list[str]:
    import ppt_dask as ppt
    return ppt.cluster.worker_addresses(client)[:p]


def cluster_terms(client, quick: bool = False) -> dict:
    """The cluster's terms of the run-time model (seed 001 eq. (4) plus the Dask head):
    ``Th = th0 + th1 * tasks`` from probe rounds over virtual cluster sizes and ``Tw, Ti``
    from reductions over the real workers (:mod:`ppt_dask.perf.calibrate`).

    The probes do not spin: on a machine shared with other work a probe that spins for a
    fixed CPU time takes several times longer in wall time, and the fit would charge that
    to the head. So the shortest gradient phase ``tq`` is folded into ``th0`` here."""
    import ppt_dask as ppt
    from ppt_dask.perf import calibrate
    rounds, warmup = (8, 2) if quick else (20, 5)
    head = calibrate.measure_head(client, p_values=(1, 2, 4) if quick else (1, 2, 4, 8, 16),
                                  rounds=rounds, warmup=warmup, spin_seconds=0.0)
    tw, ti = 0.0, 0.0
    if len(ppt.cluster.worker_addresses(client)) >= 2:
        tw, ti = calibrate.measure_reduce(client, (1000, 100_000), head=head, rounds=rounds, warmup=warmup,
                                          spin_seconds=0.0)
    return dict(th0_seconds=head.th0_seconds, th1_seconds=head.th1_seconds, tq_seconds=0.0,
                tw_seconds_per_weight=tw, ti_seconds=ti)


def model_constants(client, net, X, y, block: int, terms: dict, repeats: int = 5):
    """:class:`ppt_dask.perf.model.Constants` of ``net`` on this cluster: Tf, Tb, Tu, Tm, Ts,
    To, Ta, tc timed on a worker (001 sec. V-A: the real code, a few iterations), plus the
    cluster's ``terms`` (:func:`cluster_terms`)."""
    from ppt_dask.perf import calibrate
    n = min(len(X), max(4 * int(block), 2000))
    first = addresses(client, 1)
    data = client.scatter([np.asarray(X[:n]), np.asarray(y[:n])], workers=first)
    local = client.submit(calibrate.measure_constants, net, *data, block=int(min(block, n)),
                          repeats=repeats, workers=first, pure=False).result()
    return dataclasses.replace(local, **terms)


def percent_not_gradient(result) -> float | None:
    """Share (%) of the workers' time not spent computing gradients, from the run's
    diagnostics (scheduler-side task records); None when the run has none."""
    summary = result.diagnostics.summary() if getattr(result, "diagnostics", None) is not None else {}
    return summary.get("percent_not_gradient")


def mean(values) -> float:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.mean(values)) if values else float("nan")
