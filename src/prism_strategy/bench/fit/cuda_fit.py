"""Fit the CUDA presets' compute terms to the published single-node runs
(data/measurements/cuda-published.toml). Few, physical knobs (estimate/compute_shape.py):

  fraction.dgx-h100         large-matmul fraction of peak, H100 SXM 700 W (llm-foundry MF rows)
  fraction.h100-96gb-500w   the same on torchtitan's 500 W H100 hosts (TT rows)
  fraction.ampere           dgx-a100-80 and dgx-a100-40 (same A100 compute; HBM differs)
  attention_ratio           flash attention's fraction relative to a large matmul, every preset
  elementwise_bytes         memory-bound bytes per eager non-matmul kernel, every preset

Not fitted: gemm_half_dim (128, the assumption in ComputeTerms): every row's smallest matmul
dimension is 1024-4096 (Llama 3's k/v width to hidden), where d / (d + 128) moves 3% across the
rows; they cannot see it. What the rows cannot decide, besides: the 500 W cap from the
torchtitan stack (every TT row is both, every MF row neither); Ampere's attention and elementwise
terms (every A100 row is eager llm-foundry at seq 2048: shared with Hopper); anything across nodes.

Each record is predicted as the planner predicts a step (estimate/option.py estimate_step: compute, exposed comm,
optimizer) on its own platform; selective checkpointing, which the training spec cannot carry
yet, adds torchtitan's per-op recompute (compute_shape.sac_recompute_s). Loss: squared log error
of step time; coordinate descent on log knob values as bench/fit/fit_terms.fit.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from prism_strategy.bench.fit.published import PublishedRecord
from prism_strategy.estimate.comm import CommEstimate
from prism_strategy.specs.cluster import PlatformSpec

MEASUREMENTS = "cuda-published"
PLATFORMS = ("dgx-h100", "h100-96gb-500w", "dgx-a100-80", "dgx-a100-40")
FRACTION_KNOB = {
    "dgx-h100": "fraction.dgx-h100",
    "h100-96gb-500w": "fraction.h100-96gb-500w",
    "dgx-a100-80": "fraction.ampere",
    "dgx-a100-40": "fraction.ampere",
}
KNOBS = ("fraction.dgx-h100", "fraction.h100-96gb-500w", "fraction.ampere", "attention_ratio", "elementwise_bytes")
PRIORS = {
    "fraction.dgx-h100": 0.4,
    "fraction.h100-96gb-500w": 0.4,
    "fraction.ampere": 0.4,
    "attention_ratio": 1.0,
    "elementwise_bytes": 3.0,
}
"""Where the fit starts: the presets' former one fraction (0.4) for every FLOP, attention as fast
as a matmul, an eager kernel reading two operands and writing one at hidden width."""
BOUNDS = {"attention_ratio": (0.1, 2.0), "elementwise_bytes": (0.0, 20.0)}
FRACTION_BOUNDS = (0.05, 1.0)
NOT_FITTED = {"float8": "Float8 linears: no planner precision models them"}
"""Stack features that keep a record out of the fit (shown as a check with the reason)."""

Knobs = dict[str, float]


def fit_reason(r: PublishedRecord) -> str | None:
    """Why a record is not fitted, or None when it is."""
    for feature, why in NOT_FITTED.items():
        if feature in r.unmodelled or (feature == "float8" and r.scenario.float8):
            return why
    if r.step_time_s() is None:
        return "no throughput (memory only)"
    return None


def apply(p: PlatformSpec, knobs: Knobs) -> PlatformSpec:
    """The platform with these knob values."""
    assert p.compute.compute_terms is not None, f"{p.name} has no [compute_terms]"
    terms = dataclasses.replace(
        p.compute.compute_terms, attention_ratio=knobs["attention_ratio"], elementwise_bytes=knobs["elementwise_bytes"]
    )
    return p.with_values(achievable_fraction=knobs[FRACTION_KNOB[p.name]], compute_terms=terms)


def shipped_knobs(platforms: dict[str, PlatformSpec]) -> Knobs:
    h = platforms["dgx-h100"]
    assert h.compute.compute_terms is not None
    return {
        "fraction.dgx-h100": h.compute.achievable_fraction,
        "fraction.h100-96gb-500w": platforms["h100-96gb-500w"].compute.achievable_fraction,
        "fraction.ampere": platforms["dgx-a100-80"].compute.achievable_fraction,
        "attention_ratio": h.compute.compute_terms.attention_ratio,
        "elementwise_bytes": h.compute.compute_terms.elementwise_bytes,
    }


@dataclass(frozen=True, kw_only=True, slots=True)
class StepObservation:
    """A published record's measured step time and the model's prediction of it on a platform."""

    id: str
    platform: str
    measured: float
    """Seconds per optimizer step."""
    predict: Callable[[PlatformSpec], float]


def record_observation(r: PublishedRecord) -> StepObservation:
    from prism_strategy.estimate.compute import selective_ac
    from prism_strategy.estimate.compute_shape import sac_recompute_s
    from prism_strategy.estimate.option import BatchAt, estimate_step
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.parts import model_parts
    from prism_strategy.strategies import get_strategy

    sac = r.scenario.ckpt_policy == "sac"
    kw = r.scenario_kwargs() | ({"ckpt_freq": 0} if sac else {})
    sc = scenario_from_flags(**kw)
    parts = model_parts(sc.model, sc.training)
    s = get_strategy(r.planner_strategy)
    if r.scenario.reduce_dtype:
        s = s.with_options(reduce_dtype=r.scenario.reduce_dtype)
    mb, ga = r.scenario.micro_batch, r.scenario.grad_accum
    add_sac = sac and not selective_ac(sc.training)

    comm: dict[str, CommEstimate] = {}  # the knobs change compute only: price collectives once

    def predict(p: PlatformSpec) -> float:
        o = estimate_step(
            sc.with_platform(p), s, BatchAt(micro_batch=mb, grad_accum=ga), parts=parts, comm=comm.get(p.name)
        )
        comm.setdefault(p.name, o.comm)
        return o.step_time_s + (ga * sac_recompute_s(parts, sc.training, p, mb) if add_sac else 0.0)

    return StepObservation(id=r.id, platform=r.platform, measured=r.step_time_s() or 0.0, predict=predict)


def loss(knobs: Knobs, obs: list[StepObservation], platforms: dict[str, PlatformSpec]) -> float:
    fitted = {n: apply(p, knobs) for n, p in platforms.items()}
    return sum(math.log(max(o.predict(fitted[o.platform]), 1e-9) / o.measured) ** 2 for o in obs)


def _clamp(knob: str, v: float) -> float:
    lo, hi = BOUNDS.get(knob, FRACTION_BOUNDS)
    return min(hi, max(lo, v))


def fit(start: Knobs, obs: list[StepObservation], platforms: dict[str, PlatformSpec]) -> Knobs:
    """Coordinate descent on log knob values, steps shrinking from 4x to 1.02x (bench/fit/fit_terms.fit);
    a knob no observation exercises keeps its start value."""
    used = {FRACTION_KNOB[o.platform] for o in obs} | {"attention_ratio", "elementwise_bytes"}
    k, best = dict(start), loss(start, obs, platforms)
    for step in (4.0, 2.0, 1.5, 1.25, 1.1, 1.05, 1.02):
        for _ in range(3):
            moved = False
            for name in (n for n in KNOBS if n in used):
                v = k[name]
                for trial in (v * step, v / step) if v > 0 else (0.1, 1.0):
                    cand = k | {name: _clamp(name, trial)}
                    c = loss(cand, obs, platforms)
                    if c < best - 1e-12:
                        k, best, moved = cand, c, True
            if not moved:
                break
    return k


def errors(knobs: Knobs, obs: list[StepObservation], platforms: dict[str, PlatformSpec]) -> dict[str, float]:
    """Signed step-time error per record, percent (predicted / measured - 1)."""
    fitted = {n: apply(p, knobs) for n, p in platforms.items()}
    return {o.id: 100 * (o.predict(fitted[o.platform]) / o.measured - 1) for o in obs}


def leave_one_out(start: Knobs, obs: list[StepObservation], platforms: dict[str, PlatformSpec]) -> dict[str, float]:
    """Each record's error when the fit did not see it."""
    out = {}
    for o in obs:
        rest = [x for x in obs if x.id != o.id]
        out[o.id] = errors(fit(start, rest, platforms), [o], platforms)[o.id]
    return out


