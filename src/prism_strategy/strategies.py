"""The strategy registry: a named strategy is an engine plus its options.

Names are the ones used everywhere (CLI, JSON, Python API). Each entry says what is sharded
over which group and which engine runs it, with its options (reshard after forward, mesh, ZeRO
stage, bucket size, reduce dtype). What the strategy communicates, holds in memory, applies
and emits comes from its engine (engines/), never from branches on names. A named variant is
one `register(StrategySpec(...))` call.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal, get_args

from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import backend_names
from prism_strategy.specs.training import check_options

BACKEND_NAMES = backend_names()
"""torch's backend names (specs/libraries.py)."""


class MeshAxis(StrEnum):
    REPLICATE = "dp_replicate"
    SHARD = "dp_shard"


Group = Literal["none", "world", "node"]
EngineName = Literal["ddp", "fsdp2", "deepspeed"]
"""An engine's name (engines/base.Engine is the engine's model)."""
ENGINE_NAMES: tuple[str, ...] = get_args(EngineName)
"""The engines a strategy can name; engines/ models each one (engines.engine_of(spec))."""
ReduceDtype = Literal["fp32", "bf16"]
FSDP1_SHARDING: dict[str, str] = {
    "FULL_SHARD": "fsdp_full_shard",
    "SHARD_GRAD_OP": "fsdp_shard_grad_op",
    "HYBRID_SHARD": "hsdp_full_shard",
    "_HYBRID_SHARD_ZERO2": "hsdp_shard_grad_op",
    "NO_SHARD": "ddp",
}
"""FSDP1's ShardingStrategy members (torch/distributed/fsdp/api.py) as the strategy they amount to:
what a user's script (inputs/script_wrapping.py) or PRISM's log (readers/prism.py) names."""


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategySpec:
    name: str
    description: str
    engine: EngineName
    param_shard: Group
    """Group the parameters are sharded over at rest."""
    grad_shard: Group
    optim_shard: Group
    reshard_after_forward: bool = False
    """Params are freed after forward and re-gathered in backward (FSDP full_shard, ZeRO-3)."""
    zero_stage: int | None = None
    """DeepSpeed's ZeRO stage (deepspeed engine only)."""
    bucket_mb: float | None = None
    """Gradient bucket size in MiB (DDP bucket_cap_mb; DeepSpeed reduce/allgather/prefetch
    buckets); None: the engine's default."""
    reduce_dtype: ReduceDtype | None = None
    """Dtype gradients are reduced in (FSDP2 MixedPrecisionPolicy.reduce_dtype; DeepSpeed
    communication_data_type); None: the engine's default."""
    backends: tuple[str, ...] = BACKEND_NAMES
    torch_form: str = ""

    def __post_init__(self) -> None:
        check_options(self.bucket_mb, self.reduce_dtype)
        if self.engine not in ENGINE_NAMES:
            raise SpecError(f"unknown engine {self.engine!r}; choose one of {', '.join(ENGINE_NAMES)}")

    def with_options(self, *, bucket_mb: float | None = None, reduce_dtype: str | None = None) -> "StrategySpec":
        """This strategy with per-run options (None keeps the entry's own)."""
        return replace(
            self,
            bucket_mb=self.bucket_mb if bucket_mb is None else bucket_mb,
            reduce_dtype=self.reduce_dtype if reduce_dtype is None else reduce_dtype,
        )  # type: ignore[arg-type]

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


