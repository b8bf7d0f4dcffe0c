"""What a run leaves: the :class:`Result`, and the evaluations of weights it is built from."""

from __future__ import annotations

import functools
import html
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ppt_dask.algorithms import asynchronous, strategies
from ppt_dask.core import keys
from ppt_dask.core.model import Network
from ppt_dask.core.outcome import Outcome as Outcome
from ppt_dask.engine.placement.shards import ShardSet
from ppt_dask.engine.rounds import graph
from ppt_dask.engine.rounds.steps import partial_sums
from ppt_dask.engine.waits import ROUND_TIMEOUT


@dataclass
class Result:
    """A finished run: the trained weights, a record per round and the totals.

    What :func:`ppt_dask.train` returns; never made by hand.

    Attributes
    ----------
    net : Network
        The network trained (an MLP, a TorchNet or a model of your own).
    params : ndarray, shape (net.n_params,)
        The trained weights (for local SGD with ``ema``, the running mean reported).
    history : History
        One record per round, read as a list of dicts (``history[-1]["loss"]``): ``try``,
        ``gen``, ``round``, ``epoch``, ``loss`` and ``error_rate`` (of the weights the round
        started from, over the round's patterns), ``error_estimate`` (the stopping rule's
        windowed estimate), ``patterns``, ``wall_seconds`` and ``head_seconds`` (the round's
        share of the head's wall and submit time), ``elapsed_seconds`` (since the run began),
        and ``verified_error_rate`` on the rounds whose state was checked against the target.
        Kept as numpy columns (:class:`ppt_dask.engine.history.History`, about 100 bytes a
        round): ``history.column("loss")`` is one as an array, ``list(history)`` the plain
        list of dicts (for ``json.dumps``, say).
    strategy : Sync, PPT, Average, LocalSGD or Async
        The strategy, as it ran (with the shard sizes and the seed filled in).
    learned : bool
        Whether the run reached its target error, verified.
    stopped_because : str
        Why it stopped: "target_error", "max_epochs", "stopped" (an ``on_round`` call), or
        "diverged at ..." (a loss that was not finite; the weights before it are kept).
    outcome : Outcome
        The same as an enum.
    epochs : float
        Passes over the training set.
    rounds : int
        Rounds run (``len(history)``).
    wall_seconds, head_seconds : float
        The run's wall time, and the head's own share of it.
    train_loss, train_error_rate : float
        The final weights' mean loss and error rate on the training set.
    test_accuracy : float or None
        On the test set of ``Stop(test=...)``, else None.
    settings : dict
        The run's settings and events (workers, shards, exchange, recoveries ...), as
        saved in the model file and printed by ``--json``.
    snapshots : dict
        Epoch -> weights, for ``train(..., snapshot_epochs=...)``.
    diagnostics : RunRecords or None
        Where the time went, round by round (None with ``recorder=None``): the source of
        :meth:`breakdown`, :meth:`report` and :meth:`trace`; the last rounds in full, the
        older ones in bins.
    state : ModelState
        Weights and optimizer state, to continue with ``train(..., initial_state=...)``.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=4)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> result = ppt.train(net, shards, ppt.Sync(lr=2.0, momentum=0.9),
    ...                    ppt.Stop(max_epochs=2000, target_error=0.0))
    >>> result.learned, result.rounds == len(result.history)
    (True, True)
    >>> row = result.breakdown()[-1]                  # the last round's time, by phase
    >>> "gradient" in row and "idle" in row
    True
    >>> bool((result.predict(data.X) == data.y).all())
    True
    >>> ppt.exit_data(shards)
    >>> client.close()
    """

    net: Network
    params: np.ndarray
    history: Sequence[dict]
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
        (:meth:`ppt_dask.observe.records.RunRecords.curves`)."""
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
        if not getattr(self.strategy, "asynchronous", False):  # the history's dicts are not built for nothing
            return None
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
    """The loss and the errors of ``weights`` over all shards, computed where they are.

    Parameters
    ----------
    net : Network
        The network the weights belong to.
    shards : ShardSet
        Placed rows (training or test rows), from :func:`ppt_dask.enter_data`.
    weights : ndarray, shape (net.n_params,), or a future of one
        The weights to score.
    fan_in : int
        Children per node of the tree that adds the shards' parts (>= 2).
    timeout : float
        Seconds to wait for the result.

    Returns
    -------
    ndarray, shape (3,)
        ``[loss_sum, n_wrong, n]``: the loss summed over the rows, the rows counted wrong
        and the number of rows.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> client = ppt.connect(n_workers=2)
    >>> data = ppt.datasets.parity(8)
    >>> shards = ppt.enter_data(client, data.X, data.y, n_shards=4)
    >>> net = ppt.MLP((8, 100, 1), hidden="tanh", output="sigmoid")
    >>> loss_sum, n_wrong, n = ppt.evaluate(net, shards, net.init_params(0))
    >>> int(n)
    256
    >>> ppt.exit_data(shards)
    >>> client.close()
    """
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