def median_abs(errs: dict[str, float]) -> float:
    return statistics.median(abs(v) for v in errs.values()) if errs else float("nan")


def before_platform(p: PlatformSpec) -> PlatformSpec:
    """The one-fraction model the CUDA presets had before this fit: 0.4 for every FLOP."""
    return p.with_values(achievable_fraction=0.4, compute_terms=None)


def gpu_spread(knobs: Knobs) -> float:
    """|ln| of the ratio between the two fitted H100 variants' fractions (700 W SXM vs 500 W): how
    far one GPU's fit sits from a sibling's, the widening for a preset that borrows a fit."""
    return abs(math.log(knobs["fraction.dgx-h100"] / knobs["fraction.h100-96gb-500w"]))


def range_coverage(loo_pct: dict[str, float], slow_extra: dict[str, float] | None = None) -> tuple[int, int]:
    """(inside, records) of the leave-one-out rows: each record's measured step against the range
    around its leave-one-out prediction, base from the other records' leave-one-out errors, the
    slow side widened by the record's own scale terms (slow_extra, ln; 0 where it was measured).
    err = predicted / measured - 1, so inside when -(base + extra) <= ln(1 + err) <= base."""
    from prism_strategy.estimate.ranges import halfwidth

    extra = slow_extra or {}
    inside = 0
    for rid, e in loo_pct.items():
        w = halfwidth([v for k, v in loo_pct.items() if k != rid])
        inside += -(w + extra.get(rid, 0.0)) <= math.log1p(e / 100) <= w
    return inside, len(loo_pct)


