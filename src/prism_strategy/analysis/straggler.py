"""Straggler: a minority of ranks whose own work (data + forward + optimizer) is consistently
slower by wall time, who wait least in the gradient collective, with a cause: compute, waiting
or data loader. The method is documented in `prism_strategy.analysis.detect` (which runs it). Steps are counted
by step number (warm-up skip, minimum steps), so every reader's records count alike."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from prism_strategy.analysis.detect import DetectConfig, Series, fmt_s, nanmedian, rounded
from prism_strategy.readers.steps import Event

__all__ = ["detect_straggler", "straggler_cause"]

CAUSE_WORDS = {"compute": "compute", "waiting": "waiting, not computing", "data_loader": "data loader"}


def _others_median(a: np.ndarray) -> np.ndarray:
    """Per step, the median over the *other* ranks (exact up to 64 ranks, else over all)."""
    if a.shape[0] > 64:
        return np.broadcast_to(nanmedian(a, axis=0), a.shape)
    return np.stack([nanmedian(np.delete(a, k, axis=0), axis=0) for k in range(a.shape[0])])


def _straggler_stats(s: Series) -> dict[str, Any] | None:
    local = s.local
    ok = np.all(np.isfinite(local), axis=0)
    if ok.sum() == 0:
        return None
    local = local[:, ok]
    ref = _others_median(local)
    ratio = local / np.where(ref > 0, ref, np.nan)
    return {
        "ratio": nanmedian(ratio, axis=1),
        "local": nanmedian(local, axis=1),
        "all_ratios": ratio,
        "backward": nanmedian(s.backward[:, ok], axis=1),
        "data": nanmedian(s.data[:, ok], axis=1),
        "forward": nanmedian(s.forward[:, ok], axis=1),
        "optimizer": nanmedian(s.optimizer[:, ok], axis=1),
        "cpu": nanmedian(s.cpu_local[:, ok], axis=1),
        "tokens": nanmedian(s.tokens[:, ok], axis=1),
        "step": nanmedian(s.step_s[:, ok]),
        "n": _steps_covered(s.steps[ok]),
        "steps": s.steps[ok],
        "slowest": np.argmax(local, axis=0),
    }


def _steps_covered(steps: np.ndarray) -> int:
    """Steps the records span: one rule whether a record is one step (StepMonitor, per-rank
    [TIMING] lines) or the mean of a window of steps (PRISM's running-mean lines every N steps)."""
    if steps.size < 2:
        return int(steps.size)
    width = int(np.median(np.diff(steps)))  # the first record's window too
    return int(steps[-1] - steps[0]) + max(1, width)


def _excess(a: np.ndarray, k: int, others: list[int]) -> float:
    """How much rank k's value is above the others' median (0 where unknown)."""
    d = float(a[k]) - float(np.median(a[others]))
    return d if math.isfinite(d) else 0.0


def straggler_cause(st: dict[str, Any], k: int, others: list[int], ratio: float) -> dict[str, Any]:
    """Why rank k is slow: ``data_loader`` when its data phase holds at least half its extra
    wall time; else ``compute`` when its CPU time is itself `ratio` x the others' and, stretched,
    covers a quarter of its extra wall time (a ratio of tiny CPU times alone is noise), or its extra
    CPU time, stretched as the other ranks' CPU time is stretched into wall time on their host
    (a busy host slows every rank's compute alike), explains at least half its extra wall time,
    or when no CPU time was recorded (accelerators, PRISM logs); else ``waiting`` (wall slow,
    CPU not: storage, a slower device the host waits on, starvation on an oversubscribed host,
    a sleep)."""
    wall = _excess(st["local"], k, others)
    data = _excess(st["data"], k, others)
    cpu_known = bool(np.all(np.isfinite(st["cpu"])))
    cpu = _excess(st["cpu"], k, others) if cpu_known else math.nan
    stretch, cpu_ratio = 1.0, math.nan
    if cpu_known and float(np.median(st["cpu"][others])) > 0:
        base = float(np.median(st["cpu"][others]))
        stretch = max(1.0, float(np.median(st["local"][others])) / base)
        cpu_ratio = float(st["cpu"][k]) / base
    if data >= 0.5 * wall:
        cause = "data_loader"
    elif not cpu_known or (cpu_ratio >= ratio and cpu * stretch >= 0.25 * wall) or cpu * stretch >= 0.5 * wall:
        cause = "compute"
    else:
        cause = "waiting"
    return {
        "cause": cause,
        "extra_wall_s": rounded(wall),
        "extra_data_s": rounded(data),
        "extra_forward_s": rounded(_excess(st["forward"], k, others)),
        "extra_optimizer_s": rounded(_excess(st["optimizer"], k, others)),
        "extra_cpu_s": rounded(cpu),
        "cpu_ratio": rounded(cpu_ratio, 2),
        "others_wall_per_cpu": rounded(stretch, 2),
        "cpu_time": "recorded" if cpu_known else "not recorded",
    }


def detect_straggler(s: Series, cfg: DetectConfig) -> Event | None:
    """A minority of ranks whose local work is consistently slower by wall time and who wait least.

    Wall time decides (a rank slowed by waiting, even for a core on an oversubscribed host, holds
    the others back just the same); CPU time, where recorded, only names the cause."""
    if len(s.ranks) < 2:
        return None
    st = _straggler_stats(s.skip_steps(cfg.warmup_skip))
    if st is None or st["n"] < cfg.straggler_min_steps:
        return None
    excess = st["local"] - np.array([np.median(np.delete(st["local"], k)) for k in range(len(s.ranks))])
    over = np.mean(st["all_ratios"] >= cfg.straggler_ratio, axis=1)
    slow = [
        k
        for k in range(len(s.ranks))
        if st["ratio"][k] >= cfg.straggler_ratio
        and over[k] >= cfg.straggler_consistency
        and excess[k] >= cfg.straggler_min_share * st["step"]
    ]
    if not slow or len(slow) * 2 > len(s.ranks):
        return None
    others = [k for k in range(len(s.ranks)) if k not in slow]
    wait_others = float(np.median(st["backward"][others]))
    if any(st["backward"][k] > wait_others for k in slow):
        return None
    tok = st["tokens"]
    if np.all(np.isfinite(tok)) and np.min(tok) > 0:
        tok_ratio = tok / float(np.median(tok[others]))
        if any(tok_ratio[k] >= 1 + 0.5 * (st["ratio"][k] - 1) for k in slow):
            return None
    return _straggler_event(s, cfg, st, slow, others, over)


def _straggler_event(
    s: Series, cfg: DetectConfig, st: dict[str, Any], slow: list[int], others: list[int], over: np.ndarray
) -> Event:
    ranks = tuple(s.ranks[k] for k in slow)
    per = {str(s.ranks[k]): k for k in range(len(s.ranks))}
    causes = {str(s.ranks[k]): straggler_cause(st, k, others, cfg.straggler_ratio) for k in slow}
    worst = max(slow, key=lambda k: st["ratio"][k])
    cause = causes[str(s.ranks[worst])]["cause"]
    fastest = s.ranks[int(np.argmin(st["local"]))]
    ev = {
        "ranks": list(ranks),
        "fastest_rank": fastest,
        "measure": "wall",
        "cause": cause,
        "causes": causes,
        "local_ratio": {r: rounded(st["ratio"][k], 2) for r, k in per.items()},
        "local_wall_s": {r: rounded(st["local"][k]) for r, k in per.items()},
        "others_local_wall_s": rounded(float(np.median(st["local"][others]))),
        "local_cpu_s": {r: rounded(st["cpu"][k]) for r, k in per.items()},
        "data_s": {r: rounded(st["data"][k]) for r, k in per.items()},
        "forward_s": {r: rounded(st["forward"][k]) for r, k in per.items()},
        "collective_wait_s": {r: rounded(st["backward"][k]) for r, k in per.items()},
        "slowest_share": {str(s.ranks[k]): rounded(float(np.mean(st["slowest"] == k)), 2) for k in slow},
        "over_ratio_share": {str(s.ranks[k]): rounded(float(over[k]), 2) for k in slow},
        "steps": [int(st["steps"][0]), int(st["steps"][-1])],
        "n_steps": int(st["n"]),
        "threshold": cfg.straggler_ratio,
    }
    wait_others = float(np.median(st["backward"][others]))
    msg = (
        f"straggler ({CAUSE_WORDS[cause]}): rank(s) {', '.join(map(str, ranks))} take "
        f"{st['ratio'][worst]:.2f}x the other ranks' wall time outside the gradient collective "
        f"({fmt_s(st['local'][worst])} vs {fmt_s(float(np.median(st['local'][others])))}) over "
        f"{ev['n_steps']} steps, and wait least in backward ({fmt_s(st['backward'][worst])} vs "
        f"{fmt_s(wait_others)} for the others)"
    )
    return Event("straggler", ev["steps"][0], ranks, ev, msg)
