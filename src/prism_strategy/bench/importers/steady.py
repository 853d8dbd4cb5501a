"""Steady-state detection: which logged windows describe the run's steady step time.

Rule (applied to the windows in log order, each window weighted by the steps it covers):

1. Warm-up: drop the first ``max(1, ceil(WARMUP_FRACTION * n))`` windows. The first window
   always holds step 0 (first-batch fetch, allocator growth, DDP bucket rebuild, compilation).
2. Outliers: of the rest, drop windows whose step time lies outside
   ``median +/- MAD_K * max(1.4826 * MAD, FLOOR_FRACTION * median)``; 1.4826 * MAD estimates
   the standard deviation of normal noise, and the floor keeps identical windows (MAD 0, or
   log rounding) from turning every small wobble into an outlier. Checkpoint saves, validation
   passes and collective collapses land here.
3. The steady figure of each quantity is the step-weighted mean over the kept windows.

At least `MIN_WINDOWS` windows must remain after the warm-up drop, else the log is too short.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from prism_strategy.readers.training_log import Window
from prism_strategy.specs.errors import SpecError

WARMUP_FRACTION = 0.1
MAD_K = 3.0
FLOOR_FRACTION = 0.02
MIN_WINDOWS = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Steady:
    kept: tuple[Window, ...]
    warmup: tuple[Window, ...]
    outliers: tuple[Window, ...]
    median_s: float
    band_s: float

    @property
    def steps(self) -> int:
        return sum(w.steps for w in self.kept)

    def mean(self, get) -> float | None:
        """Step-weighted mean of get(window) over the kept windows that have it."""
        pairs = [(get(w), w.steps) for w in self.kept if get(w) is not None]
        total = sum(s for _, s in pairs)
        return sum(v * s for v, s in pairs) / total if total else None

    def summary(self) -> str:
        n = len(self.kept) + len(self.warmup) + len(self.outliers)
        text = (
            f"kept {len(self.kept)} of {n} windows ({self.steps} steps); dropped {len(self.warmup)} warm-up "
            f"(first {WARMUP_FRACTION:.0%}, at least 1) and {len(self.outliers)} outlier(s) outside "
            f"{self.median_s:.4g} s +/- {self.band_s:.3g} s"
        )
        if self.outliers:
            text += ": " + ", ".join(f"step {w.last_step} at {w.step_s:.4g} s" for w in self.outliers[:4])
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "windows": len(self.kept) + len(self.warmup) + len(self.outliers),
            "kept": len(self.kept),
            "kept_steps": self.steps,
            "warmup_dropped": len(self.warmup),
            "outliers_dropped": len(self.outliers),
            "outlier_steps": [w.last_step for w in self.outliers],
            "median_step_s": self.median_s,
            "band_s": self.band_s,
            "rule": f"drop first max(1, ceil({WARMUP_FRACTION} n)); then outside median "
            f"+/- {MAD_K} max(1.4826 MAD, {FLOOR_FRACTION} median)",
        }


def steady_state(windows: list[Window], where: str) -> Steady:
    """Split timed windows into warm-up, outliers and the steady rest (see the module rule)."""
    timed = [w for w in windows if w.step_s is not None]
    if bad := next((w for w in timed if not (math.isfinite(w.step_s) and w.step_s > 0)), None):
        raise SpecError(
            f"{bad.where}: a step time of {bad.step_s} s is not a measurement (a step takes > 0 s); "
            "fix or remove the line"
        )
    n = len(timed)
    n_warm = max(1, math.ceil(WARMUP_FRACTION * n))
    rest = timed[n_warm:]
    if len(rest) < MIN_WINDOWS:
        raise SpecError(
            f"{where}: {n} timed window(s) in the log; steady state needs at least "
            f"{MIN_WINDOWS + 1} (the first is warm-up): import a longer run"
        )
    times = [w.step_s for w in rest]
    med = statistics.median(times)
    mad = statistics.median(abs(t - med) for t in times)
    band = MAD_K * max(1.4826 * mad, FLOOR_FRACTION * med)
    kept = tuple(w for w in rest if abs(w.step_s - med) <= band)
    outliers = tuple(w for w in rest if abs(w.step_s - med) > band)
    return Steady(kept=kept, warmup=tuple(timed[:n_warm]), outliers=outliers, median_s=med, band_s=band)
