"""`wrap(model, strategy, ...)`: apply one of the 8 named strategies for real.

One small `apply_*` per step, with explicit arguments, composed by `wrap()` in a fixed order
(torchtitan's parallelize_llama): check guardrails -> activation checkpointing -> compile ->
data parallelism (DDP, FSDP2/HSDP or DeepSpeed ZeRO) -> optimizer on the wrapped parameters.
What is sharded where comes from the strategy catalogue (engine, reshard_after_forward,
hybrid, zero_stage), not from the strategy's name.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from prism_strategy import rules
from prism_strategy.runtime.blocks import BlockSlot, BlockTypes, apply_checkpointing, apply_compile, checkpointed_count, find_blocks
from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.job import DDPJob, DeepSpeedJob, FSDPJob, Job, WrapSummary
from prism_strategy.runtime.strategy_file import read_strategy_file
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import StrategySpec, get_strategy

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
_MIXED = {"bf16": torch.bfloat16, None: None}


def wrap(model: nn.Module, strategy: str | StrategySpec, *, ctx: DistContext, optimizer: OptimizerFactory,
         block_types: BlockTypes = None, mixed_precision: str | None = "bf16", ckpt_freq: int = 0,
         static_graph: bool | None = None, find_unused_parameters: bool = False, bucket_cap_mb: int | None = None,
         ds_config: dict[str, Any] | str | Path | None = None, compile: bool = False) -> Job:
    """Apply `strategy` to `model` (in place) and return the Job handle.

    optimizer: a factory, e.g. `lambda params: torch.optim.AdamW(params, lr=1e-4)`; it gets the
    trainable parameters after wrapping (FSDP2 replaces them by DTensors). mixed_precision:
    "bf16" (bf16 compute, fp32 params and gradient reduction) or None (fp32 throughout).
    """
    spec = strategy if isinstance(strategy, StrategySpec) else get_strategy(_str(strategy, "strategy"))
    _validate(model, ctx, optimizer, mixed_precision, ckpt_freq, static_graph, find_unused_parameters,
              bucket_cap_mb, compile)
    blocks = find_blocks(model, block_types)
    if ckpt_freq and not blocks:
        raise SpecError(f"ckpt_freq={ckpt_freq} needs transformer blocks, none found in {type(model).__name__}; "
                        "pass block_types=(YourBlock,)")
    static = bool(static_graph)  # on only when the caller declares the graph fixed
    # 0. refuse what cannot work, before touching the model
    enforce_guardrails(situation(spec, ctx, compile=compile, static_graph=static,
                                 find_unused_parameters=find_unused_parameters, has_blocks=bool(blocks)))
    _warn_ignored(spec, static_graph, find_unused_parameters, bucket_cap_mb)
    if spec.engine == "deepspeed":
        _import_deepspeed(ctx.device.type)
    if not dist.is_initialized():
        raise SpecError("no process group: call ctx = init_distributed() before wrap()")
    summary = dict(blocks=len(blocks), block_class=type(blocks[0].module).__name__ if blocks else "-",
                   ckpt_freq=ckpt_freq, compiled=compile)
    # 1. activation checkpointing, every ckpt_freq-th block: the same for every strategy. An HF
    # model's KV cache would keep every checkpointed block's K/V alive to the end of backward
    # (the traced estimate measured it: OLMo-7B's max micro-batch 64 -> 27), so turn it off, as
    # transformers' own gradient_checkpointing_enable() does.
    if ckpt_freq and getattr(getattr(model, "config", None), "use_cache", False):
        model.config.use_cache = False
    blocks = apply_checkpointing(blocks, every=ckpt_freq)
    summary["checkpointed"] = checkpointed_count(blocks)
    # 2. torch.compile per block (after checkpointing, before data parallelism: torchtitan's order)
    if compile:
        apply_compile(model, blocks)
    # 3. data parallelism: exactly one engine, chosen by the catalogue entry; 4. the optimizer
    if spec.engine == "ddp":
        return _wrap_ddp(model, spec, ctx, optimizer, summary, mixed_precision=mixed_precision,
                         static_graph=static, find_unused_parameters=find_unused_parameters, bucket_cap_mb=bucket_cap_mb)
    if spec.engine == "fsdp2":
        return _wrap_fsdp(model, spec, ctx, optimizer, summary, blocks=blocks, mixed_precision=mixed_precision)
    return _wrap_deepspeed(model, spec, ctx, optimizer, summary, mixed_precision=mixed_precision, ds_config=ds_config)


def wrap_from_file(model: nn.Module, path: str | Path, *, ctx: DistContext, optimizer: OptimizerFactory,
                   block_types: BlockTypes = None) -> Job:
    """wrap() with the settings of a strategy.toml written by `prism-strategy emit`."""
    f = read_strategy_file(path)
    return wrap(model, f.strategy, ctx=ctx, optimizer=optimizer, block_types=block_types,
                mixed_precision=f.mixed_precision, ckpt_freq=f.ckpt_freq, static_graph=f.static_graph,
                find_unused_parameters=f.find_unused_parameters, bucket_cap_mb=f.bucket_cap_mb,
                ds_config=f.ds_config, compile=f.compile)


# ----------------------------------------------------------------------------- guardrails

def situation(spec: StrategySpec, ctx: DistContext, *, compile: bool, static_graph: bool,
              find_unused_parameters: bool, has_blocks: bool) -> dict[str, Any]:
    """The facts rules.toml matches on, for this wrap() call."""
    return {
        "device": ctx.device.type, "engine": spec.engine, "compile": compile, "multi_node": ctx.nodes > 1,
        "find_unused_parameters": find_unused_parameters, "static_graph": static_graph,
        "passes_device_id": False, "root_only_wrap": spec.engine == "fsdp2" and not has_blocks,
        "reshard_or_sharded": spec.sharded, "preloads_pil4dfs": "libpil4dfs" in os.environ.get("LD_PRELOAD", ""),
    }


def enforce_guardrails(facts: dict[str, Any]) -> None:
    """Refuse (SpecError) on a blocking rule, with its reason; warn about the others."""
    hits = rules.check(facts)
    blocking = [v for v in hits if v.rule.blocks]
    if blocking:
        raise SpecError(f"wrap() refuses [{blocking[0].rule.id}]: {blocking[0].message}")
    for v in hits:
        warnings.warn(f"[{v.rule.id}] {v.message}", UserWarning, stacklevel=3)


# ----------------------------------------------------------------------------- apply_*

def _autocast_hooks(model: nn.Module, device_type: str, dtype: torch.dtype) -> None:
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


def apply_ddp(model: nn.Module, *, static_graph: bool, find_unused_parameters: bool,
              bucket_cap_mb: int | None) -> nn.Module:
    """DDP: buckets are views of .grad (gradient_as_bucket_view); only parameters with
    requires_grad are bucketed, so frozen ones are never communicated."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, static_graph=static_graph, find_unused_parameters=find_unused_parameters,
                                   gradient_as_bucket_view=True, bucket_cap_mb=bucket_cap_mb)


