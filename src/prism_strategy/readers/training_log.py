"""What every training-log reader returns, and the line reading they share.

A reader turns a log into `Window`s (each the mean over some consecutive optimizer steps) and,
for `analyze`, per-rank `StepTimes` records; plus the scenario fields the log states (with the
line that states each), peak memory, and what it left out. `results import` stores the windows
(`step_windows` derives them from the records where the format logs every step); `analyze` runs
the detectors on the records.

One grammar, two uses. Every line a reader recognises must parse completely; one that does not
is bad input (`SpecError` naming file:line) for both. The one exception is the last line of a
file cut mid-write (no newline at its end: the run was killed, or is still writing): the reader
leaves it out and says so in `cut`. `analyze` goes on (a killed run is what it diagnoses);
`results import` refuses, so that nothing partial is stored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from prism_strategy.readers.collective_log import text_lines
from prism_strategy.readers.steps import PHASES, Event, Records, StepTimes
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import MAX_INT

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
"""Colour and cursor codes (torchtitan colours its metrics; rich / colorlog handlers colour levels)."""
TEXT_SUFFIXES = (".log", ".out", ".err", ".txt")
MAX_INDEX = 2**31
"""Largest step or rank index taken as real (larger ones are a mangled log)."""
MAX_SECONDS = 1e7
"""Largest phase time taken as real; a negative, infinite or larger time reads as unknown."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """Mean over `steps` consecutive optimizer steps ending at `last_step`."""

    last_step: int
    steps: int
    where: str
    """file:line of the log line this window comes from."""
    step_s: float | None = None
    """Seconds per optimizer step; None until known (torchtitan logs tokens/s, not time)."""
    tokens_per_s: float | None = None
    """Tokens per second per device, where the log gives that instead of a time."""
    phases: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    """Other per-window figures the log gives (torchtitan: tflops, mfu_pct)."""


@dataclass
class ParsedLog:
    """One file (or one run's files) read: windows and step records, what the log says about the
    run, peak memory, and what was left out."""

    format: str
    files: list[Path]
    windows: list[Window] = field(default_factory=list)
    records: Records = field(default_factory=Records)
    """Per-rank step records, each with its file:line (bounded: readers/steps.py MAX_RECORDS)."""
    events: list[Event] = field(default_factory=list)
    meta: dict[int, dict[str, Any]] = field(default_factory=dict)
    closed: dict[int, int] = field(default_factory=dict)
    """Ranks whose (last) run wrote a close record, with its step count."""
    hang_reports: list[dict[str, Any]] = field(default_factory=list)
    scenario: dict[str, Any] = field(default_factory=dict)
    scenario_where: dict[str, str] = field(default_factory=dict)
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    peak_rss_bytes: float | None = None
    host: str = ""
    torch: str = ""
    notes: list[str] = field(default_factory=list)
    """How the log was read (which timing, which windows)."""
    skipped: list[str] = field(default_factory=list)
    """What was left out (an earlier run in the same file, a cut last line)."""
    cut: str = ""
    """The cut last line left out, as file:line and why ("" when none)."""

    def state(self, name: str, value: Any, where: str) -> None:
        """The log states a scenario field; the first statement wins unless a later one disagrees."""
        if name in self.scenario and self.scenario[name] != value:
            raise SpecError(
                f"{where}: the log says {name} = {value!r} but {self.scenario_where[name]} says "
                f"{self.scenario[name]!r}; import one run at a time"
            )
        self.scenario[name] = value
        self.scenario_where.setdefault(name, where)

    def peak(self, attr: str, value: float | None) -> None:
        if value is not None:
            setattr(self, attr, max(getattr(self, attr) or 0.0, float(value)))

    def record(self, rec: StepTimes, where: str) -> None:
        self.records.append(rec, where)

    def cut_off(self, path: Path, i: int, what: str) -> None:
        self.cut = (
            f"{path}:{i}: {what} (the last line is cut off: a partial log: killed mid-write, or still being written)"
        )
        self.skipped.append(self.cut)

    def merge(self, other: ParsedLog) -> None:
        """Add another file of the same run (a StepMonitor rank file)."""
        self.files += other.files
        self.records.extend(other.records)
        self.events += other.events
        self.meta |= other.meta
        self.closed |= other.closed
        self.hang_reports += other.hang_reports
        for k, v in other.scenario.items():
            self.state(k, v, other.scenario_where[k])
        for attr in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_rss_bytes"):
            self.peak(attr, getattr(other, attr))
        self.host, self.torch = self.host or other.host, self.torch or other.torch
        self.notes += other.notes
        self.skipped += other.skipped
        self.cut = self.cut or other.cut


def log_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without colour codes, whether the line ended with a newline)."""
    for i, line, ended in text_lines(path):
        yield i, ANSI.sub("", line), ended


def head_text(path: Path, n: int = 4 << 20) -> str:
    """The first n bytes as text without colour codes ("" when unreadable)."""
    try:
        with open(path, errors="replace") as f:
            return ANSI.sub("", f.read(n))
    except (OSError, UnicodeError):
        return ""


def file_contains(path: Path, needle: str, chunk: int = 1 << 20) -> bool:
    """Whether the text (any case) holds needle anywhere: a launcher's NCCL_DEBUG=INFO preamble can
    run to many MB before a trainer's first timing line."""
    needle, tail = needle.lower(), ""
    try:
        with open(path, errors="replace") as f:
            while block := f.read(chunk):
                text = tail + block.lower()
                if needle in text:
                    return True
                tail = text[-len(needle) :]
    except (OSError, UnicodeError):
        return False
    return False


def first_json(path: Path) -> str:
    """The first non-blank line of a file (for the JSONL readers' looks_like)."""
    for line in head_text(path, 1 << 16).splitlines():
        if line.strip():
            return line
    return ""


def json_lines(path: Path, log: ParsedLog) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every non-blank line one JSON object; a cut last line is left out (`ParsedLog.cut_off`)."""
    for i, line, ended in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            if not ended:
                log.cut_off(path, i, f"malformed JSON line ({e.msg})")
                return
            raise SpecError(f"{path}:{i}: malformed JSON line ({e.msg}); fix or remove the line") from None
        if not isinstance(obj, dict):
            raise SpecError(f"{path}:{i}: expected one JSON object per line, got {type(obj).__name__}")
        yield i, obj


def bad_line(path: Path, i: int, what: str, expected: str) -> SpecError:
    return SpecError(f"{path}:{i}: {what} does not parse; expected {expected}")


def number(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> float | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, int) and abs(v) > MAX_INT):
        raise SpecError(f"{where}: field {key!r} must be a number, got {str(v)[:40]}")
    return float(v)


def window_records(log: ParsedLog, rank: int) -> None:
    """One record per window (formats that log running or window means, from one rank): the
    detectors then see one point per window, not per step."""
    for w in log.windows:
        if w.step_s is not None:
            log.record(
                StepTimes(w.last_step, rank, w.step_s, *(w.phases.get(p, float("nan")) for p in PHASES)), w.where
            )


def step_windows(log: ParsedLog) -> list[Window]:
    """Per-step records -> one window per step every rank logged: the slowest rank's step time
    (the job moves at that pace), each phase the slowest rank's (of those it knows); the lowest
    rank's file:line. A rank's later record of a step replaces its earlier one. Computed on the
    record columns: no object per record (memory: the windows, bounded as the records are)."""
    import numpy as np

    if not log.records:
        return []
    c = log.records.columns()
    n = len(c["step"])
    last = n - 1 - np.unique(np.stack([c["step"], c["rank"]])[:, ::-1], axis=1, return_index=True)[1]
    last = last[np.lexsort((c["rank"][last], c["step"][last]))]  # by step, then rank
    steps = c["step"][last]
    starts = np.flatnonzero(np.r_[True, steps[1:] != steps[:-1]])
    full = np.diff(np.r_[starts, len(last)]) == len(np.unique(c["rank"]))
    step_s = np.maximum.reduceat(c["step_s"][last], starts)
    phase = {p: np.fmax.reduceat(c[p][last], starts) for p in PHASES}
    count = np.maximum.reduceat(c["count"][last], starts)
    ends = np.maximum.reduceat(c["last"][last], starts)  # a window of several steps ends at its last
    return [
        Window(
            last_step=int(ends[g]),
            steps=int(count[g]),
            where=log.records.where(int(last[k])),
            step_s=float(step_s[g]),
            phases={p: float(v[g]) for p, v in phase.items() if math.isfinite(v[g])},
        )
        for g, k in enumerate(starts)
        if full[g]
    ]


def seconds(v: float) -> float:
    return v if 0.0 <= v <= MAX_SECONDS else math.nan


def integer(v: Any, where: str, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > MAX_INT or not math.isfinite(v):
        raise SpecError(f"{where}: {name} must be a number, got {str(v)[:40]}")
    return int(v)


def index(v: Any, where: str, name: str) -> int:
    """A step or rank index: an integer in [0, 2**31) (SpecError naming the file and line)."""
    n = integer(v, where, name)
    if not 0 <= n < MAX_INDEX or n != v:
        raise SpecError(f"{where}: {name} must be an integer in [0, {MAX_INDEX}), got {v!r}")
    return n


def rank_from_path(path: Path) -> int | None:
    m = re.search(r"(?<![a-z])rank[_-]?(\d{1,9})(?!\d)", str(path), re.IGNORECASE)
    return int(m.group(1)) if m else None
