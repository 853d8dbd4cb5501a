"""What a collective-benchmark reader returns, and the strict line reading the readers share.

Every line a reader recognises must parse completely; one that does not (malformed, or cut off
at the end of a truncated log) is bad input naming file:line, and nothing is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

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


def text_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without newline, whether the line ended with a newline)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise SpecError(f"{path}: cannot read ({e.strerror})") from None
    lines = text.split("\n")
    for i, line in enumerate(lines, 1):
        last = i == len(lines)
        if last and not line:
            return
        yield i, line.rstrip("\r"), not last


def bad_line(path: Path, i: int, ended: bool, what: str, expected: str) -> SpecError:
    cut = " (the last line is cut off: a truncated log)" if not ended else ""
    return SpecError(f"{path}:{i}: {what} does not parse{cut}; expected {expected}")


def head(path: Path, n: int = 4096) -> str:
    try:
        with path.open("rb") as f:
            return f.read(n).decode(errors="replace")
    except OSError:
        return ""