STRATEGIES: tuple[StrategySpec, ...] = (
    StrategySpec(
        name="ddp",
        description="Replicate everything; all-reduce gradients in buckets.",
        engine="ddp",
        param_shard="none",
        grad_shard="none",
        optim_shard="none",
        torch_form="DistributedDataParallel",
    ),
    StrategySpec(
        name="fsdp_full_shard",
        description="Shard params, grads and optimizer state over all ranks; re-gather params in backward.",
        engine="fsdp2",
        param_shard="world",
        grad_shard="world",
        optim_shard="world",
        reshard_after_forward=True,
        torch_form="fully_shard(reshard_after_forward=True), 1-D mesh",
    ),
    StrategySpec(
        name="fsdp_shard_grad_op",
        description="Shard grads and optimizer state over all ranks; params stay gathered from forward to backward.",
        engine="fsdp2",
        param_shard="world",
        grad_shard="world",
        optim_shard="world",
        reshard_after_forward=False,
        torch_form="fully_shard(reshard_after_forward=False), 1-D mesh",
    ),
    StrategySpec(
        name="hsdp_full_shard",
        description="Full shard inside each node, replicate across nodes.",
        engine="fsdp2",
        param_shard="node",
        grad_shard="node",
        optim_shard="node",
        reshard_after_forward=True,
        torch_form="fully_shard(reshard_after_forward=True), 2-D mesh (replicate=nodes, shard=ranks per node)",
    ),
    StrategySpec(
        name="hsdp_shard_grad_op",
        description="Shard_grad_op inside each node, replicate across nodes.",
        engine="fsdp2",
        param_shard="node",
        grad_shard="node",
        optim_shard="node",
        reshard_after_forward=False,
        torch_form="fully_shard(reshard_after_forward=False), 2-D mesh (replicate=nodes, shard=ranks per node)",
    ),
    StrategySpec(
        name="zero1",
        description="DeepSpeed ZeRO-1: shard optimizer state; full grads kept, all-reduced in buckets at the step.",
        engine="deepspeed",
        param_shard="none",
        grad_shard="none",
        optim_shard="world",
        zero_stage=1,
        torch_form="deepspeed.initialize, zero_optimization.stage=1",
    ),
    StrategySpec(
        name="zero2",
        description="DeepSpeed ZeRO-2: shard grads and optimizer state.",
        engine="deepspeed",
        param_shard="none",
        grad_shard="world",
        optim_shard="world",
        zero_stage=2,
        torch_form="deepspeed.initialize, zero_optimization.stage=2",
    ),
    StrategySpec(
        name="zero3",
        description="DeepSpeed ZeRO-3: shard params, grads and optimizer state.",
        engine="deepspeed",
        param_shard="world",
        grad_shard="world",
        optim_shard="world",
        reshard_after_forward=True,
        zero_stage=3,
        torch_form="deepspeed.initialize, zero_optimization.stage=3",
    ),
)
STRATEGY_NAMES: tuple[str, ...] = tuple(s.name for s in STRATEGIES)
"""The built-in strategies (pinned); registered variants come after them."""
_REGISTRY: dict[str, StrategySpec] = {s.name: s for s in STRATEGIES}


def register(spec: StrategySpec, *, replace_existing: bool = False) -> StrategySpec:
    """Add a named strategy (e.g. DDP with 100 MiB buckets): plan, wrap, emit and census see it."""
    if not isinstance(spec, StrategySpec):
        raise SpecError(f"register() takes a StrategySpec, got {type(spec).__name__}")
    if spec.name in STRATEGY_NAMES or (spec.name in _REGISTRY and not replace_existing):
        raise SpecError(f"strategy {spec.name!r} is already registered; pick another name")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a registered variant (the built-in strategies stay)."""
    if name in STRATEGY_NAMES:
        raise SpecError(f"{name!r} is a built-in strategy and cannot be removed")
    _REGISTRY.pop(name, None)


def all_strategies() -> tuple[StrategySpec, ...]:
    """Built-in strategies, then registered variants, in registration order."""
    return tuple(_REGISTRY.values())


def strategy_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_strategy(name: str) -> StrategySpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        from difflib import get_close_matches

        near = get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise SpecError(f"unknown strategy {name!r}; {hint}choose one of {', '.join(_REGISTRY)}") from None


def parse_strategies(text: str) -> tuple[StrategySpec, ...]:
    """'ddp,fsdp_full_shard' -> specs; 'all' -> every registered strategy."""
    if text.strip() == "all":
        return all_strategies()
    return tuple(get_strategy(n.strip()) for n in text.split(",") if n.strip())
