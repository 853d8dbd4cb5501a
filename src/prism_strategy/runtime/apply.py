"""How each engine is applied for real: one small `apply_*` per wrapper with explicit arguments
(torchtitan's parallelize_llama), and one `wrap_<engine>` per engine that builds its Job.
runtime/wrap.py picks the wrap_* by the strategy's engine name (WRAP_BY_ENGINE); nothing here
chooses between engines.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from prism_strategy.engines import engine_of
from prism_strategy.runtime.blocks import BlockSlot
from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.job import DDPJob, DeepSpeedJob, FSDPJob, Job, WrapSummary
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.safe_files import load_json
from prism_strategy.strategies import StrategySpec
from prism_strategy.wrap_config import WrapConfig

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
_MIXED = {"bf16": torch.bfloat16, None: None}
_REDUCE = {"bf16": torch.bfloat16, "fp32": torch.float32}


def autocast_hooks(model: nn.Module, device_type: str, dtype: torch.dtype) -> None:
    """Run model.forward under torch.autocast (bf16 compute, fp32 params and grads), via hooks
    so the module tree and the user's model stay as they are."""
    active: list[torch.autocast] = []

    def enter(_m: nn.Module, _args: Any) -> None:
        active.append(torch.autocast(device_type, dtype=dtype))
        active[-1].__enter__()

    def leave(_m: nn.Module, _args: Any, _out: Any) -> None:
        active.pop().__exit__(None, None, None)

    model.register_forward_pre_hook(enter)
    model.register_forward_hook(leave, always_call=True)


def apply_ddp(
    model: nn.Module, *, static_graph: bool, find_unused_parameters: bool, bucket_cap_mb: int | None
) -> nn.Module:
    """DDP: buckets are views of .grad (gradient_as_bucket_view); only parameters with
    requires_grad are bucketed, so frozen ones are never communicated."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model,
        static_graph=static_graph,
        find_unused_parameters=find_unused_parameters,
        gradient_as_bucket_view=True,
        bucket_cap_mb=bucket_cap_mb,
    )


def apply_fsdp(
    model: nn.Module,
    blocks: list[BlockSlot],
    *,
    mesh: Any,
    reshard_after_forward: bool,
    param_dtype: torch.dtype | None,
    reduce_dtype: torch.dtype | None,
) -> nn.Module:
    """FSDP2 fully_shard on each block, then the root. A 2-D mesh makes it HSDP. Neither the last
    block nor the root (embeddings, LM head) is resharded after forward: backward needs them
    first (torchtitan). torch 2.13 honours an explicit True on the root: it frees the root after
    forward and all-gathers it again as backward starts, an extra all-gather of the embeddings
    and head every step and a transient second copy of them (seen in traces)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for i, slot in enumerate(blocks):
        fully_shard(
            slot.module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward and i < len(blocks) - 1
        )
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


def apply_deepspeed(model: nn.Module, optimizer: torch.optim.Optimizer, *, config: dict[str, Any]) -> Any:
    """deepspeed.initialize with the client optimizer on an existing process group."""
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
    return engine


def wrap_ddp(
    model: nn.Module,
    spec: StrategySpec,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    summary: dict[str, Any],
    *,
    config: WrapConfig,
    blocks: list[BlockSlot],
    ds_config: Any = None,
) -> Job:
    model.to(ctx.device)
    if config.mixed_precision:
        autocast_hooks(model, ctx.device.type, _MIXED[config.mixed_precision])
    static = bool(config.static_graph)  # on only when the caller declares the graph fixed
    ddp = apply_ddp(
        model, static_graph=static, find_unused_parameters=config.find_unused_parameters, bucket_cap_mb=spec.bucket_mb
    )
    opt = _build_optimizer(optimizer, model)
    opts = (
        f"static_graph={static} find_unused_parameters={config.find_unused_parameters} "
        f"gradient_as_bucket_view=True; {engine_of(spec).describe(spec)}"
    )
    precision = "bf16 autocast compute, fp32 params and grads" if config.mixed_precision else "fp32"
    return DDPJob(
        model=ddp,
        optimizer=opt,
        strategy=spec,
        ctx=ctx,
        module=model,
        summary=WrapSummary(mesh=f"dp={ctx.world_size}", precision=precision, engine_options=opts, **summary),
    )


