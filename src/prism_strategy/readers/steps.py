"""One rank's step record and a recorded finding: what the readers produce for `analyze` and
what `StepMonitor` writes and detects (analysis/detect.py), so both sides share one type.

Pure Python: readers/ sits below runtime/ (DESIGN.md), and `diagnose.analyze` reads logs without
importing anything that applies a strategy.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

EventKind = Literal["collapse", "straggler", "input_skew", "hang", "incomplete", "slowdown"]
PHASES = ("data", "forward", "backward", "optimizer")
FIELDS = ("step", "data", "forward", "backward", "optimizer", "step_s", "tokens", "cpu_forward", "cpu_local")
"""Column order of one gathered row (what each rank sends every K steps)."""


class StepTimes(NamedTuple):
    """One rank's timings of one step, in seconds; nan where unknown."""

    step: int
    rank: int
    step_s: float
    data: float = math.nan
    forward: float = math.nan
    backward: float = math.nan
    optimizer: float = math.nan
    tokens: float = math.nan
    cpu_forward: float = math.nan
    """Process CPU time of forward (CPU devices only): compute without run-queue waits."""
    cpu_local: float = math.nan
    """Process CPU time of data + forward + optimizer (CPU devices only)."""

    def row(self) -> list[float]:
        return [float(getattr(self, f)) for f in FIELDS]


def step_times(rec: dict[str, Any], rank: int) -> StepTimes:
    """A step record (as written to the JSONL) -> StepTimes."""
    ph, cpu, tok = rec.get("phases") or {}, rec.get("cpu"), rec.get("tokens")
    cpu_fwd = cpu_local = math.nan
    if cpu and "forward" in cpu:
        cpu_fwd = cpu["forward"]
        cpu_local = sum(cpu.get(p, 0.0) for p in ("data", "forward", "optimizer"))
    return StepTimes(
        int(rec["step"]),
        rank,
        float(rec["step_s"]),
        *(float(ph.get(p, math.nan)) for p in PHASES),
        math.nan if tok is None else float(tok),
        cpu_fwd,
        cpu_local,
    )


@dataclass(frozen=True, slots=True)
class Event:
    """A finding: what, from which step, which ranks, and the numbers behind it."""

    kind: EventKind
    step: int
    ranks: tuple[int, ...]
    evidence: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    source: Literal["online", "offline", "hang_report", "log"] = "offline"

    def to_dict(self) -> dict[str, Any]:
        return {
            "event": self.kind,
            "step": self.step,
            "ranks": list(self.ranks),
            "evidence": self.evidence,
            "message": self.message,
            "source": self.source,
        }


MAX_RECORDS = 250_000
"""Step records held at once (about 100 bytes each: 25 MB; 8 ranks x 31,000 steps). A log with more is read in windows: the
records of each rank are averaged over `stride` consecutive steps (doubled each time the count
passes this), so memory is bounded by this, not by the log's size, and a long log reads as one
that logged a mean every `stride` steps (as PRISM's running-mean lines do)."""
_COLUMNS = StepTimes._fields[2:]