def apply_fsdp(model: nn.Module, blocks: list[BlockSlot], *, mesh: Any, reshard_after_forward: bool,
               param_dtype: torch.dtype | None, reduce_dtype: torch.dtype | None) -> nn.Module:
    """FSDP2 fully_shard on each block, then the root. A 2-D mesh makes it HSDP. Neither the last
    block nor the root (embeddings, LM head) is resharded after forward: backward needs them
    first (torchtitan). torch 2.13 honours an explicit True on the root: it frees the root after
    forward and all-gathers it again as backward starts, an extra all-gather of the embeddings
    and head every step and a transient second copy of them (seen in traces)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    for i, slot in enumerate(blocks):
        fully_shard(slot.module, mesh=mesh, mp_policy=mp,
                    reshard_after_forward=reshard_after_forward and i < len(blocks) - 1)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)
    return model


def apply_deepspeed(model: nn.Module, optimizer: torch.optim.Optimizer, *, config: dict[str, Any]) -> Any:
    """deepspeed.initialize with the client optimizer on an existing process group."""
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config, dist_init_required=False)
    return engine


def _wrap_ddp(model: nn.Module, spec: StrategySpec, ctx: DistContext, optimizer: OptimizerFactory,
              summary: dict[str, Any], *, mixed_precision: str | None, static_graph: bool,
              find_unused_parameters: bool, bucket_cap_mb: int | None) -> Job:
    model.to(ctx.device)
    if mixed_precision:
        _autocast_hooks(model, ctx.device.type, _MIXED[mixed_precision])
    ddp = apply_ddp(model, static_graph=static_graph, find_unused_parameters=find_unused_parameters,
                    bucket_cap_mb=bucket_cap_mb)
    opt = _build_optimizer(optimizer, model)
    opts = (f"static_graph={static_graph} find_unused_parameters={find_unused_parameters} "
            f"gradient_as_bucket_view=True bucket_cap_mb={bucket_cap_mb or 25}")
    precision = "bf16 autocast compute, fp32 params and grads" if mixed_precision else "fp32"
    return DDPJob(model=ddp, optimizer=opt, strategy=spec, ctx=ctx, module=model,
                  summary=WrapSummary(mesh=f"dp={ctx.world_size}", precision=precision, engine_options=opts, **summary))


def _wrap_fsdp(model: nn.Module, spec: StrategySpec, ctx: DistContext, optimizer: OptimizerFactory,
               summary: dict[str, Any], *, blocks: list[BlockSlot], mixed_precision: str | None) -> Job:
    mesh = ctx.mesh_2d if spec.hybrid else ctx.mesh_1d
    dtype = _MIXED[mixed_precision]
    apply_fsdp(model, blocks, mesh=mesh, reshard_after_forward=spec.reshard_after_forward,
               param_dtype=dtype, reduce_dtype=torch.float32 if dtype else None)
    opt = _build_optimizer(optimizer, model)
    mesh_text = " x ".join(f"{n}={s}" for n, s in zip(mesh.mesh_dim_names, mesh.shape))
    precision = "bf16 params/compute, fp32 sharded params and reduce" if dtype else "fp32"
    return FSDPJob(model=model, optimizer=opt, strategy=spec, ctx=ctx, module=model,
                   summary=WrapSummary(mesh=mesh_text, precision=precision,
                                       engine_options=f"fully_shard(reshard_after_forward={spec.reshard_after_forward})",
                                       **summary))


def _wrap_deepspeed(model: nn.Module, spec: StrategySpec, ctx: DistContext, optimizer: OptimizerFactory,
                    summary: dict[str, Any], *, mixed_precision: str | None,
                    ds_config: dict[str, Any] | str | Path | None) -> Job:
    config = deepspeed_config(spec, ctx, mixed_precision=mixed_precision, ds_config=ds_config)
    model.to(ctx.device)
    engine = apply_deepspeed(model, _build_optimizer(optimizer, model), config=config)
    bf16 = bool(config.get("bf16", {}).get("enabled"))
    if bf16:  # DeepSpeed keeps bf16 params but leaves inputs alone; FSDP2 casts them: do the same
        engine.module.register_forward_pre_hook(_cast_floats_hook(torch.bfloat16), with_kwargs=True)
    precision = "bf16 params with fp32 master weights, float inputs cast to bf16" if bf16 else "fp32"
    return DeepSpeedJob(model=engine, optimizer=engine.optimizer, strategy=spec, ctx=ctx, module=engine.module,
                        summary=WrapSummary(mesh=f"dp={ctx.world_size}", precision=precision,
                                            engine_options=f"ZeRO stage {spec.zero_stage}", **summary))


def _cast_floats_hook(dtype: torch.dtype) -> Callable[..., Any]:
    """A forward pre-hook casting floating-point tensor inputs to `dtype` (ints stay)."""
    from torch.utils._pytree import tree_map

    def cast(x: Any) -> Any:
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    def hook(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return tree_map(cast, args), tree_map(cast, kwargs)

    return hook


def deepspeed_config(spec: StrategySpec, ctx: DistContext, *, mixed_precision: str | None,
                     ds_config: dict[str, Any] | str | Path | None) -> dict[str, Any]:
    """The generated config (emit.deepspeed.build_ds_config), or the caller's, checked against
    the strategy; never mutates the caller's dict. wrap() drives accumulation itself, so
    DeepSpeed's micro-step counting is off."""
    from prism_strategy.emit.deepspeed import build_ds_config

    if ds_config is None:
        # micro_batch=1: DeepSpeed uses batch sizes only for its own dataloader and logging.
        cfg = build_ds_config(spec, micro_batch=1, world_size=ctx.world_size,
                              precision="bf16-mixed" if mixed_precision else "fp32")
    else:
        cfg = copy.deepcopy(_load_ds_config(ds_config))
        bf16 = bool(cfg.get("bf16", {}).get("enabled", False))
        if bf16 != (mixed_precision == "bf16"):
            raise SpecError(f"ds_config bf16.enabled={str(bf16).lower()} contradicts mixed_precision={mixed_precision!r}; "
                            "make them agree")
    stage = cfg.get("zero_optimization", {}).get("stage")
    if stage != spec.zero_stage:
        raise SpecError(f"ds_config has zero_optimization.stage={stage!r} but the strategy is {spec.name}; "
                        f"set stage {spec.zero_stage} or choose the matching zero strategy")
    if "optimizer" in cfg:
        raise SpecError("ds_config has an optimizer section but wrap() passes the client optimizer; "
                        "remove the optimizer section from ds_config")
    _one_micro_step_per_step(cfg, ctx.world_size)
    cfg.setdefault("zero_allow_untested_optimizer", True)  # the client picks the optimizer (e.g. SGD)
    cfg["managed_gradient_accumulation"] = False
    if spec.zero_stage != 2:  # DeepSpeed allows overlap_comm with caller-owned accumulation only in stage 2
        cfg["zero_optimization"] = {**cfg["zero_optimization"], "overlap_comm": False}
    return cfg


