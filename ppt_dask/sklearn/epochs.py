"""Per-epoch bookkeeping of the estimators, fed one round at a time from inside ``train``.

scikit-learn's word for ``MLPClassifier`` (``solver="sgd"``, ``early_stopping=False``):
``max_iter`` counts epochs, ``n_iter_`` counts each epoch once, ``loss_curve_`` holds one
mean loss per epoch, and the ``tol`` rule stops training once more than
``n_iter_no_change`` epochs in a row did not bring the loss below the best so far minus
``tol``. :class:`EpochCurve` turns the trainer's round records (``on_round``) into that
curve and answers, after each round, whether the rule has fired. Pure Python: no dask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class ToleranceRule:
    """scikit-learn's ``tol`` / ``n_iter_no_change`` rule over a sequence of epoch losses.

    ``add(loss)`` returns True at the epoch where ``MLPClassifier`` would stop: its
    ``_update_no_improvement_count`` counts an epoch whose loss is above
    ``best_loss - tol`` and resets the count otherwise, then keeps the lower loss as the
    best; training stops when the count exceeds ``n_iter_no_change``.
    """

    tol: float
    n_iter_no_change: int
    best: float = math.inf
    no_improvement: int = 0

    def add(self, loss: float) -> bool:
        self.no_improvement = self.no_improvement + 1 if loss > self.best - self.tol else 0
        self.best = min(self.best, loss)
        return self.no_improvement > self.n_iter_no_change


@dataclass
class EpochCurve:
    """The mean loss of each completed epoch, from round records ``{"epoch", "loss", "patterns"}``.

    A round belongs to the epoch its end falls in (``record["epoch"]`` is fractional,
    ``(round + 1) / rounds_per_epoch``); an epoch's loss is the pattern-weighted mean of its
    rounds' losses. When one round spans several epochs, each epoch it completes gets its loss.
    """

    rule: ToleranceRule | None = None
    start_epoch: float = 0.0  # epochs of the rounds before this fit (a resumed state)
    losses: list = field(default_factory=list)
    stopped_by_rule: bool = False
    on_epoch: object = None  # called with (epoch number, loss) at each completed epoch
    _sum: float = 0.0
    _count: float = 0.0

    def add(self, record: dict) -> bool:
        """Take one round's record; True when the tol rule fires at an epoch it completes."""
        weight = float(record.get("patterns", 1))
        self._sum += record["loss"] * weight
        self._count += weight
        epoch = record["epoch"] - self.start_epoch
        while epoch >= len(self.losses) + 1 - 1e-9:
            loss = self._sum / self._count if self._count else float(record["loss"])
            self._sum = self._count = 0.0
            self.losses.append(float(loss))
            if self.on_epoch is not None:
                self.on_epoch(len(self.losses), float(loss))
            if self.rule is not None and self.rule.add(loss):
                self.stopped_by_rule = True
                return True
        return False

    def close_partial(self) -> None:
        """Count the rounds of an epoch a diverged run did not finish as that epoch."""
        if self._count:
            self.losses.append(float(self._sum / self._count))
            self._sum = self._count = 0.0