def wrap_fsdp(
    model: nn.Module,
    spec: StrategySpec,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    summary: dict[str, Any],
    *,
    config: WrapConfig,
    blocks: list[BlockSlot],
    ds_config: Any = None,
) -> Job:
    mesh = ctx.mesh_2d if spec.hybrid else ctx.mesh_1d
    dtype = _MIXED[config.mixed_precision]
    reduce = _REDUCE[spec.reduce_dtype] if spec.reduce_dtype else (torch.float32 if dtype else None)
    apply_fsdp(
        model,
        blocks,
        mesh=mesh,
        reshard_after_forward=spec.reshard_after_forward,
        param_dtype=dtype,
        reduce_dtype=reduce,
    )
    opt = _build_optimizer(optimizer, model)
    mesh_text = " x ".join(f"{n}={s}" for n, s in zip(mesh.mesh_dim_names, mesh.shape))
    precision = "bf16 params/compute, fp32 sharded params and reduce" if dtype else "fp32"
    return FSDPJob(
        model=model,
        optimizer=opt,
        strategy=spec,
        ctx=ctx,
        module=model,
        summary=WrapSummary(
            mesh=mesh_text, precision=precision, engine_options=engine_of(spec).describe(spec), **summary
        ),
    )


def wrap_deepspeed(
    model: nn.Module,
    spec: StrategySpec,
    ctx: DistContext,
    optimizer: OptimizerFactory,
    summary: dict[str, Any],
    *,
    config: WrapConfig,
    blocks: list[BlockSlot],
    ds_config: dict[str, Any] | str | Path | None,
) -> Job:
    _import_deepspeed(ctx.device.type)
    cfg = deepspeed_config(spec, ctx, mixed_precision=config.mixed_precision, ds_config=ds_config)
    model.to(ctx.device)
    engine = apply_deepspeed(model, _build_optimizer(optimizer, model), config=cfg)
    bf16 = bool(cfg.get("bf16", {}).get("enabled"))
    if bf16:  # DeepSpeed keeps bf16 params but leaves inputs alone; FSDP2 casts them: do the same
        engine.module.register_forward_pre_hook(_cast_floats_hook(torch.bfloat16), with_kwargs=True)
    master = "bf16" if cfg.get("bf16", {}).get("bf16_master_weights_and_grads") else "fp32"
    precision = f"bf16 params with {master} master weights, float inputs cast to bf16" if bf16 else "fp32"
    return DeepSpeedJob(
        model=engine,
        optimizer=engine.optimizer,
        strategy=spec,
        ctx=ctx,
        module=engine.module,
        summary=WrapSummary(
            mesh=f"dp={ctx.world_size}", precision=precision, engine_options=engine_of(spec).describe(spec), **summary
        ),
    )


WRAP_BY_ENGINE: dict[str, Callable[..., Job]] = {"ddp": wrap_ddp, "fsdp2": wrap_fsdp, "deepspeed": wrap_deepspeed}
"""How runtime applies each engine of strategies.EngineName: one wrap_<engine> each, same arguments."""


