"""A run's per-round records, compact: the recent rounds in full, the older ones folded into bins.

The head records every round (its numbers and, on streamed rounds, each worker loop's timing of
it: :mod:`ppt_dask.observe.diagnostics`), keeps them for the run's report and sends them to the
scheduler's collector for the ``/ppt`` page. A dict per round grew the head by 5.3 MB and the
scheduler by 2.0 MB every 1000 rounds (7500 rounds of MNIST block 200, 2 workers): gigabytes
for a run of a million rounds. A :class:`RoundLog` holds, in numpy arrays:

* the last ``window`` rounds (between ``window`` and ``2 * window``) in full: the head's numbers a
  column each (:data:`NUMBERS`), and a row per loop and round (worker, start, bytes sent,
  seconds per phase in the order the loop ran them), rebuilt into the same dicts on demand
  (:meth:`RoundLog.records`), as the breakdown and the trace read them;
* the rounds before, folded into at most ``max_bins`` bins of consecutive rounds, each with
  the count and the sums of the head's numbers and of the phases (the mean over the loops, as
  :func:`ppt_dask.observe.breakdown.breakdown` gives a streamed round's row); when the bins are
  full, neighbours merge in pairs, so a bin covers twice the rounds (memory bounded, the
  shape of the whole run kept). :meth:`RoundLog.bin_rows` and :meth:`RoundLog.bin_heads` give
  them as breakdown rows and head records, with ``rounds`` (how many each stands for).

Its size is bounded by the rule, whatever the number of rounds: :meth:`RoundLog.max_bytes`.
Pure numpy: no dask, no bokeh.
"""

from __future__ import annotations

import math

import numpy as np

from ppt_dask.core.roundblock import Block
from ppt_dask.observe.phases import _PRIORITY, PHASES

NUMBERS = Block.NUMBERS  # the head's numbers of a round, a column each
WINDOW = 1000  # rounds kept in full (at least; up to twice as many before a fold)
MAX_BINS = 500  # bins the older rounds fold into
MAX_PHASES = 8  # phases a loop times a round (six today: ppt_dask.engine.rounds.streamloops)
LOOPS = "loops"
_W, _ORDER, _AT, _BYTES = 0, 1, 2, 3  # columns of a loop row before its phases' seconds
# a bin: gen, first and last round, rounds, streamed rounds, then per number its sum and count,
# then per phase of the breakdown its seconds summed over the streamed rounds, bytes, most loops
_B_GEN, _B_FIRST, _B_LAST, _B_N, _B_STREAMED = range(5)
_B_NUMS = 5
_B_PHASES = _B_NUMS + 2 * len(NUMBERS)
_B_BYTES = _B_PHASES + len(PHASES)
_B_LOOPS = _B_BYTES + 1
_B_WIDTH = _B_LOOPS + 1


def _number(value) -> float:
    return math.nan if value is None else float(value)


