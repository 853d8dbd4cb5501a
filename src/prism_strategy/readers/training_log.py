"""What every log reader returns, and the strict line reading they share.

A reader turns one run's log into `Window`s (each the mean over some consecutive optimizer
steps), the scenario fields the log states (with the line that states each), and peak memory.
Every line a reader recognises must parse completely; one that does not (a malformed or
truncated line) is bad input naming the file and line, and nothing is stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from prism_strategy.readers.collective_log import text_lines
from prism_strategy.specs.errors import SpecError

PHASES = ("data", "forward", "backward", "optimizer")


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
    """One run read from a log: windows, what the log says about the run, and peak memory."""

    format: str
    files: list[Path]
    windows: list[Window] = field(default_factory=list)
    scenario: dict[str, Any] = field(default_factory=dict)
    scenario_where: dict[str, str] = field(default_factory=dict)
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    peak_rss_bytes: float | None = None
    host: str = ""
    torch: str = ""
    notes: list[str] = field(default_factory=list)

    def state(self, name: str, value: Any, where: str) -> None:
        """The log states a scenario field; the first statement wins unless a later one disagrees."""
        if name in self.scenario and self.scenario[name] != value:
            raise SpecError(f"{where}: the log says {name} = {value!r} but {self.scenario_where[name]} says "
                            f"{self.scenario[name]!r}; import one run at a time")
        self.scenario[name] = value
        self.scenario_where.setdefault(name, where)

    def peak(self, attr: str, value: float | None) -> None:
        if value is not None:
            setattr(self, attr, max(getattr(self, attr) or 0.0, float(value)))


def json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Strict JSONL: every non-blank line one JSON object; a cut last line is a partial log."""
    for i, line, ended in text_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            cut = "" if ended else " (the last line is cut off: a partial log)"
            raise SpecError(f"{path}:{i}: malformed JSON line ({e.msg}){cut}; fix or remove the line") from None
        if not isinstance(obj, dict):
            raise SpecError(f"{path}:{i}: expected one JSON object per line, got {type(obj).__name__}")
        yield i, obj


def bad_line(path: Path, i: int, ended: bool, what: str, expected: str) -> SpecError:
    cut = " (the last line is cut off: a partial log)" if not ended else ""
    return SpecError(f"{path}:{i}: {what} does not parse{cut}; expected {expected}")


def number(obj: dict[str, Any], key: str, where: str, *, required: bool = True) -> float | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: field {key!r} must be a number, got {v!r}")
    return float(v)
