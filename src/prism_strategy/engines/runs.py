"""Runs: a sequence of numbers stored as (value, count) runs of equal consecutive values.

A deep stack of identical blocks issues the same collective once per block (FSDP2's per-unit
gathers, DeepSpeed's per-module fetches, DDP's equal buckets): 100,000 layers are a handful of
runs. StepCollective.sizes and CollectiveCost.call_seconds carry them so that building, hashing
(the price caches), pricing and scheduling them cost per run, not per call (issue 26, finding 12).
It reads as the tuple it stands for (len, indexing, iteration, sum), so a reader that wants one
value per call still gets them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload


class Runs(Sequence[float]):
    """Immutable and hashable by its runs; equal to another Runs with the same values in order (not
    to a tuple: its hash would have to read every value)."""

    __slots__ = ("runs", "_ends", "_hash")

    runs: tuple[tuple[float, int], ...]
    """(value, how many in a row): adjacent runs hold different values, every count >= 1."""

    def __init__(self, values: Iterable[float] = ()) -> None:
        self._set(((x, len(list(g))) for x, g in itertools.groupby(values)))

    @classmethod
    def of_runs(cls, runs: Iterable[tuple[float, int]]) -> Runs:
        """From (value, count) pairs; equal neighbours merge and empty runs drop."""
        out = cls.__new__(cls)
        out._set(runs)
        return out

    def _set(self, runs: Iterable[tuple[float, int]]) -> None:
        merged: list[tuple[float, int]] = []
        for x, n in runs:
            if n <= 0:
                continue
            if merged and merged[-1][0] == x:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((x, n))
        self.runs = tuple(merged)
        self._ends = tuple(itertools.accumulate(n for _, n in merged))
        self._hash = hash(self.runs)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __iter__(self) -> Iterator[float]:
        return itertools.chain.from_iterable(itertools.repeat(x, n) for x, n in self.runs)

    def __reversed__(self) -> Iterator[float]:
        return itertools.chain.from_iterable(itertools.repeat(x, n) for x, n in reversed(self.runs))

    @overload
    def __getitem__(self, i: int) -> float: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[float, ...]: ...
    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self)[i]
        k = i + len(self) if i < 0 else i
        if not 0 <= k < len(self):
            raise IndexError("Runs index out of range")
        return self.runs[bisect.bisect_right(self._ends, k)][0]

    def __eq__(self, other: object) -> bool:
        return self.runs == other.runs if isinstance(other, Runs) else NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Runs.of_runs({list(self.runs)!r})"

    def map(self, f: Callable[[float], float]) -> Runs:
        """f of each value, computed once per run."""
        return Runs.of_runs((f(x), n) for x, n in self.runs)
