"""The view: a page on the Dask dashboard and a standalone HTML report (the only bokeh module).

Importing this module adds the page to the scheduler's dashboard at ``/ppt`` (and at
``/individual-ppt``, which the dashboard lists under "More" and JupyterLab can embed);
``dask_setup`` makes it a scheduler preload, which also starts the collector::

    dask scheduler --preload ppt_dask.observe.dashboard        # then open http://HOST:8787/ppt

:func:`ppt_dask.connect` preloads it on the LocalCluster it starts. The page redraws once
a second from the collector's records of the latest run: bars and curves of its last
``PAGE_ROUNDS`` rounds, the summary and the phase table of the whole run (the rounds the
collector folded into bins, :mod:`ppt_dask.observe.roundlog`, and the last ones in full);
:func:`write_report` draws the same components once, from a finished run, into a
single HTML file with bokeh's JavaScript inline, so it opens without a server or network.

Each component follows distributed's pattern: a ``source``, a ``root`` and ``update()``,
which pulls a :class:`View` (plain data from :mod:`ppt_dask.observe.breakdown`) from its feed.
"""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable
from typing import NamedTuple

from bokeh import __version__ as bokeh_version
from bokeh.embed import file_html
from bokeh.layouts import column, row
from bokeh.models import (
    ColumnDataSource,
    DataRange1d,
    DataTable,
    Div,
    HoverTool,
    LinearAxis,
    NumberFormatter,
    NumeralTickFormatter,
    TableColumn,
)
from bokeh.plotting import figure
from bokeh.resources import INLINE
from distributed.dashboard.components import add_periodic_callback
from distributed.dashboard.scheduler import applications
from distributed.utils import log_errors

from ppt_dask.observe import breakdown as bd
from ppt_dask.observe.diagnostics import ensure_collector, records_of
from ppt_dask.observe.pagetext import settings_html, summary_html

ROUTE = "/ppt"
PAGE_ROUNDS = 300  # rounds drawn on the live page
PAGE_TASKS = 2500  # task records read per redraw (the tail of the latest run): ~10 ms
COLORS = {"gradient": "#1f77b4", "reduce": "#2ca02c", "other": "#8c564b", "transfer": "#ff7f0e",
          "scheduler": "#9467bd", "head": "#d62728", "idle": "#c7c7c7"}
LABELS = {"gradient": "gradient", "reduce": "reduce + update", "other": "eval / other",
          "transfer": "transfer", "scheduler": "scheduler latency", "head": "head", "idle": "idle"}
# streamed rounds (one loop per worker for the run): the same stacks named for what they are
# there, and no scheduler latency (no task is handed over per round)
STREAM_LABELS = {**LABELS, "transfer": "sending sums", "head": "waiting for the head",
                 "idle": "waiting for others' sums", "scheduler": None}


class View(NamedTuple):
    """What every component draws from: rows, head records, the phase table, totals."""

    run: str
    rows: list
    heads: list
    table: list
    summary: dict
    settings: dict


def make_view(run: str, tasks: list, heads: list, settings: dict | None = None,
              last: int | None = None, partial: bool = False, binned_rows: list = (),
              binned_heads: list = ()) -> View:
    """Rows, table and totals of the records; the rows and head records drawn are the
    ``last`` ones only, if given (the table and totals are the whole run's).

    ``binned_rows`` and ``binned_heads``: the older rounds, folded into bins
    (:mod:`ppt_dask.observe.roundlog`), before ``tasks`` and ``heads``' rounds. ``partial``
    says the oldest task records were left out: the first round may have lost some of its
    tasks, so it is dropped.
    """
    rows = [*binned_rows, *bd.breakdown(tasks, heads)[1 if partial else 0:]]
    heads = [*binned_heads, *heads]
    table, summary = bd.phase_table(rows), bd.summarize(rows)
    if last is not None:
        rows, heads = rows[-last:], heads[-last:]
    return View(run, rows, heads, table, summary, settings or {})


# ---- components ------------------------------------------------------------------------


class _Component:
    """``source``, ``root``, ``update()``: ``update`` redraws only when the feed has news."""

    feed: Callable[[], View | None]
    _shown = None

    @log_errors
    def update(self):
        view = self.feed()
        if view is not None and view is not self._shown:
            self._shown = view
            self.draw(view)