def _cast_floats_hook(dtype: torch.dtype) -> Callable[..., Any]:
    """A forward pre-hook casting floating-point tensor inputs to `dtype` (ints stay)."""
    from torch.utils._pytree import tree_map

    def cast(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return tree_map(cast, args), tree_map(cast, kwargs)

    return hook


def deepspeed_config(
    spec: StrategySpec, ctx: DistContext, *, mixed_precision: str | None, ds_config: dict[str, Any] | str | Path | None
) -> dict[str, Any]:
    """The generated config (emit.deepspeed.build_ds_config), or the caller's, checked against
    the strategy; never mutates the caller's dict. wrap() drives accumulation itself, so
    DeepSpeed's micro-step counting is off."""
    if ds_config is None:
        # micro_batch=1: DeepSpeed uses batch sizes only for its own dataloader and logging.
        cfg = engine_of(spec).engine_config(
            spec, micro_batch=1, world_size=ctx.world_size, precision="bf16-mixed" if mixed_precision else "fp32"
        )
    else:
        cfg = copy.deepcopy(_load_ds_config(ds_config))
        bf16 = bool(cfg.get("bf16", {}).get("enabled", False))
        if bf16 != (mixed_precision == "bf16"):
            raise SpecError(
                f"ds_config bf16.enabled={str(bf16).lower()} contradicts mixed_precision={mixed_precision!r}; "
                "make them agree"
            )
    stage = cfg.get("zero_optimization", {}).get("stage")
    want = engine_of(spec).engine_config(spec, micro_batch=1, world_size=1)["zero_optimization"]
    if stage != want["stage"]:
        raise SpecError(
            f"ds_config has zero_optimization.stage={stage!r} but the strategy is {spec.name}; "
            f"set stage {want['stage']} or choose the matching zero strategy"
        )
    if "optimizer" in cfg:
        raise SpecError(
            "ds_config has an optimizer section but wrap() passes the client optimizer; "
            "remove the optimizer section from ds_config"
        )
    _one_micro_step_per_step(cfg, ctx.world_size)
    cfg.setdefault("zero_allow_untested_optimizer", True)  # the client picks the optimizer (e.g. SGD)
    cfg["managed_gradient_accumulation"] = False
    if not want["overlap_comm"]:  # DeepSpeed allows overlap_comm with caller-owned accumulation only in stage 2
        cfg["zero_optimization"] = {**cfg["zero_optimization"], "overlap_comm": False}
    return cfg


# ----------------------------------------------------------------------------- helpers


def _one_micro_step_per_step(cfg: dict[str, Any], world_size: int) -> None:
    """Batch keys for this world with DeepSpeed's accumulation at 1: the training script
    accumulates (job.no_sync()), every job.step() is an optimizer step."""
    gas = cfg.get("gradient_accumulation_steps", 1)
    if gas != 1:
        warnings.warn(
            f"ds_config gradient_accumulation_steps={gas} ignored: wrap() steps on every job.step(); "
            "accumulate micro-batches in the training loop with job.no_sync()",
            UserWarning,
            stacklevel=4,
        )
    micro = cfg.get("train_micro_batch_size_per_gpu") or max(
        cfg.get("train_batch_size", world_size) // (gas * world_size), 1
    )
    cfg.update(gradient_accumulation_steps=1, train_micro_batch_size_per_gpu=micro, train_batch_size=micro * world_size)


def _load_ds_config(ds_config: dict[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(ds_config, dict):
        return ds_config
    if not isinstance(ds_config, (str, Path)):
        raise SpecError(f"ds_config must be a dict or a path to a JSON file, got {type(ds_config).__name__}")
    data = load_json(ds_config, "ds_config")  # regular file, size cap, depth, finite numbers
    if not isinstance(data, dict):
        raise SpecError(f"ds_config {ds_config} must hold a JSON object")
    return data


def _import_deepspeed(device_type: str) -> Any:
    """DeepSpeed, on the accelerator init_distributed picked (DS_ACCELERATOR, unless set)."""
    os.environ.setdefault("DS_ACCELERATOR", device_type)
    try:
        import deepspeed
    except ImportError:
        raise SpecError(
            "zero1/zero2/zero3 need DeepSpeed, which is not installed; "
            "pip install 'prism-strategy[deepspeed]' or choose ddp/fsdp_*/hsdp_*"
        ) from None
    return deepspeed


def _build_optimizer(factory: OptimizerFactory, model: nn.Module) -> torch.optim.Optimizer:
    opt = factory([p for p in model.parameters() if p.requires_grad])
    if not isinstance(opt, torch.optim.Optimizer):
        raise SpecError(f"optimizer factory returned {type(opt).__name__}, not a torch.optim.Optimizer")
    return opt
