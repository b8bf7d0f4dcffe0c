"""Flags of ``ppt-dask train`` that do not apply to the run asked for are refused.

A strategy's own flags (``--pull`` of local SGD, ``--staleness`` of Async ...) used to be
dropped without a word under another strategy; so was ``--data-dir`` for the generated
data sets; ``--exchange`` was refused only once the cluster had started. Each is now
refused in one line naming the flag, before any work.
"""

from __future__ import annotations

# flag -> the strategies it applies to (their dataclass fields, see strategies.make)
STRATEGY_FLAGS = {
    "block": ("--block", ("block", "average", "local", "async")),
    "local_epoch": ("--local-epoch", ("ppt",)),
    "interval": ("--interval", ("average", "local")),
    "pull": ("--pull", ("local",)),
    "local_epochs": ("--local-epochs", ("average",)),
    "sample_fraction": ("--sample-fraction", ("average",)),
    "momentum_policy": ("--momentum-policy", ("average",)),
    "staleness": ("--staleness", ("async",)),
}
GENERATED = ("parity8", "encoder", "function")  # made by a seeded generator, no files


def check_flags_apply(args, strategy: str) -> None:
    """Raise ValueError naming the first flag given that ``strategy`` or the data set ignores."""
    for name, (flag, strategies) in STRATEGY_FLAGS.items():
        if getattr(args, name, None) is not None and strategy not in strategies:
            raise ValueError(f"{flag} does not apply to --strategy {strategy} "
                             f"(only to {', '.join(strategies)})")
    # the local strategy has its own overlapped graph, async none (train refuses them too,
    # but after the cluster has started)
    exchange = getattr(args, "exchange", "auto")
    if (strategy == "local" and exchange not in ("auto", "all")) or (strategy == "async" and exchange != "auto"):
        raise ValueError(f"--exchange {exchange} does not apply to --strategy {strategy}")
    if getattr(args, "data_dir", None) is not None and args.dataset in GENERATED:
        raise ValueError(f"--data-dir does not apply to {args.dataset}: it is generated, not read")
