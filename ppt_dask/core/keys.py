"""Task keys and the timings a task reports with its result: built here, read back here.

Every task of a run is named ``<prefix>-<run>-<rest>``: the prefix says what the task does
(the dashboard groups keys by it), ``run`` is eight hex digits per :func:`ppt_dask.train`
call, and the rest says where in the run it sits: ``g<generation>-r<round>`` for rounds
(a generation starts afresh after a lost or a joined worker, so a replayed round never
reuses a key). The per-worker tasks of a round are tuples ``(name, slot)``.
"""

from __future__ import annotations

import re

GRAD = "ppt-grad"  # a worker's gradient (one-hop: reduce, update and gradient in one task)
REDUCE = "ppt-reduce"  # a tree-reduce task, or a recursive-doubling hop
UPDATE = "ppt-update"  # the optimizer step
WEIGHTS = "ppt-weights"  # a pick of the weights
STATS = "ppt-stats"  # a pick of the round's stats
STATE = "ppt-state"  # a pick of the whole state (weights and optimizer state)
LOG = "ppt-log"  # a pick of the stats of the last rounds
EVAL = "ppt-eval"  # a verification pass
LOOP = "ppt-loop"  # one task that runs many rounds (streamed rounds)
SHARD = "ppt-shard"  # a placed shard (the worker's own aligned copy)
SHARD_INFO = "ppt-shardinfo"  # a shard's checks and summary, computed where it lives
PHASES = "ppt-phases"  # the entry of a finished task's metadata with its own timings {phase: seconds}
# What a streamed loop times in each of its rounds, in the order they run: waiting for the other
# workers' sums, adding them, the optimizer step, the shards' gradients (or local steps),
# sending its sums, waiting for the head to read (ppt_dask.engine.rounds.stream)
LOOP_PHASES = ("idle", "reduce", "update", "gradient", "transfer", "head", "evaluate")

_KEY = re.compile(r"^(ppt-[a-z]+)-(.+)$")
_RUN = re.compile(r"^([0-9a-f]{8})-(.+)$")
_ROUND = re.compile(r"^g(\d+)-r(\d+)$")


def name(prefix: str, tag: str) -> str:
    """``"ppt-grad-3f2a9c1b-g0-r12"`` from the prefix and the rest."""
    return f"{prefix}-{tag}"


def round_tag(tag: str, r: int) -> str:
    """``"3f2a9c1b-g0-r12"``: round ``r`` of a generation's ``tag``."""
    return f"{tag}-r{r}"


def generation(run: str, gen: int) -> str:
    """``"3f2a9c1b-g0"``: what every key of one generation of a run carries."""
    return f"{run}-g{gen}"


def round_name(prefix: str, tag: str, r: int) -> str:
    """``"ppt-grad-3f2a9c1b-g0-r12"``: a round's task of a generation (``tag``)."""
    return name(prefix, round_tag(tag, r))


def parse_key(key) -> tuple | None:
    """``(prefix, run, gen, round)`` of a ``ppt-*`` key, None for any other key.

    >>> parse_key(("ppt-grad-3f2a9c1b-g0-r12", 1))
    ('ppt-grad', '3f2a9c1b', 0, 12)
    >>> parse_key("ppt-eval-eval-0a1b2c3d")
    ('ppt-eval', None, None, None)
    >>> parse_key("x-1") is None
    True
    """
    name = key[0] if isinstance(key, tuple) and key else key
    if not isinstance(name, str) or not name.startswith("ppt-"):
        return None
    m = _KEY.match(name)
    if m is None:
        return (name, None, None, None)
    prefix, tag = m.groups()
    run = None
    r = _RUN.match(tag)
    if r is not None:
        run, tag = r.groups()
    m = _ROUND.match(tag)
    if m is None:
        return (prefix, run, None, None)
    return (prefix, run, int(m.group(1)), int(m.group(2)))


def phases_of(metadata) -> dict:
    """The phases a finished task recorded (:mod:`ppt_dask.engine.rounds.taskmeta`), from the
    ``metadata`` the scheduler received with it; {} when it has none."""
    if not isinstance(metadata, dict):
        return {}
    value = metadata.get(PHASES)
    return dict(value) if isinstance(value, dict) else {}
