"""Tune: rank candidates (strategy x micro-batch x checkpoint frequency) with the planner,
measure the most promising first, stop when no remaining candidate can beat the best measured
one beyond the model's own error.

The model's error is learned per strategy as measurements come in: a strategy's scale is the
median of measured / predicted over its runs (the global median until it has one), and the
spread is the largest |log(measured / (scale x predicted))| seen, never below `error_floor`.
A candidate's reach = its strategy's scale x predicted x exp(spread). First the best-predicted
candidate of every strategy is measured (so no strategy is judged by another's error), then the
leading strategy's most promising other candidate (so the leader's error is seen across
configurations, not at one point), then always the candidate of highest reach, until the best
measured throughput is at least every remaining reach.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    strategy: str
    micro_batch: int
    ckpt_freq: int
    predicted_samples_per_s: float


@dataclass(kw_only=True)
class TuneResult:
    best: Candidate | None
    best_samples_per_s: float
    measured: list[tuple[Candidate, float]] = field(default_factory=list)
    grid_size: int = 0
    stop_reason: str = ""

    @property
    def runs(self) -> int:
        return len(self.measured)

    def as_dict(self) -> dict[str, Any]:
        b = self.best
        return {
            "best": None
            if b is None
            else {
                "strategy": b.strategy,
                "micro_batch": b.micro_batch,
                "ckpt_freq": b.ckpt_freq,
                "samples_per_s": self.best_samples_per_s,
            },
            "runs": self.runs,
            "grid_size": self.grid_size,
            "stop_reason": self.stop_reason,
            "measured": [
                {
                    "strategy": c.strategy,
                    "micro_batch": c.micro_batch,
                    "ckpt_freq": c.ckpt_freq,
                    "predicted_samples_per_s": c.predicted_samples_per_s,
                    "samples_per_s": m,
                }
                for c, m in self.measured
            ],
        }


class _ErrorModel:
    def __init__(self, floor: float):
        self.floor = math.log1p(floor)
        self.ratios: dict[str, list[float]] = {}

    def add(self, c: Candidate, got: float) -> None:
        if got > 0 and c.predicted_samples_per_s > 0:
            self.ratios.setdefault(c.strategy, []).append(got / c.predicted_samples_per_s)

    def scale(self, strategy: str) -> float:
        own = self.ratios.get(strategy)
        everything = [r for rs in self.ratios.values() for r in rs]
        return statistics.median(own or everything or [1.0])

    def spread(self) -> float:
        devs = [abs(math.log(r / self.scale(s))) for s, rs in self.ratios.items() for r in rs]
        return max([self.floor, *devs])

    def reach(self, c: Candidate) -> float:
        return self.scale(c.strategy) * c.predicted_samples_per_s * math.exp(self.spread())


def _leader_check(res: TuneResult, remaining: list[Candidate], model: _ErrorModel) -> Candidate | None:
    """The leading strategy's most promising other candidate, while the leader has one measurement:
    one point shows the model's scale for a strategy, not how its error moves with micro-batch and
    sequence length (on CPU the fixed per-step cost makes it move by 30%)."""
    if res.best is None or sum(c.strategy == res.best.strategy for c, _ in res.measured) >= 2:
        return None
    own = [c for c in remaining if c.strategy == res.best.strategy]
    return max(own, key=model.reach) if own else None


def tune(
    candidates: list[Candidate], measure: Callable[[Candidate], float], *, error_floor: float = 0.10
) -> TuneResult:
    """measure(candidate) -> samples/s (0 for out-of-memory or failure)."""
    remaining = sorted(candidates, key=lambda c: -c.predicted_samples_per_s)
    res = TuneResult(best=None, best_samples_per_s=0.0, grid_size=len(remaining))
    model = _ErrorModel(error_floor)
    firsts = [next(c for c in remaining if c.strategy == s) for s in dict.fromkeys(c.strategy for c in remaining)]

    def run(c: Candidate) -> None:
        remaining.remove(c)
        got = measure(c)
        res.measured.append((c, got))
        model.add(c, got)
        if got > res.best_samples_per_s:
            res.best, res.best_samples_per_s = c, got

    for c in firsts:
        run(c)
    while remaining:
        if (check := _leader_check(res, remaining, model)) is not None:
            run(check)
            continue
        nxt = max(remaining, key=model.reach)
        if res.best_samples_per_s >= model.reach(nxt):
            res.stop_reason = (
                f"no remaining candidate can beat {res.best_samples_per_s:.2f} samples/s: the most "
                f"promising ({nxt.strategy}, mb {nxt.micro_batch}, ckpt {nxt.ckpt_freq}) reaches at "
                f"most {model.reach(nxt):.2f} (model error {math.expm1(model.spread()):.0%})"
            )
            return res
        run(nxt)
    res.stop_reason = "measured every candidate"
    return res
