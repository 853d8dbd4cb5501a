"""A step's range composed from its parts, each part with the held-out errors of the fit that decided
it (issue 25 item 5): step_range, the one way a range is made (estimate/option.py). Where no
collective fit (data/fits/, kind = "collectives") and training-part errors cover the platform, the
step is one part, the training fit's leave-one-out band +-base (estimate/ranges.py docstring).

Otherwise the parts of a predicted step (estimate/option.py estimate_step: compute + exposed collectives +
grad path + optimizer + late ranks):
- the training part: compute, the host's gradient path, the optimizer, and the share of each
  exposed collective that a training-fit knob prices (COMM_KNOBS of the fit file, on Aurora the
  node's 12-rank host ring `host_ring_node_gbps`, which only training record A1 exercises: no
  collective row has 12 ranks per node on the flat host ring). That share is the collective's
  elasticity to the knob (how its seconds move when the knob moves by 10%: 1 where the knob's rate
  is the ring's binding rate, 0 where the latency or staging decides). It takes the training fit's
  leave-one-out errors attributed to this part (`part_err_pct`: a record's measured step less its
  collective-decided seconds, against its predicted training part; all of the record's residual
  laid on this part, so at least as wide as the truth);
- one part per group of collectives judged by the same collective rows (estimate/ranges.py
  collective_rows: the rows covering the layout): the rest of each exposed collective's seconds,
  with those rows' leave-one-node-count-out errors. Collectives judged by one group share one draw
  (an error of the fit at that layout is systematic), groups and the training part are independent.

Each part's true seconds is its prediction x e^-eps, eps drawn from its errors (ln(predicted /
measured)); the step's true seconds is their sum, its distribution enumerated (compressed to
KEEP points between parts), and the range is its (1 - q)/2 and (1 + q)/2 quantiles (nearest rank:
with the training fit's 7 records alone that is the smallest and largest error). Then the slow
side widens by what the parts' fits did not measure (estimate/ranges.py docstring: comm where the
one part holds the collectives, late ranks, the nodes beyond the fit's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate.calibration import platform_value, with_value
from prism_strategy.estimate.ranges import (
    COMM,
    LATE,
    QUANTILE,
    SCALE,
    CollectiveFit,
    FitErrors,
    PredictionRange,
    collective_fits,
    collective_rows,
    collective_widening,
    comm_widening,
    fit_errors,
    gpu_widening,
    scale_widening,
    scaleout_bytes,
    uncalibrated_halfwidth,
)
from prism_strategy.specs.cluster import Layout, PlatformSpec

KEEP = 256
"""Points kept of a distribution between parts (evenly spaced quantiles): enough that the 10% and
90% quantiles move by less than a point's spacing."""
NUDGE = 1.1
"""The factor a training-fit comm knob is moved by to read a collective's elasticity to it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StepPart:
    label: str
    seconds: float
    errors_ln: tuple[float, ...]
    """ln(predicted / measured) of the held-out rows that judge this part."""


def _compress(values: list[float]) -> list[float]:
    values.sort()
    if len(values) <= KEEP:
        return values
    n = len(values)
    return [values[int((i + 0.5) * n / KEEP)] for i in range(KEEP)]


def _quantile_ranks(n: int, quantile: float) -> tuple[int, int]:
    """The nearest ranks of the (1 - q)/2 and (1 + q)/2 quantiles of n sorted values."""
    return max(0, math.ceil((1 - quantile) / 2 * n) - 1), min(n - 1, math.ceil((1 + quantile) / 2 * n) - 1)


def compose(parts: list[StepPart], quantile: float = QUANTILE) -> tuple[float, float]:
    """(fast, slow): ln(step / low) and ln(high / step), low and high the quantiles of the step's
    true seconds with each part's error drawn independently (module docstring); each >= 0."""
    if len(parts) == 1:  # the step's errors are the part's: read in log space, exactly
        errs = sorted(parts[0].errors_ln or (0.0,), reverse=True)  # the true seconds, ascending
        lo, hi = _quantile_ranks(len(errs), quantile)
        return max(0.0, errs[lo]), max(0.0, -errs[hi])
    step = sum(p.seconds for p in parts)
    if step <= 0:
        return 0.0, 0.0
    dist = [0.0]
    for p in parts:
        errs = p.errors_ln or (0.0,)
        dist = _compress([a + p.seconds * math.exp(-e) for a in dist for e in errs])
    lo, hi = (dist[i] for i in _quantile_ranks(len(dist), quantile))
    return max(0.0, math.log(step / lo)), max(0.0, math.log(hi / step))


