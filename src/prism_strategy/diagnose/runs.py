"""`analyze --runs A B C ...`: before the points of a scaling study are compared, flag the runs
whose step times are bimodal or whose backward grew mid-run (PRISM's intermittent backward
collapse makes a scaling curve noisy; suspect it before blaming a config change), and say which
points to rerun.

Per run (a StepMonitor folder or a log `analyze` reads), over the steps after the warm-up skip,
the per-step median over ranks:

* bimodal step times: the split of the sorted step times into two groups that minimises the
  within-group variance (Otsu / 1-D two-means); bimodal when each group holds at least
  ``MIN_SHARE`` of the steps (and 3 steps), the slower group's mean is >= ``MIN_RATIO`` x the
  faster's, and Ashman's D = sqrt(2) |m1 - m2| / sqrt(s1^2 + s2^2) >= 2 (two modes cleanly
  apart; Ashman, Bird & Zepf 1994, J. Astron. 108:2348);
* backward grew mid-run: the collapse detector fires, or the backward's median over the last
  third of the steps is >= ``GROWTH`` x that over the first third.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from prism_strategy.analysis.detect import DetectConfig, Series, nanmedian
from prism_strategy.diagnose.analyze import analyze_run
from prism_strategy.diagnose.logs import load_run
from prism_strategy.specs.errors import SpecError

MIN_SHARE = 0.15
MIN_RATIO = 1.5
"""The slow mode at least this much slower (a loaded host's jitter gives two modes ~1.4x apart)."""
ASHMAN_D = 2.0
GROWTH = 1.5
MIN_STEPS = 6


@dataclass(frozen=True, slots=True)
class RunCheck:
    path: str
    steps: int
    step_s: float | None
    verdict: str
    flags: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rerun(self) -> bool:
        return bool(self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "steps": self.steps,
            "step_s": self.step_s,
            "verdict": self.verdict,
            "flags": self.flags,
            "rerun": self.rerun,
        }


def bimodal(x: np.ndarray) -> dict[str, Any] | None:
    """Two clean modes in x (see the module docstring), with their means and shares; else None."""
    x = np.sort(x[np.isfinite(x)])
    n = x.size
    if n < 2 * 3:
        return None
    c1, c2 = np.cumsum(x), np.cumsum(x * x)
    ks = np.arange(3, n - 2)  # each side at least 3 steps
    sum_lo, sq_lo = c1[ks - 1], c2[ks - 1]
    sum_hi, sq_hi = c1[-1] - sum_lo, c2[-1] - sq_lo
    within = (sq_lo - sum_lo**2 / ks) + (sq_hi - sum_hi**2 / (n - ks))  # n x the within-group variance
    k = int(ks[np.argmin(within)])
    lo, hi = x[:k], x[k:]
    d = math.sqrt(2) * abs(hi.mean() - lo.mean()) / max(math.sqrt(lo.var() + hi.var()), 1e-12)
    share = min(k, n - k) / n
    if share < MIN_SHARE or hi.mean() < MIN_RATIO * lo.mean() or d < ASHMAN_D:
        return None
    return {
        "fast_s": round(float(lo.mean()), 6),
        "slow_s": round(float(hi.mean()), 6),
        "fast_share": round(k / n, 3),
        "slow_share": round((n - k) / n, 3),
        "ashman_d": round(d, 2),
    }


def _backward_growth(s: Series) -> dict[str, Any] | None:
    bwd = nanmedian(s.backward, axis=0)
    ok = bwd[np.isfinite(bwd)]
    if ok.size < MIN_STEPS:
        return None
    third = ok.size // 3
    first, last = float(np.median(ok[:third])), float(np.median(ok[-third:]))
    if first > 0 and last >= GROWTH * first:
        return {"first_third_s": round(first, 6), "last_third_s": round(last, 6), "factor": round(last / first, 2)}
    return None


def check_run(path: str | Path, cfg: DetectConfig | None = None) -> RunCheck:
    cfg = cfg or DetectConfig()
    run = load_run([path])
    v = analyze_run(run, cfg)
    if v.series is None or v.series.steps.size <= cfg.warmup_skip:
        return RunCheck(str(path), 0, None, v.verdict)
    s = v.series.tail(cfg.warmup_skip)
    step = nanmedian(s.step_s, axis=0)
    flags: dict[str, dict[str, Any]] = {}
    if (b := bimodal(step)) is not None:
        flags["bimodal"] = b
    collapse = next((e for e in v.events if e.kind == "collapse"), None)
    if collapse is not None:
        ev = collapse.evidence
        flags["backward_grew"] = {
            "from_step": ev.get("from_step"),
            "before_s": ev.get("backward_baseline_s"),
            "after_s": ev.get("backward_s"),
            "factor": ev.get("backward_factor"),
            "by": "collapse detector",
        }
    elif (g := _backward_growth(s)) is not None:
        flags["backward_grew"] = {**g, "by": "last third vs first third"}
    finite = step[np.isfinite(step)]
    median = round(float(np.median(finite)), 6) if finite.size else None
    return RunCheck(str(path), int(finite.size), median, v.verdict, flags)


def check_runs(paths: Iterable[str | Path], cfg: DetectConfig | None = None) -> list[RunCheck]:
    """Each run checked on its own (SpecError on bad input, naming the run)."""
    paths = list(paths)
    if len(paths) < 2:
        raise SpecError("--runs compares runs: pass two or more run folders or logs")
    return [check_run(p, cfg) for p in paths]
