"""Candidates x estimates x rules -> Plan: every strategy evaluated, ranked and explained."""

from __future__ import annotations

from typing import Any

from prism_strategy.estimate.entry import (
    assumptions,
    estimate_option,
    estimate_searched,
    samples_per_s_at,
    with_ckpt,
)
from prism_strategy.planning.advice import states_never_fit
from prism_strategy.planning.env_advice import advice_line, env_advice
from prism_strategy.planning.option import Option, Plan
from prism_strategy.planning.recommend import annotate, recommend
from prism_strategy.rules import Violation, blocking
from prism_strategy.specs.cluster import GiB, Layout
from prism_strategy.specs.parts import Part, model_parts
from prism_strategy.specs.platform_file import defaults_note
from prism_strategy.specs.policies import PlanOptions, batch_problem
from prism_strategy.specs.scenario import Scenario
from prism_strategy.specs.values import int_list
from prism_strategy.strategies import StrategySpec, all_strategies, get_strategy


def evaluate(
    sc: Scenario,
    s: StrategySpec,
    parts: tuple[Part, ...] | None = None,
    *,
    search_ckpt: bool = False,
    blocked: tuple[Violation, ...] | None = None,
) -> Option:
    """One strategy on the scenario: judged by the rules once (rules.blocking; blocked: already
    judged), estimated by one call into estimate/. search_ckpt (plan and its sweep): under
    --ckpt-freq auto, at the checkpointing estimate/ckpt_search.py chose; else at the one
    sc.training names."""
    blocked = blocking(sc, s) if blocked is None else blocked
    if search_ckpt:
        e = estimate_searched(sc, s, parts, viable=not blocked)
    else:
        e = estimate_option(sc, s, parts=parts)
    why_not = f"not viable: {blocked[0].message}" if blocked else e.oom
    return Option(
        strategy=s.name,
        feasible=why_not is None,
        why_not=why_not,
        estimate=e,
        global_batch=e.global_batch,
        ckpt_freq=e.ckpt_freq,
        blocked_by=blocked,
    )


def _evaluated(sc: Scenario, parts: tuple[Part, ...], specs: list[StrategySpec]) -> list[Option]:
    """Every strategy judged by the rules, then each estimated (one call into estimate/ each,
    checkpointing searched under --ckpt-freq auto)."""
    blocked = [blocking(sc, s) for s in specs]
    return [evaluate(sc, s, parts, search_ckpt=True, blocked=b) for s, b in zip(specs, blocked)]


def _retimer(parts: tuple[Part, ...], specs: list[StrategySpec]):
    """samples/s of an option at its own batch and checkpointing under another scenario (another
    env profile's platform: planning/env_advice.py), through the one entry into the estimates."""
    by_name = {s.name: s for s in specs}

    def retime(sc: Scenario, o: Option) -> float:
        return samples_per_s_at(sc, by_name[o.strategy], parts, o.micro_batch, o.grad_accum, o.ckpt_freq)

    return retime


def plan(sc: Scenario, o: PlanOptions = PlanOptions()) -> Plan:
    """Every strategy evaluated on the scenario (built by inputs/scenario.py, its platform already
    under the env profile and calibrated), ranked and explained. `prism_strategy.plan(model, **flags)`
    (flags.py) is the convenience from keywords."""
    bucket_mb = sc.training.bucket_mb
    specs = [s.with_options(bucket_mb=bucket_mb, reduce_dtype=o.reduce_dtype) for s in all_strategies()]
    sweep = int_list(o.sweep_nodes, "--sweep-nodes")
    parts = model_parts(sc.model, sc.training)
    early = states_never_fit(sc, parts, specs)  # nothing's model states fit: judged before any timing
    options = early or _evaluated(sc, parts, specs)
    if o.traced and not early:
        trace_options(sc, options)
    if not early:
        annotate(sc, parts, options)
    recommended, reasons, warnings = recommend(sc, options)
    advice = [] if early else env_advice(sc, options, recommended, _retimer(parts, specs))
    reasons += [advice_line(a) for a in advice] + assumptions(sc)  # MoE; Gemma's attention
    warnings += [defaults_note(sc.platform)] if sc.platform.defaulted else []  # said once, under the table
    result = Plan(
        scenario=sc,
        options=options,
        recommended=recommended,
        reasons=reasons,
        warnings=warnings,
        script=o.script,
        env_advice=advice,
    )
    if sweep:
        result.sweep = sweep_rows(sc, parts, options, sweep, recommended, specs)
    return result


