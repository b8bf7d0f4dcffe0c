"""The text of the page and the report: a run's summary line and its settings, as HTML
strings (pure; the view, :mod:`ppt_dask.observe.dashboard`, puts them in its components)."""

from __future__ import annotations

import html
import math


def _fmt(value, spec="", unit="") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:{spec}}{unit}"


def summary_html(view) -> str:
    """The summary line of a run's view (its ``run`` and ``summary``) as HTML."""
    s = view.summary
    rounds = f"{s.get('rounds', 0)} rounds"
    if s.get("streamed"):
        rounds += " (streamed: one loop per worker, no scheduler hop a round)"
    parts = [f"<b>run {html.escape(view.run)}</b>", rounds,
             f"{_fmt(s.get('workers'))} workers",
             f"<b>{_fmt(s.get('percent_not_gradient'), '.1f', ' %')}</b> of the workers' time not "
             f"computing gradients",
             f"median round {_fmt(s.get('median_round_ms'), '.2f', ' ms')}",
             f"median head submit {_fmt(s.get('median_head_submit_ms'), '.3f', ' ms')} per round",
             f"{_fmt(s.get('patterns_per_second'), ',.0f')} patterns/s",
             f"{_fmt((s.get('transfer_bytes_per_round') or 0) / 1e3, '.1f', ' kB')} sent per round (median, "
             f"{_fmt((s.get('transfer_bytes_per_round') or 0) / 1e3 / max(s.get('workers') or 1, 1), '.1f', ' kB')}"
             " a worker)"]
    return "<p>" + " &middot; ".join(parts) + "</p>"


def settings_html(settings: dict) -> str:
    """A run's settings as an HTML table, one row a setting."""
    cells = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(str(k))}</th>"
                    f"<td>{html.escape(str(v))}</td></tr>" for k, v in settings.items())
    return f"<table style='font-size:90%'>{cells}</table>"