PREDICTED_LABEL = "predicted round"


class RoundBars(_Component):
    """Stacked bars per round: where each round's wall time went (ms)."""

    def __init__(self, feed: Callable[[], View | None], **kwargs):
        self.feed = feed
        self.source = ColumnDataSource(bd.bar_columns([]), name="ppt-rounds")
        self.root = figure(title="Where each round's time goes (ms, mean over workers)",
                           x_axis_label="round of the run", y_axis_label="ms", height=320,
                           tools="pan,xwheel_zoom,box_zoom,reset,save", **kwargs)
        names = [name for name, _ in bd.STACKS]
        renderers = self.root.vbar_stack(names, x="x", width=0.9, source=self.source,
                                         color=[COLORS[n] for n in names], legend_label=[LABELS[n] for n in names])
        self.root.legend.orientation = "horizontal"
        self.root.legend.nrows = 2  # in one row its ten labels ran past the plot's left edge, cut off
        self.root.legend.label_text_font_size = "8pt"
        self.root.add_layout(self.root.legend[0], "above")  # over the plot, not over the bars
        self.hover = HoverTool(tooltips=self._tooltips(LABELS), renderers=list(renderers))
        self.root.add_tools(self.hover)
        self.items = dict(zip(names, self.root.legend[0].items))
        self.renderers = dict(zip(names, renderers))
        self.streamed = False
        # the run-time model's predicted round (ppt-dask train --calibration): a line over the bars
        self.predicted = ColumnDataSource({"x": [], "predicted_ms": []}, name="ppt-predicted")
        self.root.line("x", "predicted_ms", source=self.predicted, color="black", line_dash="dashed",
                       line_width=2, legend_label=PREDICTED_LABEL)
        self.predicted_item = self.root.legend[0].items[-1]
        self.root.legend[0].name = "ppt-legend"
        self.root.legend[0].items = list(self.items.values())  # shown once there is a prediction
        self.predicting = False

    @staticmethod
    def _tooltips(labels: dict) -> list:
        return [("round", "@gen/@round"), ("wall", "@wall_ms{0.0} ms"),
                *((labels[n], f"@{n}{{0.00}} ms") for n, _ in bd.STACKS if labels[n] is not None)]

    def draw(self, view: View):
        self.source.data = bd.bar_columns(view.rows)
        predicted = view.settings.get("predicted_round_ms")
        n = len(view.rows)
        self.predicted.data = ({"x": [-0.5, n - 0.5], "predicted_ms": [float(predicted)] * 2}
                               if predicted and n else {"x": [], "predicted_ms": []})
        streamed = bool(view.summary.get("streamed"))
        if streamed != self.streamed or bool(predicted) != self.predicting:  # name the stacks for the rounds shown
            self.streamed, self.predicting = streamed, bool(predicted)
            labels = STREAM_LABELS if streamed else LABELS
            for name, item in self.items.items():
                self.renderers[name].visible = labels[name] is not None
                if labels[name] is not None:
                    item.label = {"value": labels[name]}
            self.root.legend[0].items = ([item for name, item in self.items.items() if labels[name] is not None]
                                         + ([self.predicted_item] if predicted else []))
            self.hover.tooltips = self._tooltips(labels)


class Curves(_Component):
    """The loss (left axis) and the error rate and estimate (right axis) per round."""

    def __init__(self, feed: Callable[[], View | None], **kwargs):
        self.feed = feed
        self.source = ColumnDataSource(bd.curve_columns([]), name="ppt-curves")
        self.root = figure(title="Loss and error", x_axis_label="round of the run",
                           y_axis_label="loss", height=320, tools="pan,xwheel_zoom,box_zoom,reset,save",
                           **kwargs)
        self.root.line("x", "loss", source=self.source, color="#1f77b4", line_width=2, legend_label="loss")
        self.root.extra_y_ranges = {"error": DataRange1d(start=0)}
        self.root.add_layout(LinearAxis(y_range_name="error", axis_label="error rate"), "right")
        rate = self.root.line("x", "error_rate", source=self.source, color="#d62728", alpha=0.5,
                              y_range_name="error", legend_label="error (round)")
        est = self.root.line("x", "error_estimate", source=self.source, color="#d62728", line_width=2,
                             y_range_name="error", legend_label="error estimate")
        self.root.extra_y_ranges["error"].renderers = [rate, est]
        self.root.legend.location = "top_right"
        self.root.add_tools(HoverTool(tooltips=[("round", "@gen/@round"), ("epoch", "@epoch{0.00}"),
                                                ("loss", "@loss{0.0000}"), ("error", "@error_rate{0.0000}")]))

    def draw(self, view: View):
        self.source.data = bd.curve_columns(view.heads)


