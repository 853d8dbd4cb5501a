"""What the planner answers: one Option per strategy (fit, batch, time, why) and the Plan of a
scenario (options, the pick and its reasons, the sweep). JSON: report/plan_json.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prism_strategy.estimate.comm import CommEstimate
from prism_strategy.estimate.memory import MemoryEstimate
from prism_strategy.estimate.ranges import PredictionRange
from prism_strategy.estimate.scale_loss import LateRanks
from prism_strategy.specs.scenario import Scenario


@dataclass(kw_only=True)
class Option:
    strategy: str
    feasible: bool
    why_not: str | None
    memory: MemoryEstimate
    max_micro_batch: int
    micro_batch: int
    grad_accum: int
    global_batch: int = 0
    """micro_batch x grad_accum x world: samples per optimizer step."""
    ckpt_freq: int | str = 0
    """Activation checkpointing this option runs with: k (every k-th block, 0 = none) or "sac"
    (searched under --ckpt-freq auto)."""
    compute_s: float = 0.0
    comm_s: float = 0.0
    exposed_comm_s: float = 0.0
    optimizer_s: float = 0.0
    step_time_s: float = 0.0
    samples_per_s: float = 0.0
    tokens_per_s_per_device: float = 0.0
    """Decoder tokens (text + image) per second on one device: samples/s / world x tokens per sample."""
    mfu: float = 0.0
    """Model FLOPs utilisation: forward + backward FLOPs (estimate/compute.py, recompute excluded, as
    PaLM's MFU) per second on one device over the platform's peak for the compute dtype."""
    bound: str = "compute"
    scaling_efficiency: float | None = None
    comm: CommEstimate | None = None
    traced: dict[str, Any] | None = None
    """`plan --traced`: traced_memory_gib, traced_max_micro_batch, ... (traced/estimate.py)."""
    notes: list[str] = field(default_factory=list)
    provenance: dict[str, str] = field(default_factory=dict)
    memory_runtime: dict[str, Any] = field(default_factory=dict)
    """Which figure memory.total is, and the allocator's reserved figure (estimate/memory_runtime.py)."""
    step_time_s_range: list[float] | None = None
    """[low, high]: the fit's leave-one-out range, or one composed from the step's parts (estimate/range_parts.py), the
    high side widened by scale beyond what was measured (estimate/ranges.py)."""
    samples_per_s_range: list[float] | None = None
    """[low, high]: the low side carries the scale terms (scale only slows a step), the high the fit's."""
    range: PredictionRange | None = None
    """How the range was made: the fit's side, each slow-side term (estimate/ranges.py)."""
    late_ranks: LateRanks | None = None
    """The late-rank term (estimate/scale_loss.py): in step_time_s when the per-rank spread is measured."""
    step_time_s_readings: dict[str, float] = field(default_factory=dict)
    """Beyond the node count the fit measured: the step time under each reading of the comm terms
    its records could not rule out (estimate/comm.comm_readings); empty where there is one."""

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
    env_advice: list[dict[str, Any]] = field(default_factory=list)
    """Other documented env profiles that move the pick's step by more than 10% or change the pick
    (planning/env_advice.py): both figures, the variables that differ, validation status."""
    script: dict[str, Any] | None = None
    """`plan --script`: what was read from the script, per input (inputs/script.py)."""
    config: dict[str, Any] | None = None
    """`plan --from`: the framework config's fields, used or ignored (inputs/frameworks/plan.py)."""

    def option(self, name: str) -> Option:
        return next(o for o in self.options if o.strategy == name)
