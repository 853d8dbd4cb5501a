"""The planner's prediction for one measured configuration (a stored result's `config`): the row
read back as its Scenario (inputs/stored.py scenario_from_row, either schema) and priced by the
one entry into the estimates (estimate/option.py estimate_option)."""

from __future__ import annotations

from typing import Any

from prism_strategy.estimate.option import estimate_option
from prism_strategy.inputs.stored import scenario_from_row
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy


def predict(config: dict[str, Any], platform: PlatformSpec) -> dict[str, float]:
    if "strategy" not in config:
        raise SpecError("stored config lacks 'strategy'")
    sc = scenario_from_row(config, platform)
    e = estimate_option(sc, get_strategy(config["strategy"]))
    step = e.step
    return {
        "step_time_s": step.step_time_s,
        "samples_per_s": step.samples_per_s,
        "memory_bytes": e.memory.total,
        # the counters a run reports, predicted as such (estimate/memory_runtime.memory_fields)
        "allocated_bytes": e.memory_runtime["memory_allocated_gib"] * GiB,
        "reserved_bytes": e.memory_runtime["memory_reserved_gib"] * GiB,
        "activation_bytes": e.memory.activations,
        "max_micro_batch": e.batch.max_micro_batch,
        "compute_s": step.compute_s,
        "comm_s": step.comm_s,
        "exposed_comm_s": step.exposed_comm_s,
        "optimizer_s": step.optimizer_s,
        "tokens_per_s_per_device": step.tokens_per_s_per_device,
        "mfu": step.mfu,
    }


def check_readable(results: list[Any]) -> None:
    """SpecError naming the first stored run whose config cannot be read back (and why), before a
    fit or a comparison prices any of them."""
    for r in results:
        try:
            scenario_from_row(r.config)
        except SpecError as e:
            raise SpecError(f"stored result {r.id}: {e}") from None
