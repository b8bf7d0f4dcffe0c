"""Which parameter applies to which strategy: one table for the CLI, ``train`` and the estimators.

A parameter given for a strategy it does not apply to is refused before any cluster work,
with one line that names it and says where it applies (``--block applies to --strategy
block, average, local, async``), never dropped. The CLI spells a parameter as its flag
(``--local-epoch``), ``train`` as its keyword, the estimators as a key of
``strategy_params`` (``batch_size`` for the size of a block).
"""

from __future__ import annotations

STRATEGIES = ("epoch", "block", "ppt", "average", "local", "async")
_SYNCHRONOUS = ("epoch", "block", "ppt", "average", "local")

# parameter -> the strategies it applies to
TABLE: dict[str, tuple[str, ...]] = {
    # the optimizer: every strategy
    "lr": STRATEGIES,
    "momentum": STRATEGIES,
    "l2": STRATEGIES,
    # the strategies' own sizes and rules
    "block": ("block", "average", "local", "async"),  # patterns per update, or the local mini-batch
    "local_epoch": ("ppt",),
    "replicate": ("ppt",),
    "interval": ("average", "local"),
    "pull": ("local",),
    "ema": ("local",),
    "solver": ("local",),  # the local steps' optimizer: sgd or adam
    "shuffle": ("local",),  # a new order of each shard's rows each pass
    "compensate": ("local",),  # the gap to the late average from the shard's last start (CoCoD-SGD)
    "local_epochs": ("average",),
    "sample_fraction": ("average",),
    "momentum_policy": ("average",),
    "staleness": ("async",),
    # the round loop (train): every strategy runs in it
    "exchange": ("epoch", "block", "ppt", "average"),  # tree, doubling (all and stream: see below)
    "pipeline": _SYNCHRONOUS,  # the per-round graphs' (refuse_pipeline); the asynchronous loops have none
    "checkpoint": STRATEGIES,
    "resume": STRATEGIES,
    "restarts": STRATEGIES,
    "on_round": STRATEGIES,
    "snapshot_epochs": STRATEGIES,
    "initial_state": STRATEGIES,
    # the bits a seeded run promises (train's reproducible): the synchronous strategies
    "reproducible": _SYNCHRONOUS,
}

# reproducible="any-p": the same weights on any number of workers (every shard's sums on their own,
# added along the fixed shard tree); "same-p": the same weights on the same number of workers,
# through a lost worker and a resume (a worker's rows of a round in one pass, one partial a worker)
REPRODUCIBLE = ("any-p", "same-p")

# the rows that are arguments of a strategy object (choose.make), not of train
STRATEGY_OWN = ("block", "local_epoch", "interval", "pull", "ema", "local_epochs", "sample_fraction",
                "momentum_policy", "staleness", "solver", "shuffle", "compensate")

# values that say "not given" for every strategy (the defaults of train and the CLI)
NEUTRAL = {"exchange": ("auto",), "pipeline": (1,), "restarts": (0,), "resume": (False,), "solver": ("sgd",),
           "shuffle": (False,), "compensate": (False,), "snapshot_epochs": ((),)}
# values that apply beyond the table's row: the local strategy's graph is all to all, and it
# streams its rounds as the others do; the asynchronous strategy has streamed loops only
ALSO: dict[tuple[str, str], tuple[str, ...]] = {("exchange", "all"): ("local",),
                                                ("exchange", "stream"): ("local", "async")}
# values that apply to their own strategies only: one pass over a worker's rows is a gradient's
# (averaging and local SGD keep a model per shard, the same bits on any number of workers already)
ONLY: dict[tuple[str, str], tuple[str, ...]] = {("reproducible", "same-p"): ("epoch", "block", "ppt")}
# what each synchronous strategy runs when train is not told (graphs/block_race.py measured one
# pass over a worker's rows against a pass per shard: see reproducible_for)
REPRODUCIBLE_DEFAULT = {"epoch": "same-p", "block": "same-p", "ppt": "same-p", "average": "any-p", "local": "any-p"}


def strategy_name(strategy) -> str:
    """The name users type for a strategy object (``Sync`` without a block is "epoch")."""
    name = getattr(strategy, "name", None)
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    return name


def where(parameter: str, spell=str) -> str:
    """Where ``parameter`` applies, in words."""
    names = TABLE[parameter]
    if names == STRATEGIES:
        return "every strategy"
    return ("--strategy " if spell is cli_spelling else "strategy ") + ", ".join(names)


