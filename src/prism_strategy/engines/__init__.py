"""Data-parallel engines, one module each, one protocol (engines/base.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prism_strategy.engines.base import Engine, Moment, Rows, StepCollective
from prism_strategy.engines.ddp import DDPEngine
from prism_strategy.engines.deepspeed import DeepSpeedEngine
from prism_strategy.engines.fsdp2 import FSDP2Engine
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import ENGINE_NAMES as STRATEGY_ENGINES

if TYPE_CHECKING:
    from prism_strategy.strategies import StrategySpec

ENGINES: dict[str, Engine] = {e.name: e for e in (DDPEngine(), FSDP2Engine(), DeepSpeedEngine())}
ENGINE_NAMES: tuple[str, ...] = tuple(ENGINES)
if set(ENGINE_NAMES) != set(STRATEGY_ENGINES):  # the registry's Literal and the models stay one set
    raise ImportError(f"engines {ENGINE_NAMES} do not match strategies.EngineName {STRATEGY_ENGINES}")

__all__ = [
    "ENGINES",
    "ENGINE_NAMES",
    "Engine",
    "Moment",
    "Rows",
    "StepCollective",
    "engine_of",
    "get_engine",
    "step_collectives",
]


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise SpecError(f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)}") from None


def engine_of(spec: "StrategySpec") -> Engine:
    """The engine model that models, emits and names the capabilities of `spec`."""
    return ENGINES[spec.engine]


def step_collectives(
    spec: "StrategySpec",
    parts: tuple[Part, ...],
    training: TrainingSpec,
    layout: Layout,
    grad_accum: int = 1,
    wrap: str = "block",
) -> tuple[StepCollective, ...]:
    """Every collective of one optimizer step of `spec` (all grad_accum micro-steps), as the
    engine issues it: what census compares with a real run."""
    return engine_of(spec).step_collectives(spec, parts, training, layout, grad_accum, wrap)


def collective_kinds(spec: "StrategySpec") -> list[str]:
    """ "op(group)" of every collective `spec` issues, on the tiny-llama preset over 2 nodes x 2
    ranks with gradient accumulation 2 (the catalogue's summary)."""
    from prism_strategy.specs.model import MultimodalSpec
    from prism_strategy.specs.parts import model_parts
    from prism_strategy.specs.presets import load_model

    t = TrainingSpec.from_precision("bf16-mixed", seq_len=16)
    parts = model_parts(MultimodalSpec(backbone=load_model("tiny-llama")), t)
    return [f"{c.op}({c.group})" for c in step_collectives(spec, parts, t, Layout(nodes=2, ranks_per_node=2), 2)]
