"""A verdict from one rank's logged windows (torchtitan: rank 0's tokens/s per logging window;
Hugging Face Trainer: tqdm's seconds per step), for logs with no per-rank phase times. What such a series can show, with the detectors'
thresholds (analysis/detect.py DetectConfig):

- slowdown: from some window on, every window's step time is at least `straggler_ratio` (1.3x)
  the baseline's (the median of the first half after warm-up) to the end of the log; at
  `collapse_factor` (3x) and over `collapse_steps` steps it is a collapse;
- straggler: windows at 1.3x or more that recover in between, in at least `straggler_min_share`
  of the windows and at least twice: the steps some rank or node holds up now and then (rank 0's
  log cannot say which: StepMonitor can);
- healthy otherwise. A window's step time is 1 / tokens per second (the tokens per step are the
  same in every window of one run), so ratios need no batch or sequence length; where the log
  gives seconds per step, those.
"""

from __future__ import annotations

import statistics

from prism_strategy.analysis.detect import DetectConfig
from prism_strategy.readers.steps import Event
from prism_strategy.readers.training_log import Window

MIN_WINDOWS = 4
"""Windows after warm-up below which the series says nothing."""
WHO = "rank 0's log has no per-rank times to name a rank: time the run with StepMonitor (docs/collapse.md)"


def judged(windows: list[Window]) -> list[Window]:
    """The windows after warm-up: the first logged window (step 1: compile, allocator warm-up)
    is left out, and windows without tokens/s."""
    out = [w for w in windows if w.step_s or w.tokens_per_s]
    return out[1:] if out and out[0].last_step <= 1 else out


def step_time(w: Window) -> float:
    """Seconds per step, or its stand-in 1 / tokens per second (same tokens in every step)."""
    return w.step_s if w.step_s else 1.0 / w.tokens_per_s


def _rate(t: float, w: Window) -> str:
    return f"{1 / t:,.0f} tokens/s per device" if not w.step_s else f"{t:.2f} s per step"


def window_events(windows: list[Window], cfg: DetectConfig) -> list[Event]:
    ws = judged(windows)
    if len(ws) < MIN_WINDOWS:
        return []
    times = [step_time(w) for w in ws]
    base = statistics.median(times[: max(2, len(times) // 2)])
    slow = [t >= cfg.straggler_ratio * base for t in times]
    first = next((k for k in range(len(ws)) if all(slow[k:])), None)
    if first is not None and first >= 2:
        return [_slowdown(ws, times, base, first, cfg)]
    spikes = [k for k, s in enumerate(slow) if s]
    if len(spikes) >= 2 and len(spikes) >= cfg.straggler_min_share * len(ws):
        return [_spikes(ws, times, base, spikes, cfg)]
    return []


def _slowdown(ws: list[Window], times: list[float], base: float, first: int, cfg: DetectConfig) -> Event:
    after = statistics.median(times[first:])
    ratio = after / base
    start = ws[first].last_step - ws[first].steps + 1
    steps = ws[-1].last_step - start + 1
    kind = "collapse" if ratio >= cfg.collapse_factor and steps >= cfg.collapse_steps else "slowdown"
    msg = (
        f"{kind}: from step {start} rank 0 went from {_rate(base, ws[0])} to {_rate(after, ws[-1])} "
        f"({ratio:.2f}x the step time; threshold {cfg.straggler_ratio}x, a collapse from {cfg.collapse_factor}x) "
        f"and stayed there to the last logged step {ws[-1].last_step}; {WHO}"
    )
    evidence = {
        "baseline_step": base,
        "after_step": after,
        "step_unit": "s" if ws[0].step_s else "1 / (tokens/s per device)",
        "ratio": ratio,
        "from_step": start,
        "windows_after": len(ws) - first,
    }
    return Event(kind, start, (0,), evidence, msg, "log")


def _spikes(ws: list[Window], times: list[float], base: float, spikes: list[int], cfg: DetectConfig) -> Event:
    worst = max(times[k] for k in spikes) / base
    at = [ws[k].last_step for k in spikes]
    shown = ", ".join(map(str, at[:8])) + (" ..." if len(at) > 8 else "")
    msg = (
        f"straggler (from rank 0's step times): {len(spikes)} of {len(ws)} logging windows take "
        f"{cfg.straggler_ratio}x the median step time or more (up to {worst:.2f}x; windows ending at steps {shown}) "
        f"and recover in between: a rank or node that is slow at times holds the collective; {WHO}"
    )
    evidence = {"windows": len(ws), "slow_windows": at, "worst_ratio": worst, "baseline_step": base}
    return Event("straggler", at[0], (), evidence, msg, "log")


def healthy_message(windows: list[Window]) -> str:
    ws = judged(windows)
    if len(ws) < MIN_WINDOWS:
        return (
            f"healthy as far as it shows: {len(ws)} logging windows after warm-up, too few to judge (>= {MIN_WINDOWS})"
        )
    return (
        f"healthy: no slowdown or straggler in rank 0's step times over {len(ws)} logging windows, steps "
        f"{ws[0].last_step - ws[0].steps + 1}-{ws[-1].last_step} (the step-1 window is warm-up); {WHO} for per-rank phases"
    )
