"""Price a collective from measured curves (specs/measured.py) instead of the link model, where
one matches: same op, same group shape (ranks per node in the group, spanning nodes or not, the
same number of concurrent groups). Pure: the curves come in as plain data.

At the measured rank count:
- inside the measured sizes: log-log interpolation between the two neighbouring points (time is
  a power law in size between them: latency-bound below, bandwidth-bound above);
- outside them: the curve's ring-form fit (below).
At another rank count of the same shape, the ring form of DOMAIN 7 carries the measurement over:
a ring collective over N ranks runs h(N) dependent steps (2(N-1) for all-reduce, N-1 otherwise)
and moves f(N) x S bytes per rank over the bus (f = 2(N-1)/N for all-reduce, (N-1)/N otherwise:
nccl-tests' busbw factors, its doc/PERFORMANCE.md, which make bus bandwidth independent of N).
Fit on the curve's points t_i = h(N) a + f(N) S_i / B (least squares, a >= 0: per-hop latency a,
bus bandwidth B); then at M ranks t_M(S) = h(M) a + (t_N(S) - h(N) a) f(M) / f(N), which keeps
the measured shape in size (protocol switches) and scales latency by hops, bytes by the bus factor.
Assumption (named in provenance): the ring form. NCCL's tree all-reduce has log(nodes) latency,
so a ring-carried latency far beyond the measured node count is pessimistic.
A curve with one measured size prices only that size (within 5%) at its own rank count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate.ring import bus_factor, ring_steps
from prism_strategy.specs.measured import MeasuredCurve

SAME_SIZE = 0.05


@dataclass(frozen=True, kw_only=True, slots=True)
class Match:
    seconds: float
    curve: MeasuredCurve
    how: str
    """"measured size", "interpolated", "extrapolated" or "carried"."""


def fits_shape(c: MeasuredCurve, op: str, ranks: int, nodes: int, concurrent: int) -> bool:
    return (
        c.op == op
        and c.ranks // c.nodes == ranks // nodes
        and (c.nodes > 1) == (nodes > 1)
        and c.concurrent == concurrent
    )


def ring_fit(c: MeasuredCurve) -> tuple[float, float] | None:
    """(per-hop latency s, bus bandwidth B/s) by least squares; None with fewer than 2 sizes."""
    if len(c.points) < 2:
        return None
    h, f = ring_steps(c.op, c.ranks), bus_factor(c.op, c.ranks)
    xs, ts = [f * b for b, _ in c.points], [t for _, t in c.points]
    mx, mt = sum(xs) / len(xs), sum(ts) / len(ts)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx if sxx else 0.0
    intercept = mt - slope * mx
    if intercept < 0 or slope <= 0:  # latency cannot be negative: fit bandwidth through the origin
        intercept, slope = 0.0, sum(x * t for x, t in zip(xs, ts)) / sum(x * x for x in xs)
    return intercept / h, 1.0 / slope if slope > 0 else math.inf


def at_own_ranks(c: MeasuredCurve, size: float) -> tuple[float, str] | None:
    """Seconds per call at the curve's own rank count, and how it was found."""
    pts = c.points
    if len(pts) == 1:
        b, t = pts[0]
        return (t, "measured size") if abs(size - b) <= SAME_SIZE * b else None
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if b0 <= size <= b1:
            if size in (b0, b1):
                return (t0 if size == b0 else t1), "measured size"
            w = math.log(size / b0) / math.log(b1 / b0)
            return math.exp(math.log(t0) + w * math.log(t1 / t0)), "interpolated"
    a, bw = ring_fit(c)  # type: ignore[misc]
    return ring_steps(c.op, c.ranks) * a + bus_factor(c.op, c.ranks) * size / bw, "extrapolated"


def carried(c: MeasuredCurve, size: float, ranks: int) -> float | None:
    """Seconds per call at `ranks` from a curve measured at another rank count (ring form)."""
    fit, own = ring_fit(c), at_own_ranks(c, size)
    if fit is None or own is None:
        return None
    a, _ = fit
    latency = min(ring_steps(c.op, c.ranks) * a, own[0])
    moving = own[0] - latency
    return ring_steps(c.op, ranks) * a + moving * bus_factor(c.op, ranks) / bus_factor(c.op, c.ranks)


def measured_seconds(
    curves: tuple[MeasuredCurve, ...], op: str, size: float, ranks: int, nodes: int, concurrent: int
) -> Match | None:
    """The measured seconds of one call, from the best matching curve: the same rank count
    first (the newest), else the nearest rank count of the same shape; None when none matches."""
    if ranks <= 1 or size <= 0:
        return None
    shaped = [c for c in curves if fits_shape(c, op, ranks, nodes, concurrent)]
    for c in sorted((c for c in shaped if c.ranks == ranks), key=lambda c: c.date, reverse=True):
        own = at_own_ranks(c, size)
        if own is not None:
            return Match(seconds=own[0], curve=c, how=own[1])
    for c in sorted(shaped, key=lambda c: (abs(math.log(c.ranks / ranks)), c.date)):
        t = carried(c, size, ranks)
        if t is not None and c.ranks != ranks:
            return Match(seconds=t, curve=c, how="carried")
    return None


def describe(m: Match, ranks: int, nodes: int) -> str:
    """Provenance: "measured: nccl-tests all_reduce, 2x8 ranks, 2026-12-01; other sizes interpolated"."""
    c = m.curve
    head = f"measured: {c.label} {c.op}, {c.shape} ranks, {c.date}"
    if m.how == "carried":
        return (
            f"{head}; carried to {nodes}x{ranks // nodes} ranks by the ring form (per-hop latency x hops, "
            "bus bandwidth x bus factor)"
        )
    if m.how == "extrapolated":
        lo, hi = c.points[0][0], c.points[-1][0]
        return f"{head}; this size extrapolated beyond the measured {lo:,.0f}-{hi:,.0f} B by the ring form fit"
    return head + ("" if len(c.points) == 1 else "; other sizes interpolated")
