"""The training fit's leave-one-out errors laid on the part of the step it decides, and the
coverage of the ranges composed from the step's parts (estimate/range_parts.py) on its held-out
records (issue 25 item 5).

A record's step at its leave-one-out platform (refitted without it) splits into the part the
collective fit decides (the collectives' seconds not priced by a training-fit comm knob) and the
rest, the training part. Its error on the training part: predicted training part / (measured step
- the collective-decided seconds) - 1: all of the record's residual is laid on the part this fit
decides, none on the collective fit's (so at least as wide as the truth).
"""

from __future__ import annotations

import math

from prism_strategy.bench.fit.published import PublishedRecord
from prism_strategy.estimate.range_parts import StepPart, collective_seconds, compose, exposed_fraction, step_parts
from prism_strategy.estimate.ranges import collective_fits
from prism_strategy.specs.cluster import PlatformSpec


def record_parts(
    r: PublishedRecord, p: PlatformSpec, knobs: tuple[str, ...], training_errors_ln: tuple[float, ...] = ()
) -> tuple[float, list[StepPart]]:
    """(predicted step, its parts) for the record's scenario on platform p, at the record's batch
    (as fit_terms.record_observations predicts it)."""
    from prism_strategy.estimate.option import BatchAt, estimate_step, reprice_collectives
    from prism_strategy.estimate.range_parts import training_shares
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.parts import model_parts
    from prism_strategy.strategies import get_strategy

    sc = scenario_from_flags(**r.scenario_kwargs()).with_platform(p)
    parts, s = model_parts(sc.model, sc.training), get_strategy(r.planner_strategy)
    at = BatchAt(micro_batch=r.scenario.micro_batch, grad_accum=r.scenario.grad_accum)
    step = estimate_step(sc, s, at, parts=parts)
    collectives = step.comm.collectives
    shares = training_shares(collectives, reprice_collectives(sc, s, at, parts), p, knobs)
    coll = collective_fits()[p.calibration.fit_platform or p.name]
    split = step_parts(
        step_s=step.step_time_s,
        collectives=collectives,
        exposed_fraction=exposed_fraction(step),
        shares=shares,
        coll=coll,
        nodes=sc.layout.nodes,
        per_node=sc.layout.ranks_per_node,
        training_errors_ln=training_errors_ln,
    )
    return step.step_time_s, split


def part_errors_pct(
    records: dict[str, PublishedRecord], fits: dict[str, PlatformSpec], knobs: tuple[str, ...]
) -> dict[str, float]:
    """Per record, its leave-one-out error laid on the training part (module docstring); a record
    whose measured step is not above its collective-decided seconds is left out."""
    out = {}
    for rid, p in fits.items():
        r = records[rid]
        step, parts = record_parts(r, p, knobs)
        rest = r.step_time_s() - collective_seconds(parts)
        if rest > 0:
            out[rid] = 100 * (parts[0].seconds / rest - 1)
    return out


def part_coverage(
    records: dict[str, PublishedRecord], fits: dict[str, PlatformSpec], errs: dict[str, float], knobs: tuple[str, ...]
) -> list[dict]:
    """Per held-out record: its measured step against the range composed from its parts at its
    leave-one-out platform, the training part judged by the other records' part errors."""
    out = []
    for rid in errs:
        others = tuple(math.log1p(v / 100) for k, v in errs.items() if k != rid)
        step, parts = record_parts(records[rid], fits[rid], knobs, others)
        fast, slow = compose(parts)
        lo, hi = step * math.exp(-fast), step * math.exp(slow)
        m = records[rid].step_time_s()
        out.append({"id": rid, "measured_s": m, "predicted_s": step, "range_s": [lo, hi], "inside": lo <= m <= hi})
    return out
