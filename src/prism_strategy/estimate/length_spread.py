"""The slowest rank under variable sequence lengths: order statistics of each rank's padded length.

Each rank pads its micro-batch to its longest sample (PRISM's collator, aurora_measurements.md
"text is bucketed and padded per batch"), so with lengths drawn independently per rank, the
rank holding the longest padded batch sets the pace at every synchronisation (PRISM: straggler
ratios 3-7x in its data-mix ablations, shared/data/aurora_prism_scale.md S-abl; length bucketing
42.7 -> 131 samples/s, S-bucket). One rank's padded length:
- without bucketing: the max of its micro-batch's b sample lengths, P(L <= x) = F(x)^b;
- with length bucketing (batches drawn from one length bucket): about one sample's length, F.
A rank's work is taken linear in its tokens, image tokens + padded text (the GEMMs; attention's
L^2 share is small at the lengths where this matters, <= 2k), on the FLOPs-bound part of its
compute (kernel launches do not grow with the length), so the step waits, per
synchronisation, E[max over N ranks of W] where the fit measured E[max over M]. Syncs per
micro-batch (FSDP / HSDP all-gather every micro-batch) add those maxima; a strategy that syncs
once per optimizer step (DDP under no_sync) waits for the max of the sums, whose spread
shrinks as sqrt(k) over k micro-batches (normal approximation of the sum).
E[max of n iid draws] of a discrete distribution: sum_j v_j (F_j^n - F_(j-1)^n).

Without a histogram, --mean-seq-len alone gives the sample lengths the maximum-entropy shape
on [1, seq_len] with that mean (a truncated exponential; Jaynes 1957): an assumption, said in
the provenance; with neither there is no term (the records' own spread is in their fit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate.scale_loss import expected_max_normal

Dist = tuple[tuple[float, float], ...]
"""(value, probability) pairs, values ascending, probabilities summing to 1."""
POINTS = 64
"""Bins of the truncated exponential built from a mean alone."""


def normalised(hist: tuple[tuple[int, float], ...]) -> Dist:
    total = sum(c for _, c in hist)
    merged: dict[float, float] = {}
    for v, c in hist:
        merged[float(v)] = merged.get(float(v), 0.0) + c / total
    return tuple(sorted(merged.items()))


def max_entropy_lengths(mean: float, longest: int) -> Dist:
    """Lengths on [1, longest] with the given mean, max-entropy: p ~ exp(a x), a by bisection (the
    mean grows with a; a < 0 below the midpoint, > 0 above it)."""
    xs = [1 + (longest - 1) * (i + 0.5) / POINTS for i in range(POINTS)]

    def shape(a: float) -> list[float]:
        top = max(a * x for x in xs)
        return [math.exp(a * x - top) for x in xs]

    lo, hi = -50.0 / longest, 50.0 / longest
    for _ in range(100):
        a = (lo + hi) / 2
        w = shape(a)
        lo, hi = (a, hi) if sum(x * p for x, p in zip(xs, w)) / sum(w) < mean else (lo, a)
    w = shape((lo + hi) / 2)
    return tuple((x, p / sum(w)) for x, p in zip(xs, w))


def padded(samples: Dist, micro_batch: int, bucketing: bool) -> Dist:
    """One rank's padded length: its micro-batch's longest (F^b), or one draw with bucketing."""
    if bucketing or micro_batch <= 1:
        return samples
    out, prev, cum = [], 0.0, 0.0
    for v, p in samples:
        cum += p
        f = min(1.0, cum) ** micro_batch
        out.append((v, f - prev))
        prev = f
    return tuple(out)


def expected_max(dist: Dist, n: int) -> float:
    """E[max of n iid draws]."""
    total, prev, cum = 0.0, 0.0, 0.0
    for v, p in dist:
        cum += p
        f = min(1.0, cum) ** n
        total += v * (f - prev)
        prev = f
    return total


def moments(dist: Dist) -> tuple[float, float]:
    mean = sum(v * p for v, p in dist)
    return mean, math.sqrt(max(0.0, sum((v - mean) ** 2 * p for v, p in dist)))


@dataclass(frozen=True, kw_only=True, slots=True)
class LengthStragglers:
    seconds: float
    """Added to the step over what the fit's ranks already waited."""
    ratio: float
    """E[max over N ranks of a rank's work] / E[a rank's work], per synchronisation."""
    ranks: int
    measured_ranks: int
    source: str

    @property
    def basis(self) -> str:
        return (
            f"slowest rank of {self.ranks} under variable lengths: its padded batch {self.ratio:.2f}x the mean "
            f"rank's work ({self.source}; vs the {self.measured_ranks} ranks the fit measured): +{self.seconds:.3g} s"
        )


def length_stragglers(
    samples: Dist,
    *,
    image_tokens: int,
    micro_batch: int,
    bucketing: bool,
    ranks: int,
    measured_ranks: int,
    flops_s: float,
    launch_s: float,
    per_micro_batch: bool,
    grad_accum: int,
    source: str,
) -> LengthStragglers:
    """flops_s, launch_s: the step's FLOPs and launch seconds at the mean padded length
    (estimate/compute.py phase_times). A rank's time is max(launches, FLOPs x its work ratio r):
    launches do not grow with the length, so a launch-bound step absorbs a longer batch until its
    FLOPs pass the launches; the slowest of N ranks takes r = E[max of N] / mean."""
    work = tuple((image_tokens + v, p) for v, p in padded(samples, micro_batch, bucketing))
    mean, sd = moments(work)
    if per_micro_batch or grad_accum <= 1:
        excess = [expected_max(work, n) / mean - 1 for n in (ranks, max(1, measured_ranks))]
    else:  # the max of sums over k micro-batches: spread sd sqrt(k) around k x mean
        k = grad_accum
        excess = [sd * math.sqrt(k) * expected_max_normal(n) / (k * mean) for n in (ranks, max(1, measured_ranks))]
    at = [max(launch_s, flops_s * (1 + e)) for e in excess]
    extra = max(0.0, at[0] - at[1]) if ranks > measured_ranks else 0.0
    return LengthStragglers(
        seconds=extra,
        ratio=1 + excess[0],
        ranks=ranks,
        measured_ranks=measured_ranks,
        source=source,
    )
