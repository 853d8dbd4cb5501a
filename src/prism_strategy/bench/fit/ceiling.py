"""The largest micro-batch that runs: bisection seeded with the planner's prediction.

Each trial is a real run; an out-of-memory is caught (the run's status), recorded, and the
search goes on. From the seed it doubles (or halves) until it brackets the ceiling, then bisects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from prism_strategy.specs.errors import SpecError


@dataclass(kw_only=True)
class Ceiling:
    ceiling: int
    """Largest micro-batch that ran; 0 when even 1 does not fit."""
    seed: int
    trials: list[tuple[int, str]] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.trials)


def search_ceiling(measure: Callable[[int], str], *, seed: int, max_micro_batch: int = 4096) -> Ceiling:
    """measure(mb) -> "ok" | "oom"; any other status stops the search with an error."""
    result = Ceiling(ceiling=0, seed=max(1, min(seed, max_micro_batch)))
    seen: dict[int, bool] = {}

    def fits(mb: int) -> bool:
        if mb not in seen:
            status = measure(mb)
            result.trials.append((mb, status))
            if status not in ("ok", "oom"):
                raise SpecError(f"ceiling trial at micro-batch {mb} {status}; see `prism-strategy results` for its log")
            seen[mb] = status == "ok"
        return seen[mb]

    lo, hi = 0, max_micro_batch + 1
    x = result.seed
    if fits(x):
        lo = x
        while lo < max_micro_batch and fits(min(2 * lo, max_micro_batch)):
            lo = min(2 * lo, max_micro_batch)
        hi = min(2 * lo, max_micro_batch + 1) if lo < max_micro_batch else max_micro_batch + 1
    else:
        hi = x
        while hi > 1 and not fits(hi // 2):
            hi //= 2
        lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    result.ceiling = lo
    return result


def scan_ceiling(measure: Callable[[int], str], *, max_micro_batch: int = 4096) -> Ceiling:
    """Exhaustive reference: 1, 2, 3, ... until the first out-of-memory."""
    result = Ceiling(ceiling=0, seed=1)
    for mb in range(1, max_micro_batch + 1):
        status = measure(mb)
        result.trials.append((mb, status))
        if status != "ok":
            break
        result.ceiling = mb
    return result