class Throughput(_Component):
    """Patterns per second (left) and percent of time not computing gradients (right)."""

    def __init__(self, feed: Callable[[], View | None], **kwargs):
        self.feed = feed
        self.source = ColumnDataSource(bd.bar_columns([]), name="ppt-throughput")
        self.root = figure(title="Throughput and overhead", x_axis_label="round of the run",
                           y_axis_label="patterns / s", height=300,
                           tools="pan,xwheel_zoom,box_zoom,reset,save", **kwargs)
        self.root.line("x", "patterns_per_second", source=self.source, color="#1f77b4", line_width=2,
                       legend_label="patterns / s")
        self.root.yaxis[0].formatter = NumeralTickFormatter(format="0,0")
        self.root.extra_y_ranges = {"pct": DataRange1d(start=0, end=100)}
        self.root.add_layout(LinearAxis(y_range_name="pct", axis_label="% not gradient"), "right")
        self.root.line("x", "not_gradient_percent", source=self.source, color="#ff7f0e",
                       y_range_name="pct", legend_label="% of time not computing gradients")
        self.root.legend.location = "top_left"
        self.root.add_tools(HoverTool(tooltips=[("round", "@gen/@round"),
                                                ("patterns/s", "@patterns_per_second{0,0}"),
                                                ("% not gradient", "@not_gradient_percent{0.0}")]))

    def draw(self, view: View):
        self.source.data = bd.bar_columns(view.rows)


class PhaseTable(_Component):
    """The gprof-style flat profile: share of time per phase (002, Table 1)."""

    FIELDS = (("percent", "% time", "0.0"), ("cumulative_seconds", "cumulative s", "0.000"),
              ("seconds", "self s", "0.000"), ("rounds", "rounds", "0"),
              ("ms_per_round", "self ms/round", "0.000"))

    def __init__(self, feed: Callable[[], View | None], **kwargs):
        self.feed = feed
        self.source = ColumnDataSource({k: [] for k in ("phase", "description", *(f for f, _, _ in self.FIELDS))})
        columns = [TableColumn(field=f, title=t, formatter=NumberFormatter(format=fmt), width=80)
                   for f, t, fmt in self.FIELDS]
        columns += [TableColumn(field="phase", title="phase", width=90),
                    TableColumn(field="description", title="what it is", width=380)]
        self.root = DataTable(source=self.source, columns=columns, index_position=None,
                              height=290, name="ppt-phases", **kwargs)

    def draw(self, view: View):
        # A table redraws when its rows change in number, or when its source is replaced:
        # the phases are always the same nine rows, so replace the source.
        self.source = ColumnDataSource({k: [e[k] for e in view.table] for k in self.source.data})
        self.root.source = self.source


class Summary(_Component):
    """The run's headline figures, as text."""

    def __init__(self, feed: Callable[[], View | None], **kwargs):
        self.feed = feed
        self.source = None
        self.root = Div(text="<p>No ppt_dask run on this scheduler yet.</p>", name="ppt-summary", **kwargs)

    def draw(self, view: View):
        self.root.text = summary_html(view)


COMPONENTS = (Summary, RoundBars, Curves, Throughput, PhaseTable)


def _layout(parts: dict):
    return column(parts[Summary].root,
                  row(parts[RoundBars].root, parts[Curves].root, sizing_mode="stretch_width"),
                  row(parts[Throughput].root, parts[PhaseTable].root, sizing_mode="stretch_width"),
                  sizing_mode="stretch_width")


# ---- the live page ---------------------------------------------------------------------