class Records:
    """Step records (StepTimes, each with the file:line it came from), held as columns. Reads as
    the list it stands for (len, indexing, iteration). Past MAX_RECORDS rows, the rows of a rank
    within one window of `stride` steps are averaged into one (the window's first step, its
    first file:line, `counts` the steps it holds)."""

    def __init__(self, cap: int | None = None) -> None:
        """cap: rows held at most (None: MAX_RECORDS, read now)."""
        self.cap, self.stride, self.merged = cap or MAX_RECORDS, 1, 0
        self._int = {k: array("q") for k in ("step", "rank", "count", "last", "file", "line")}
        self._float = {k: array("d") for k in _COLUMNS}
        self._files: dict[str, int] = {}
        self._names: list[str] = []
        self._last: dict[int, int] = {}
        """Each rank's last row (a record of the same window folds into it)."""

    def append(self, rec: StepTimes, where: str) -> None:
        last = self._last.get(rec.rank)
        if self.stride > 1 and last is not None and self._int["step"][last] // self.stride == rec.step // self.stride:
            self._merge(last, rec)
            return
        self._last[rec.rank] = len(self)
        name, _, line = where.rpartition(":")
        if not name or not line.isdigit():
            name, line = where, "-1"
        f = self._files.get(name)
        if f is None:
            f = self._files[name] = len(self._names)
            self._names.append(name)
        row = (
            ("step", rec.step),
            ("rank", rec.rank),
            ("count", 1),
            ("last", rec.step),
            ("file", f),
            ("line", int(line)),
        )
        for k, v in row:
            self._int[k].append(v)
        for k in _COLUMNS:
            self._float[k].append(getattr(rec, k))
        if len(self) > self.cap:
            self._coarsen()

    def _merge(self, j: int, rec: StepTimes) -> None:
        """Fold a record into row j, its rank's row of the same window (a running mean)."""
        n = self._int["count"][j]
        for k in _COLUMNS:
            self._float[k][j] = (self._float[k][j] * n + getattr(rec, k)) / (n + 1)
        self._int["count"][j] = n + 1
        self._int["last"][j] = max(self._int["last"][j], rec.step)
        self.merged += 1

    def extend(self, other: Records) -> None:
        for rec, where in other.with_wheres():
            self.append(rec, where)
        self.stride = max(self.stride, other.stride)
        self.merged += other.merged

    def clear(self) -> None:
        for a in (*self._int.values(), *self._float.values()):
            del a[:]
        self.stride, self.merged, self._last = 1, 0, {}

    def note(self) -> str:
        """What reading in windows did ("" when it did not)."""
        if self.stride == 1:
            return ""
        return (
            f"more than {self.cap:,} step records: each rank's records averaged over windows of {self.stride} "
            f"steps ({self.merged:,} records merged; memory bound, readers/steps.py MAX_RECORDS)"
        )

    def __len__(self) -> int:
        return len(self._int["step"])

    def __bool__(self) -> bool:
        return len(self) > 0

    def _row(self, i: int) -> StepTimes:
        return StepTimes(self._int["step"][i], self._int["rank"][i], *(self._float[k][i] for k in _COLUMNS))

    def where(self, i: int) -> str:
        line = self._int["line"][i]
        name = self._names[self._int["file"][i]]
        return name if line < 0 else f"{name}:{line}"

    def __getitem__(self, i: int) -> StepTimes:
        return self._row(range(len(self))[i])

    def __iter__(self) -> Iterator[StepTimes]:
        return (self._row(i) for i in range(len(self)))

    def with_wheres(self) -> Iterator[tuple[StepTimes, str]]:
        return ((self._row(i), self.where(i)) for i in range(len(self)))

    def counts(self) -> Iterator[int]:
        """Steps each record holds (1 until the records are read in windows)."""
        return iter(self._int["count"])

    def columns(self) -> dict[str, Any]:
        """step, rank, count, last (a window's last step) and each time as numpy arrays
        (copies), for Series.from_records and training_log.step_windows."""
        import numpy as np

        out = {k: np.array(self._int[k], dtype=np.int64) for k in ("step", "rank", "count", "last")}
        return out | {k: np.array(self._float[k], dtype=np.float64) for k in _COLUMNS}

    def _coarsen(self) -> None:
        """Widen the window (doubling) until the rows fit in half the cap: rows of one rank in
        one window become their mean (times), their first step and where, and their step count."""
        import numpy as np

        i = {k: np.array(v, dtype=np.int64) for k, v in self._int.items()}
        x = {k: np.array(v, dtype=np.float64) for k, v in self._float.items()}
        n = len(i["step"])
        stride = self.stride  # rows read since the last time are not yet in windows of it
        while True:
            key = np.stack([i["rank"], i["step"] // stride])
            _, first, group = np.unique(key, axis=1, return_index=True, return_inverse=True)
            if len(first) <= self.cap // 2:
                break
            stride *= 2
        self.stride = stride
        group = group.ravel()
        count = np.bincount(group, weights=i["count"]).astype(np.int64)
        for k in _COLUMNS:
            x[k] = np.bincount(group, weights=x[k] * i["count"]) / count  # a nan in a window: nan
        order = np.argsort(first, kind="stable")  # the rows keep the order they were read in
        first, count = first[order], count[order]
        self.merged += n - len(first)
        last = np.full(len(first), np.iinfo(np.int64).min)
        np.maximum.at(last, group, i["last"])
        done = {"count": count, "last": last[order]}
        self._int = {k: _array("q", done[k] if k in done else v[first]) for k, v in i.items()}
        self._float = {k: _array("d", v[order]) for k, v in x.items()}
        self._last = {int(r): j for j, r in enumerate(self._int["rank"])}  # the last row of each rank wins


def _array(code: str, values: Any) -> array:
    """A numpy vector as an array.array of that type code, through its bytes (no Python objects)."""
    out = array(code)
    out.frombytes(values.astype("int64" if code == "q" else "float64").tobytes())
    return out
