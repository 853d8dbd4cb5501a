"""One rank's step record and a recorded finding: what the readers produce for `analyze` and
what `StepMonitor` writes and detects (analysis/detect.py), so both sides share one type.

Pure Python: readers/ sits below runtime/ (DESIGN.md), and `diagnose.analyze` reads logs without
importing anything that applies a strategy.
"""

from __future__ import annotations

import math
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