def training_shares(collectives, reprice, platform: PlatformSpec, knobs: tuple[str, ...]) -> list[float]:
    """Per collective, the share of its seconds a training-fit knob prices: its elasticity to each
    knob (seconds repriced with the knob x NUDGE), summed over the knobs, within [0, 1].
    reprice(platform) -> the collectives priced on that platform, in the same order."""
    shares = [0.0] * len(collectives)
    for k in knobs:
        v = platform_value(platform, k)
        if not v:
            continue
        moved = reprice(with_value(platform, k, v * NUDGE))
        for i, (a, b) in enumerate(zip(collectives, moved)):
            if a.seconds_per_step > 0 and b.seconds_per_step > 0:
                shares[i] += abs(math.log(a.seconds_per_step / b.seconds_per_step)) / math.log(NUDGE)
    return [min(1.0, s) for s in shares]


def step_parts(
    *,
    step_s: float,
    collectives,
    exposed_fraction: float,
    shares: list[float],
    coll: CollectiveFit,
    nodes: int,
    per_node: int,
    training_errors_ln: tuple[float, ...],
) -> list[StepPart]:
    """The step split by the fit that decided each part (module docstring). exposed_fraction: the
    exposed part of the collectives' seconds (1 when collectives hold the host)."""
    groups: dict[str, list] = {}
    training = step_s
    for c, share in zip(collectives, shares):
        exposed = c.seconds_per_step * exposed_fraction
        if exposed <= 0:
            continue
        at_nodes, at_per_node = (1, c.ranks) if c.link == "intra-node" else (nodes, per_node)
        errs, label = collective_rows(coll, scaleout_bytes(c, nodes), at_nodes, at_per_node)
        g = groups.setdefault(label, [0.0, errs])
        g[0] += exposed * (1 - share)
        training -= exposed * (1 - share)
    out = [StepPart(label="training-fit parts", seconds=max(training, 0.0), errors_ln=training_errors_ln)]
    out += [
        StepPart(label=f"collectives ({label})", seconds=s, errors_ln=tuple(math.log1p(e / 100) for e in errs))
        for label, (s, errs) in sorted(groups.items())
        if s > 0
    ]
    return out


def collective_seconds(parts: list[StepPart]) -> float:
    """The seconds the collective fit decides (every part but the training one)."""
    return sum(p.seconds for p in parts[1:])


COLLECTIVE_PARTS = "collectives (collective fit)"


def exposed_fraction(step) -> float:
    """The exposed share of the collectives' seconds (estimate/option.StepEstimate: exposed_comm_s
    holds the exposed collectives and the grad path, comm_s the collectives and the grad path)."""
    total = step.comm.total_s
    if total <= 0:
        return 0.0
    grad_path = step.comm_s - total
    return min(1.0, max(0.0, (step.exposed_comm_s - grad_path) / total))


BAND = "the step (the training fit's leave-one-out band)"


def parts_of_step(step, platform: PlatformSpec, layout: Layout, reprice) -> list[StepPart]:
    """The step split by the fit that decided each part (module docstring) where a collective fit
    and the training fit's part errors cover the platform; else one part, the whole step with the
    training fit's leave-one-out band: errors +-base (estimate/ranges.py docstring)."""
    key = platform.calibration.fit_platform or platform.name
    fit, coll = fit_errors().get(key), collective_fits().get(key)
    if fit is None or coll is None or not fit.part_errors_ln or key != platform.name:
        base = _band(platform)[0]
        return [StepPart(label=BAND, seconds=step.step_time_s, errors_ln=(base, -base))]
    collectives = step.comm.collectives
    return step_parts(
        step_s=step.step_time_s,
        collectives=collectives,
        exposed_fraction=exposed_fraction(step),
        shares=training_shares(collectives, reprice, platform, fit.comm_knobs),
        coll=coll,
        nodes=layout.nodes,
        per_node=layout.ranks_per_node,
        training_errors_ln=fit.part_errors_ln,
    )


def step_range(step, platform: PlatformSpec, layout: Layout, reprice) -> PredictionRange:
    """The step's range: its parts' errors composed (compose), then the slow side widened by what
    the parts' fits did not measure: the collectives beyond the band's nodes (the band holds them),
    late ranks and the nodes beyond the fit's (estimate/ranges.py docstring). step: the option's
    StepEstimate (estimate/option.py); reprice(platform) -> its collectives priced there."""
    parts = parts_of_step(step, platform, layout, reprice)
    fast, slow = compose(parts)
    band = parts[0].label == BAND
    if band:
        _, max_nodes, why = _band(platform)
        terms, comm_why = _band_comm(step, platform, layout.nodes, max_nodes)
        why += comm_why
    else:
        terms, why = _parts_comm(parts, fit_errors()[platform.name], fast, slow)
    late = step.late_ranks.slow_seconds
    if late > 0 and step.step_time_s > 0:
        terms[LATE] = math.log1p(late / step.step_time_s)
        why += (
            f"; slower side: {step.late_ranks.basis} (x{math.exp(terms[LATE]):.3f}; measure the per-rank spread: "
            "--rank-jitter FOLDER of StepMonitor logs)"
        )
    if (w := scale_widening(platform, layout.nodes))[0] > 0:
        terms[SCALE] = w[0]
        why += f"; slower side: {w[1]}"
    beyond = sum(v for k, v in terms.items() if k != COLLECTIVE_PARTS)  # COLLECTIVE_PARTS is inside slow
    return PredictionRange(fast=fast, slow=slow + beyond, terms=terms, basis=why, slow_base=None if band else slow)


