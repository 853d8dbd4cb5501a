"""Detectors for collapse, straggler and input skew, shared by `StepMonitor` (online, every K
steps) and `prism-strategy analyze` (offline, the whole log), so both give the same answer.

Pure numpy: no torch, no torch.distributed. Input is a `Series`: per rank and step, the time
of each phase (data / forward / backward / optimizer), the step time and the tokens.

How compute is told apart from collective wait (docs/domain.md section 6)
---------------------------------------------------------------------
In a synchronous data-parallel step every rank leaves the gradient collective at about the same
moment. The phases before it hold no collective in DDP / ZeRO-1/2 (data, forward) and the
optimizer step is local, so ``local = data + forward + optimizer`` is each rank's own work,
measured without a barrier, by wall time (a rank that waits - on storage, on a slower device,
for a core on an oversubscribed host, in a sleep - holds the others back just as a slow one
does). On CPU devices the monitor also records the process CPU time of those phases; it names
the cause of a straggler (compute / waiting / data loader), it does not decide whether there is
one. The backward phase holds the rank's backward compute *plus* its wait
in the gradient collective; the rank that arrives last (the straggler) waits least, so its
backward is the shortest while its local time is the longest. Hence:

* collapse: after a warm-up baseline, backward of *every* rank is >= ``collapse_factor`` x its
  own baseline for ``collapse_steps`` consecutive steps while forward stays flat on every rank
  (within ``flat_factor`` of its baseline, or grown by less than ``flat_share`` of the
  backward's growth): compute unchanged, something in backward slowed on every rank together
  (which: the collective, the allocator or the host, is what `analysis.forensics` tells from
  the capture's records);
* straggler: the per-step ratio ``local[rank] / median of the other ranks`` (wall) has a median >=
  ``straggler_ratio`` and exceeds it in >= ``straggler_consistency`` of the steps, for a minority
  of ranks; their excess is a visible share of the step, and their backward (= collective wait)
  is not above the others' (they wait least). When the slow rank also gets more tokens, it is
  input skew instead. Cause (`straggler.straggler_cause`): data loader when the data phase holds
  half the excess, else compute when CPU time is itself over the ratio, or the extra CPU time
  (stretched by the host's load, as measured on the other ranks) explains half the excess (or
  no CPU time is recorded), else waiting;
* input skew: compute (forward, else step time) follows the tokens of the batch (Spearman rank
  correlation >= ``skew_corr`` over (rank, step) points, with tokens and time both varying;
  ranks, not values, so a few scheduler hiccups do not hide it).

Limits: where forward itself holds collectives (FSDP all-gathers) the local share is smaller and a
slowness confined to backward kernels cannot be told from a collapse without a comm-level split.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from prism_strategy.readers.steps import FIELDS, Event, Records, StepTimes


@dataclass(frozen=True, kw_only=True, slots=True)
class DetectConfig:
    """Thresholds; the defaults follow the issue (3x for 5 steps after a warm-up)."""

    warmup_skip: int = 3
    """First steps ignored everywhere (allocator warm-up, first collectives, compile)."""
    warmup_steps: int = 10
    """Steps after the skip that form the per-rank baseline for collapse."""
    collapse_factor: float = 3.0
    collapse_steps: int = 5
    flat_factor: float = 1.5
    """Forward may grow at most this much during a collapse (compute unchanged) ..."""
    flat_share: float = 0.1
    """... or by at most this share of the backward's growth (a 2 ms jitter on a 3 ms forward
    is flat next to a 300 ms backward rise)."""
    straggler_ratio: float = 1.3
    straggler_min_share: float = 0.1
    """The straggler's extra local time must be at least this share of the median step (what the
    others lose waiting for it; below a tenth, a busy host's scheduling looks the same)."""
    straggler_min_steps: int = 10
    """Fewer steps than this say nothing: on a shared host a few descheduled steps look alike."""
    straggler_consistency: float = 0.8
    """Share of steps in which the straggler must be over the ratio (a rank that is only
    descheduled now and then, as under CPU contention, is not a straggler)."""
    skew_corr: float = 0.6
    skew_min_cv: float = 0.1
    skew_min_points: int = 8


