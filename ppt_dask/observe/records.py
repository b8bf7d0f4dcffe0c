"""A finished run's records on the head (:class:`RunRecords`): what reports, tables, curves and
Chrome traces are made of, from the collector's task records and the head's rounds
(:mod:`ppt_dask.observe.diagnostics` collects them), or from a result's history alone
(:func:`records_of`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from ppt_dask.observe.breakdown import breakdown, phase_table, summarize
from ppt_dask.observe.display import Curves, PhaseTable
from ppt_dask.observe.trace import trace_events

HEAD_FIELDS = ("round", "epoch", "loss", "error_rate", "error_estimate", "patterns",
               "wall_seconds", "head_seconds")


def plain_settings(settings: dict | None) -> dict:
    """The settings with every value a string, number, bool or None (anything else as text)."""
    out = {}
    for k, v in (settings or {}).items():
        out[str(k)] = v if isinstance(v, (str, int, float, bool, type(None))) else str(v)
    return out


@dataclass
class RunRecords:
    """A finished run's records, on the head: what reports and traces are made of."""

    run: str
    settings: dict
    tasks: list = field(repr=False)
    heads: list = field(repr=False)  # the head's records of the last rounds, in full (a RoundLog's window)
    dropped: int = 0  # task records the collector had to drop (bounded memory)
    head_cost_seconds: float = 0.0  # the recorder's own head time per round (mean)
    report_writer: Callable | None = field(default=None, repr=False, compare=False)
    # the rounds before ``heads``, folded into bins (ppt_dask.observe.roundlog): as breakdown rows
    # (streamed rounds) and as head records, each with the ``rounds`` it stands for
    binned_rows: list = field(default_factory=list, repr=False)
    binned_heads: list = field(default_factory=list, repr=False)

    def rows(self) -> list[dict]:
        """Per-round breakdown, after the binned rows of the older rounds (``rounds``: how many
        each stands for); without the oldest round when task records were dropped."""
        return self.binned_rows + breakdown(self.tasks, self.heads)[1 if self.dropped else 0:]

    def all_heads(self) -> list[dict]:
        """The head's records: a bin's means for the older rounds, then each recent round."""
        return self.binned_heads + self.heads

    def summary(self) -> dict:
        return {**summarize(self.rows()), "head_cost_seconds": self.head_cost_seconds,
                "dropped_records": self.dropped}

    def table(self) -> PhaseTable:
        """The phase table: a list of dicts, one per phase, shown as a table in a notebook."""
        return PhaseTable(phase_table(self.rows()))

    def curves(self) -> Curves:
        """The loss and error rate per round, drawn in a notebook."""
        return Curves(self.rows())

    def trace(self) -> dict:
        return trace_events(self.tasks, self.heads, self.settings)

    def write_trace(self, path) -> None:
        """Write the Chrome trace (``chrome://tracing``, https://ui.perfetto.dev)."""
        with open(path, "w") as fh:
            json.dump(self.trace(), fh, default=str)

    def write_report(self, result, path) -> None:
        """Write the standalone HTML report of ``result`` (whose records these are) with the
        writer the recorder was given (:func:`ppt_dask.observe.dashboard.write_report`)."""
        if self.report_writer is None:
            raise ValueError("these records have no report writer: pass the recorder "
                             "report=ppt_dask.observe.dashboard.write_report (ppt_dask.train does)")
        self.report_writer(result, path)


def records_of(obj) -> RunRecords:
    """The :class:`RunRecords` of a ``Result`` (or the records themselves).

    A result without task records (the scheduler did not take the collector, or a loop
    that does not record) still has its history: records with no tasks are made from it.
    """
    if isinstance(obj, RunRecords):
        return obj
    if getattr(obj, "diagnostics", None) is not None:
        return obj.diagnostics
    heads = [{**{k: h.get(k) for k in HEAD_FIELDS}, "gen": int(h.get("try", 0))}
             for h in getattr(obj, "history", [])]
    return RunRecords("no-task-records", plain_settings(getattr(obj, "settings", {})), [], heads)


def write_trace(obj, path) -> None:
    """Write the Chrome trace of a ``Result`` or :class:`RunRecords` to ``path``."""
    records_of(obj).write_trace(path)
