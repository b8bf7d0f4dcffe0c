"""What a run leaves: the :class:`Result`, and the evaluations of weights it is built from."""

from __future__ import annotations

import enum
import functools
import html
import uuid
import warnings
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.algorithms import asynchronous, strategies
from ppt_dask.core import keys
from ppt_dask.core.model import Network
from ppt_dask.engine.placement.shards import ShardSet
from ppt_dask.engine.rounds import graph
from ppt_dask.engine.rounds.steps import partial_sums
from ppt_dask.engine.waits import ROUND_TIMEOUT


class Outcome(enum.Enum):
    """Why a run stopped (``Result.outcome``; ``Result.stopped_because`` says it in words)."""

    TARGET_ERROR = "target_error"  # the verified error reached the target: learned
    MAX_EPOCHS = "max_epochs"  # the epochs ran out
    DIVERGED = "diverged"  # a loss was not finite: the weights before it are kept
    STOPPED = "stopped"  # an ``on_round`` call-back asked to stop

    def words(self, where: str | None = None) -> str:
        """``stopped_because``: the value, with where it happened for a divergence."""
        return f"{self.value} at {where}" if where else self.value


@dataclass
class Result:
    """A finished run: final weights, per-round history and totals."""

    net: Network
    params: np.ndarray
    history: list[dict]
    strategy: object
    learned: bool
    stopped_because: str
    epochs: float
    wall_seconds: float
    head_seconds: float
    train_loss: float
    train_error_rate: float
    test_accuracy: float | None
    settings: dict = field(default_factory=dict)
    snapshots: dict = field(default_factory=dict)  # epoch -> weights pulled then
    diagnostics: object = field(default=None, repr=False)  # RunRecords or None
    state: object = field(default=None, repr=False)  # final ModelState (weights + optimizer state)
    outcome: Outcome = Outcome.MAX_EPOCHS

    @property
    def rounds(self) -> int:
        return len(self.history)

    def _repr_html_(self) -> str:
        """In a notebook: one line of what the run did, then its loss and error curves
        (:meth:`ppt_dask.observe.diagnostics.RunRecords.curves`)."""
        test = "" if self.test_accuracy is None else f", test accuracy {self.test_accuracy:.4f}"
        line = (f"<p><b>{'learned' if self.learned else 'not learned'}</b> ({html.escape(str(self.stopped_because))}): "
                f"{self.epochs:.3g} epochs, {self.rounds} rounds, {self.wall_seconds:.3g} s, "
                f"train error {self.train_error_rate:.4f}{test}</p>")
        draw = getattr(self.diagnostics, "curves", None)  # the records ppt_dask.train gives draw them
        return line + (draw()._repr_html_() if draw is not None and self.history else "")

    def predict(self, X):
        return self.net.predict(self.params, X)

    def dropped_shares(self) -> list[float] | None:
        """An asynchronous run's share of each worker slot's gradients dropped as too stale
        (or not sent to a peer that read too slowly), over its last try; None for a
        synchronous run (:func:`ppt_dask.algorithms.asynchronous.dropped_shares`)."""
        last = self.settings.get("tries", 1) - 1
        return asynchronous.dropped_shares([r for r in self.history if r.get("try", 0) == last])

    def left_out(self, bound: str | None = None) -> str | None:
        """A sentence on the workers whose gradients this asynchronous run mostly dropped as
        too stale (the rows of their shards hardly learned), or None; ``bound`` spells the
        staleness bound (default ``staleness=S``; the command line's ``--staleness S``)."""
        staleness = getattr(self.strategy, "staleness", 0)
        return asynchronous.left_out(self.dropped_shares(), bound or f"staleness={staleness}")

    def warn_left_out(self, stacklevel: int = 2) -> None:
        """Warn (:class:`StaleGradientsWarning`) with :meth:`left_out`'s sentence, if any;
        ``stacklevel`` as :func:`warnings.warn`'s, counted from the caller of this method."""
        text = self.left_out()
        if text:
            warnings.warn(text, asynchronous.StaleGradientsWarning, stacklevel=stacklevel + 1)

    def summary(self) -> dict:
        """The JSON summary of the CLI (``--json``)."""
        return {**self.settings, "strategy": getattr(self.strategy, "name", str(self.strategy)),
                "epochs": self.epochs, "rounds": self.rounds, "train_loss": self.train_loss,
                "train_error_rate": self.train_error_rate, "test_accuracy": self.test_accuracy,
                "wall_seconds": self.wall_seconds, "head_seconds": self.head_seconds,
                "learned": self.learned, "stopped_because": self.stopped_because,
                **({"dropped_shares": shares} if (shares := self.dropped_shares()) is not None else {})}

    def save(self, path, classes=None) -> str:
        """Write the trained model to a ``.npz`` file (:mod:`ppt_dask.engine.saving.modelfile`); returns the path.

        ``classes``: the labels of the outputs when they are not 0..k-1 (softmax) or 0/1
        (one sigmoid output). Read it back with :func:`ppt_dask.load_model`.
        """
        from ppt_dask.engine.saving.modelfile import save_result
        return save_result(self, path, classes)

    # where the time went: the records of the run's watcher (ppt_dask.observe for ppt_dask.train)
    def breakdown(self) -> list[dict]:
        """Per-round time breakdown rows (see :mod:`ppt_dask.observe.breakdown`); [] without records."""
        return self.diagnostics.rows() if self.diagnostics is not None else []

    def report(self, path) -> None:
        """Write a standalone HTML report of the run (opens without a server or network)."""
        self._records("report").write_report(self, path)

    def trace(self, path) -> None:
        """Write the run as a Chrome trace (one track per worker plus the head)."""
        self._records("trace").write_trace(path)

    def _records(self, what: str):
        if self.diagnostics is None:
            raise ValueError(f"this result has no run records to write a {what} from: it was trained "
                             "without a recorder (ppt_dask.train records; recorder=None does not)")
        return self.diagnostics


def evaluate(net: Network, shards: ShardSet, weights, fan_in: int = 2,
             timeout: float = ROUND_TIMEOUT) -> np.ndarray:
    """Stats ``[loss_sum, n_wrong, n]`` of ``weights`` (array or future) over all shards."""
    client = shards.client
    tag = f"eval-{uuid.uuid4().hex[:8]}"
    if isinstance(weights, np.ndarray):
        weights = client.scatter(weights, hash=False)
    plan = graph.make_plan(shards.worker_blocks(), shards.n_shards, fan_in)
    _, _, stats = graph.submit_round(
        client, plan, shards.futures, functools.partial(partial_sums, functools.partial(strategies.evaluate_work, net)),
        strategies.evaluate_apply, weights, weights, 0, tag, prefix=keys.EVAL)
    return stats.result(timeout=timeout)


def test_error(net: Network, params: np.ndarray, test) -> float:
    """The error rate of ``params`` on the held-out ``test = (X, y)``, on the head, or on a
    :class:`ShardSet` of test rows, on the workers that hold them."""
    if isinstance(test, ShardSet):
        stats = evaluate(net, test, np.asarray(params))
        return float(stats[1] / stats[2])
    X, y = test
    stats = net.stats(params, np.asarray(X, dtype=net.dtype), np.asarray(y))
    return float(stats[1] / stats[2])
