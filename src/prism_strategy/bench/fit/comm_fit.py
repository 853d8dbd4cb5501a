"""The platform's communication terms fitted to measured collective curves (commbench rows,
imported nccl-tests / oneCCL benchmark logs): `prism-strategy calibrate` with curve rows.

The model fitted is the one that prices the plan (estimate/comm.py `collective_seconds`: NCCL's
cost model, oneCCL's as profiled, or the alpha-beta ring), so the fitted values carry to group
shapes and sizes the curves do not hold. The terms, per model:
- NCCL (`gpu_arch` set): factors over data/nccl_tuning.toml's per-generation constants
  (PlatformSpec.nccl.nccl_scale): base latency, NVLink/PCI hop latency, network hop latency, and the
  bus bandwidth of one-node and of multi-node groups;
- the others: collective_overhead_us and scaleout_overhead_us (per call), intra_latency_us and
  inter_latency_us (per ring step), intra_bw_gbps, intra_ring_bw_gbps and nic_bw_gbps.
Loss: the squared log error of seconds per call over the (op, group shape, size) points that
latency or bandwidth bound (FIT_SHARE), minimised by Levenberg-Marquardt on log values inside the
calibration bounds; the bound points are taken again under the fitted values until they hold.

What the points can decide (the sensitivity d log t / d log value of each point, at the start;
the steeper one-sided difference, so a bandwidth tied in a min() still shows that it binds):
- a bandwidth term by bandwidth-bound points (where it is at least half of the point's time:
  the large sizes); none -> held at the start value;
- latency terms by latency-bound points (latency terms together at least half of the time: the
  small sizes). Base and per-hop latency differ only in how they grow with the group, so each
  measured configuration (op, ranks, nodes) gives one equation: they are taken in the order
  base, intra-node hop, network hop, and one that the configurations already fitted cannot tell
  apart from the earlier ones (relative residual of its sensitivities under RESIDUAL) is held
  (one rank count: per-hop latency is held, the base latency takes it all), unless at the preset
  it alone is more latency than measured: then it is scaled with the base (the preset's split
  kept). Bandwidth terms bound by the same points (a ring limited by the slower of two links
  that the preset makes equal) are told apart the same way.
Leave-one-out: refit without one rank count (or one op), predict the points left out.

A fitted bus bandwidth is nccl-tests' busbw (algbw x 2(N-1)/N for all-reduce, (N-1)/N for
all-gather / reduce-scatter: its doc/PERFORMANCE.md) where the curve has one regime above its
latency-bound sizes; where it has two (a slower mid-size regime: Oracle Cloud's 2 x 8 A100 run,
33-37 GB/s from 16 MiB to 256 MiB, 70-72 GB/s above), one bandwidth lies between them, and the
report shows busbw measured vs fitted at the largest size. The points between the latency- and
the bandwidth-bound ones are where the model's protocol and channel switches are least like the
backend's: reported, not fitted.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from prism_strategy.estimate.backends import Term, backend_of
from prism_strategy.estimate.calibration import platform_value, with_value
from prism_strategy.estimate.comm import collective_seconds
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.measured import MeasuredCurve

BOUND_SHARE = 0.5
"""A point is bandwidth- (latency-) bound when that kind of term is at least half of its time."""
EXERCISED = 0.05
"""A latency term a point's time moves by less than 5% per e-fold does not decide anything there."""
RESIDUAL = 0.15
"""A term whose sensitivities over the configurations are within 15% (relative residual) of a
combination of the terms of its kind already fitted cannot be told apart from them."""
FIT_SHARE = 0.8
"""Points fitted: latency or bandwidth at least 80% of the time. Between them, where the model's
protocol and channel switches are least like the backend's, points are reported, not fitted."""
STEP = 1e-3


