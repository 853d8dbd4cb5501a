"""Largest micro-batch under a memory budget, from as few probes (traced steps) as possible.

Pure Python, no torch: `probe(micro_batch) -> peak bytes` is any measurement. Peak memory is
affine in the micro-batch while the peak stays in the same phase (activations grow linearly),
so a predicted boundary plus its neighbour usually settle it: 2 probes when the seed (the
analytic answer) is right, 4 when a line through the first probes is. Every probe stays
strictly inside the bracket (largest known fit, smallest known miss), and a round that does
not close it is followed by a bisection step, so a curve that is not affine still converges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class SearchResult:
    micro_batch: int
    """Largest probed micro-batch that fits (0: micro-batch 1 does not)."""
    exact: bool
    """micro_batch + 1 was probed and does not fit, or micro_batch is the cap."""
    points: tuple[tuple[int, float], ...]
    """(micro-batch, peak bytes) per probe, in order."""

    @property
    def probes(self) -> int:
        return len(self.points)


def find_max_micro_batch(
    probe: Callable[[int], float],
    budget: float,
    *,
    seed: int,
    per_sample: float = 0.0,
    max_probes: int = 6,
    cap: int = 4096,
) -> SearchResult:
    """Largest micro-batch m <= cap with probe(m) <= budget.

    Probes in rounds: a predicted boundary (first the seed, e.g. the analytic answer; then the
    line through the probes nearest the bracket), then its neighbour across the boundary, which
    closes the bracket when memory is affine there; a round that does not close it is followed
    by a plain bisection step. per_sample: bytes one more sample adds, the slope to use while
    only one probe exists (0: double or halve instead)."""
    points: list[tuple[int, float]] = []
    lo, hi = 0, cap + 1  # lo fits (0 trivially), hi does not (cap + 1 by decree)
    plan = _rounds()
    guess, step = min(max(seed, 1), cap), next(plan)
    while len(points) < max_probes and hi - lo > 1:
        peak = float(probe(guess))
        points.append((guess, peak))
        fits = peak <= budget
        lo, hi = (guess, hi) if fits else (lo, guess)
        step = next(plan)
        if step == "check":
            guess = guess + 1 if fits else guess - 1
        elif step == "bisect" and hi <= cap:
            guess = (lo + hi) // 2
        else:
            guess = line_guess(points, budget, lo, hi, per_sample)
        guess = min(max(guess, lo + 1), hi - 1)
    return SearchResult(micro_batch=lo, exact=hi - lo <= 1, points=tuple(points))


def _rounds():
    """predict, check, predict, check, bisect, predict, check, bisect, ..."""
    yield "predict"
    yield "check"
    while True:
        yield "predict"
        yield "check"
        yield "bisect"


def line_guess(points: list[tuple[int, float]], budget: float, lo: int, hi: int, per_sample: float = 0.0) -> int:
    """Where a line through the two probes nearest the bracket reaches the budget; with one
    probe, the per-sample slope; without a slope, double the fit (or halve the miss)."""
    near = sorted(points, key=lambda p: min(abs(p[0] - lo), abs(p[0] - hi)))[:2]
    m1, p1 = near[0]
    slope = per_sample
    if len(near) == 2 and near[1][0] != m1:
        slope = (near[1][1] - p1) / (near[1][0] - m1)
    if slope > 0:
        return int(m1 + (budget - p1) // slope)
    return 2 * lo if points[-1][1] <= budget else (lo + hi) // 2