def applies(parameter: str, strategy: str, value=None) -> bool:
    """Whether ``parameter`` (with ``value``) applies to ``strategy``; KeyError if unknown."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {list(STRATEGIES)}")
    if isinstance(value, str) and (parameter, value) in ONLY:
        return strategy in ONLY[parameter, value]
    also = ALSO.get((parameter, value), ()) if isinstance(value, str) else ()
    return strategy in TABLE[parameter] or strategy in also


def is_given(parameter: str, value) -> bool:
    """A value other than "not given" (None, or the neutral default)."""
    if value is None:
        return False
    return not any(value is n or (type(value) is type(n) and value == n) for n in NEUTRAL.get(parameter, ()))


def cli_spelling(parameter: str) -> str:
    return "--" + parameter.replace("_", "-")


def refuse(strategy: str, given: dict, spell=str) -> None:
    """Raise ValueError for the first parameter in ``given`` that does not apply to ``strategy``.

    Parameters
    ----------
    strategy : str
        One of :data:`STRATEGIES`.
    given : dict
        Parameter name -> value; None and the neutral defaults count as not given.
    spell : callable
        How the message spells a parameter (:func:`cli_spelling` for flags).
    """
    for parameter, value in given.items():
        if parameter not in TABLE:
            raise ValueError(f"unknown parameter {spell(parameter)} (known: {', '.join(sorted(TABLE))})")
        if is_given(parameter, value) and not applies(parameter, strategy, value):
            shown = f"{spell(parameter)} {value!r}" if parameter in ("exchange", "reproducible") else spell(parameter)
            key = (parameter, value) if isinstance(value, str) else ("", "")
            names: tuple[str, ...] = ONLY.get(key) or (*TABLE[parameter], *ALSO.get(key, ()))
            place = (where(parameter, spell) if names == STRATEGIES
                     else ("--strategy " if spell is cli_spelling else "strategy ") + ", ".join(names))
            raise ValueError(f"{shown} applies to {place}, "
                             f"not to {'--strategy ' if spell is cli_spelling else 'strategy '}{strategy}")


def reproducible_for(strategy: str, value: str | None, spell=str) -> str | None:
    """What a run of ``strategy`` promises to repeat bit for bit.

    Parameters
    ----------
    strategy : str
        One of :data:`STRATEGIES`.
    value : {"any-p", "same-p"} or None
        What the user asked for (None: not given).
    spell : callable
        How a refusal spells the parameter (:func:`cli_spelling` for the flag).

    Returns
    -------
    str or None
        ``value``, or where it is None the strategy's default (:data:`REPRODUCIBLE_DEFAULT`);
        None for the asynchronous strategy, whose replicas never wait for each other.

    Raises
    ------
    ValueError
        An unknown value, or one that does not apply to ``strategy``, in one line.
    """
    if value is not None and value not in REPRODUCIBLE:
        raise ValueError(f"{spell('reproducible')} must be one of {REPRODUCIBLE}, got {value!r}")
    refuse(strategy, {"reproducible": value}, spell)
    return value if value is not None else REPRODUCIBLE_DEFAULT.get(strategy)


def refuse_allreduce(strategy: str, exchange: str, allreduce: str, spell=str) -> None:
    """The allreduce's algorithm is the streamed rounds' of the synchronous and local strategies
    (exchange "stream", and "auto"'s choice): refused elsewhere, and an unknown one."""
    from ppt_dask.core.allreduce import ALGORITHMS

    shown = spell("allreduce") if spell is cli_spelling else "allreduce"
    if allreduce not in ALGORITHMS:
        raise ValueError(f"{shown} must be one of {ALGORITHMS}, got {allreduce!r}")
    if allreduce == "auto":
        return
    if strategy == "async":
        raise ValueError(f"{shown} {allreduce!r} applies to the synchronous and local strategies, not to "
                         "strategy async: its loops send each gradient to every replica")
    if exchange not in ("auto", "stream"):
        raise ValueError(f"{shown} {allreduce!r} applies to streamed rounds (exchange 'stream', the default), "
                         f"not to exchange {exchange!r}")


def refuse_pipeline(strategy: str, exchange: str, pipeline: int, spell=str) -> None:
    """Streamed rounds (exchange "stream", and "auto"'s choice) run ahead by themselves: a
    pipeline there would change nothing, so it is refused."""
    if strategy in _SYNCHRONOUS and exchange in ("auto", "stream") and pipeline != 1:
        shown = spell("pipeline") if spell is cli_spelling else f"pipeline={pipeline}"
        raise ValueError(f"{shown} applies to the per-round graphs (exchange 'all', 'doubling', 'tree'); "
                         "streamed rounds (exchange 'stream', the default) run ahead by themselves")


# The data a run reads: a built-in set, a table (CSV, Parquet) or arrays (.npz, an .npy pair).
SOURCES = {"preset": "a built-in data set", "table": "a table (.csv, .parquet)",
           "arrays": "arrays (.npz, or --x and --y)"}
# parameter -> the kinds of data it applies to
SOURCE_TABLE: dict[str, tuple[str, ...]] = {
    "target": ("table",),  # a column; arrays hold their labels as y
    "features": ("table",),
    "task": ("table", "arrays"),
    "test": ("table", "arrays"),  # the built-in sets have their own test sets
    "test_fraction": ("table", "arrays"),
    "row_shape": ("preset", "table", "arrays"),  # on a built-in set: with --model (cli/usermodel.py)
    "dropna": ("table", "arrays"),
    "data_dir": ("preset",),  # the folder of mnist/ and digits5000/
    "splits": ("preset",),  # 004's experiment splits a set held on the head
    "split_epochs": ("preset",),
}


def refuse_source(kind: str, given: dict, name, spell=str) -> None:
    """Raise ValueError for the first parameter in ``given`` that does not apply to data of
    ``kind`` (one of :data:`SOURCES`) named ``name``; None and False count as not given."""
    for parameter, value in given.items():
        if value is None or value is False:
            continue
        kinds = SOURCE_TABLE[parameter]
        if kind not in kinds:
            where = " or ".join(SOURCES[k] for k in kinds)
            raise ValueError(f"{spell(parameter)} applies to {where}, not to {SOURCES[kind]} ({name})")
