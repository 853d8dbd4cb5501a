"""Candidates x estimates x rules -> Plan: every strategy evaluated, ranked and explained."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prism_strategy.estimate.comm import CommEstimate, estimate_comm
from prism_strategy.estimate.compute import compute_time_s, optimizer_time_s
from prism_strategy.estimate.memory import MemoryEstimate, estimate_memory, max_micro_batch
from prism_strategy.estimate.parts import Part, model_parts
from prism_strategy.rules import RuleFacts, check
from prism_strategy.recommend import annotate, recommend
from prism_strategy.scenario import Scenario, build_scenario
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import StrategySpec, all_strategies, get_strategy

MAX_MICRO_BATCH_SHOWN = 4096
"""Cap on the micro-batch an option is evaluated at when it has that much room."""


@dataclass(kw_only=True)
class Option:
    strategy: str
    feasible: bool
    why_not: str | None
    memory: MemoryEstimate
    max_micro_batch: int
    micro_batch: int
    grad_accum: int
    compute_s: float = 0.0
    comm_s: float = 0.0
    exposed_comm_s: float = 0.0
    optimizer_s: float = 0.0
    step_time_s: float = 0.0
    samples_per_s: float = 0.0
    bound: str = "compute"
    scaling_efficiency: float | None = None
    comm: CommEstimate | None = None
    traced: dict[str, Any] | None = None
    """`plan --traced`: traced_memory_gib, traced_max_micro_batch, ... (estimate/traced.py)."""
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, str] = field(default_factory=dict)

    @property
    def comm_fraction(self) -> float:
        return self.exposed_comm_s / self.step_time_s if self.step_time_s else 0.0


@dataclass(kw_only=True)
class Plan:
    scenario: Scenario
    options: list[Option]
    recommended: str | None
    reasons: list[str]
    warnings: list[str]
    sweep: list[dict[str, Any]] = field(default_factory=list)

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.strategy == name)


def _situation(sc: Scenario, s: StrategySpec) -> RuleFacts:
    """The planner's rule facts; the engine contributes its own."""
    return RuleFacts(device=sc.platform.device, backend=sc.platform.backend, compile=sc.training.compile,
                     multi_node=sc.layout.multi_node, **s.impl.facts(s))


