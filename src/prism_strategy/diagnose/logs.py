"""Read a run's logs for `analyze`: every file under the given paths that a reader in
`readers.READERS` recognises (or, with a format named, every file of that format), merged into
one `RunLog` of per-rank step records, recorded events and hang reports.

The grammar is the readers' (readers/prism.py for [TIMING] lines, readers/prism_perf.py for
perf.jsonl, readers/step_monitor.py for rank*.jsonl), the same `results import` reads. What analyze
adds: a folder is searched recursively (watchdog stacks and heartbeats skipped), several paths are
read together, a cut last line (a run killed mid-write) is left out and listed in `skipped`
rather than refused, and a hang report written before the (last) run started is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from prism_strategy.readers import collective_format, read_file, reader_for, step_monitor
from prism_strategy.readers.steps import Event, Records
from prism_strategy.readers.training_log import ParsedLog, Window
from prism_strategy.specs.errors import SpecError

MAX_FILES = 20_000
"""A folder with more files than this is not a run directory (`analyze /` stops here)."""
SKIP_DIRS = {"stacks", "heartbeat", "flight_recorder", "hang"}


@dataclass
class RunLog:
    """Everything read from a run: step records, recorded events, hang reports."""

    records: Records = field(default_factory=Records)
    events: list[Event] = field(default_factory=list)
    hang_reports: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[int, dict[str, Any]] = field(default_factory=dict)
    closed: dict[int, int] = field(default_factory=dict)
    """Ranks whose (last) run wrote a close record, with its step count."""
    sources: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    forensics: list[dict[str, Any]] = field(default_factory=list)
    """The collapse capture's per-step records (StepMonitor folders only)."""
    windows: list[Window] = field(default_factory=list)
    """One rank's logged windows, from a log with no per-rank step records (torchtitan)."""

    def add(self, log: ParsedLog) -> None:
        self.records.extend(log.records)
        self.events += log.events
        self.hang_reports += log.hang_reports
        self.meta.update(log.meta)
        self.closed.update(log.closed)
        self.skipped += log.skipped
        if log.records or log.events or log.meta or log.hang_reports:
            self.sources += [str(f) for f in log.files]


def _drop_stale_hang_reports(log: RunLog) -> None:
    """A hang report written before the (last) run started belongs to an earlier run."""
    start = max((m.get("t0", 0.0) for m in log.meta.values()), default=0.0)
    stale = [r for r in log.hang_reports if r.get("written", float("inf")) < start]
    for r in stale:
        log.skipped.append(f"{r['_path']}: written before the run started; left out")
        log.hang_reports.remove(r)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    out = []
    try:
        for p in path.rglob("*"):
            if len(out) >= MAX_FILES:
                raise SpecError(
                    f"{path}: more than {MAX_FILES} files under it; pass the run directory or the log files"
                )
            if p.is_file() and not SKIP_DIRS & set(p.relative_to(path).parts[:-1]):
                out.append(p)
    except OSError as e:
        raise SpecError(f"{path}: cannot read the folder ({e.strerror or e})") from None
    return sorted(out)


def load_run(paths: Iterable[str | Path], fmt: str | None = None) -> RunLog:
    """Read every recognised file under the given paths (`fmt`: only that format); SpecError
    when nothing usable is found."""
    log = RunLog()
    why_not: list[str] = []
    paths = [Path(p) for p in paths]
    if not paths:
        raise SpecError("no path given: pass a run directory or log files")
    for path in paths:
        try:
            exists = path.exists()
        except OSError as e:  # e.g. a file name too long
            raise SpecError(f"{str(path)[:80]}...: not a usable path ({e.strerror})") from None
        if not exists:
            raise SpecError(f"{path}: no such file or directory")
        for f in _files(path):
            reader = reader_for(f, fmt, in_folder=f != path)
            if reader is not None:
                one = read_file(reader, f)
                log.add(one)
                if not one.records and getattr(reader, "NO_STEP_RECORDS", None):
                    if one.windows:
                        log.windows += one.windows
                        log.sources += [str(f)] if str(f) not in log.sources else []
                    why_not.append(f"{f}: a {reader.FORMAT} has {reader.NO_STEP_RECORDS}")
            elif f == path and (kind := collective_format(f)) is not None:
                why_not.append(
                    f"{f}: a {kind} output (one collective's time per size), not a training log; "
                    "store it with `prism-strategy results import` (plan then uses it)"
                )
            if reader is step_monitor:
                log.forensics += step_monitor.read_forensics(f)
    _drop_stale_hang_reports(log)
    if log.records.note():
        log.skipped.append(log.records.note())
    if not log.records and not log.hang_reports and not log.meta and not log.windows:
        if why_not:
            raise SpecError(why_not[0])
        where = ", ".join(map(str, paths))
        raise SpecError(f"{where}: no step records found (expected rank*.jsonl, perf.jsonl or [TIMING] lines)")
    return log
