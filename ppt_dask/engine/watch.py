"""Who watches a run: the engine calls the recorder it is given and imports none.

:func:`ppt_dask.train` gives the collector of :mod:`ppt_dask.observe`
(:class:`ppt_dask.observe.diagnostics.Recorder`); the engine's own ``train`` called without
one records nothing, and its result has no breakdown, report or trace. A recorder is
``recorder(client, run_id, settings)``, an object whose ``round_done(record)`` sees every
round's record and whose ``finish()`` returns the run's records. On streamed rounds the record
also has ``loops``: each worker loop's own timing of the round
(:func:`ppt_dask.engine.rounds.stream.loop_timing`), which no scheduler sees.
"""

from __future__ import annotations

from ppt_dask.core import model


class NoRecords:
    """The watcher of a run nobody records."""

    def round_done(self, record: dict) -> None:
        pass

    def finish(self):
        return None


def start(recorder, shards, run_id: str, settings: dict):
    """The run's watcher (a :class:`NoRecords` without a recorder)."""
    return NoRecords() if recorder is None else recorder(shards.client, run_id, settings)


def both(first, then):
    """A callback that calls ``first(record)`` and then ``then(record)`` (``then`` may be None)."""
    if then is None:
        return first

    def call(record):
        first(record)
        then(record)
    return call


def settings(net, shards, strategy, **more) -> dict:
    """What a report shows of the run: network, data placement, strategy and loop options."""
    return {**model.describe(net), "network": model.label(net), "rows": shards.n_rows, "shards": shards.n_shards,
            "workers": len(shards.worker_blocks()), "strategy": getattr(strategy, "name", ""),
            "strategy_settings": repr(strategy), **more}
