"""``ppt-dask train``: flags that do not apply are refused, before any cluster work.

The strategy's own flags go through the one table of :mod:`ppt_dask.core.applicability`; the
flags of a mode (``--splits``, ``--scheduler``, a target error, a checkpoint) are checked
here. Each refusal is one line naming the flag and saying when it applies.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ppt_dask.core import applicability
from ppt_dask.engine.saving import checkpoint

# the strategy-dependent flags (attribute names of the parsed arguments = table rows)
STRATEGY_FLAGS = ("block", "local_epoch", "replicate", "interval", "pull", "ema", "local_epochs",
                  "sample_fraction", "momentum_policy", "staleness", "exchange", "pipeline",
                  "checkpoint", "resume", "restarts", "solver", "compensate", "shuffle")

GENERATED = ("parity8", "encoder", "function")  # made by a seeded generator, no files

# flags that the repeated-splits mode (--splits) does not use
NOT_WITH_SPLITS = ("checkpoint", "resume", "checkpoint_every", "report", "trace", "calibration")


def refuse_flags(args, strategy: str, target_error) -> None:
    """Raise ValueError for the first flag of ``args`` that does not apply.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed ``train`` arguments (defaults of the mode flags are None: "not given").
    strategy : str
        The strategy the run will use (the flag, else the data set's preset).
    target_error : float or None
        The run's target error (the flag, else the preset).
    """
    given = {name: getattr(args, name) for name in STRATEGY_FLAGS}
    given["checkpoint"] = given["checkpoint"] or None
    applicability.refuse(strategy, given, spell=applicability.cli_spelling)
    applicability.refuse_pipeline(strategy, args.exchange, args.pipeline, spell=applicability.cli_spelling)
    applicability.reproducible_for(strategy, getattr(args, "reproducible", None), spell=applicability.cli_spelling)
    if args.resume and not args.checkpoint:
        raise ValueError("--resume needs --checkpoint DIR")
    if args.resume and not (Path(args.checkpoint) / checkpoint.FILE).is_file():
        raise ValueError(f"--resume: there is no checkpoint in {args.checkpoint!r} "
                         f"(no {checkpoint.FILE}); to start fresh, leave out --resume")
    if args.splits:
        for name in NOT_WITH_SPLITS:
            if getattr(args, name) not in (None, False):
                raise ValueError(f"{applicability.cli_spelling(name)} does not apply with --splits "
                                 "(each split is a fresh run; it applies to a single run)")
    elif args.split_epochs is not None:
        raise ValueError("--split-epochs applies with --splits N")
    if args.scheduler and args.threads_per_worker is not None:
        raise ValueError("--threads-per-worker applies to the local cluster ppt-dask starts, "
                         "not with --scheduler")
    if getattr(args, "data_dir", None) is not None and args.dataset in GENERATED:
        raise ValueError(f"--data-dir does not apply to {args.dataset}: it is generated, not read")
    if args.connect_timeout is not None and not args.scheduler:
        raise ValueError("--connect-timeout applies with --scheduler ADDRESS")
    if target_error is None:
        for name in ("check_every", "window_epochs"):
            if getattr(args, name) is not None:
                raise ValueError(f"{applicability.cli_spelling(name)} applies when there is a target "
                                 "error (--target-error)")


def hidden_widths(text: str) -> tuple[int, ...]:
    """``--hidden 64,64``: the hidden layers' widths (an argparse type)."""
    try:
        sizes = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--hidden takes widths like 64,64; got {text!r}") from None
    if any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"--hidden widths must be >= 1; got {text!r}")
    return sizes
