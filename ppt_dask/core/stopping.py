"""The stopping rule of Dahl et al. (2008), section 4.1, as pure bookkeeping on the head.

The paper: "each process maintains an average [error] over the last k*n/p training patterns
that it has processed ... Each process piggybacks its error estimate onto the broadcast of
its weight updates. The error estimates from all the processes are averaged ... When the
global error estimate gets below the stopping threshold, each process tests the neural
network on a test set of patterns to verify that the stopping condition has been met."

Every shard draws the same number of patterns per round, so averaging the shards' windows
of their last ``k * n / S`` patterns is the same as one window over the last ``k * n``
patterns of the whole cluster: the reduce already adds the shards' error counts each
round, and the head keeps that window here. No state lives on the workers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from ppt_dask.core.validation import check_int_at_least


@dataclass(frozen=True)
class Stop:
    """When to stop: the most epochs, and a target error verified on a test set.

    The rule of Dahl et al. (2008): an estimate of the training error over the last
    ``window_epochs`` of patterns rides with every round; once it is at the target, the
    weights are checked on the test set (or the whole training set), and the run stops
    only when that check confirms the target.

    Parameters
    ----------
    max_epochs : float
        Passes over the training set per try.
    target_error : float, optional
        Error rate (fraction of patterns wrong) to reach. When the windowed estimate is at
        or below it, the weights are verified (on ``test`` when given, else on the whole
        training set) before the run stops as learned.
    window_epochs : float
        The paper's ``k``: the estimate covers the last ``k * n`` patterns processed (k
        between 1 and 10 in the paper). Rounds that see the whole set (learning by epoch)
        need no window.
    test : (X_test, y_test) or ShardSet, optional
        Held on the head, or placed on the workers (:func:`ppt_dask.enter_data`, the rows
        never on the head); verifies the target and gives ``test_accuracy`` at the end.
    restarts : int
        Further tries from new random weights when a try reaches ``max_epochs`` without
        learning (the paper: "restart with new random weights when a try fails").
    check_every : float
        Epochs between two verifications (each costs a pass over ``test`` on the head);
        the first comes at the first round whose estimate is at or below the target.
    screen : bool
        True (the paper's rule): verify only once the windowed training-error estimate is at or
        below the target. False: verify every ``check_every`` epochs whatever the estimate,
        as a program that tests after each epoch does. The estimate lags the weights (it
        covers the last window of patterns; for local SGD it comes from the workers' own
        models, while the test is of their average), so screening saves tests but can stop
        a run later than testing on a schedule would.

    Examples
    --------
    >>> import ppt_dask as ppt
    >>> data = ppt.datasets.mnist(n_train=1000)
    >>> stop = ppt.Stop(max_epochs=15, target_error=0.03, test=(data.X_test, data.y_test))
    >>> stop.max_epochs, stop.target_error
    (15, 0.03)
    >>> ppt.Stop(max_epochs=0)
    Traceback (most recent call last):
    ...
    ValueError: max_epochs must be a positive number, got 0
    """

    max_epochs: float = 100
    target_error: float | None = None
    window_epochs: float = 1.0
    test: tuple | None = field(default=None, repr=False)
    restarts: int = 0
    check_every: float = 1.0
    screen: bool = True

    def __post_init__(self):
        if not (isinstance(self.max_epochs, (int, float)) and math.isfinite(self.max_epochs)
                and self.max_epochs > 0):
            raise ValueError(f"max_epochs must be a positive number, got {self.max_epochs!r}")
        if self.target_error is not None and not 0 <= self.target_error < 1:
            raise ValueError(f"target_error must be in [0, 1), got {self.target_error!r}")
        if not (isinstance(self.window_epochs, (int, float)) and self.window_epochs > 0):
            raise ValueError(f"window_epochs must be > 0, got {self.window_epochs!r}")
        check_int_at_least("restarts", self.restarts, 0)
        if not (isinstance(self.check_every, (int, float)) and math.isfinite(self.check_every)
                and self.check_every > 0):
            raise ValueError(f"check_every must be a positive number of epochs, got {self.check_every!r}")
        if not isinstance(self.screen, bool):
            raise ValueError(f"screen must be True or False, got {self.screen!r}")


class ErrorEstimate:
    """The error rate over the most recent ``window_patterns`` patterns seen.

    >>> e = ErrorEstimate(window_patterns=10)
    >>> e.add(n_wrong=4, n=5); e.add(n_wrong=0, n=5); e.rate
    0.4
    >>> e.add(n_wrong=0, n=5); e.rate   # the first round has left the window
    0.0
    """

    def __init__(self, window_patterns: float):
        self.window = window_patterns
        self.rounds: deque[tuple[float, float]] = deque()
        self.wrong = self.seen = 0.0

    def add(self, n_wrong: float, n: float) -> None:
        self.rounds.append((n_wrong, n))
        self.wrong += n_wrong
        self.seen += n
        while len(self.rounds) > 1 and self.seen - self.rounds[0][1] >= self.window:
            w, k = self.rounds.popleft()
            self.wrong -= w
            self.seen -= k

    @property
    def full(self) -> bool:
        return self.seen >= self.window

    @property
    def rate(self) -> float:
        return self.wrong / self.seen if self.seen else math.nan


@dataclass
class RoundRule:
    """The stopping rule as every loop of a synchronous run applies it, round after round.

    Every loop of a synchronous run holds the same reduced stats each round, so each can keep
    the same :class:`ErrorEstimate` and decide the same thing at the same round, as the ranks of
    an MPI program do: the estimate of the paper's rule, then a verification of the weights the
    round started from, whose counts ride with the next round's sums (each loop counts its part
    of the verification set). The head's copy of the rule (:mod:`ppt_dask.engine.roundloop`)
    decides alike for the rounds it runs itself.

    Parameters
    ----------
    rounds_per_epoch : float
        Rounds that make one pass over the training set.
    target_error : float or None
        The target (None: no verification, the rule only watches for divergence).
    window_patterns : float
        The estimate's window (``Stop.window_epochs`` times the training rows).
    check_every : float
        Epochs between two verifications.
    screen : bool
        Verify only once the estimate is at or below the target (``Stop.screen``).
    exact_stats : bool
        A round's stats cover the whole training set (learning by epoch): its error is the
        verification where no test set is given, and the estimate is always full.
    next_check : float
        The epoch from which the next verification may run (``-inf``: the first screened round).
    verify_apart : bool
        A verification set apart from the training rows is given (a test set): verifications
        count on it even where a round's stats cover the training set.
    seen : sequence of (n_wrong, n)
        This try's rounds so far, oldest first (the estimate's window is filled from them).

    Examples
    --------
    >>> rule = RoundRule(rounds_per_epoch=2, target_error=0.1, window_patterns=10, check_every=1,
    ...                  screen=True, exact_stats=False, next_check=float("-inf"))
    >>> rule.after(0, loss_sum=3.0, n_wrong=5, n=5)   # estimate 1.0: nothing to verify
    'go'
    >>> rule.after(1, loss_sum=1.0, n_wrong=0, n=5)   # estimate 0.5
    'go'
    >>> rule.after(2, loss_sum=1.0, n_wrong=0, n=5)   # estimate 0.0: verify the weights round 2 began from
    'check'
    >>> rule.after(3, loss_sum=float("nan"), n_wrong=0, n=5)
    'diverged'
    """

    rounds_per_epoch: float
    target_error: float | None
    window_patterns: float
    check_every: float
    screen: bool
    exact_stats: bool
    next_check: float
    verify_apart: bool = False
    seen: tuple = ()

    def __post_init__(self):
        self.estimate = ErrorEstimate(self.window_patterns)
        for n_wrong, n in self.seen:
            self.estimate.add(n_wrong, n)
        self.seen = ()

    def epoch(self, r: int) -> float:
        return (r + 1) / self.rounds_per_epoch

    def after(self, r: int, loss_sum: float, n_wrong: float, n: float) -> str:
        """Round ``r``'s verdict from its reduced stats: ``"diverged"`` (its loss is not finite:
        keep the weights it began from), ``"check"`` (verify the weights it began from), else
        ``"go"``. The estimate takes the round's counts."""
        if not math.isfinite(loss_sum):
            return "diverged"
        self.estimate.add(n_wrong, n)
        target = self.target_error
        if target is None:
            return "go"
        screened = (self.estimate.full or self.exact_stats) and self.estimate.rate <= target
        due = self.epoch(r) >= self.next_check - 1e-9 or (self.screen and self.exact_stats)
        if (screened or not self.screen) and due:
            self.next_check = self.epoch(r) + self.check_every
            return "check"
        return "go"

    def learned(self, n_wrong: float, n: float) -> bool:
        """Whether a verification's counts meet the target."""
        return self.target_error is not None and n > 0 and n_wrong / n <= self.target_error