# ----------------------------------------------------------------------------- helpers

def _one_micro_step_per_step(cfg: dict[str, Any], world_size: int) -> None:
    """Batch keys for this world with DeepSpeed's accumulation at 1: the training script
    accumulates (job.no_sync()), every job.step() is an optimizer step."""
    gas = cfg.get("gradient_accumulation_steps", 1)
    if gas != 1:
        warnings.warn(f"ds_config gradient_accumulation_steps={gas} ignored: wrap() steps on every job.step(); "
                      "accumulate micro-batches in the training loop with job.no_sync()", UserWarning, stacklevel=4)
    micro = cfg.get("train_micro_batch_size_per_gpu") or max(cfg.get("train_batch_size", world_size) // (gas * world_size), 1)
    cfg.update(gradient_accumulation_steps=1, train_micro_batch_size_per_gpu=micro, train_batch_size=micro * world_size)


def _load_ds_config(ds_config: dict[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(ds_config, dict):
        return ds_config
    if not isinstance(ds_config, (str, Path)):
        raise SpecError(f"ds_config must be a dict or a path to a JSON file, got {type(ds_config).__name__}")
    try:
        data = json.loads(Path(ds_config).read_text())
    except OSError as e:
        raise SpecError(f"cannot read ds_config {ds_config}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise SpecError(f"ds_config {ds_config} is not valid JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(data, dict):
        raise SpecError(f"ds_config {ds_config} must hold a JSON object")
    return data


def _import_deepspeed(device_type: str) -> Any:
    """DeepSpeed, on the accelerator init_distributed picked (DS_ACCELERATOR, unless set)."""
    os.environ.setdefault("DS_ACCELERATOR", device_type)
    try:
        import deepspeed
    except ImportError:
        raise SpecError("zero1/zero2/zero3 need DeepSpeed, which is not installed; "
                        "pip install 'prism-strategy[deepspeed]' or choose ddp/fsdp_*/hsdp_*") from None
    return deepspeed


def _build_optimizer(factory: OptimizerFactory, model: nn.Module) -> torch.optim.Optimizer:
    opt = factory([p for p in model.parameters() if p.requires_grad])
    if not isinstance(opt, torch.optim.Optimizer):
        raise SpecError(f"optimizer factory returned {type(opt).__name__}, not a torch.optim.Optimizer")
    return opt


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{what} must be a strategy name (str), got {type(value).__name__}")
    return value


def _validate(model: Any, ctx: Any, optimizer: Any, mixed_precision: Any, ckpt_freq: Any, static_graph: Any,
              find_unused_parameters: Any, bucket_cap_mb: Any, compile: Any) -> None:
    if not isinstance(model, nn.Module):
        raise SpecError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(ctx, DistContext):
        raise SpecError(f"ctx must be the DistContext from init_distributed(), got {type(ctx).__name__}")
    if isinstance(optimizer, torch.optim.Optimizer) or not callable(optimizer):
        raise SpecError("optimizer must be a factory, e.g. optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4): "
                        "FSDP2 and DeepSpeed replace the parameters, so the optimizer is built after wrapping")
    if mixed_precision not in _MIXED:
        raise SpecError(f"mixed_precision must be 'bf16' or None (full fp32), got {mixed_precision!r}")
    if isinstance(ckpt_freq, bool) or not isinstance(ckpt_freq, int) or ckpt_freq < 0:
        raise SpecError(f"ckpt_freq must be an int >= 0 (checkpoint every k-th block; 0 = none), got {ckpt_freq!r}")
    for name, v in (("static_graph", static_graph), ("find_unused_parameters", find_unused_parameters),
                    ("compile", compile)):
        if not (isinstance(v, bool) or (v is None and name == "static_graph")):
            raise SpecError(f"{name} must be True or False, got {v!r}")
    if bucket_cap_mb is not None and (isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float))
                                      or bucket_cap_mb <= 0):
        raise SpecError(f"bucket_cap_mb must be a positive number of MiB, got {bucket_cap_mb!r}")


def _warn_ignored(spec: StrategySpec, static_graph: bool | None, find_unused: bool, bucket_cap_mb: int | None) -> None:
    if spec.engine == "ddp":
        return
    given = [n for n, v in (("static_graph", static_graph), ("find_unused_parameters", find_unused),
                            ("bucket_cap_mb", bucket_cap_mb)) if v]
    if given:
        warnings.warn(f"{', '.join(given)} only apply to ddp; ignored for {spec.name} ({spec.engine})",
                      UserWarning, stacklevel=3)
