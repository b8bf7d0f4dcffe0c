"""Why a run stopped: the outcomes a run of the cluster and a run in the caller's process share.

Pure (no dask): the estimator's fits in this process (:mod:`ppt_dask.sklearn.inprocess`) name
their outcome without importing the engine, whose import brings dask and distributed.
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    """Why a run stopped (``Result.outcome``; ``Result.stopped_because`` says it in words)."""

    TARGET_ERROR = "target_error"  # the verified error reached the target: learned
    MAX_EPOCHS = "max_epochs"  # the epochs ran out
    DIVERGED = "diverged"  # a loss was not finite: the weights before it are kept
    STOPPED = "stopped"  # an ``on_round`` call-back asked to stop

    def words(self, where: str | None = None) -> str:
        """``stopped_because``: the value, with where it happened for a divergence."""
        return f"{self.value} at {where}" if where else self.value
