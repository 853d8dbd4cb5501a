"""The one way into the estimates for planning/: `estimate_option` (estimate/option.py) for an
option, `estimate_searched` (estimate/ckpt_search.py) for it under `--ckpt-freq auto` (every
candidate priced, the chosen one returned: one call per strategy), and the few questions the
planner asks beside it, each taking the Scenario and a strategy (never estimate's own argument
lists): memory at a given batch without timing (the advice when nothing fits, the notes), the
scale the fit measured, and the environment's collective variables. planning/ imports estimate/
only here and the types these return (tests/unit/house/test_layers.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from prism_strategy.estimate.ckpt_search import estimate_searched, samples_per_s_at, with_ckpt
from prism_strategy.estimate.comm_oneccl import PROFILE_VARIABLES, SCALEOUT_VARS, ccl_env_of, with_ccl_env
from prism_strategy.estimate.families import assumptions as family_assumptions
from prism_strategy.estimate.memory import MemoryEstimate, estimate_memory, model_state_rows, moments
from prism_strategy.estimate.memory import gathered_model_bytes as _gathered
from prism_strategy.estimate.memory_runtime import device_peak, memory_fields
from prism_strategy.estimate.option import (
    BatchAt,
    OptionEstimate,
    StepEstimate,
    estimate_option,
    estimate_step,
    timed_view,
    with_run_options,
)
from prism_strategy.estimate.ranges import LATE, max_measured_nodes
from prism_strategy.specs.parts import Part, model_parts
from prism_strategy.specs.scenario import Scenario
from prism_strategy.strategies import StrategySpec

__all__ = [
    "LATE",
    "PROFILE_VARIABLES",
    "SCALEOUT_VARS",
    "BatchAt",
    "MemoryAt",
    "OptionEstimate",
    "StepEstimate",
    "assumptions",
    "ccl_env_of",
    "device_peak_at",
    "estimate_option",
    "estimate_searched",
    "estimate_step",
    "gathered_model_bytes",
    "measured_nodes",
    "memory_at",
    "model_state_bytes",
    "samples_per_s_at",
    "scenario_under_variables",
    "timed_view",
    "with_ckpt",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryAt:
    """One strategy's memory at one micro-batch, judged as the plan judges (nothing timed)."""

    memory: MemoryEstimate
    """Allocated + runtime at the step's largest moment (estimate/memory.py estimate_memory)."""
    memory_total: float
    """memory.total, read once."""
    device_peak_bytes: float
    """Reserved + runtime at the worst moment, what must fit (estimate/memory_runtime.py device_peak)."""
    memory_runtime: Mapping[str, Any]
    """Which figure memory.total is, and the allocator's reserved one (memory_runtime.memory_fields)."""


def _parts(sc: Scenario, parts: tuple[Part, ...] | None) -> tuple[Part, ...]:
    return parts or model_parts(sc.model, sc.training)


def scenario_under_variables(sc: Scenario, variables: Mapping[str, str]) -> Scenario:
    """sc on its platform as these collective variables route its collectives
    (estimate/comm_oneccl.py with_ccl_env)."""
    return sc.with_platform(with_ccl_env(sc.platform, variables))


def assumptions(sc: Scenario) -> list[str]:
    """What the estimates assume about these model families (estimate/families.py), one line each."""
    return family_assumptions(sc.model, sc.training)


def measured_nodes(sc: Scenario) -> int:
    """The largest node count the platform's fit measured (estimate/ranges.py max_measured_nodes)."""
    return max_measured_nodes(sc.platform)


def model_state_bytes(sc: Scenario, s: StrategySpec, parts: tuple[Part, ...] | None = None) -> float:
    """Params, grads and optimizer state per device at sc's layout (the engine's model_state_rows)."""
    t = sc.training
    return sum(b for *_, b in model_state_rows(_parts(sc, parts), t, with_run_options(s, t), sc.layout))


def gathered_model_bytes(sc: Scenario, parts: tuple[Part, ...] | None = None) -> float:
    """The whole model's parameters gathered on one rank (estimate/memory.py gathered_model_bytes)."""
    return _gathered(_parts(sc, parts), sc.training)


def _moments(sc: Scenario, s: StrategySpec, batch: BatchAt, parts: tuple[Part, ...] | None, wrap: str):
    """(parts, the strategy as the run configures it, the step's moments: estimate/memory.py moments)."""
    parts, s = _parts(sc, parts), with_run_options(s, sc.training)
    return parts, s, moments(parts, sc.training, sc.platform, sc.layout, s, wrap, batch.grad_accum > 1)


def device_peak_at(
    sc: Scenario, s: StrategySpec, batch: BatchAt, *, parts: tuple[Part, ...] | None = None, wrap: str = "block"
) -> float:
    """Reserved + runtime at the worst moment of s's step at `batch` (estimate/memory_runtime.py
    device_peak); wrap: "block" (a unit per transformer block) or "root" (one flat unit)."""
    *_, ms = _moments(sc, s, batch, parts, wrap)
    return device_peak(ms, batch.micro_batch, sc.platform, sc.training)


def memory_at(
    sc: Scenario, s: StrategySpec, batch: BatchAt, *, parts: tuple[Part, ...] | None = None, wrap: str = "block"
) -> MemoryAt:
    """s's memory at `batch` on sc: the figures estimate_option judges feasibility on, without the
    timing (the strategy as the run configures it: estimate/option.py with_run_options)."""
    parts, s, ms = _moments(sc, s, batch, parts, wrap)
    t, p, mb = sc.training, sc.platform, batch.micro_batch
    mem = estimate_memory(parts, t, p, sc.layout, s, mb, wrap, accumulating=batch.grad_accum > 1)
    device = device_peak(ms, mb, p, t)
    fields = memory_fields(mem, p, t, ms, mb, limit=device)
    return MemoryAt(
        memory=mem, memory_total=mem.total, device_peak_bytes=device, memory_runtime=MappingProxyType(fields)
    )