@dataclass(frozen=True, slots=True)
class Series:
    """Per-rank, per-step arrays of shape (ranks, steps); nan where a rank has no record."""

    ranks: tuple[int, ...]
    steps: np.ndarray
    data: np.ndarray
    forward: np.ndarray
    backward: np.ndarray
    optimizer: np.ndarray
    step_s: np.ndarray
    tokens: np.ndarray
    cpu_forward: np.ndarray
    cpu_local: np.ndarray

    @classmethod
    def from_records(cls, records: Iterable[StepTimes]) -> Series:
        if isinstance(records, Records):
            return cls.from_columns(records.columns())
        recs = list(records)
        ranks = tuple(sorted({r.rank for r in recs}))
        steps = np.array(sorted({r.step for r in recs}), dtype=np.int64)
        block = np.full((len(ranks), len(steps), len(FIELDS)), np.nan)
        ri = {r: i for i, r in enumerate(ranks)}
        si = {int(s): i for i, s in enumerate(steps)}
        for r in recs:
            block[ri[r.rank], si[r.step]] = r.row()
        return cls._from(ranks, steps, block)

    @classmethod
    def from_columns(cls, c: dict[str, np.ndarray]) -> Series:
        """From Records.columns(): a row per (rank, step), the last record of a pair read wins
        (as from_records)."""
        ranks, ri = np.unique(c["rank"], return_inverse=True)
        steps, si = np.unique(c["step"], return_inverse=True)
        block = np.full((len(ranks), len(steps), len(FIELDS)), np.nan)
        for j, f in enumerate(FIELDS):
            block[ri, si, j] = c[f] if f != "step" else c["step"]
        return cls._from(tuple(int(r) for r in ranks), steps.astype(np.int64), block)

    @classmethod
    def from_block(cls, ranks: tuple[int, ...], block: np.ndarray) -> Series:
        """From gathered rows (ranks, steps, FIELDS); rows whose step is nan on all ranks go."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            steps = np.nanmax(block[:, :, 0], axis=0)
        keep = np.isfinite(steps)
        return cls._from(ranks, steps[keep].astype(np.int64), block[:, keep])

    @classmethod
    def _from(cls, ranks, steps, block) -> Series:
        cols = {f: block[:, :, i] for i, f in enumerate(FIELDS) if f != "step"}
        return cls(ranks=tuple(ranks), steps=steps, **cols)

    @property
    def local(self) -> np.ndarray:
        """data + forward + optimizer: the collective-free work of each rank."""
        parts = np.stack([self.data, self.forward, self.optimizer])
        total = np.nansum(parts, axis=0)
        return np.where(np.isfinite(self.forward), total, np.nan)

    def tail(self, skip: int) -> Series:
        sl = slice(skip, None)
        return Series(self.ranks, self.steps[sl], *(getattr(self, f)[:, sl] for f in FIELDS[1:]))

    def skip_steps(self, n: int) -> Series:
        """Without the first `n` *steps* (by step number): a record per step (StepMonitor) or per
        window of several steps (PRISM's running means) is skipped alike."""
        if not self.steps.size:
            return self
        keep = self.steps >= self.steps[0] + n
        return Series(self.ranks, self.steps[keep], *(getattr(self, f)[:, keep] for f in FIELDS[1:]))


def nanmedian(a: np.ndarray, axis=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(a, axis=axis)


def _first_run(flags: np.ndarray, length: int) -> tuple[int, int] | None:
    """[start, end) of the first run of True at least `length` long, extended to its end."""
    start = None
    for i, f in enumerate(list(flags) + [False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            if i - start >= length:
                return start, i
            start = None
    return None


def rounded(x: float, nd: int = 4) -> float | None:
    return None if not np.isfinite(x) else round(float(x), nd)


def detect_collapse(s: Series, cfg: DetectConfig) -> Event | None:
    """Backward of all ranks >= factor x baseline for N consecutive steps, forward flat."""
    b0, b1 = cfg.warmup_skip, cfg.warmup_skip + cfg.warmup_steps
    if s.steps.size < b1 + cfg.collapse_steps:
        return None
    base_b = nanmedian(s.backward[:, b0:b1], axis=1)
    base_f = nanmedian(s.forward[:, b0:b1], axis=1)
    if not np.all(base_b > 0) or not np.all(base_f > 0):
        return None
    ratio = s.backward[:, b1:] / base_b[:, None]
    present = np.isfinite(ratio)
    hot = np.all((ratio >= cfg.collapse_factor) | ~present, axis=0) & present.any(axis=0)
    run = _first_run(hot, cfg.collapse_steps)
    if run is None:
        return None
    i, j = run[0] + b1, run[1] + b1
    bwd = nanmedian(s.backward[:, i:j], axis=1)
    fwd = nanmedian(s.forward[:, i:j], axis=1)
    fwd_ratio = fwd / base_f
    flat = (fwd_ratio <= cfg.flat_factor) | (fwd - base_f <= cfg.flat_share * (bwd - base_b))
    if not np.all(flat):
        return None
    step0, step1 = nanmedian(s.step_s[:, b0:b1]), nanmedian(s.step_s[:, i:j])
    per_rank = {
        str(r): {
            "backward_baseline_s": rounded(base_b[k]),
            "backward_s": rounded(bwd[k]),
            "backward_ratio": rounded(bwd[k] / base_b[k], 2),
            "forward_baseline_s": rounded(base_f[k]),
            "forward_s": rounded(fwd[k]),
            "forward_ratio": rounded(fwd_ratio[k], 2),
        }
        for k, r in enumerate(s.ranks)
    }
    factor = float(np.median(bwd / base_b))
    before_after = {
        "backward_baseline_s": float(np.median(base_b)),
        "backward_s": float(np.median(bwd)),
        "forward_baseline_s": float(np.median(base_f)),
        "forward_s": float(np.median(fwd)),
        "step_baseline_s": float(step0),
        "step_s": float(step1),
    }
    ev = {
        "from_step": int(s.steps[i]),
        "to_step": int(s.steps[j - 1]),
        "hot_steps": j - i,
        "baseline_steps": [int(s.steps[b0]), int(s.steps[b1 - 1])],
        **{k: rounded(v) for k, v in before_after.items()},
        "backward_factor": rounded(factor, 2),
        "forward_factor": rounded(float(np.max(fwd_ratio)), 2),
        "step_time_factor": rounded(step1 / step0, 2),
        "threshold": cfg.collapse_factor,
        "per_rank": per_rank,
    }
    ba = {k: fmt_s(v) for k, v in before_after.items()}
    msg = (
        f"collapse: backward {ba['backward_baseline_s']} -> {ba['backward_s']} ({factor:.1f}x) on all "
        f"{len(s.ranks)} ranks together from step {ev['from_step']} to {ev['to_step']}, while forward "
        f"stayed {ba['forward_baseline_s']} -> {ba['forward_s']}: the backward slowed on every rank, not one rank"
    )
    return Event("collapse", int(s.steps[i]), s.ranks, ev, msg)


def fmt_s(x: Any) -> str:
    """Seconds with a unit a reader takes in at once: 12.1 s, 1.02 s, 310 ms, 0.42 ms; '-' if unknown."""
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating)) or not math.isfinite(x):
        return "-"
    if abs(x) >= 1.0:
        return f"{x:.1f} s" if abs(x) >= 10 else f"{x:.2f} s"
    return f"{x * 1000:.0f} ms" if abs(x) >= 0.01 else f"{x * 1000:.2f} ms"


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    if x.size < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def _rankdata(a: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (for Spearman's correlation)."""
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(a.size)
    ranks[order] = np.arange(a.size)
    _, inv = np.unique(a, return_inverse=True)
    sums = np.bincount(inv, weights=ranks)
    return (sums / np.bincount(inv))[inv]


def _cv(a: np.ndarray) -> float:
    m = float(np.mean(a))
    return float(np.std(a) / m) if m > 0 else 0.0


def detect_input_skew(s: Series, cfg: DetectConfig) -> Event | None:
    """Compute time follows the batch's tokens (sequence length)."""
    t = s.tail(cfg.warmup_skip)
    y_all = np.where(np.isfinite(t.cpu_forward), t.cpu_forward, np.where(np.isfinite(t.forward), t.forward, t.step_s))
    ok = np.isfinite(t.tokens) & np.isfinite(y_all)
    x, y = t.tokens[ok], y_all[ok]
    if x.size < cfg.skew_min_points or _cv(x) < cfg.skew_min_cv or _cv(y) < cfg.skew_min_cv:
        return None
    corr = _pearson(_rankdata(x), _rankdata(y))
    if not corr >= cfg.skew_corr:
        return None
    slope = float(np.polyfit(x, y, 1)[0]) * 1000.0
    ranks = tuple(r for k, r in enumerate(t.ranks) if ok[k].any())
    ev = {
        "spearman_compute_vs_tokens": rounded(corr, 3),
        "pearson": rounded(_pearson(x, y), 3),
        "points": int(x.size),
        "tokens_min": rounded(float(x.min()), 1),
        "tokens_max": rounded(float(x.max()), 1),
        "compute_min_s": rounded(float(y.min())),
        "compute_max_s": rounded(float(y.max())),
        "s_per_1k_tokens": rounded(slope, 5),
        "threshold": cfg.skew_corr,
    }
    first = int(t.steps[np.argmax(ok.any(axis=0))])
    msg = (
        f"input skew: compute follows the batch's tokens (r={corr:.2f}; "
        f"{x.min():.0f}-{x.max():.0f} tokens -> {y.min():.4f}-{y.max():.4f}s); "
        "bucket by length or balance tokens per rank"
    )
    return Event("input_skew", first, ranks, ev, msg)


def detect_all(s: Series, cfg: DetectConfig | None = None) -> list[Event]:
    from prism_strategy.analysis.straggler import detect_straggler  # it builds on this module

    cfg = cfg or DetectConfig()
    found = (detect_collapse(s, cfg), detect_straggler(s, cfg), detect_input_skew(s, cfg))
    return [e for e in found if e is not None]


def summarize(s: Series) -> dict[str, Any]:
    """Fastest and slowest rank by local wall time over the series, and the straggler ratio."""
    local = nanmedian(s.local, axis=1)
    step = nanmedian(s.step_s, axis=1)
    if not np.any(np.isfinite(local)):
        return {"ranks": len(s.ranks)}
    lo, hi = int(np.nanargmin(local)), int(np.nanargmax(local))
    ratio = local[hi] / local[lo] if local[lo] > 0 else math.nan
    return {
        "ranks": len(s.ranks),
        "steps": [int(s.steps[0]), int(s.steps[-1])],
        "step_s": rounded(float(np.nanmedian(step))),
        "fastest_rank": s.ranks[lo],
        "fastest_local_s": rounded(local[lo]),
        "slowest_rank": s.ranks[hi],
        "slowest_local_s": rounded(local[hi]),
        "straggler_ratio": rounded(ratio, 3),
        "measure": "wall",
    }