def _batch(sc: Scenario, max_mb: int) -> tuple[int, int]:
    """(micro-batch, grad accumulation) for this option."""
    t, world = sc.training, sc.layout.world
    mb = t.micro_batch or max(1, min(max_mb, MAX_MICRO_BATCH_SHOWN))
    if t.global_batch is not None and t.micro_batch is None:
        mb = max(1, min(mb, t.global_batch // world))
    ga = 1 if t.global_batch is None else max(1, math.ceil(t.global_batch / (mb * world)))
    return mb, ga


def _time(sc: Scenario, parts: tuple[Part, ...], s: StrategySpec, o: Option, layout: Layout) -> None:
    t, p = sc.training, sc.platform
    comm = estimate_comm(parts, t, p, layout, s, o.grad_accum)
    o.comm = comm
    o.compute_s = compute_time_s(parts, t, p, o.micro_batch) * o.grad_accum
    o.comm_s = comm.total_s + comm.per_tensor_s
    o.exposed_comm_s = comm.exposed_s(o.compute_s, p.comm_overlap)
    opt_bytes = t.param_bytes + t.grad_bytes + t.optim_bytes
    trainable = sum(x.trainable for x in parts) / s.degree(s.optim_shard, layout)
    o.optimizer_s = optimizer_time_s(trainable, opt_bytes, p)
    o.step_time_s = o.compute_s + o.exposed_comm_s + o.optimizer_s
    o.samples_per_s = o.micro_batch * o.grad_accum * layout.world / o.step_time_s
    o.bound = "comm" if o.comm_s > o.compute_s else "compute"


def evaluate(sc: Scenario, s: StrategySpec, parts: tuple[Part, ...] | None = None) -> Option:
    parts = parts or model_parts(sc.model, sc.training)
    t, p, lay = sc.training, sc.platform, sc.layout
    max_mb = max_micro_batch(parts, t, p, lay, s)
    mb, ga = _batch(sc, max_mb)
    if ga > 1:  # gradients accumulating over micro-batches live through every backward
        max_mb = max_micro_batch(parts, t, p, lay, s, accumulating=True)
        mb, ga = _batch(sc, max_mb)
    mem = estimate_memory(parts, t, p, lay, s, mb, accumulating=ga > 1)
    o = Option(strategy=s.name, feasible=True, why_not=None, memory=mem, max_micro_batch=min(max_mb, MAX_MICRO_BATCH_SHOWN),
               micro_batch=mb, grad_accum=ga, provenance=_provenance(sc))
    blocked = [v for v in check(_situation(sc, s)) if v.rule.blocks]
    if blocked:
        o.feasible, o.why_not = False, f"not viable: {blocked[0].message}"
    elif mem.total > p.usable_bytes:
        o.feasible, o.why_not = False, _oom_reason(mem, p.usable_bytes, mb, max_mb)
    _time(sc, parts, s, o, lay)
    if lay.nodes > 1:
        one = _time_only(sc, parts, s, mb, ga, Layout(nodes=1, ranks_per_node=lay.ranks_per_node))
        o.scaling_efficiency = (o.samples_per_s / lay.nodes) / one if one else None
    else:
        o.scaling_efficiency = 1.0
    return o


def _time_only(sc: Scenario, parts, s: StrategySpec, mb: int, ga: int, layout: Layout) -> float:
    o = Option(strategy=s.name, feasible=True, why_not=None, memory=None, max_micro_batch=0,  # type: ignore[arg-type]
               micro_batch=mb, grad_accum=ga)
    _time(sc, parts, s, o, layout)
    return o.samples_per_s


def _oom_reason(mem: MemoryEstimate, usable: float, mb: int, max_mb: int) -> str:
    top = ", ".join(f"{label} {b / GiB:.1f}" for label, b in mem.largest_items(2))
    hint = f"max micro-batch {max_mb}" if max_mb > 0 else "model states alone do not fit"
    return f"out of memory: needs {mem.total / GiB:.1f} GiB at micro-batch {mb} > {usable / GiB:.1f} GiB usable ({top} GiB; {hint})"


def calibrated_platform(platform: PlatformSpec, calibration: str | None) -> PlatformSpec:
    """calibration: a file, "auto" (the cached one when its fingerprint matches), or None / "none"."""
    from prism_strategy.estimate.calibration import apply_calibration, find_calibration, load_calibration

    if calibration in (None, "none"):
        return platform
    if calibration == "auto":
        from importlib import metadata

        try:
            torch_version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            return platform
        found = find_calibration(platform, {"platform": platform.name, "torch": torch_version, "backend": platform.backend})
        return platform if found is None else apply_calibration(platform, load_calibration(found), str(found))
    return apply_calibration(platform, load_calibration(calibration), str(calibration))


def _provenance(sc: Scenario) -> dict[str, str]:
    p = sc.platform
    calibrated = next((v for v in p.sources.values() if v.startswith("calibrated")), None)
    kind = "predicted (calibrated)" if calibrated else "predicted"
    return {
        "memory": f"{kind}: analytic model (estimate/memory.py: ZeRO model states, saved-tensor activations, fp32 loss logits)",
        "compute": f"{kind}: FLOPs / ({p.peak_tflops_bf16:g} TF/s bf16 x {p.achievable_fraction:g}); "
                   f"peak: {p.source('peak_tflops_bf16')}; fraction: {p.source('achievable_fraction')}",
        "communication": f"{kind}: alpha-beta model (estimate/comm.py) on platform {p.name}: "
                         f"intra {p.intra_bw_gbps:g} GB/s, NIC {p.nic_bw_gbps:g} GB/s x {p.nics_per_node}, "
                         f"overlap {p.comm_overlap:g} ({p.source('comm_overlap')})",
        "calibration": calibrated or "none",
    }


def plan(model: Any = "qwen3-0.6b", **kw: Any) -> Plan:
    """Evaluate every strategy for this scenario; see `build_scenario` for the arguments."""
    sweep = kw.pop("sweep_nodes", None)
    calibration = kw.pop("calibration", "auto")
    traced = kw.pop("traced", False)
    bucket_mb, reduce_dtype = kw.pop("bucket_mb", None), kw.pop("reduce_dtype", None)
    specs = [s.with_options(bucket_mb=bucket_mb, reduce_dtype=reduce_dtype) for s in all_strategies()]
    sc = build_scenario(model, **kw)
    sc = sc.with_platform(calibrated_platform(sc.platform, calibration))
    parts = model_parts(sc.model, sc.training)
    options = [evaluate(sc, s, parts) for s in specs]
    fits = [o for o in options if o.memory.total <= sc.platform.usable_bytes]
    if sc.training.micro_batch is not None and not fits:
        best = min(options, key=lambda o: o.memory.total)
        raise SpecError(
            f"micro-batch {sc.training.micro_batch} fits no strategy: the smallest, {best.strategy}, needs "
            f"{best.memory.total / GiB:.1f} GiB > {sc.platform.usable_bytes / GiB:.1f} GiB usable; "
            f"try --micro-batch {max(1, best.max_micro_batch)} or --ckpt-freq 1")
    if traced:
        trace_options(sc, options)
    annotate(sc, parts, options)
    recommended, reasons, warnings = recommend(sc, options)
    result = Plan(scenario=sc, options=options, recommended=recommended, reasons=reasons, warnings=warnings)
    if sweep:
        result.sweep = sweep_rows(sc, parts, options, sweep, specs)
    return result


def trace_options(sc: Scenario, options: list[Option]) -> None:
    """Trace every option's real training step on fake tensors (slow: seconds to a minute each)."""
    from prism_strategy.estimate.traced import trace_option, traced_fields

    reserve = sc.platform.framework_reserve_gib * GiB
    for o in options:
        t = trace_option(sc.model, sc.training, sc.layout, o.strategy, o.micro_batch,
                         usable_bytes=sc.platform.usable_bytes, reserve_bytes=reserve)
        o.traced = traced_fields(t.memory, reserve_bytes=reserve, search=t.search, analytic=o.memory)
        o.notes.extend(o.traced.get("traced_notes", []))


def sweep_rows(sc: Scenario, parts: tuple[Part, ...], options: list[Option], nodes_list: list[int],
               specs: list[StrategySpec] | None = None) -> list[dict[str, Any]]:
    """Scaling table of the leading strategies (the 3 best feasible at the planned size)."""
    lead = sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)[:3]
    rows = []
    for n in nodes_list:
        at = sc.with_layout(Layout(nodes=n, ranks_per_node=sc.layout.ranks_per_node))
        for o in lead:
            e = evaluate(at, next(s for s in (specs or all_strategies()) if s.name == o.strategy), parts)
            rows.append({"nodes": n, "strategy": o.strategy, "feasible": e.feasible, "micro_batch": e.micro_batch,
                         "step_time_s": e.step_time_s, "samples_per_s": e.samples_per_s,
                         "scaling_efficiency": e.scaling_efficiency, "bound": e.bound})
    return rows


def option_dict(o: Option) -> dict[str, Any]:
    return {
        "strategy": o.strategy, "feasible": o.feasible, "why_not": o.why_not,
        "memory_gib": {k: round(v, 3) for k, v in o.memory.gib().items()},
        "memory_items": [{"item": label, "key": k, "gib": round(b / GiB, 3)} for k, label, b in o.memory.items],
        "memory_peak_at": o.memory.moment,
        "max_micro_batch": o.max_micro_batch, "micro_batch": o.micro_batch, "grad_accum": o.grad_accum,
        "step_time_s": o.step_time_s, "samples_per_s": o.samples_per_s, "compute_s": o.compute_s,
        "comm_s": o.comm_s, "exposed_comm_s": o.exposed_comm_s, "optimizer_s": o.optimizer_s,
        "comm_fraction": o.comm_fraction, "bound": o.bound, "scaling_efficiency": o.scaling_efficiency,
        "collectives": [
            {"op": c.op, "group": c.group, "link": c.link, "ranks": c.ranks, "bytes_per_call": c.bytes_per_call,
             "calls_per_step": c.calls_per_step, "seconds_per_step": c.seconds_per_step}
            for c in (o.comm.collectives if o.comm else ())
        ],
        "notes": o.notes, "provenance": o.provenance | ({"traced_memory": o.traced["traced_method"]} if o.traced else {}),
    } | (o.traced or {})


def plan_dict(p: Plan) -> dict[str, Any]:
    """The pinned JSON shape of `prism-strategy plan --json`."""
    return {"inputs": p.scenario.inputs(), "options": [option_dict(o) for o in p.options],
            "recommended": p.recommended, "reasons": p.reasons, "warnings": p.warnings, "sweep": p.sweep}


def estimate_traced(model: Any, strategy: str, **kw: Any) -> dict[str, Any]:
    """`prism-strategy estimate`: analytic and traced memory of one strategy side by side.
    model may also be a "pkg.mod:make_model" factory (traced only: no spec to model analytically)."""
    from prism_strategy.estimate.traced import trace_option, traced_fields

    s = get_strategy(strategy)
    if isinstance(model, str) and ":" in model and not model.endswith(".json"):
        sc = build_scenario("tiny-llama", **kw)  # layout, training and platform only
        mb = sc.training.micro_batch or 1
        t = trace_option(model, sc.training, sc.layout, s, mb, usable_bytes=sc.platform.usable_bytes,
                         reserve_bytes=sc.platform.framework_reserve_gib * GiB)
        return {"strategy": s.name, "micro_batch": mb, "memory_gib": None,
                **traced_fields(t.memory, reserve_bytes=sc.platform.framework_reserve_gib * GiB, search=t.search)}
    sc = build_scenario(model, **kw)
    o = evaluate(sc, s)
    trace_options(sc, [o])
    return option_dict(o)
