"""`wrap(model, strategy, ...)`: apply a named strategy for real.

`wrap()` composes the steps in a fixed order (torchtitan's parallelize_llama): check guardrails
-> activation checkpointing -> compile -> data parallelism (the strategy's engine: runtime/apply.py's
wrap_<engine>) -> optimizer on the wrapped parameters. Its settings are one `WrapConfig`
(wrap_config.py), which is also what strategy.toml holds.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import torch
import torch.distributed as dist
from torch import nn

from prism_strategy import rules
from prism_strategy.engines import engine_of
from prism_strategy.rules import RuleFacts
from prism_strategy.runtime.apply import WRAP_BY_ENGINE, OptimizerFactory, deepspeed_config  # noqa: F401
from prism_strategy.runtime.blocks import (
    BlockTypes,
    apply_checkpointing,
    apply_compile,
    checkpointed_count,
    find_blocks,
)
from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.job import Job
from prism_strategy.runtime.loss import apply_loss
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import StrategySpec
from prism_strategy.wrap_config import WrapConfig

if TYPE_CHECKING:
    from typing_extensions import Unpack


class WrapSettings(TypedDict, total=False):
    """wrap()'s keyword settings: the WrapConfig fields a training script sets (wrap_config.py has
    each one's meaning and default; a missing one takes it)."""

    mixed_precision: str | None
    ckpt_freq: int | str
    static_graph: bool | None
    find_unused_parameters: bool
    bucket_mb: float | None
    reduce_dtype: str | None
    compile: bool
    loss: str


SETTINGS = tuple(WrapSettings.__annotations__)
"""The settings wrap() takes as keywords, in WrapConfig's terms."""


def wrap(
    model: nn.Module,
    strategy: str | StrategySpec | None = None,
    *,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    block_types: BlockTypes = None,
    ds_config: dict[str, Any] | str | Path | None = None,
    config: WrapConfig | None = None,
    **settings: Unpack[WrapSettings],
) -> Job:
    """Apply `strategy` to `model` (in place) and return the Job handle.

    optimizer: a factory, e.g. `lambda params: torch.optim.AdamW(params, lr=1e-4)`; it gets the
    trainable parameters after wrapping (FSDP2 replaces them by DTensors). The settings (WrapSettings,
    as keywords) are WrapConfig's: mixed_precision "bf16" (bf16 compute, fp32 params and gradient
    reduction) or None (fp32 throughout); ckpt_freq; static_graph, find_unused_parameters (DDP);
    bucket_mb: DDP bucket_cap_mb / DeepSpeed bucket size; reduce_dtype: "fp32" | "bf16" (FSDP2
    reduce_dtype / DeepSpeed communication_data_type); compile; loss: "upcast" (the model's own),
    "chunked" or "fused" (runtime/loss.py replaces a causal LM's loss). `config` (a WrapConfig) gives
    all the settings at once, instead of the keywords.
    """
    if config is None:
        config = config_of(strategy, settings)
    elif not isinstance(config, WrapConfig):
        raise SpecError(f"config must be a WrapConfig, got {type(config).__name__}")
    elif settings:
        raise SpecError(f"wrap() takes config= or the settings, not both: put {', '.join(settings)} in the WrapConfig")
    return _wrap(
        model,
        config,
        ctx=ctx,
        optimizer=optimizer,
        block_types=block_types,
        ds_config=ds_config if ds_config is not None else config.ds_config,
    )


def config_of(strategy: str | StrategySpec | None, settings: Mapping[str, Any]) -> WrapConfig:
    """The WrapConfig of wrap()'s keywords; a StrategySpec's own bucket size and reduce dtype fill
    the ones not given."""
    if unknown := sorted(set(settings) - set(SETTINGS)):
        raise SpecError(
            f"wrap() has no setting {', '.join(unknown)}; its settings are {', '.join(SETTINGS)} (or config=WrapConfig)"
        )
    given = dict(settings)
    if isinstance(strategy, StrategySpec):
        for k in ("bucket_mb", "reduce_dtype"):
            given[k] = getattr(strategy, k) if given.get(k) is None else given[k]
        strategy = strategy.name
    return WrapConfig(strategy=strategy, **given)  # type: ignore[arg-type]


def wrap_from_file(
    model: nn.Module,
    path: str | Path | None = None,
    *,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    block_types: BlockTypes = None,
) -> Job:
    """wrap() with the settings of a strategy.toml written by `prism-strategy emit`; with no
    path, the file named by $PRISM_STRATEGY_FILE (the emitted launchers export it). A file whose
    layout (nodes x ranks per node) differs from the running world is warned about: the run works,
    but not at the plan's global batch and memory."""
    config = read_strategy_file(path)
    if (mismatch := layout_mismatch(config, ctx)) is not None:
        warnings.warn(mismatch, UserWarning, stacklevel=2)
    return wrap(model, ctx=ctx, optimizer=optimizer, block_types=block_types, config=config)