@dataclass(frozen=True, kw_only=True, slots=True)
class CommPoint:
    op: str
    ranks: int
    nodes: int
    concurrent: int
    bytes: float
    seconds: float
    curve: str
    env: tuple[tuple[str, str], ...] | None = None
    """The CCL / NCCL variables the point ran under, the backend's defaults for the rest (with_env
    prices it so; () = all defaults); None = as the platform is (a curve measured under its profile)."""
    overrides: tuple[tuple[str, Any], ...] = ()
    """Platform values the point's placement or software stack changes (bench/fit/comm_rows.py)."""


def curve_label(c: MeasuredCurve) -> str:
    return f"{c.label} {c.op} {c.shape}"


def points_of(curves: tuple[MeasuredCurve, ...] | list[MeasuredCurve]) -> list[CommPoint]:
    return [
        CommPoint(
            op=c.op, ranks=c.ranks, nodes=c.nodes, concurrent=c.concurrent, bytes=b, seconds=t, curve=curve_label(c)
        )
        for c in curves
        if c.ranks > 1
        for b, t in c.points
        if b > 0 and t > 0
    ]


def value(p: PlatformSpec, name: str) -> float:
    v = platform_value(p, name)
    return 1.0 if v is None else v  # an absent nccl_scale factor is 1


def terms_of(p: PlatformSpec) -> tuple[Term, ...]:
    """The terms of the model that prices p; a term at 0 (no scale-out cost) has no factor to fit."""
    terms = backend_of(p).terms(p)
    return tuple(t for t in terms if value(p, t.name) > 0)


def point_platform(p: PlatformSpec, x: CommPoint, cache: dict | None = None) -> PlatformSpec:
    """p as the point ran: its environment, then its placement / stack values."""
    if x.env is None and not x.overrides:
        return p
    key = (x.env, x.overrides)
    if cache is not None and key in cache:
        return cache[key]
    q = backend_of(p).with_env(p, dict(x.env)) if x.env is not None else p
    q = q.with_values(**dict(x.overrides)) if x.overrides else q
    if cache is not None:
        cache[key] = q
    return q


def predict(p: PlatformSpec, pts: list[CommPoint]) -> np.ndarray:
    cache: dict = {}
    return np.array(
        [collective_seconds(x.op, x.bytes, x.ranks, x.nodes, x.concurrent, point_platform(p, x, cache)) for x in pts]
    )


Groups = list[tuple[str, ...]]
"""Fitted parameters: each one log factor that moves every value of its group together."""


def _moved(p: PlatformSpec, groups: Groups, logs: np.ndarray, start: PlatformSpec) -> PlatformSpec:
    for g, x in zip(groups, logs):
        for n in g:
            p = with_value(p, n, value(start, n) * math.exp(x))
    return p


def _group_sensitivities(p: PlatformSpec, pts: list[CommPoint], groups: Groups) -> np.ndarray:
    cols = []
    for g in groups:
        up = _moved(p, [g], np.array([STEP]), p)
        down = _moved(p, [g], np.array([-STEP]), p)
        cols.append((np.log(predict(up, pts)) - np.log(predict(down, pts))) / (2 * STEP))
    return np.array(cols).T


def sensitivities(p: PlatformSpec, pts: list[CommPoint], names: list[str]) -> np.ndarray:
    """d log t / d log value, points x terms: the one-sided difference of larger size, so a value
    tied in a min() (a ring's bandwidth: the slower of the host ring and the NICs) still shows
    that it moves the time (one side of the tie does)."""
    if not names:
        return np.zeros((len(pts), 0))
    t0 = np.log(predict(p, pts))
    cols = []
    for n in names:
        up = np.log(predict(with_value(p, n, value(p, n) * math.exp(STEP)), pts)) - t0
        down = t0 - np.log(predict(with_value(p, n, value(p, n) * math.exp(-STEP)), pts))
        cols.append(np.where(np.abs(up) >= np.abs(down), up, down) / STEP)
    return np.array(cols).T


