"""Log readers, one per format: `FORMAT`, `SUFFIXES`, `looks_like(path)` and `read(path)`.

Training logs (`READERS`), shared by `analyze` and `results import`: StepMonitor rank files
(`step_monitor`), PRISM's perf.jsonl and per-step JSONL (`prism_perf`), text logs with [TIMING]
lines (`prism`), torchtitan's metrics logs (`torchtitan`), Hugging Face Trainer logs
(`hf_trainer`) and the watchdog's hang report
(`hang_report`); each returns a `training_log.ParsedLog` (windows for import, per-rank step
records for analyze). Without --format the first reader in `READERS` whose `looks_like` says yes
reads a file; with it, the named one does. Collective benchmarks (`COLLECTIVE_FORMATS`: nccl-tests,
oneCCL's benchmark) return a `CollectiveLog` that `results import` stores as a measured curve.

A new format is one module with those four names and one entry in `READERS` (or
`COLLECTIVE_FORMATS`).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from prism_strategy.readers import (
    hang_report,
    hf_trainer,
    nccl_tests,
    oneccl_benchmark,
    prism,
    prism_perf,
    step_monitor,
    torchtitan,
)
from prism_strategy.readers.collective_log import CollectiveLog, Sample, on_progress
from prism_strategy.readers.training_log import ParsedLog
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import require_regular

READERS: tuple[ModuleType, ...] = (step_monitor, prism_perf, prism, torchtitan, hf_trainer, hang_report)
"""Tried in this order; the JSONL readers tell theirs apart by the first line's keys."""
FORMATS = {r.FORMAT: r for r in READERS}
COLLECTIVE_FORMATS = {"nccl-tests": nccl_tests, "oneccl-benchmark": oneccl_benchmark}
KNOWN = (
    "a StepMonitor folder (rank*.jsonl), PRISM perf.jsonl, a log with [TIMING] lines, a torchtitan log, "
    "a Hugging Face Trainer log or a hang_report.json"
)

__all__ = [
    "READERS",
    "FORMATS",
    "COLLECTIVE_FORMATS",
    "CollectiveLog",
    "ParsedLog",
    "Sample",
    "reader_for",
    "read_file",
    "read_run",
    "collective_format",
    "named",
    "on_progress",
]


def named(fmt: str) -> ModuleType:
    if fmt not in FORMATS:
        every = ", ".join([*FORMATS, *COLLECTIVE_FORMATS])
        raise SpecError(f"--format {fmt!r} is not a log format; one of {every}")
    return FORMATS[fmt]


def reader_for(path: Path, fmt: str | None = None, *, in_folder: bool = False) -> ModuleType | None:
    """The reader for one file: the named one, else the first that recognises it. In a folder
    walk only files with a reader's suffixes are opened (a run folder holds checkpoints too)."""
    if fmt is not None:
        reader = named(fmt)
        return reader if not in_folder or (path.suffix in reader.SUFFIXES and reader.looks_like(path)) else None
    for reader in READERS:
        if (not in_folder or path.suffix in reader.SUFFIXES) and reader.looks_like(path):
            return reader
    return None


def read_file(reader: ModuleType, path: Path, **options: Any) -> ParsedLog:
    """Read one file; options (e.g. timing) go to the readers that take them (their OPTIONS)."""
    try:
        return reader.read(path, **{k: v for k, v in options.items() if k in getattr(reader, "OPTIONS", ())})
    except OSError as e:
        raise SpecError(f"{path}: cannot read it ({e.strerror or e})") from None


def collective_format(path: Path) -> str | None:
    """The collective benchmark a file is the output of (None: not one)."""
    if not path.is_file():
        return None
    return next((name for name, r in COLLECTIVE_FORMATS.items() if r.looks_like(path)), None)


def _in_folder(folder: Path, fmt: str | None, options: dict[str, Any]) -> ParsedLog:
    if fmt in (None, step_monitor.FORMAT) and step_monitor.rank_files(folder):
        return step_monitor.read_folder(folder)
    for reader in READERS if fmt is None else (named(fmt),):
        if reader in (step_monitor, hang_report):
            continue
        files = [p for p in sorted(folder.iterdir()) if p.is_file() and reader_for(p, reader.FORMAT, in_folder=True)]
        if len(files) > 1:
            raise SpecError(
                f"{folder}: {len(files)} {reader.FORMAT} files ({', '.join(p.name for p in files)}); "
                "pass the file itself"
            )
        if files:
            return read_file(reader, files[0], **options)
    raise SpecError(f"{folder}: expected {KNOWN} in it; found none: pass the file itself")


def read_run(path: str | Path, fmt: str | None = None, **options: Any) -> ParsedLog:
    """One whole run from a file or folder, for storing: a cut last line is refused here."""
    path = Path(path)
    if not path.exists():
        raise SpecError(f"{path}: no such file or directory")
    if path.is_dir():
        log = _in_folder(path, fmt, options)
    else:
        require_regular(path)  # a FIFO would block the reader's first read
        reader = reader_for(path, fmt)
        if reader is None:
            raise SpecError(
                f"{path}: not a PRISM log ([TIMING] lines), nor any format read here ({KNOWN}); "
                "see `prism-strategy results import --help`"
            )
        if reader is step_monitor:
            raise SpecError(f"{path}: a StepMonitor rank file; pass its folder ({path.parent}) to read every rank")
        log = read_file(reader, path, **options)
    if log.cut:
        raise SpecError(f"{log.cut}; import a complete log")
    if log.records.note():
        log.notes.append(log.records.note())
    if not log.windows:
        raise SpecError(f"{path}: a {log.format} file with no step times in it; nothing to import")
    return log
