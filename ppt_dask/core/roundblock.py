"""Consecutive rounds as columns: what the head hands its recorder a batch at a time.

Streamed rounds are read a batch at a time (ppt_dask/engine/rounds/watched.py), and each round
has every loop's timing of it. A dict a loop and round cost the head a few microseconds each,
O(p) a round; a :class:`Block` is a few arrays a batch, whatever p is. The recorder keeps the
same content (ppt_dask/observe/roundlog.py ``RoundLog.add_block``). Pure numpy.
"""

from __future__ import annotations

import numpy as np


class Block:
    """Consecutive streamed rounds of one generation, as columns: ``rounds`` (n,), ``nums`` (n,
    len(NUMBERS)) the head's numbers, ``loops`` (n, p, 2 + len(phases)) each loop's start, bytes
    sent and seconds per phase, ``workers`` (p names) and ``phases`` (their names, in order)."""

    __slots__ = ("gen", "rounds", "nums", "loops", "workers", "phases")
    # the head's numbers of a round, the columns of ``nums`` (ppt_dask.observe.roundlog.NUMBERS)
    NUMBERS = ("epoch", "loss", "error_rate", "error_estimate", "patterns", "wall_seconds", "head_seconds")

    def __init__(self, gen: int, rounds, nums, loops, workers, phases):
        self.gen, self.rounds, self.nums, self.loops = int(gen), np.asarray(rounds), np.asarray(nums), loops
        self.workers, self.phases = list(workers), tuple(phases)

    def __getstate__(self):
        return (self.gen, self.rounds, self.nums, self.loops, self.workers, self.phases)

    def __setstate__(self, state):
        self.gen, self.rounds, self.nums, self.loops, self.workers, self.phases = state