def write_fit_errors(
    path: str,
    *,
    measurements: str,
    writer: str,
    device: str,
    loo_pct: dict[str, float],
    prior_pct: dict[str, float],
    max_nodes: dict[str, int],
    spread: float | None,
) -> None:
    """data/fits/NAME.toml: what estimate/ranges.py reads (written by the fit benchmarks only).
    spread: the fit's spread between variants of one GPU, None when it fitted one variant."""
    from prism_strategy.estimate.ranges import QUANTILE, halfwidth

    inside, n = range_coverage(loo_pct)
    lines = [
        f"# Written by {writer} --write: the fit's error summary that plan's ranges read",
        "# (estimate/ranges.py). Do not edit; rerun the benchmark after a refit.",
        f'measurements = "{measurements}"',
        f'device = "{device}"',
        f"quantile = {QUANTILE}",
        f"records = {n}",
        f"halfwidth = {halfwidth(list(loo_pct.values())):.4f}",
        f"prior_halfwidth = {halfwidth(list(prior_pct.values())):.4f}",
        *([f"gpu_spread = {spread:.4f}"] if spread is not None else ["# gpu_spread: one GPU variant fitted"]),
        f"loo_coverage = [{inside}, {n}]",
        "",
        "[loo_err_pct]",
        *(f'"{k}" = {v:.1f}' for k, v in loo_pct.items()),
        "",
    ]
    for name, nodes in max_nodes.items():
        lines += [f'[platform."{name}"]', f"max_nodes = {nodes}", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def record_range(r: PublishedRecord) -> tuple[float, float] | None:
    """The shipped preset's step-time range for the record's scenario, as plan states it
    (estimate_option at the record's batch); None when the planner cannot evaluate it."""
    from prism_strategy.estimate.option import estimate_option
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.errors import SpecError
    from prism_strategy.strategies import get_strategy

    try:
        o = estimate_option(scenario_from_flags(**r.scenario_kwargs()), get_strategy(r.planner_strategy))
    except SpecError:
        return None
    return None if o.step_time_s_range is None else (o.step_time_s_range[0], o.step_time_s_range[1])
