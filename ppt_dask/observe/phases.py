"""The words of the time breakdown: the phases of a round, what each means, and the task
records the scheduler-side collector keeps, each given its phase by its key's prefix.

:mod:`ppt_dask.observe.breakdown` turns such records into rows per round; the page and the
report (:mod:`ppt_dask.observe.dashboard`) name the phases as described here.
"""

from __future__ import annotations

from typing import NamedTuple

from ppt_dask.core import keys

# Phases in priority order (the first active one wins at each instant), then idle.
PHASES = ("gradient", "reduce", "update", "evaluate", "other", "transfer", "head", "scheduler", "idle")
COMPUTE = PHASES[:5]
DESCRIPTIONS = {
    "gradient": "forward + backward over the resident shards (ppt-grad)",
    "reduce": "tree-reduce tasks (ppt-reduce)",
    "update": "optimizer step and weight/stat picks (ppt-update, -weights, -stats)",
    "evaluate": "verification passes (ppt-eval)",
    "other": "other ppt tasks",
    "transfer": "fetching inputs from other workers",
    "head": "waiting for the head to send the round",
    "scheduler": "task sent to the worker, not running (scheduling latency)",
    "idle": "waiting for other workers",
}
# What the phases are on streamed rounds (the loops time them; see the module docstring)
STREAM_DESCRIPTIONS = {
    "gradient": "the shards' gradients or local steps, inside each worker's loop",
    "reduce": "adding the other workers' sums along the shard tree",
    "update": "the optimizer step",
    "evaluate": "verification passes (ppt-eval)",
    "other": "other ppt work",
    "transfer": "sending this round's sums to the other workers' mailboxes",
    "head": "waiting for the head to read the last rounds (a loop runs a bounded number ahead)",
    "idle": "waiting for the other workers' sums",
}
NOT_STREAMED = ("scheduler",)  # phases a streamed round does not have: no task is handed over per round
# ``ppt-loop``: one task running many rounds (streamed rounds); rows come from the loops'
# own timings in the head's records, the task itself only places them on the trace
CATEGORY_OF_PREFIX = {keys.GRAD: "gradient", keys.LOOP: "gradient", keys.REDUCE: "reduce",
                      keys.UPDATE: "update", keys.WEIGHTS: "update", keys.STATS: "update",
                      keys.EVAL: "evaluate"}
_PRIORITY = {p: i for i, p in enumerate(PHASES)}


class TaskRecord(NamedTuple):
    """One finished ``ppt-*`` task, as the scheduler saw it (seconds).

    ``key`` is the key as text; ``prefix`` its ``ppt-<word>`` part; ``run``, ``gen`` and
    ``round`` come from the key (None where it has none); ``submitted``, ``sent`` and
    ``done`` are scheduler timestamps (graph arrived, task sent to ``worker``, result
    reported); ``compute`` is the worker's own measure of the task's run time; ``nbytes``
    the size of its result; ``deps`` the keys (as text) of its ``ppt-*`` inputs; ``io``
    holds ``(action, seconds, source)`` for each transfer, deserialization or spill the
    worker recorded for it; ``phases`` holds ``(phase, seconds)`` pairs, in the order they
    ran, that a task doing several things timed itself (a one-hop task: reduce, update,
    gradient; see :mod:`ppt_dask.engine.rounds.onehop`).
    """

    key: str
    prefix: str
    run: str | None
    gen: int | None
    round: int | None
    worker: str
    submitted: float
    sent: float
    done: float
    compute: float
    nbytes: int
    deps: tuple = ()
    io: tuple = ()
    phases: tuple = ()

    def layout(self) -> tuple:
        """``(start, stop)`` of the compute and of the io placed in ``[sent, done]``."""
        stop = self.done
        start = max(self.sent, stop - self.compute)
        io_seconds = sum(x[1] for x in self.io)
        return start, stop, max(self.sent, start - io_seconds), start

    def compute_parts(self) -> list:
        """``(start, stop, phase)`` pieces of the compute: the task's own phases in the order
        they ran (the last one takes what is left), or the whole compute as its category."""
        start, stop, _, _ = self.layout()
        if not self.phases:
            return [(start, stop, category(self))]
        parts, a = [], start
        for phase, seconds in self.phases[:-1]:
            b = min(stop, a + max(0.0, seconds))
            parts.append((a, b, phase if phase in _PRIORITY else "other"))
            a = b
        last = self.phases[-1][0]
        parts.append((a, stop, last if last in _PRIORITY else "other"))
        return parts

    @classmethod
    def from_list(cls, row) -> TaskRecord:
        """Rebuild from the list a msgpack round trip makes of it."""
        *head, deps, io, phases = row if len(row) == len(cls._fields) else (*row, ())
        return cls(*head, tuple(deps), tuple(tuple(x) for x in io), tuple(tuple(x) for x in phases))


def category(task: TaskRecord) -> str:
    """The phase a task's compute counts as (verification rounds carry ``eval`` in the key)."""
    if task.prefix == keys.EVAL or "-eval-" in task.key:
        return "evaluate"
    return CATEGORY_OF_PREFIX.get(task.prefix, "other")