def _residual(col: np.ndarray, basis: list[np.ndarray]) -> float:
    if not basis:
        return 1.0
    a = np.array(basis).T
    coef, *_ = np.linalg.lstsq(a, col, rcond=None)
    return float(np.linalg.norm(col - a @ coef) / np.linalg.norm(col))


def span(pts: list[CommPoint], idx: list[int]) -> str:
    by: dict[str, list[float]] = {}
    for i in idx:
        by.setdefault(pts[i].curve, []).append(pts[i].bytes)
    return "; ".join(f"{c}: {len(b)} points, {_size(min(b))}..{_size(max(b))}" for c, b in by.items())


def _size(b: float) -> str:
    for unit, n in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= n:
            return f"{b / n:.4g} {unit}"
    return f"{b:.0f} B"


def _rows(pts: list[CommPoint], bound: list[int], largest: bool) -> list[int]:
    """One equation per measured configuration (op, ranks, nodes, concurrent): its smallest
    latency-bound point, or its largest bandwidth-bound one."""
    rows: dict[tuple, int] = {}
    for i in sorted(bound, key=lambda i: pts[i].bytes, reverse=largest):
        rows.setdefault((pts[i].op, pts[i].ranks, pts[i].nodes, pts[i].concurrent), i)
    return list(rows.values())


def decide(p: PlatformSpec, pts: list[CommPoint]) -> tuple[list[Term], dict[str, str], dict[str, str]]:
    """(terms the points decide, {name: the points that decide it}, {name: why it is held})."""
    terms = list(terms_of(p))
    j = sensitivities(p, pts, [t.name for t in terms])
    chosen, decided, held = [], {}, {}
    for kind, sign, need, largest in (("latency", 1, EXERCISED, False), ("bandwidth", -1, BOUND_SHARE, True)):
        ks = [k for k, t in enumerate(terms) if t.kind == kind]
        bound = [i for i in range(len(pts)) if sign * j[i, ks].sum() >= BOUND_SHARE] if ks else []
        rows, basis = _rows(pts, bound, largest), []
        for k in ks:
            t, idx = terms[k], [i for i in bound if sign * j[i, k] >= need]
            col = np.array([j[i, k] for i in rows])
            if not idx or not np.linalg.norm(col):
                held[t.name] = (
                    f"no {kind}-bound point exercises it "
                    f"({'small' if kind == 'latency' else 'large'} sizes on such a group decide it)"
                )
            elif _residual(col, basis) < RESIDUAL:
                earlier = ", ".join(c.name for c in chosen if c.kind == kind)
                held[t.name] = (
                    f"cannot be told apart from {earlier} with {len(rows)} measured configuration(s) "
                    "(op, ranks, nodes): "
                    + ("measure another rank count" if kind == "latency" else "the same points are bound by both")
                )
            else:
                chosen.append(t)
                basis.append(col)
                decided[t.name] = span(pts, idx)
    return chosen, decided, held


def _loss(p: PlatformSpec, pts: list[CommPoint], meas: np.ndarray) -> tuple[np.ndarray, float]:
    r = np.log(predict(p, pts) / meas)
    return r, float(r @ r)


def fit_values(
    start: PlatformSpec,
    pts: list[CommPoint],
    groups: Groups,
    bounds: Callable[[str], tuple[float, float]],
    iters: int = 60,
) -> PlatformSpec:
    """Levenberg-Marquardt on one log factor per group, every value kept inside its bounds."""
    if not groups or not pts:
        return start
    meas = np.array([x.seconds for x in pts])
    lo = np.array([max(math.log(max(bounds(n)[0], 1e-300) / value(start, n)) for n in g) for g in groups])
    hi = np.array(
        [
            min(math.log(bounds(n)[1] / value(start, n)) if math.isfinite(bounds(n)[1]) else 50.0 for n in g)
            for g in groups
        ]
    )
    x = np.clip(np.zeros(len(groups)), lo, hi)
    p = _moved(start, groups, x, start)
    r, loss = _loss(p, pts, meas)
    lam = 1e-2
    for _ in range(iters):
        j = _group_sensitivities(p, pts, groups)
        g, h = j.T @ r, j.T @ j
        step = np.linalg.solve(h + lam * (np.diag(np.diag(h)) + 1e-9 * np.eye(len(groups))), -g)
        x_new = np.clip(x + step, lo, hi)
        p_new = _moved(start, groups, x_new, start)
        r_new, loss_new = _loss(p_new, pts, meas)
        if loss_new < loss - 1e-12:
            x, p, r, loss, lam = x_new, p_new, r_new, loss_new, max(lam / 3, 1e-6)
            if np.max(np.abs(step)) < 1e-5:
                break
        else:
            lam *= 4
            if lam > 1e8:
                break
    return p