def _band(platform: PlatformSpec) -> tuple[float, int, str]:
    """(half-width, the nodes it was measured up to, why): the training fit's leave-one-out band
    (estimate/ranges.py docstring: base)."""
    fit = fit_errors().get(platform.calibration.fit_platform or platform.name)
    if fit is None:
        base = uncalibrated_halfwidth(platform.device)
        calibrated = any(v.startswith("calibrated") for v in platform.sources.values())
        what = "calibrated (provenance.calibration), its width still" if calibrated else "uncalibrated preset,"
        return (
            base,
            1,
            f"predicted range: {what} the pre-fit error of the {platform.device} fits (x{math.exp(base):.2f})",
        )
    other = bool(platform.calibration.fit_platform) and platform.calibration.fit_platform != platform.name
    base = math.hypot(fit.halfwidth, gpu_widening() if other else 0.0)
    why = (
        f"predicted range: {fit.measurements} leave-one-out {QUANTILE:.0%} range (x{math.exp(fit.halfwidth):.2f}, "
        f"{fit.records} records)"
        + (f", another GPU than {fit.platform}'s (x{math.exp(gpu_widening()):.2f})" if other else "")
    )
    return base, fit.max_nodes, why


def _band_comm(step, platform: PlatformSpec, nodes: int, max_nodes: int) -> tuple[dict[str, float], str]:
    """The band's collectives beyond the nodes its fit measured (estimate/ranges.py docstring:
    comm): per cross-node collective where a collective fit covers the nodes, else blanket."""
    comm_s, compute_s, collectives = step.comm_s, step.compute_s, step.comm.collectives
    share = comm_s / (comm_s + compute_s) if comm_s + compute_s > 0 else 0.0
    coll = collective_fits().get(platform.calibration.fit_platform or platform.name)
    if nodes > max_nodes and coll is not None and nodes <= coll.max_nodes and collectives:
        per_node = next(
            (c.ranks // nodes for c in collectives if c.link == "spans nodes"), platform.hardware.devices_per_node
        )
        w, groups = collective_widening(coll, collectives, nodes, comm_s + compute_s, per_node)
        return {COMM: w}, (
            f"; slower side: {nodes} nodes beyond the {max_nodes} the step fit measured, each cross-node collective "
            f"widened by its share x the {coll.measurements} leave-one-node-count-out error ({groups}; "
            f"x{math.exp(w):.2f})"
        )
    if (comm := comm_widening(nodes, max_nodes, share)) > 0:
        return {COMM: comm}, (
            f"; slower side: {nodes} nodes beyond the {max_nodes} measured, communication {share:.0%} of the work "
            f"(x{math.exp(comm):.2f}; measure it: prism-strategy commbench at {nodes} nodes)"
        )
    return {}, ""


def _parts_comm(parts: list[StepPart], fit: FitErrors, fast: float, slow: float) -> tuple[dict[str, float], str]:
    """The sides' why of a range composed from several fits' parts, and the collective parts' share
    of its slow side (COLLECTIVE_PARTS: already inside it, named for to_measure)."""
    _, slow_training = compose(
        parts[:1] + [StepPart(label=p.label, seconds=p.seconds, errors_ln=()) for p in parts[1:]]
    )
    coll_s = collective_seconds(parts)
    terms = {COLLECTIVE_PARTS: slow - slow_training} if coll_s > 0 and slow > slow_training else {}
    why = (
        f"predicted range: composed from the step's parts, each with the held-out errors of the fit that decided it "
        f"(estimate/range_parts.py): {parts[0].seconds:.3f} s with the {fit.measurements} leave-one-out errors "
        f"({len(fit.part_errors_ln)} records)"
    )
    if coll_s > 0:
        groups = "; ".join(p.label.removeprefix("collectives (").removesuffix(")") for p in parts[1:])
        why += f", {coll_s:.3f} s of collectives with the collective fit's leave-one-node-count-out errors ({groups})"
    why += f"; {QUANTILE:.0%} of the combined errors: x{math.exp(-fast):.2f}-x{math.exp(slow):.2f} the step"
    return terms, why