def layout_mismatch(config: WrapConfig, ctx: DistContext) -> str | None:
    """Why the strategy file's planned layout is not the running one (None: it is, or it names none)."""
    planned = (config.nodes or ctx.nodes, config.ranks_per_node or ctx.ranks_per_node)
    running = (ctx.nodes, ctx.ranks_per_node)
    if planned == running:
        return None
    per_step = config.micro_batch * config.grad_accum if config.micro_batch else None
    batch = (
        f"; global batch {per_step * planned[0] * planned[1]} planned, {per_step * ctx.world_size} now"
        if per_step
        else ""
    )
    return (
        f"strategy file planned {planned[0]} nodes x {planned[1]} ranks per node, this job runs {running[0]} x "
        f"{running[1]}{batch}: launch with the emitted launcher, or plan and emit again for this layout"
    )


def _wrap(
    model: nn.Module,
    config: WrapConfig,
    *,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    block_types: BlockTypes,
    ds_config: Any,
) -> Job:
    spec = config.spec
    _validate(model, ctx, optimizer)
    blocks = find_blocks(model, block_types)
    if config.ckpt_freq and not blocks:
        raise SpecError(
            f"ckpt_freq={config.ckpt_freq} needs transformer blocks, none found in {type(model).__name__}; "
            "pass block_types=(YourBlock,)"
        )
    # 0. refuse what cannot work, before touching the model
    enforce_guardrails(
        situation(
            spec,
            ctx,
            compile=config.compile,
            static_graph=bool(config.static_graph),
            find_unused_parameters=config.find_unused_parameters,
            has_blocks=bool(blocks),
        )
    )
    _warn_ignored(spec, config)
    if not dist.is_initialized():
        raise SpecError("no process group: call ctx = init_distributed() before wrap()")
    summary = dict(
        blocks=len(blocks),
        block_class=type(blocks[0].module).__name__ if blocks else "-",
        ckpt_freq=config.ckpt_freq,
        compiled=config.compile,
    )
    # 1. activation checkpointing, every ckpt_freq-th block: the same for every strategy. An HF
    # model's KV cache would keep every checkpointed block's K/V alive to the end of backward
    # (the traced estimate measured it: OLMo-7B's max micro-batch 64 -> 27), so turn it off, as
    # transformers' own gradient_checkpointing_enable() does.
    if config.ckpt_freq and getattr(getattr(model, "config", None), "use_cache", False):
        model.config.use_cache = False
    blocks = apply_checkpointing(blocks, every=config.ckpt_freq)
    summary["checkpointed"] = checkpointed_count(blocks)
    # 1b. the loss kernel: the root's forward, before any wrapper holds the module
    summary["loss"] = apply_loss(model, config.loss)
    # 2. torch.compile per block (after checkpointing, before data parallelism: torchtitan's order)
    if config.compile:
        apply_compile(model, blocks)
    # 3. data parallelism: the strategy's engine; 4. the optimizer (inside the engine's apply)
    return WRAP_BY_ENGINE[spec.engine](
        model, spec, ctx, optimizer, summary, config=config, blocks=blocks, ds_config=ds_config
    )


# ----------------------------------------------------------------------------- guardrails


def situation(
    spec: StrategySpec,
    ctx: DistContext,
    *,
    compile: bool,
    static_graph: bool,
    find_unused_parameters: bool,
    has_blocks: bool,
) -> RuleFacts:
    """The rule facts of this wrap() call; the engine contributes its own."""
    return RuleFacts(
        device=ctx.device.type,
        backend=ctx.backend,
        compile=compile,
        multi_node=ctx.nodes > 1,
        find_unused_parameters=find_unused_parameters,
        static_graph=static_graph,
        passes_device_id=False,
        preloads_pil4dfs="libpil4dfs" in os.environ.get("LD_PRELOAD", ""),
        **engine_of(spec).facts(spec, has_blocks=has_blocks),
    )


def enforce_guardrails(facts: RuleFacts) -> None:
    """Refuse (SpecError) on a blocking rule, with its reason; warn about the others."""
    hits = rules.check(facts)
    blocking = [v for v in hits if v.rule.blocks]
    if blocking:
        raise SpecError(f"wrap() refuses [{blocking[0].rule.id}]: {blocking[0].message}")
    for v in hits:
        warnings.warn(f"[{v.rule.id}] {v.message}", UserWarning, stacklevel=4)


# ----------------------------------------------------------------------------- helpers


def _validate(model: Any, ctx: Any, optimizer: Any) -> None:
    if not isinstance(model, nn.Module):
        raise SpecError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(ctx, DistContext):
        raise SpecError(f"ctx must be the DistContext from init_distributed(), got {type(ctx).__name__}")
    if isinstance(optimizer, torch.optim.Optimizer) or not callable(optimizer):
        raise SpecError(
            "optimizer must be a factory, e.g. optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4): "
            "FSDP2 and DeepSpeed replace the parameters, so the optimizer is built after wrapping"
        )


def _warn_ignored(spec: StrategySpec, config: WrapConfig) -> None:
    given = [
        n
        for n, v in (
            ("static_graph", config.static_graph),
            ("find_unused_parameters", config.find_unused_parameters),
            ("bucket_mb", config.bucket_mb),
            ("reduce_dtype", config.reduce_dtype),
        )
        if v and n not in engine_of(spec).options
    ]
    if given:
        warnings.warn(
            f"{', '.join(given)} do not apply to {spec.name} ({spec.engine}); ignored", UserWarning, stacklevel=4
        )
