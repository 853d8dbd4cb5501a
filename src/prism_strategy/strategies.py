"""The strategy catalogue: one declarative entry per named data-parallel strategy.

Names are the ones used everywhere (CLI, JSON, Python API). Each entry says what is sharded
over which group, which collectives run per step and which engine applies it; the estimators
and the runtime both read these entries instead of branching on names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError


class MeshAxis(StrEnum):
    REPLICATE = "dp_replicate"
    SHARD = "dp_shard"


Group = Literal["none", "world", "node"]
Engine = Literal["ddp", "fsdp2", "deepspeed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Collective:
    """One collective a step runs: over which group, on what fraction of the trainable
    bytes, how many times per step (per wrapped unit for FSDP)."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter"]
    group: Literal["world", "node", "across_nodes"]
    payload: Literal["params", "grads"]
    fraction: Literal["full", "shard"] = "full"
    """full: the whole unit; shard: 1/ranks-per-node of it (HSDP's cross-node all-reduce)."""
    phase: Literal["forward", "backward", "step"] = "backward"
    frozen_too: bool = False
    """True when frozen params are moved too (all-gathers of sharded frozen params)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategySpec:
    name: str
    description: str
    engine: Engine
    param_shard: Group
    """Group the parameters are sharded over at rest."""
    grad_shard: Group
    optim_shard: Group
    reshard_after_forward: bool = False
    """Params are freed after forward and re-gathered in backward (FSDP full_shard, ZeRO-3)."""
    zero_stage: int | None = None
    collectives: tuple[Collective, ...]
    backends: tuple[str, ...] = ("nccl", "xccl", "gloo")
    torch_form: str = ""

    @property
    def hybrid(self) -> bool:
        return self.param_shard == "node" or self.grad_shard == "node"

    @property
    def sharded(self) -> bool:
        return self.param_shard != "none" or self.grad_shard != "none" or self.optim_shard != "none"

    def degree(self, group: Group, layout: Layout) -> int:
        return {"none": 1, "world": layout.world, "node": layout.ranks_per_node}[group]

    def mesh_axes(self, layout: Layout) -> tuple[tuple[MeshAxis, int], ...]:
        if self.hybrid:
            return ((MeshAxis.REPLICATE, layout.nodes), (MeshAxis.SHARD, layout.ranks_per_node))
        return ((MeshAxis.SHARD, layout.world),)


_AR = Collective(op="all_reduce", group="world", payload="grads")
_AG_FWD = Collective(op="all_gather", group="world", payload="params", phase="forward", frozen_too=True)
_AG_BWD = Collective(op="all_gather", group="world", payload="params", phase="backward", frozen_too=True)
_RS = Collective(op="reduce_scatter", group="world", payload="grads")
_AG_NODE_FWD = Collective(op="all_gather", group="node", payload="params", phase="forward", frozen_too=True)
_AG_NODE_BWD = Collective(op="all_gather", group="node", payload="params", phase="backward", frozen_too=True)
_RS_NODE = Collective(op="reduce_scatter", group="node", payload="grads")
_AR_ACROSS = Collective(op="all_reduce", group="across_nodes", payload="grads", fraction="shard")
_AG_STEP = Collective(op="all_gather", group="world", payload="params", phase="step")

STRATEGIES: tuple[StrategySpec, ...] = (
    StrategySpec(
        name="ddp", description="Replicate everything; all-reduce gradients in buckets.",
        engine="ddp", param_shard="none", grad_shard="none", optim_shard="none",
        collectives=(_AR,), torch_form="DistributedDataParallel",
    ),
    StrategySpec(
        name="fsdp_full_shard",
        description="Shard params, grads and optimizer state over all ranks; re-gather params in backward.",
        engine="fsdp2", param_shard="world", grad_shard="world", optim_shard="world", reshard_after_forward=True,
        collectives=(_AG_FWD, _AG_BWD, _RS), torch_form="fully_shard(reshard_after_forward=True), 1-D mesh",
    ),
    StrategySpec(
        name="fsdp_shard_grad_op",
        description="Shard grads and optimizer state over all ranks; params stay gathered from forward to backward.",
        engine="fsdp2", param_shard="world", grad_shard="world", optim_shard="world", reshard_after_forward=False,
        collectives=(_AG_FWD, _RS), torch_form="fully_shard(reshard_after_forward=False), 1-D mesh",
    ),
    StrategySpec(
        name="hsdp_full_shard",
        description="Full shard inside each node, replicate across nodes.",
        engine="fsdp2", param_shard="node", grad_shard="node", optim_shard="node", reshard_after_forward=True,
        collectives=(_AG_NODE_FWD, _AG_NODE_BWD, _RS_NODE, _AR_ACROSS),
        torch_form="fully_shard(reshard_after_forward=True), 2-D mesh (replicate=nodes, shard=ranks per node)",
    ),
    StrategySpec(
        name="hsdp_shard_grad_op",
        description="Shard_grad_op inside each node, replicate across nodes.",
        engine="fsdp2", param_shard="node", grad_shard="node", optim_shard="node", reshard_after_forward=False,
        collectives=(_AG_NODE_FWD, _RS_NODE, _AR_ACROSS),
        torch_form="fully_shard(reshard_after_forward=False), 2-D mesh (replicate=nodes, shard=ranks per node)",
    ),
    StrategySpec(
        name="zero1", description="DeepSpeed ZeRO-1: shard optimizer state; full grads kept, reduce-scattered to their owners.",
        engine="deepspeed", param_shard="none", grad_shard="none", optim_shard="world", zero_stage=1,
        collectives=(_RS, _AG_STEP), torch_form="deepspeed.initialize, zero_optimization.stage=1",
    ),
    StrategySpec(
        name="zero2", description="DeepSpeed ZeRO-2: shard grads and optimizer state.",
        engine="deepspeed", param_shard="none", grad_shard="world", optim_shard="world", zero_stage=2,
        collectives=(_RS, _AG_STEP), torch_form="deepspeed.initialize, zero_optimization.stage=2",
    ),
    StrategySpec(
        name="zero3", description="DeepSpeed ZeRO-3: shard params, grads and optimizer state.",
        engine="deepspeed", param_shard="world", grad_shard="world", optim_shard="world",
        reshard_after_forward=True, zero_stage=3,
        collectives=(_AG_FWD, _AG_BWD, _RS), torch_form="deepspeed.initialize, zero_optimization.stage=3",
    ),
)
STRATEGY_NAMES: tuple[str, ...] = tuple(s.name for s in STRATEGIES)
_BY_NAME = {s.name: s for s in STRATEGIES}


def get_strategy(name: str) -> StrategySpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SpecError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGY_NAMES)}") from None


def parse_strategies(text: str) -> tuple[StrategySpec, ...]:
    """'ddp,fsdp_full_shard' -> specs; 'all' -> every strategy."""
    if text.strip() == "all":
        return STRATEGIES
    return tuple(get_strategy(n.strip()) for n in text.split(",") if n.strip())


@dataclass(frozen=True, kw_only=True, slots=True)
class DeepSpeedBuckets:
    """Bucket sizes (elements) our generated ds_config uses: DeepSpeed's own defaults, so the
    memory estimate and the emitted config agree."""

    reduce_bucket_size: int = 500_000_000
    allgather_bucket_size: int = 500_000_000
    stage3_prefetch_bucket_size: int = 50_000_000
    stage3_max_live_parameters: int = 1_000_000_000
    stage3_param_persistence_threshold: int = 100_000


DS_BUCKETS = DeepSpeedBuckets()
DS_OVERLAP_COMM = {1: False, 2: True, 3: False}
"""overlap_comm per ZeRO stage in our configs: DeepSpeed allows it with caller-owned gradient
accumulation (no_sync micro-steps) only in stage 2."""
