"""DeepSpeed config for zero1/zero2/zero3 (used by emit and by wrap()): the engine's own
(engines/deepspeed.py `engine_config`), so the memory and communication models and the file
agree on every bucket size."""

from __future__ import annotations

import json
from typing import Any

from prism_strategy.engines import engine_of
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import StrategySpec


def build_ds_config(
    strategy: StrategySpec,
    *,
    micro_batch: int,
    world_size: int,
    grad_accum: int = 1,
    precision: str = "bf16-mixed",
    gradient_clipping: float | None = None,
) -> dict[str, Any]:
    """A ds_config dict DeepSpeed's DeepSpeedConfig accepts. No train_batch_size: DeepSpeed derives
    it from micro-batch x accumulation x the world size it finds, so one file serves any world.
    The optimizer is the client's (passed to deepspeed.initialize), so no optimizer section is
    written. DeepSpeed's bf16 mode always keeps fp32 master weights: `bf16-pure` cannot be
    reproduced under ZeRO."""
    if micro_batch <= 0 or world_size <= 0 or grad_accum <= 0:
        raise SpecError("micro_batch, world_size and grad_accum must be > 0")
    cfg = engine_of(strategy).engine_config(
        strategy, micro_batch=micro_batch, world_size=world_size, grad_accum=grad_accum, precision=precision
    )
    if cfg is None:
        raise SpecError(f"strategy {strategy.name!r} is not a DeepSpeed ZeRO stage; choose zero1, zero2 or zero3")
    if gradient_clipping is not None:
        cfg["gradient_clipping"] = gradient_clipping
    return cfg


def dumps(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"
