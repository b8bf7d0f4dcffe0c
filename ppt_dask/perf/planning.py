"""Decisions from the run-time model: which block size and how many workers to book.

Seed 001, section V-C reads its model for the block and cluster size that minimise the
time of an iteration, and for the smallest block that gives any speedup. These functions
do the same over :func:`ppt_dask.perf.model.epoch_seconds` and
:func:`ppt_dask.perf.model.speedup` (pure numpy, no I/O).

>>> from ppt_dask.perf.paper001 import CONSTANTS, PROBLEMS
>>> fn = PROBLEMS["function"]
>>> min_block_for_speedup(2, fn.n_patterns, fn.n_weights, CONSTANTS["bat_cave", "function"],
...                       n_test=fn.n_test)  # 001: "no speedup below a block of about 50"
42
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ppt_dask.core.validation import check_int_array_at_least
from ppt_dask.perf.model import Constants, epoch_seconds, speedup


@dataclass(frozen=True)
class Recommendation:
    """The (block, p) of least predicted time per epoch, with its speedup and efficiency."""

    block: int
    p: int
    epoch_seconds: float
    speedup: float
    efficiency: float

    def _repr_html_(self) -> str:
        """In a notebook: a small table of the recommendation."""
        rows = (("block", f"{self.block}"), ("workers", f"{self.p}"),
                ("seconds an epoch", f"{self.epoch_seconds:.3g}"), ("speedup", f"{self.speedup:.3g}"),
                ("efficiency", f"{self.efficiency:.2f}"))
        cells = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
        return f'<table class="ppt-recommendation"><caption>the run-time model recommends</caption>{cells}</table>'


def default_blocks(n: int) -> np.ndarray:
    """Powers of two up to ``n``, and ``n``: the blocks tried when none are given."""
    return np.array(sorted({2**j for j in range(n.bit_length()) if 2**j <= n} | {n}))


def recommend(n_patterns, n_weights, c: Constants, p_max: int, blocks=None, *,
              n_test: int = 0, fan_in: int = 2, n_shards=None,
              exchange: str = "auto", cores=None) -> Recommendation:
    """The (block, p), p in 1..p_max, that minimises :func:`epoch_seconds` (001 sec. V-C).

    Larger blocks always cost less per epoch but converge slower (001 sec. VI), so pass
    the ``blocks`` whose convergence you accept; default: powers of two up to n, and n.
    Ties go to the fewer workers, then the smaller block. ``exchange``: the rounds to
    predict (as ``ppt.train`` takes it); ``cores``: the cores the workers share (None: one
    each); with them, more workers than cores never pay (their rounds serialize).
    """
    n = int(check_int_array_at_least("n_patterns", n_patterns, 1))
    p_max = int(check_int_array_at_least("p_max", p_max, 1))
    blocks = default_blocks(n) if blocks is None else np.unique(check_int_array_at_least("blocks", blocks, 1).ravel())
    ps = np.arange(1, p_max + 1)
    t = epoch_seconds(ps[:, None], blocks[None, :], n, n_weights, c, n_test=n_test,
                      fan_in=fan_in, n_shards=n_shards, exchange=exchange, cores=cores)
    i, j = np.unravel_index(np.argmin(t), t.shape)
    p, b = int(ps[i]), int(blocks[j])
    s = speedup(p, b, n, n_weights, c, n_test=n_test, fan_in=fan_in, n_shards=n_shards,
                exchange=exchange, cores=cores)
    return Recommendation(block=b, p=p, epoch_seconds=float(t[i, j]), speedup=s, efficiency=s / p)


def best_workers(blocks, n_patterns, n_weights, c: Constants, p_max: int, *,
                 n_test: int = 0, fan_in: int = 2, n_shards=None, exchange: str = "auto", cores=None):
    """For each block, the p in 1..p_max of least :func:`epoch_seconds` (fewest on ties).

    Returns ``(p, epoch_seconds, speedup)``, three arrays of shape (len(blocks),): the
    cluster size to use once the block is fixed by convergence (001 sec. V-C).
    """
    n = int(check_int_array_at_least("n_patterns", n_patterns, 1))
    p_max = int(check_int_array_at_least("p_max", p_max, 1))
    blocks = check_int_array_at_least("blocks", blocks, 1).ravel()
    ps = np.arange(1, p_max + 1)
    t = np.asarray(epoch_seconds(ps[:, None], blocks[None, :], n, n_weights, c, n_test=n_test,
                                 fan_in=fan_in, n_shards=n_shards, exchange=exchange,
                                 cores=cores)).reshape(p_max, blocks.size)
    best = np.argmin(t, axis=0)
    cols = np.arange(blocks.size)
    p = ps[best]
    s = np.asarray(speedup(p, blocks, n, n_weights, c, n_test=n_test, fan_in=fan_in,
                           n_shards=n_shards, exchange=exchange, cores=cores)).reshape(blocks.size)
    return p, t[best, cols], s


def min_block_for_speedup(p, n_patterns, n_weights, c: Constants, *, n_test: int = 0,
                          fan_in: int = 2, n_shards=None, exchange: str = "auto", cores=None):
    """Smallest block b in 1..n with predicted speedup (eq. (7)) > 1 on p workers, or
    None. 001 sec. V-C: function example on Bat Cave, no speedup below b of about 50."""
    n = int(check_int_array_at_least("n_patterns", n_patterns, 1))
    p = int(check_int_array_at_least("p", p, 1))
    blocks = np.arange(1, n + 1)
    s = speedup(p, blocks, n, n_weights, c, n_test=n_test, fan_in=fan_in, n_shards=n_shards,
                exchange=exchange, cores=cores)
    above = np.flatnonzero(np.atleast_1d(s) > 1)
    return int(blocks[above[0]]) if above.size else None
