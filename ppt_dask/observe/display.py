"""How a run's records show in a notebook: a table for the phase table, a drawing for curves.

Jupyter shows an object by its ``_repr_html_`` when it has one, else by its ``repr``. The
records stay what they were (a list of dicts, a list of floats: they compare, index, pickle
and turn into a pandas DataFrame as before); these thin subclasses only add how they look,
as pandas' DataFrame does. Plain Python, no plotting library: the curves are a small inline
SVG (one polyline per series), so a stored notebook shows them anywhere, with no JavaScript.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from ppt_dask.observe.breakdown import format_table

# The phase table's columns, as the page and the report name them (its ``description`` last).
PHASE_COLUMNS = (("phase", "phase", "{}"), ("percent", "% time", "{:.1f}"),
                 ("cumulative_seconds", "cumulative s", "{:.3f}"), ("seconds", "self s", "{:.3f}"),
                 ("rounds", "rounds", "{:d}"), ("ms_per_round", "ms/round", "{:.3f}"),
                 ("description", "what it is", "{}"))
SVG_WIDTH, SVG_HEIGHT, MARGIN = 360, 160, 34  # pixels: a curve beside text, not a figure


class PhaseTable(list):
    """The gprof-style phase table (:func:`ppt_dask.observe.breakdown.phase_table`): a list
    of dicts, one per phase, largest first, shown as a table.

    ``repr`` is the text table :func:`~ppt_dask.observe.breakdown.format_table` prints;
    ``_repr_html_`` an HTML table with one row per phase and the phase's description.
    ``pandas.DataFrame(table)`` makes a frame of it.
    """

    def __repr__(self) -> str:
        return format_table(self) if self else "PhaseTable([])  (no rounds recorded)"

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in PHASE_COLUMNS)
        rows = []
        for entry in self:
            cells = "".join(f"<td>{html.escape(fmt.format(entry[key]))}</td>" for key, _, fmt in PHASE_COLUMNS)
            rows.append(f"<tr>{cells}</tr>")
        body = "".join(rows) or f'<tr><td colspan="{len(PHASE_COLUMNS)}">no rounds recorded</td></tr>'
        return (f'<table class="ppt-phase-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")


def _finite(values: Iterable) -> list[tuple[int, float]]:
    out = []
    for i, v in enumerate(values):
        if v is not None and isinstance(v, (int, float)) and math.isfinite(v):
            out.append((i, float(v)))
    return out


def svg_curves(series: dict[str, Sequence], x_label: str, title: str = "") -> str:
    """One small SVG with a polyline per series (name -> values; None and NaN left out),
    the first and last x and the least and greatest y written on the axes."""
    points = {name: _finite(values) for name, values in series.items()}
    every = [p for pts in points.values() for p in pts]
    if not every:
        return f"<p>{html.escape(title or x_label)}: nothing recorded</p>"
    x0, x1 = min(i for i, _ in every), max(i for i, _ in every)
    y0, y1 = min(v for _, v in every), max(v for _, v in every)
    w, h = SVG_WIDTH - 2 * MARGIN, SVG_HEIGHT - 2 * MARGIN

    def xy(i: int, v: float) -> str:
        x = MARGIN + (w * (i - x0) / (x1 - x0) if x1 > x0 else w / 2)
        y = MARGIN + (h * (y1 - v) / (y1 - y0) if y1 > y0 else h / 2)
        return f"{x:.1f},{y:.1f}"

    colors = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")
    lines, legend = [], []
    for k, (name, pts) in enumerate(points.items()):
        color = colors[k % len(colors)]
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                     f'points="{" ".join(xy(i, v) for i, v in pts)}"/>')
        legend.append(f'<text x="{MARGIN + 90 * k}" y="{MARGIN - 8}" font-size="11" fill="{color}">'
                      f"{html.escape(name)}</text>")
    axes = (f'<rect x="{MARGIN}" y="{MARGIN}" width="{w}" height="{h}" fill="none" stroke="#999"/>'
            f'<text x="{MARGIN - 4}" y="{MARGIN + 4}" font-size="10" text-anchor="end">{y1:.3g}</text>'
            f'<text x="{MARGIN - 4}" y="{MARGIN + h}" font-size="10" text-anchor="end">{y0:.3g}</text>'
            f'<text x="{MARGIN}" y="{MARGIN + h + 14}" font-size="10">{x0}</text>'
            f'<text x="{MARGIN + w}" y="{MARGIN + h + 14}" font-size="10" text-anchor="end">{x1}</text>'
            f'<text x="{MARGIN + w / 2}" y="{MARGIN + h + 26}" font-size="11" text-anchor="middle">'
            f"{html.escape(x_label)}</text>")
    label = f"<title>{html.escape(title)}</title>" if title else ""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{SVG_HEIGHT}" '
            f'role="img">{label}{axes}{"".join(lines)}{"".join(legend)}</svg>')


class LossCurve(list):
    """A loss per epoch (an estimator's ``loss_curve_``): a list of floats, as
    scikit-learn's, that draws itself in a notebook."""

    def _repr_html_(self) -> str:
        return svg_curves({"training loss": self}, "epoch", "loss per epoch")


class Curves:
    """The loss and error rate of each round of a run, from its per-round rows
    (:func:`ppt_dask.observe.breakdown.breakdown`); drawn in a notebook.

    Attributes
    ----------
    round, epoch, loss, error_rate : list
        One entry per round (None where the head did not record it).
    """

    def __init__(self, rows: Sequence[dict]):
        self.round = [r.get("round") for r in rows]
        self.epoch = [r.get("epoch") for r in rows]
        self.loss = [r.get("loss") for r in rows]
        self.error_rate = [r.get("error_rate") for r in rows]

    def __len__(self) -> int:
        return len(self.round)

    def __repr__(self) -> str:
        last = next((f"loss {v:.4g}" for v in reversed(self.loss) if v is not None), "no loss recorded")
        return f"Curves({len(self)} rounds, last {last})"

    def _repr_html_(self) -> str:
        return (svg_curves({"loss": self.loss}, "round", "training loss per round")
                + svg_curves({"error rate": self.error_rate}, "round", "error rate per round"))
