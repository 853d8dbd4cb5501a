"""DeepSpeed config generation for zero1/zero2/zero3 (used by emit and by wrap())."""

from __future__ import annotations

import json
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import DS_BUCKETS, DS_OVERLAP_COMM, StrategySpec


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
    it from micro-batch x accumulation x the world size it finds, so one file serves any world. The optimizer is the client's
    (passed to deepspeed.initialize), so no optimizer section is written. DeepSpeed's bf16
    mode always keeps fp32 master weights: `bf16-pure` cannot be reproduced under ZeRO."""
    if strategy.zero_stage is None:
        raise SpecError(f"strategy {strategy.name!r} is not a DeepSpeed ZeRO stage; choose zero1, zero2 or zero3")
    if micro_batch <= 0 or world_size <= 0 or grad_accum <= 0:
        raise SpecError("micro_batch, world_size and grad_accum must be > 0")
    b = DS_BUCKETS
    zero: dict[str, Any] = {
        "stage": strategy.zero_stage,
        "overlap_comm": DS_OVERLAP_COMM[strategy.zero_stage],
        "contiguous_gradients": True,
        "reduce_scatter": True,
        "reduce_bucket_size": b.reduce_bucket_size,
    }
    if strategy.zero_stage < 3:
        zero["allgather_bucket_size"] = b.allgather_bucket_size
    else:
        zero.update(
            stage3_prefetch_bucket_size=b.stage3_prefetch_bucket_size,
            stage3_max_live_parameters=b.stage3_max_live_parameters,
            stage3_param_persistence_threshold=b.stage3_param_persistence_threshold,
        )
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": grad_accum,
        "bf16": {"enabled": precision != "fp32"},
        "zero_optimization": zero,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }
    if gradient_clipping is not None:
        cfg["gradient_clipping"] = gradient_clipping
    return cfg


def dumps(cfg: dict[str, Any]) -> str:
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"
