"""What a collective-benchmark reader returns, and the strict line reading the readers share.

Every line a reader recognises must parse completely; one that does not (malformed, or cut off
at the end of a truncated log) is bad input naming file:line, and nothing is stored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from prism_strategy.specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class Sample:
    """One measured size: payload bytes per call (census convention) and seconds per call."""

    bytes: float
    seconds: float
    where: str
    """file:line it was read from."""


@dataclass
class CollectiveLog:
    format: str
    path: Path
    op: str = ""
    """all_reduce, all_gather, reduce_scatter or broadcast."""
    dtype: str = ""
    """torch dtype name: float32, bfloat16, ..."""
    ranks: int | None = None
    """Ranks the log says took part (None when it does not say)."""
    hosts: tuple[str, ...] = ()
    samples: list[Sample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    buffers: str = "device"
    """Where the buffers lived: "device", or "host" (oneCCL's backend host / USM host memory):
    a host-buffer curve is its own, never a device collective's (bench/results/curves.py)."""


PROGRESS_EVERY = 1 << 16
"""Lines between two progress reports (text_lines calls the `on_progress` callback)."""
Progress = Callable[[Path, int, int], None]
"""(file, characters read so far, its size in bytes): set by the CLI (report/console.py prints it)."""
_progress: list[Progress] = []


def on_progress(callback: Progress | None) -> None:
    """Report the reading of every file from now on to `callback` (None: stop)."""
    _progress[:] = [callback] if callback is not None else []


MAX_LINE = 1 << 20
"""Longest line read (characters); a longer one is not a log line (a binary file, a dump)."""


def text_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without newline, whether the line ended with a newline), read one line
    at a time: memory is one line, whatever the file's size."""
    try:
        with open(path, errors="replace") as f:
            i, done, size = 0, 0, os.fstat(f.fileno()).st_size
            while line := f.readline(MAX_LINE + 1):
                i, done = i + 1, done + len(line)
                if _progress and not i % PROGRESS_EVERY:
                    _progress[0](path, done, size)
                ended = line.endswith("\n")
                if not ended and len(line) > MAX_LINE:
                    raise SpecError(f"{path}:{i}: a line longer than {MAX_LINE:,} characters; not a log: pass the log")
                yield i, (line[:-1] if ended else line).rstrip("\r"), ended
            if _progress and i >= PROGRESS_EVERY:
                _progress[0](path, size, size)
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror or e})") from None


def bad_line(path: Path, i: int, ended: bool, what: str, expected: str) -> SpecError:
    cut = " (the last line is cut off: a truncated log)" if not ended else ""
    return SpecError(f"{path}:{i}: {what} does not parse{cut}; expected {expected}")


def head(path: Path, n: int = 4096) -> str:
    try:
        with path.open("rb") as f:
            return f.read(n).decode(errors="replace")
    except OSError:
        return ""