def trace_options(sc: Scenario, options: list[Option]) -> None:
    """Trace every option's real training step on fake tensors (slow: seconds to a minute each)."""
    from prism_strategy.traced.estimate import trace_option, traced_fields

    reserve = sc.platform.allocator.framework_reserve_gib * GiB
    for o in options:
        t = trace_option(
            sc.model,
            with_ckpt(sc, o.ckpt_freq).training,
            sc.layout,
            o.strategy,
            o.micro_batch,
            usable_bytes=sc.platform.usable_bytes,
            reserve_bytes=reserve,
        )
        o.traced = traced_fields(t.memory, reserve_bytes=reserve, search=t.search, analytic=o.memory)
        o.notes.extend(o.traced.get("traced_notes", []))


def sweep_rows(
    sc: Scenario,
    parts: tuple[Part, ...],
    options: list[Option],
    nodes_list: list[int],
    recommended: str | None = None,
    specs: list[StrategySpec] | None = None,
) -> list[dict[str, Any]]:
    """Scaling table of the leading strategies (the 3 best feasible at the planned size) and the
    recommended one, at the planned batch and checkpointing settings."""
    lead = [o.strategy for o in sorted((o for o in options if o.feasible), key=lambda o: -o.samples_per_s)[:3]]
    if recommended is not None and recommended not in lead:
        lead.insert(0, recommended)
    by_name = {s.name: s for s in (specs or all_strategies())}
    rows = []
    for n in nodes_list:
        at = sc.with_layout(Layout(nodes=n, ranks_per_node=sc.layout.ranks_per_node))
        problem = batch_problem(at.training, at.layout.world)
        for name in lead:
            if problem is not None:
                rows.append(
                    {
                        "nodes": n,
                        "strategy": name,
                        "feasible": False,
                        "why_not": problem,
                        "micro_batch": None,
                        "grad_accum": None,
                        "global_batch": None,
                        "ckpt_freq": None,
                        "step_time_s": None,
                        "samples_per_s": None,
                        "scaling_efficiency": None,
                        "bound": None,
                        "step_time_s_range": None,
                        "samples_per_s_range": None,
                    }
                )
                continue
            e = evaluate(at, by_name[name], parts, search_ckpt=True)
            rows.append(
                {
                    "nodes": n,
                    "strategy": name,
                    "feasible": e.feasible,
                    "why_not": e.why_not,
                    "micro_batch": e.micro_batch,
                    "grad_accum": e.grad_accum,
                    "global_batch": e.global_batch,
                    "ckpt_freq": e.ckpt_freq,
                    "step_time_s": e.step_time_s,
                    "samples_per_s": e.samples_per_s,
                    "scaling_efficiency": None,
                    "bound": e.bound,
                    "step_time_s_range": e.step_time_s_range,
                    "samples_per_s_range": e.samples_per_s_range,
                }
            )
    return row_efficiency(rows)


def row_efficiency(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each sweep row's scaling efficiency against the rows beside it: its samples/s per node over
    the same strategy's first feasible row (the fewest nodes), each at its own batch and
    checkpointing. `efficiency_vs_nodes` names the row it is compared with."""
    base: dict[str, dict[str, Any]] = {}
    for r in rows:
        if not r["feasible"] or not r["samples_per_s"]:
            r["efficiency_vs_nodes"] = None
            continue
        b = base.setdefault(r["strategy"], r)
        r["scaling_efficiency"] = (r["samples_per_s"] / r["nodes"]) / (b["samples_per_s"] / b["nodes"])
        r["efficiency_vs_nodes"] = b["nodes"]
    return rows


def estimate_traced(sc: Scenario, strategy: str, factory: str | None = None) -> Option | dict[str, Any]:
    """`prism-strategy estimate`: analytic and traced memory of one strategy side by side: the
    Option, its traced fields set (report/plan_json.estimate_dict is its JSON). factory: a
    "pkg.mod:make_model" to trace instead of sc's model: then the traced fields alone (no spec to
    model analytically; sc gives the layout, training and platform)."""
    from prism_strategy.traced.estimate import trace_option, traced_fields

    s = get_strategy(strategy)
    if factory is not None:
        mb = sc.training.micro_batch or 1
        t = trace_option(
            factory,
            sc.training,
            sc.layout,
            s,
            mb,
            usable_bytes=sc.platform.usable_bytes,
            reserve_bytes=sc.platform.allocator.framework_reserve_gib * GiB,
        )
        return {
            "strategy": s.name,
            "micro_batch": mb,
            "memory_gib": None,
            **traced_fields(t.memory, reserve_bytes=sc.platform.allocator.framework_reserve_gib * GiB, search=t.search),
        }
    if (early := states_never_fit(sc, model_parts(sc.model, sc.training), [s], at_batch_1=False)) is not None:
        return early[0]  # model states alone cannot fit: nothing to trace (planning/advice.py)
    o = evaluate(sc, s)
    trace_options(sc, [o])
    return o