class RoundLog:
    """A run's per-round records in bounded memory (the module docstring).

    Parameters
    ----------
    window : int
        Rounds kept in full (at least; up to twice as many before the oldest fold into bins).
    max_bins : int
        Bins the older rounds fold into (at most).
    """

    def __init__(self, window: int = WINDOW, max_bins: int = MAX_BINS):
        if window < 1 or max_bins < 2:
            raise ValueError(f"window must be >= 1 and max_bins >= 2; got {window}, {max_bins}")
        self.window, self.max_bins = int(window), int(max_bins)
        self.ids = np.zeros((2 * self.window, 2), dtype=np.int64)  # gen, round
        self.nums = np.full((2 * self.window, len(NUMBERS)), math.nan)
        self.n_loops = np.zeros(2 * self.window, dtype=np.int32)  # loop rows of each round
        self.loops = np.zeros((0, 4 + MAX_PHASES))
        self.n = 0  # rounds in full
        self.n_loop_rows = 0
        self._bins = np.zeros((self.max_bins, _B_WIDTH))  # the first n_bins rows hold the bins
        self.n_bins = 0
        self.bin_rounds = 1  # rounds a bin covers (when full), doubled as the bins merge
        self.workers: list = []  # worker names, by their index in the loop rows
        self._worker_index: dict = {}
        self.orders: list = []  # tuples of phase names, by their index in the loop rows
        self._order_index: dict = {}
        self.total = 0  # rounds ever added

    # -- adding ----------------------------------------------------------------------------

    def add(self, record: dict) -> None:
        """One round's head record: ``gen``, ``round``, :data:`NUMBERS`, ``loops`` (optional)."""
        if self.n == len(self.ids):
            self._fold(self.window)
        i = self.n
        self.ids[i] = (int(record.get("gen") or 0), int(record["round"]))
        self.nums[i] = [_number(record.get(name)) for name in NUMBERS]
        loops = record.get(LOOPS) or ()
        self.n_loops[i] = len(loops)
        if loops:
            self._add_loops(loops)
        self.n += 1
        self.total += 1

    def extend(self, records) -> None:
        """Records (dicts, as :meth:`add` takes) and blocks of rounds (:class:`Block`), in order."""
        for record in records:
            if isinstance(record, Block):
                self.add_block(record)
            else:
                self.add(record)

    def add_block(self, block: Block) -> None:
        """A block of consecutive rounds at once (the head's batch of streamed rounds): the same
        content as a record a round with its ``loops``, without a dict a loop and round."""
        n, p = block.loops.shape[:2]
        workers = [_index(self.workers, self._worker_index, w) for w in block.workers]
        order = _index(self.orders, self._order_index, tuple(block.phases))
        if len(block.phases) > MAX_PHASES:
            raise ValueError(f"a loop timed {len(block.phases)} phases; a RoundLog keeps {MAX_PHASES}")
        done = 0
        while done < n:
            if self.n == len(self.ids):
                self._fold(self.window)
            take = min(n - done, len(self.ids) - self.n)
            i, part = self.n, slice(done, done + take)
            self.ids[i:i + take, 0] = block.gen
            self.ids[i:i + take, 1] = block.rounds[part]
            self.nums[i:i + take] = block.nums[part]
            self.n_loops[i:i + take] = p
            rows = np.zeros((take, p, 4 + MAX_PHASES))
            rows[:, :, _W] = workers
            rows[:, :, _ORDER] = order
            rows[:, :, _AT] = block.loops[part, :, 0]
            rows[:, :, _BYTES] = block.loops[part, :, 1]
            rows[:, :, 4:4 + len(block.phases)] = block.loops[part, :, 2:]
            self._add_rows(rows.reshape(take * p, -1))
            self.n += take
            self.total += take
            done += take

    def _add_rows(self, rows: np.ndarray) -> None:
        need = self.n_loop_rows + len(rows)
        if need > len(self.loops):
            grown = np.zeros((max(need, 2 * len(self.loops), 64), self.loops.shape[1]))
            grown[:self.n_loop_rows] = self.loops[:self.n_loop_rows]
            self.loops = grown
        self.loops[self.n_loop_rows:need] = rows
        self.n_loop_rows = need

    def _add_loops(self, loops: list) -> None:
        need = self.n_loop_rows + len(loops)
        if need > len(self.loops):
            grown = np.zeros((max(need, 2 * len(self.loops), 64), self.loops.shape[1]))
            grown[:self.n_loop_rows] = self.loops[:self.n_loop_rows]
            self.loops = grown
        pad = [0.0] * MAX_PHASES
        for j, loop in enumerate(loops):
            phases = loop.get("phases") or {}
            if len(phases) > MAX_PHASES:
                raise ValueError(f"a loop timed {len(phases)} phases; a RoundLog keeps {MAX_PHASES}")
            self.loops[self.n_loop_rows + j] = [
                _index(self.workers, self._worker_index, loop.get("worker")),
                _index(self.orders, self._order_index, tuple(phases)), _number(loop.get("at")),
                float(loop.get("bytes") or 0), *phases.values(), *pad[len(phases):]]
        self.n_loop_rows = need

    # -- folding the oldest rounds into bins ---------------------------------------------------

    def _fold(self, k: int) -> None:
        """The oldest ``k`` rounds into bins of ``bin_rounds`` rounds; where they would pass
        ``max_bins``, the bins merge in pairs and ``bin_rounds`` doubles first."""
        while self.n_bins + -(-k // self.bin_rounds) > self.max_bins:
            merged = _merge_pairs(self.bins)
            self._bins[:len(merged)], self.n_bins = merged, len(merged)
            self.bin_rounds *= 2
        rows = _group(self._bins_of(k), self.bin_rounds)
        self._bins[self.n_bins:self.n_bins + len(rows)] = rows
        self.n_bins += len(rows)
        used = int(self.n_loops[:k].sum())
        self.loops[:self.n_loop_rows - used] = self.loops[used:self.n_loop_rows]
        self.n_loop_rows -= used
        for name in ("ids", "nums", "n_loops"):
            array = getattr(self, name)
            array[:self.n - k] = array[k:self.n]
        self.n -= k

    def _bins_of(self, k: int) -> np.ndarray:
        """A bin for each of the oldest ``k`` rounds."""
        out = np.zeros((k, _B_WIDTH))
        out[:, _B_GEN] = self.ids[:k, 0]
        out[:, _B_FIRST] = out[:, _B_LAST] = self.ids[:k, 1]
        out[:, _B_N] = 1
        nums = self.nums[:k]
        present = ~np.isnan(nums)
        out[:, _B_NUMS:_B_PHASES:2] = np.where(present, nums, 0.0)
        out[:, _B_NUMS + 1:_B_PHASES:2] = present
        m = self.n_loops[:k]
        used = int(m.sum())
        if used:  # each loop row's phases into the breakdown's, over its round's loops, summed per round
            rows = self.loops[:used]
            owner = np.repeat(np.arange(k), m)
            parts = np.zeros((used, len(PHASES)))
            for order in np.unique(rows[:, _ORDER]).astype(int):
                mine = rows[:, _ORDER] == order
                parts[mine] = np.maximum(rows[mine, 4:], 0.0) @ self._to_phases(order)
            np.add.at(out[:, _B_PHASES:_B_BYTES], owner, parts / m[owner, None])
            np.add.at(out[:, _B_BYTES], owner, rows[:, _BYTES])
            out[:, _B_STREAMED] = m > 0
            out[:, _B_LOOPS] = m
        return out

    def _to_phases(self, order: int) -> np.ndarray:
        """(MAX_PHASES, len(PHASES)): a loop row's phases (in the order ``order`` names) onto the
        breakdown's phases (a name it does not know is ``other``, as in its streamed rows)."""
        out = np.zeros((MAX_PHASES, len(PHASES)))
        for j, name in enumerate(self.orders[order]):
            out[j, _PRIORITY.get(name, _PRIORITY["other"])] = 1.0
        return out

    # -- reading ---------------------------------------------------------------------------

    @property
    def bins(self) -> np.ndarray:
        """The bins, a row each (columns: see ``_B_*``)."""
        return self._bins[:self.n_bins]

    def __len__(self) -> int:
        """Rounds held in full."""
        return self.n

    def records(self, last: int | None = None) -> list[dict]:
        """The rounds held in full (the ``last`` of them), as the head recorded them."""
        first = 0 if last is None else max(0, self.n - last)
        offsets = np.concatenate([[0], np.cumsum(self.n_loops[:self.n])])
        out = []
        for i in range(first, self.n):
            record = {"gen": int(self.ids[i, 0]), "round": int(self.ids[i, 1])}
            for name, value in zip(NUMBERS, self.nums[i]):
                record[name] = None if math.isnan(value) else float(value)
            if self.n_loops[i]:
                record[LOOPS] = [self._loop(row) for row in self.loops[offsets[i]:offsets[i + 1]]]
            out.append(record)
        return out

    def _loop(self, row) -> dict:
        names = self.orders[int(row[_ORDER])]
        return {"worker": self.workers[int(row[_W])], "at": float(row[_AT]),
                "phases": {name: float(v) for name, v in zip(names, row[4:4 + len(names)])},
                "bytes": int(row[_BYTES])}

    def bin_heads(self) -> list[dict]:
        """The folded rounds as head records, one per bin: the means of its rounds' numbers
        (None where none had one), ``round`` its last round, ``first_round`` and ``rounds``."""
        out = []
        for b in self.bins:
            record = {"gen": int(b[_B_GEN]), "round": int(b[_B_LAST]), "first_round": int(b[_B_FIRST]),
                      "rounds": int(b[_B_N])}
            for j, name in enumerate(NUMBERS):
                count = b[_B_NUMS + 2 * j + 1]
                record[name] = float(b[_B_NUMS + 2 * j] / count) if count else None
            out.append(record)
        return out

    def bin_rows(self) -> list[dict]:
        """The folded streamed rounds as breakdown rows, one per bin that holds any: each phase
        the mean seconds a round, ``wall`` their sum, ``rounds`` the streamed rounds it stands for."""
        out = []
        for b, head in zip(self.bins, self.bin_heads()):
            streamed = b[_B_STREAMED]
            if not streamed:
                continue
            parts = dict(zip(PHASES, (float(v) for v in b[_B_PHASES:_B_BYTES] / streamed)))
            row = {"gen": head["gen"], "round": head["first_round"], "last_round": head["round"],
                   "rounds": int(streamed), "wall": sum(parts.values()), **parts, "workers": int(b[_B_LOOPS]),
                   "transfer_bytes": float(b[_B_BYTES] / streamed), "streamed": True, "binned": True,
                   "head_submit_seconds": head["head_seconds"], "head_wall_seconds": head["wall_seconds"]}
            for name in ("loss", "error_rate", "error_estimate", "patterns", "epoch"):
                if head[name] is not None:
                    row[name] = head[name]
            if head["patterns"] and head["wall_seconds"]:
                row["patterns_per_second"] = head["patterns"] / head["wall_seconds"]
            out.append(row)
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (names of workers and phase orders apart)."""
        return sum(a.nbytes for a in (self.ids, self.nums, self.n_loops, self.loops, self._bins))

    def max_bytes(self, max_loops: int) -> int:
        """The most :attr:`nbytes` can reach with at most ``max_loops`` loops a round: the
        full rounds' arrays (``2 * window`` rounds), their loop rows (twice what they need at
        most, from growing by doubling) and ``max_bins`` bins."""
        rounds = 2 * self.window
        per_round = self.ids[0].nbytes + self.nums[0].nbytes + self.n_loops[0].nbytes
        loop_rows = 2 * rounds * max_loops * (4 + MAX_PHASES) * 8
        return rounds * per_round + max(loop_rows, 64 * (4 + MAX_PHASES) * 8) + self.max_bins * _B_WIDTH * 8


def _index(names: list, index: dict, name) -> int:
    found = index.get(name)
    if found is None:
        found = index[name] = len(names)
        names.append(name)
    return found


def _group(rows: np.ndarray, width: int) -> np.ndarray:
    """Consecutive bins in groups of ``width`` (the last may be short), each merged into one."""
    starts = np.arange(0, len(rows), width)
    if width == 1:
        return rows
    merged = np.add.reduceat(rows, starts, axis=0)
    ends = np.minimum(starts + width, len(rows)) - 1
    merged[:, _B_GEN] = rows[starts, _B_GEN]
    merged[:, _B_FIRST] = rows[starts, _B_FIRST]
    merged[:, _B_LAST] = rows[ends, _B_LAST]
    merged[:, _B_LOOPS] = np.maximum.reduceat(rows[:, _B_LOOPS], starts)
    return merged


def _merge_pairs(bins: np.ndarray) -> np.ndarray:
    """Neighbouring bins merged in pairs (an odd last one stays): counts and sums add, the
    first bin's generation and first round, the second's last round, the most loops."""
    pairs = len(bins) // 2
    a, b = bins[0:2 * pairs:2], bins[1:2 * pairs:2]
    merged = a + b
    merged[:, _B_GEN] = a[:, _B_GEN]
    merged[:, _B_FIRST] = a[:, _B_FIRST]
    merged[:, _B_LAST] = b[:, _B_LAST]
    merged[:, _B_LOOPS] = np.maximum(a[:, _B_LOOPS], b[:, _B_LOOPS])
    return np.concatenate([merged, bins[2 * pairs:]])
