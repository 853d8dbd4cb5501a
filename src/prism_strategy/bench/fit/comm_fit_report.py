"""The comm fit's report (bench/fit/comm_fit.py fits; `prism-strategy calibrate` reports): each term
before / after and which points decided it, fitted and leave-one-out errors (one rank count or one
op left out), nccl-tests' bus bandwidth at each curve's largest size."""

from __future__ import annotations

from typing import Any, Callable

from prism_strategy.bench.fit.comm_fit import (
    CommPoint,
    at_bound,
    bound_points,
    curve_label,
    errors_pct,
    fit,
    median_abs,
    points_of,
    span,
    terms_of,
    value,
)
from prism_strategy.estimate.comm import collective_seconds
from prism_strategy.estimate.ring import bus_factor
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.measured import MeasuredCurve


def _folds(pts: list[CommPoint]) -> list[tuple[str, list[int]]]:
    """Leave-one-out folds: each rank count (group shape), then each op, when there are several."""
    out = []
    for what, key in (("ranks", lambda x: f"{x.nodes}x{x.ranks // x.nodes}"), ("op", lambda x: x.op)):
        keys = sorted({key(x) for x in pts})
        if len(keys) > 1:
            out += [(f"{what} {k}", [i for i, x in enumerate(pts) if key(x) == k]) for k in keys]
    return out


def leave_one_out(start: PlatformSpec, pts: list[CommPoint], bounds) -> list[dict[str, Any]]:
    """Per fold: refit on the rest (terms re-decided), the left-out points' median |error| %."""
    rows = []
    for name, out in _folds(pts):
        rest = [x for i, x in enumerate(pts) if i not in set(out)]
        fitted, _, _ = fit(start, rest, bounds)
        left = [pts[i] for i in out]
        rows.append({"left_out": name, "points": len(left), "median_abs_err_pct": median_abs(errors_pct(fitted, left))})
    return rows


def bus_bandwidths(p: PlatformSpec, curves: list[MeasuredCurve]) -> list[dict[str, Any]]:
    """At each curve's largest size: nccl-tests' busbw (bytes x bus factor / seconds, its
    doc/PERFORMANCE.md) measured and as the fitted model prices that call."""
    out = []
    for c in curves:
        if c.op not in ("all_reduce", "all_gather", "reduce_scatter") or len(c.points) < 2:
            continue
        b, t = c.points[-1]
        f = bus_factor(c.op, c.ranks) * b / 1e9
        model = collective_seconds(c.op, b, c.ranks, c.nodes, c.concurrent, p)
        out.append({"curve": curve_label(c), "bytes": b, "measured_busbw_gbps": f / t, "fitted_busbw_gbps": f / model})
    return out


def calibrate_comm(
    start: PlatformSpec,
    curves: list[MeasuredCurve] | tuple[MeasuredCurve, ...],
    bounds: Callable[[str], tuple[float, float]],
    extra: list[CommPoint] | tuple[CommPoint, ...] = (),
) -> tuple[PlatformSpec, dict[str, Any]]:
    """Fit start's comm terms to the curves (and `extra` points: published collective rows,
    bench/fit/comm_rows.py); the report: each term before / after and which points decided it (or
    why it is held), fitted and leave-one-out errors, bus bandwidth at the largest size."""
    pts = points_of(curves) + list(extra)
    if len({x.bytes for x in pts}) < 2:
        raise SpecError(
            f"cannot fit {start.name}'s communication terms: the stored collective points hold one size "
            "(latency and bandwidth need a sweep: nccl-tests -b 8 -e 8G -f 2, or commbench)"
        )
    fitted, decided, held = fit(start, pts, bounds)
    if not decided:
        raise SpecError(
            f"cannot fit {start.name}'s communication terms: no stored point is latency- or "
            "bandwidth-bound under the model (measure from 8 B to at least 1 GiB)"
        )
    before, after = errors_pct(start, pts), errors_pct(fitted, pts)
    terms = [
        {
            "name": t.name,
            "kind": t.kind,
            "what": t.what,
            "before": value(start, t.name),
            "after": value(fitted, t.name),
            "decided_by": decided.get(t.name),
            "held": held.get(t.name),
            "at_bound": at_bound(value(fitted, t.name), bounds(t.name)) if t.name in decided else None,
        }
        for t in terms_of(start)
    ]
    loo = leave_one_out(start, pts, bounds)
    between = sorted(set(range(len(pts))) - set(bound_points(fitted, pts)))
    report = {
        "points": len(pts),
        "curves": sorted({x.curve for x in pts}),
        "terms": terms,
        "before": {"comm_median": median_abs(before)},
        "after": {"comm_median": median_abs(after)},
        "max_abs_err_pct": max(abs(e) for e in after),
        "leave_one_out": loo,
        "bus_bandwidth": bus_bandwidths(fitted, list(curves)),
        "not_fitted": span(pts, between) + " (between latency- and bandwidth-bound: reported, not fitted)"
        if between
        else "",
    }
    if not loo:
        report["leave_one_out_note"] = (
            "nothing to leave out: the rows hold one rank count and one op, so the "
            "fit cannot be checked on a group shape it did not see"
        )
    return fitted, report


def comm_median(p: PlatformSpec, curves, extra: list[CommPoint] | tuple[CommPoint, ...] = ()) -> float:
    """Median |error| % of p's model on the curves' (and extra) points (calibrate's score)."""
    return median_abs(errors_pct(p, points_of(curves) + list(extra)))
