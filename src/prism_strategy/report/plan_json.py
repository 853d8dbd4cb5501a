"""The pinned JSON of `plan --json` and `estimate --json`: an Option and a Plan as dicts."""

from __future__ import annotations

from typing import Any

from prism_strategy.planning.option import Option, Plan
from prism_strategy.specs.cluster import GiB


def option_dict(o: Option) -> dict[str, Any]:
    return {
        "strategy": o.strategy,
        "feasible": o.feasible,
        "why_not": o.why_not,
        "memory_gib": {k: round(v, 3) for k, v in o.memory.gib().items()},
        "memory_items": [{"item": label, "key": k, "gib": round(b / GiB, 3)} for k, label, b in o.memory.items],
        "memory_peak_at": o.memory.moment,
        **o.memory_runtime,
        "max_micro_batch": o.max_micro_batch,
        "micro_batch": o.micro_batch,
        "grad_accum": o.grad_accum,
        "global_batch": o.global_batch,
        "ckpt_freq": o.ckpt_freq,
        "step_time_s": o.step_time_s,
        "samples_per_s": o.samples_per_s,
        "tokens_per_s_per_device": o.tokens_per_s_per_device,
        "mfu": o.mfu,
        "compute_s": o.compute_s,
        "step_time_s_range": o.step_time_s_range,
        "samples_per_s_range": o.samples_per_s_range,
        "comm_s": o.comm_s,
        "exposed_comm_s": o.exposed_comm_s,
        "optimizer_s": o.optimizer_s,
        "comm_fraction": o.comm_fraction,
        "bound": o.bound,
        "scaling_efficiency": o.scaling_efficiency,
        "step_time_s_readings": o.step_time_s_readings,
        "range_terms": ({"fit": o.range.fast} | o.range.terms) if o.range else {},
        "late_rank_s": o.late_ranks.seconds if o.late_ranks else 0.0,
        "collectives": [
            {
                "op": c.op,
                "group": c.group,
                "link": c.link,
                "ranks": c.ranks,
                "bytes_per_call": c.bytes_per_call,
                "calls_per_step": c.calls_per_step,
                "seconds_per_step": c.seconds_per_step,
                "algorithm": c.algorithm,
            }
            for c in (o.comm.collectives if o.comm else ())
        ],
        "notes": o.notes,
        "provenance": o.provenance | ({"traced_memory": o.traced["traced_method"]} if o.traced else {}),
    } | (o.traced or {})


def plan_dict(p: Plan) -> dict[str, Any]:
    """The pinned JSON shape of `prism-strategy plan --json`."""
    inputs = p.scenario.inputs() | ({"script": p.script} if p.script is not None else {})
    inputs |= {"config": p.config} if p.config is not None else {}
    return {
        "inputs": inputs,
        "options": [option_dict(o) for o in p.options],
        "recommended": p.recommended,
        "reasons": p.reasons,
        "warnings": p.warnings,
        "sweep": p.sweep,
    }


def estimate_dict(result: Option | dict[str, Any]) -> dict[str, Any]:
    """`estimate --json`: the option's dict (its traced fields merged), or the traced fields alone."""
    return option_dict(result) if isinstance(result, Option) else result
