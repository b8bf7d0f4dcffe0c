"""A run's history: one record per round, kept as columns (``Result.history``).

Users read a run's history as a list of dicts, one per round (``result.history[-1]["loss"]``,
``[h["error_rate"] for h in result.history]``), and that is what :class:`History` gives: a
sequence whose items are dicts built when read. It keeps every round, for every curve a user
may draw, but as numpy columns, one per field, not a dict per round: the head held about
1 kB a round as dicts (1 GB for a million rounds), about 100 bytes as columns (twice that
at most just after the columns grow). :meth:`History.column` gives a field's column itself.

The fields every round has (those of the first record: ``try``, ``gen``, ``round``,
``epoch``, ``loss``, ``error_rate``, ``error_estimate``, ``patterns``, ``wall_seconds``,
``head_seconds``, ``elapsed_seconds``; ppt_dask/engine/roundloop.py) are columns; a field
only some rounds have (``verified_error_rate``, the test-set check of a round) or one that is
not a number (an asynchronous round's ``updates`` per slot) is kept beside, for those rounds.
"""

from __future__ import annotations

import numbers
from collections.abc import MutableSequence

import numpy as np


class History(MutableSequence):
    """Per-round records as columns; reads and writes as a list of dicts (the module docstring)."""

    def __init__(self, records=()):
        self._fields: dict[str, None] = {}  # every field seen, in the order first seen
        self._columns: dict[str, np.ndarray] = {}
        self._present: dict[str, np.ndarray] = {}  # per column: the rounds that have it there
        self._extra: dict[int, dict] = {}  # round index -> its fields that are not numbers of a column's kind
        self._n = 0
        self._capacity = 0
        self.extend(records)

    # -- writing --------------------------------------------------------------------------

    def append(self, record: dict) -> None:
        if self._n == self._capacity:
            self._grow()
        self._n += 1
        self._write(self._n - 1, record)

    def _grow(self) -> None:
        self._capacity = max(16, 2 * self._capacity)
        for store in (self._columns, self._present):
            for name, column in store.items():
                grown = np.zeros(self._capacity, dtype=column.dtype)
                grown[:len(column)] = column
                store[name] = grown

    def _write(self, i: int, record: dict) -> None:
        extra = {}
        columns, present = self._columns, self._present
        for name in present:
            if name not in record:
                present[name][i] = False
        for name, value in record.items():
            column = columns.get(name)
            kind = type(value)  # the usual case, a float or an int of its column: no ABC checks
            if column is not None and (kind is float and column.dtype.kind == "f"
                                       or kind is int and column.dtype.kind == "i"):
                column[i] = value
                present[name][i] = True
                continue
            self._fields.setdefault(name, None)
            kind = _kind(value)
            if column is None and kind is not None:
                column = columns[name] = np.zeros(self._capacity, dtype=kind)
                present[name] = np.zeros(self._capacity, dtype=bool)
            if column is not None and _fits(value, column.dtype):
                column[i], present[name][i] = value, True
            else:  # not a number of this column's kind (None, say): kept beside, for this round
                if name in present:
                    present[name][i] = False
                extra[name] = value
        if extra:
            self._extra[i] = extra
        else:
            self._extra.pop(i, None)

    def insert(self, index: int, record: dict) -> None:
        if index < 0:
            index += self._n
        if index >= self._n:
            self.append(record)
            return
        tail = [self[i] for i in range(index, self._n)]  # rare: rebuilt from there on
        del self[index:]
        self.append(record)
        self.extend(tail)

    def __setitem__(self, index, record) -> None:
        if isinstance(index, slice):
            if index != slice(None):
                raise TypeError("a History's slices are replaced whole: history[:] = records")
            records = list(record)
            self.clear()
            self.extend(records)
            return
        self._write(self._index(index), record)

    def __delitem__(self, index) -> None:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._n)
            if step == 1 and (stop >= self._n or start >= stop):
                self._truncate(start if start < stop else self._n)
                return
            kept = [self[i] for i in range(self._n) if i not in range(start, stop, step)]
            self.clear()
            self.extend(kept)
            return
        i = self._index(index)
        del self[i:i + 1]

    def _truncate(self, n: int) -> None:
        for i in [i for i in self._extra if i >= n]:
            del self._extra[i]
        self._n = n

    def clear(self) -> None:
        self._fields, self._columns, self._present, self._extra = {}, {}, {}, {}
        self._n = self._capacity = 0

    # -- reading --------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    def _index(self, index: int) -> int:
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(f"history index {index} out of range ({self._n} rounds)")
        return i

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._n))]
        i = self._index(index)
        extra = self._extra.get(i, {})
        record = {}
        for name in self._fields:
            if name in extra:
                record[name] = extra[name]
            elif name in self._present and self._present[name][i]:
                record[name] = self._columns[name][i].item()
        return record

    def __iter__(self):
        for i in range(self._n):
            yield self[i]

    def column(self, name: str) -> np.ndarray:
        """The field ``name`` of every round as floats (a copy; NaN where a round has none, or
        has a value that is not a number)."""
        if name not in self._columns:
            return np.full(self._n, np.nan)
        out = self._columns[name][:self._n].astype(float)
        out[~self._present[name][:self._n]] = np.nan
        for i, extra in self._extra.items():
            if name in extra:
                out[i] = _number(extra[name])
        return out

    def __eq__(self, other) -> bool:
        if isinstance(other, (History, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, like a list

    def __repr__(self) -> str:
        return f"History({self._n} rounds, fields {list(self._fields)})"

    @property
    def nbytes(self) -> int:
        """Bytes of the columns (the fields kept beside apart)."""
        return sum(a.nbytes for store in (self._columns, self._present) for a in store.values())


def _kind(value):
    """The column type of a value: int64 for an int, float64 for a float, None for anything else."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    return np.int64 if isinstance(value, numbers.Integral) else np.float64


def _number(value) -> float:
    return float(value) if _kind(value) is not None else np.nan


def _fits(value, dtype) -> bool:
    if _kind(value) is None:
        return False
    if dtype.kind == "f":  # an int stays an int: kept beside, read back as it was
        return not isinstance(value, numbers.Integral)
    return isinstance(value, numbers.Integral)