def errors_pct(p: PlatformSpec, pts: list[CommPoint]) -> list[float]:
    return [float(e) for e in (predict(p, pts) / np.array([x.seconds for x in pts]) - 1) * 100]


def median_abs(errs: list[float]) -> float:
    return statistics.median(abs(e) for e in errs)


def bound_points(p: PlatformSpec, pts: list[CommPoint]) -> list[int]:
    """The points where latency or bandwidth terms make at least FIT_SHARE of the time under p."""
    terms = terms_of(p)
    j = sensitivities(p, pts, [t.name for t in terms])
    lat = j[:, [k for k, t in enumerate(terms) if t.kind == "latency"]].sum(axis=1)
    bw = -j[:, [k for k, t in enumerate(terms) if t.kind == "bandwidth"]].sum(axis=1)
    return [i for i in range(len(pts)) if lat[i] >= FIT_SHARE or bw[i] >= FIT_SHARE]


def _fit_on_bound_points(start: PlatformSpec, pts: list[CommPoint], groups: Groups, bounds) -> PlatformSpec:
    """Fit on the bound points; they are taken again under the fitted values (the sizes where
    latency gives way to bandwidth move with them) until they hold."""
    p, used = start, None
    for _ in range(4):
        idx = bound_points(p, pts)
        if idx == used:
            break
        used = idx
        p = fit_values(start, [pts[i] for i in idx], groups, bounds)
    return p


def fit(start: PlatformSpec, pts: list[CommPoint], bounds) -> tuple[PlatformSpec, dict[str, str], dict[str, str]]:
    """Decide the terms and fit them. A latency term held as not told apart from the first one
    fitted stays at the preset, unless that leaves the first at its lower bound (the preset's
    held term alone is more latency than measured): then they are scaled together, the preset's
    split between them kept, and the report says so."""
    chosen, decided, held = decide(start, pts)
    groups: Groups = [(t.name,) for t in chosen]
    p = _fit_on_bound_points(start, pts, groups, bounds)
    first = next((k for k, t in enumerate(chosen) if t.kind == "latency"), None)
    tied = [n for n, why in held.items() if "cannot be told apart" in why and _kind(start, n) == "latency"]
    if first is not None and tied and at_bound(value(p, chosen[first].name), bounds(chosen[first].name)) == "lower":
        groups[first] = (chosen[first].name, *tied)
        p = _fit_on_bound_points(start, pts, groups, bounds)
        for n in tied:
            held[n] += (
                f"; scaled with {chosen[first].name} (the preset's split kept): at the preset it alone is "
                f"more latency than measured"
            )
    return p, decided, held


def _kind(p: PlatformSpec, name: str) -> str:
    return next(t.kind for t in terms_of(p) if t.name == name)


def at_bound(v: float, bounds: tuple[float, float]) -> str | None:
    """ "lower" / "upper" when the fit stopped at a bound (data/calibration_bounds.toml): the points
    asked for more than the bound allows, so another cost is in them."""
    lo, hi = bounds
    return "lower" if v <= lo * (1 + 1e-6) else "upper" if v >= hi * (1 - 1e-6) else None
