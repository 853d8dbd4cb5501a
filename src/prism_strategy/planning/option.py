"""What the planner answers: one Option per strategy (fit, batch, time, why) and the Plan of a
scenario (options, the pick and its reasons, the sweep). JSON: report/plan_json.py."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from prism_strategy.estimate.comm import CommEstimate
from prism_strategy.estimate.entry import MemoryAt, OptionEstimate
from prism_strategy.estimate.memory import MemoryEstimate
from prism_strategy.estimate.ranges import PredictionRange
from prism_strategy.estimate.scale_loss import LateRanks
from prism_strategy.rules import Violation
from prism_strategy.specs.scenario import Scenario


@dataclass(kw_only=True)
class Option:
    """One strategy's answer: the estimates' (estimate/option.py OptionEstimate, held whole) and
    the planner's verdict on it. An option judged before timing (planning/advice.py: nothing's
    model states fit) holds its memory at micro-batch 1 instead, and no step."""

    strategy: str
    feasible: bool
    why_not: str | None
    estimate: OptionEstimate | None = None
    """What the estimates say (None: judged before timing, `untimed` holds its memory)."""
    untimed: MemoryAt | None = None
    """The memory at micro-batch 1 of an option judged before timing."""
    global_batch: int = 0
    """micro_batch x grad_accum x world: samples per optimizer step."""
    ckpt_freq: int | str = 0
    """Activation checkpointing this option runs with: k (every k-th block, 0 = none) or "sac"
    (searched under --ckpt-freq auto)."""
    blocked_by: tuple[Violation, ...] | None = None
    """The rules that make it not viable (rules.blocking; None: not judged, as before timing)."""
    traced: dict[str, Any] | None = None
    """`plan --traced`: traced_memory_gib, traced_max_micro_batch, ... (traced/estimate.py)."""
    notes: list[str] = field(default_factory=list)

    def retimed(self, samples_per_s: float) -> "Option":
        """The option at another rate (planning/env_advice.py: under another env profile), its step
        time the global batch over it."""
        e = self.estimate
        assert e is not None, "an option judged before timing has no step to retime"
        step = replace(e.step, samples_per_s=samples_per_s, step_time_s=self.global_batch / samples_per_s)
        return replace(self, estimate=replace(e, step=step))

    @property
    def memory(self) -> MemoryEstimate:
        return self.estimate.memory if self.estimate is not None else self.untimed.memory  # type: ignore[union-attr]

    @property
    def memory_total(self) -> float:
        """memory.total as the estimates read it once (the ranking compares it many times)."""
        held = self.estimate if self.estimate is not None else self.untimed
        return held.memory_total  # type: ignore[union-attr]

    @property
    def memory_runtime(self) -> dict[str, Any]:
        """Which figure memory.total is, and the allocator's reserved figure (estimate/memory_runtime.py)."""
        held = self.estimate if self.estimate is not None else self.untimed
        return dict(held.memory_runtime) if held is not None else {}

    @property
    def max_micro_batch(self) -> int:
        return self.estimate.batch.max_micro_batch if self.estimate is not None else 0

    @property
    def micro_batch(self) -> int:
        return self.estimate.batch.micro_batch if self.estimate is not None else 1

    @property
    def grad_accum(self) -> int:
        return self.estimate.batch.grad_accum if self.estimate is not None else 1

    def _step(self, name: str, default: Any = 0.0) -> Any:
        return getattr(self.estimate.step, name) if self.estimate is not None else default

    @property
    def compute_s(self) -> float:
        return self._step("compute_s")

    @property
    def comm_s(self) -> float:
        return self._step("comm_s")

    @property
    def exposed_comm_s(self) -> float:
        return self._step("exposed_comm_s")

    @property
    def optimizer_s(self) -> float:
        return self._step("optimizer_s")

    @property
    def step_time_s(self) -> float:
        return self._step("step_time_s")

    @property
    def samples_per_s(self) -> float:
        return self._step("samples_per_s")

    @property
    def tokens_per_s_per_device(self) -> float:
        """Decoder tokens (text + image) per second on one device: samples/s / world x tokens per sample."""
        return self._step("tokens_per_s_per_device")

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: forward + backward FLOPs (estimate/compute.py, recompute excluded, as
        PaLM's MFU) per second on one device over the platform's peak for the compute dtype."""
        return self._step("mfu")

    @property
    def bound(self) -> str:
        return self._step("bound", "compute")

    @property
    def comm(self) -> CommEstimate | None:
        return self._step("comm", None)

    @property
    def late_ranks(self) -> LateRanks | None:
        """The late-rank term (estimate/scale_loss.py): in step_time_s when the per-rank spread is measured."""
        return self._step("late_ranks", None)

    @property
    def scaling_efficiency(self) -> float | None:
        return self.estimate.scaling_efficiency if self.estimate is not None else None

    @property
    def provenance(self) -> dict[str, str]:
        return dict(self.estimate.provenance) if self.estimate is not None else {}

    @property
    def step_time_s_range(self) -> list[float] | None:
        """[low, high]: composed from the step's parts (estimate/range_parts.py step_range; one part, the fit's
        leave-one-out band, where no collective fit covers the platform), the high side widened by scale beyond
        what was measured (estimate/ranges.py)."""
        return self.estimate.step_time_s_range if self.estimate is not None else None

    @property
    def samples_per_s_range(self) -> list[float] | None:
        """[low, high]: the low side carries the scale terms (scale only slows a step), the high the fit's."""
        return self.estimate.samples_per_s_range if self.estimate is not None else None

    @property
    def range(self) -> PredictionRange | None:
        """How the range was made: the fit's side, each slow-side term (estimate/ranges.py)."""
        return self.estimate.range if self.estimate is not None else None

    @property
    def step_time_s_readings(self) -> dict[str, float]:
        """Beyond the node count the fit measured: the step time under each reading of the comm terms
        its records could not rule out (estimate/comm.comm_readings); empty where there is one."""
        return dict(self.estimate.readings) if self.estimate is not None else {}

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
