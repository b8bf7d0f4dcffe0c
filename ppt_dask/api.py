"""The entry points that join the layers: the engine's training loop, recorded.

The engine imports nothing of :mod:`ppt_dask.observe`; this is where the two meet. ``train``
is :func:`ppt_dask.engine.trainer.train` with the collector of :mod:`ppt_dask.observe` as its
recorder, so its result has the per-round breakdown, the report and the trace (pass
``recorder=None`` to record nothing); an asynchronous run that left a straggler's shards out
says so (:meth:`ppt_dask.Result.warn_left_out`).
"""

from __future__ import annotations

import functools
import inspect

from ppt_dask.engine import trainer
from ppt_dask.observe import diagnostics


def write_report(result, path) -> None:
    """:func:`ppt_dask.observe.dashboard.write_report`, imported (with bokeh) only when asked."""
    from ppt_dask.observe.dashboard import write_report as write

    write(result, path)


class _Recorder(functools.partial):
    """The collector's recorder, named as ``help(ppt.train)`` and the reference show the
    default of ``recorder`` (a partial's repr is a line of addresses)."""

    def __repr__(self) -> str:
        return "ppt_dask.api.RECORDER"


RECORDER = _Recorder(diagnostics.Recorder, report=write_report)


@functools.wraps(trainer.train)
def train(*args, **kwargs):
    kwargs.setdefault("recorder", RECORDER)
    result = trainer.train(*args, **kwargs)
    result.warn_left_out(stacklevel=2)  # a straggler's shards went unlearned: said at the caller's line
    return result


_signature = inspect.signature(trainer.train)
train.__signature__ = _signature.replace(parameters=[
    p.replace(default=RECORDER) if p.name == "recorder" else p for p in _signature.parameters.values()])