class LiveFeed:
    """The latest run's records on this scheduler, as a :class:`View`, recomputed only when
    the collector has something new."""

    def __init__(self, scheduler):
        self.collector = ensure_collector(scheduler)
        self._key, self._view = None, None

    def __call__(self) -> View | None:
        log = self.collector.latest()
        if log is None:
            return None
        if (log.run, log.version) != self._key:
            n = len(log.tasks)
            tasks = list(itertools.islice(log.tasks, max(0, n - PAGE_TASKS), n))
            self._view = make_view(log.run, tasks, log.heads.records(), log.settings, last=PAGE_ROUNDS,
                                   partial=n > PAGE_TASKS or log.dropped > 0,
                                   binned_rows=log.heads.bin_rows(), binned_heads=log.heads.bin_heads())
            self._key = (log.run, log.version)
        return self._view


class _Parts:
    """Components redrawn in one callback, so that each tick shows the same rounds in all."""

    def __init__(self, parts):
        self.parts = list(parts)

    def update(self):
        for part in self.parts:
            part.update()


def _page(scheduler, doc):
    feed = LiveFeed(scheduler)
    parts = {cls: cls(feed, sizing_mode="stretch_width") for cls in COMPONENTS}
    together = _Parts(parts.values())
    together.update()
    add_periodic_callback(doc, together, 1000)
    doc.title = "Dask: ppt_dask rounds"
    doc.add_root(_layout(parts))
    return parts


@log_errors
def ppt_doc(scheduler, extra, doc):
    """The page at ``/ppt``, inside the dashboard's own frame."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME, env

    _page(scheduler, doc)
    doc.template = env.get_template("simple.html")
    doc.template_variables.update(extra)
    doc.theme = BOKEH_THEME


@log_errors
def individual_ppt_doc(scheduler, extra, doc):
    """The same page alone (``/individual-ppt``), for the "More" menu and JupyterLab."""
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    _page(scheduler, doc)
    doc.theme = BOKEH_THEME


applications[ROUTE] = ppt_doc
applications["/individual-ppt"] = individual_ppt_doc


def dask_setup(scheduler):
    """Scheduler preload hook (``dask scheduler --preload ppt_dask.observe.dashboard``)."""
    ensure_collector(scheduler)


# ---- the report ------------------------------------------------------------------------


def report_html(result) -> str:
    """The standalone HTML report of a finished run (``Result`` or ``RunRecords``)."""
    records = records_of(result)
    view = make_view(records.run, records.tasks, records.heads, records.settings,
                     partial=records.dropped > 0, binned_rows=getattr(records, "binned_rows", []),
                     binned_heads=getattr(records, "binned_heads", []))
    parts = {cls: cls(lambda: view, sizing_mode="stretch_width") for cls in COMPONENTS}
    for part in parts.values():
        part.update()
    settings = dict(records.settings)
    if hasattr(result, "summary"):
        settings.update({k: v for k, v in result.summary().items() if k not in settings})
    settings["diagnostics head cost per round"] = f"{1e6 * records.head_cost_seconds:.1f} us"
    if records.dropped:
        settings["task records dropped (bounded memory)"] = records.dropped
    settings["versions"] = versions()
    # the data set (named by the command line), strategy and workers head the report
    named = ", ".join(f"{k} {settings[k]}" for k in ("dataset", "strategy", "workers") if k in settings)
    title = Div(text=f"<h2>ppt_dask run {html.escape(records.run)}{': ' + html.escape(named) if named else ''}</h2>")
    table = Div(text="<h3>Settings and results</h3>" + settings_html(settings))
    profile = Div(text="<h3>Flat profile</h3><pre>" + html.escape(bd.format_table(view.table)) + "</pre>")
    layout = column(title, _layout(parts), table, profile, sizing_mode="stretch_width")
    return file_html(layout, INLINE, title=f"ppt_dask run {records.run}")


def versions() -> str:
    """The versions a run's numbers depend on, in one line."""
    import platform

    import dask
    import distributed
    import numpy

    from ppt_dask import __version__
    return (f"ppt_dask {__version__}, dask {dask.__version__}, distributed {distributed.__version__}, "
            f"numpy {numpy.__version__}, bokeh {bokeh_version}, Python {platform.python_version()}")


def write_report(result, path) -> None:
    """Write :func:`report_html` to ``path``."""
    text = report_html(result)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
