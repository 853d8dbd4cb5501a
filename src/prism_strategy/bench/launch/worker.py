"""One rank of a benchmark run (launched by bench/launch/harness.py under torchrun).

    python -m torch.distributed.run --nproc-per-node 4 -m prism_strategy.bench.launch.worker --config '{...}' --out DIR

Builds the configured model (a TransformerSpec built with transformers, random init), applies
the strategy with `wrap()`, burns in, then times forward / backward / optimizer per step
(device-synchronised at phase ends on CUDA/XPU), then measures peak memory: the device
allocator's peak on CUDA/XPU; on CPU one extra step under torch's MemTracker (tensor memory,
gradients kept as DDP bucket views so the buckets are counted). Writes rank{R}.json (a list, one
entry per config) into --out. --config may be a list of
configs: they run one after another in the same process group (scans and grids pay the
process start once).

A config with "census": true records instead every collective of one optimizer step after the
warm-up (bench/launch/census_record.py) and skips the timed steps. A config with "mode" other than
e2e or a "vision_spec" builds vision + projector + backbone (traced/model.py), with
the parts that do not train frozen. A config with "lora" puts peft's LoRA adapters on the model
before wrap() (with_lora): only the adapters train.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

from prism_strategy.engines import engine_of
from prism_strategy.strategies import get_strategy


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True, help="JSON config (model_spec, strategy, micro_batch, ...) or a list")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--memory-limit-bytes", type=float, default=None, help="CPU: a tracked peak above this counts as out-of-memory"
    )
    p.add_argument("--fault", choices=("crash", "hang"), default=None, help="testing: inject a fault")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=1)
    return p.parse_args(argv)


def build_model(sc: Any) -> torch.nn.Module:
    import transformers

    from prism_strategy.specs.hf import to_hf_config

    cfg = to_hf_config(sc.model.backbone)
    cls = transformers.AutoModelForCausalLM._model_mapping[type(cfg)]
    # SDPA where the family has it; Gemma 2 has none (logit soft-capping): transformers' own default, eager
    cfg._attn_implementation = "sdpa" if cls._supports_sdpa else None
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model if sc.model.lora is None else with_lora(model, sc.model.lora)


def with_lora(model: torch.nn.Module, lora: Any) -> torch.nn.Module:
    """The model under peft's LoRA adapters (get_peft_model: the base frozen, lora_A / lora_B on the
    target Linears) as the row's LoraSpec names them; lora_alpha and dropout keep peft's defaults
    (the adapters' scale and a mask: neither changes what is reduced)."""
    from peft import LoraConfig, get_peft_model

    targets = list(lora.targets) if isinstance(lora.targets, tuple) else lora.targets
    return get_peft_model(model, LoraConfig(r=lora.rank, target_modules=targets))


def device_sync(device: torch.device) -> None:
    """Wait for the device's queued work, so a timer reads the kernels, not their launch."""
    if device.type == "cuda":  # device-only: CUDA
        torch.cuda.synchronize(device)
    elif device.type == "xpu":  # device-only: XPU
        torch.xpu.synchronize(device)


def _phase(name: str) -> Any:
    """A profiler range naming the phase (the census attributes each collective to it)."""
    return torch.profiler.record_function(f"prism.phase={name}")


def is_oom(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, torch.OutOfMemoryError) or "out of memory" in text or "out_of_device_memory" in text


def is_multimodal(sc: Any) -> bool:
    return sc.model.mode != "e2e" or sc.model.vision is not None


def build_multimodal(sc: Any) -> Any:
    """Vision + projector + backbone as the traced estimate builds it (traced/model.py)."""
    from prism_strategy.traced.model import build_from_spec

    torch.manual_seed(0)
    return build_from_spec(sc.model, sc.training, init=True)


class Runner:
    def __init__(
        self, config: dict[str, Any], sc: Any, job: Any, ctx: Any, args: argparse.Namespace, built: Any = None
    ):
        self.cfg, self.job, self.ctx, self.args, self.built = config, job, ctx, args, built
        accum, mb = int(sc.training.grad_accum or 1), int(sc.training.micro_batch)
        if built is not None:
            torch.manual_seed(1000 + ctx.rank)
            cast = precision_setup(config)[0]  # a bf16-pure model takes bf16 pixels (no autocast casts them)
            self.batches = [
                {k: v.to(ctx.device, dtype=cast if cast and v.is_floating_point() else None) for k, v in b.items()}
                for b in (built.make_batch(mb) for _ in range(accum))
            ]
            return
        vocab = sc.model.backbone.vocab
        g = torch.Generator().manual_seed(1000 + ctx.rank)
        self.batches = [
            torch.randint(0, vocab, (mb, int(sc.training.seq_len)), generator=g).to(ctx.device) for _ in range(accum)
        ]

    def loss(self, x: Any) -> torch.Tensor:
        if self.built is not None:
            return self.built.loss(self.job.model, x)
        return self.job.model(input_ids=x, labels=x).loss

    def step(self, index: int) -> dict[str, float]:
        if self.args.fault and self.ctx.rank == self.args.fault_rank and index == self.args.fault_step:
            if self.args.fault == "crash":
                os._exit(13)
            time.sleep(10**6)  # hang: the other ranks block in their next collective
        times = {"forward": 0.0, "backward": 0.0}
        t_step = time.perf_counter()
        for i, x in enumerate(self.batches):
            last = i == len(self.batches) - 1
            with self.job.no_sync() if not last else contextlib.nullcontext():
                t0 = time.perf_counter()
                with _phase("forward"):
                    loss = self.loss(x)
                    device_sync(self.ctx.device)
                t1 = time.perf_counter()
                with _phase("backward"):
                    self.job.backward(loss / len(self.batches))
                    device_sync(self.ctx.device)
                times["forward"] += t1 - t0
                times["backward"] += time.perf_counter() - t1
        t0 = time.perf_counter()
        with _phase("step"):
            self.job.step()
            self.zero_grad()
            device_sync(self.ctx.device)
        times["optimizer"] = time.perf_counter() - t0
        times["step"] = time.perf_counter() - t_step
        return times

    def zero_grad(self) -> None:
        if engine_of(get_strategy(self.cfg["strategy"])).grads_are_bucket_views:
            self.job.optimizer.zero_grad(set_to_none=False)  # grads stay bucket views: the buckets are counted
        else:
            self.job.zero_grad()


def peak_memory(runner: Runner, index: int) -> float | None:
    dev = runner.ctx.device
    if dev.type == "cuda":  # device-only: CUDA allocator peak over the timed steps
        return float(torch.cuda.max_memory_allocated(dev))
    if dev.type == "xpu":  # device-only: XPU allocator peak over the timed steps
        return float(torch.xpu.max_memory_allocated(dev))
    mt = frozen_aware_tracker()
    mt.track_external(runner.job.model, *optimizer_state(runner.job.optimizer))
    with warnings.catch_warnings():  # mod_tracker's "hierarchy may be messed up" under checkpointing: noise here
        warnings.simplefilter("ignore", UserWarning)
        with mt:
            runner.step(index)
    return float(sum(d["Total"] for d in mt.get_tracker_snapshot("peak").values()))


def frozen_aware_tracker() -> Any:
    """torch's MemTracker, but one that tolerates frozen parameters (LoRA's base, a projector run's
    encoder and backbone). MemTracker._track_module_params_and_buffers (torch 2.13,
    distributed/_tools/mem_tracker.py) registers a gradient hook on every parameter of each module
    entering forward, and register_hook raises on a tensor that does not require grad. For a module
    holding a frozen parameter no hook is installed here; each trainable parameter gets its hook
    when its own all-trainable module (peft's lora_A / lora_B Linear) enters forward."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class FrozenAwareTracker(MemTracker):
        def _track_module_params_and_buffers(self, module: Any, install_grad_hooks: bool = True) -> Any:
            frozen = any(not p.requires_grad for p in module.parameters())
            return super()._track_module_params_and_buffers(module, install_grad_hooks and not frozen)

    return FrozenAwareTracker()


def optimizer_state(opt: Any) -> list[Any]:
    """What the optimizer holds from before the tracked step, for MemTracker (which sees only tensors
    made inside it or handed to track_external): a torch optimizer as it is; an engine's wrapper
    (DeepSpeed's ZeRO optimizers are no torch.optim.Optimizer) its inner torch optimizer and every
    tensor it keeps in an attribute, a list, a dict or a bucket's `buffer` (stage3.py: the fp32
    partitions, grad_partitions_flat_buffer, each IPGBucketZ3's reduce_bucket_size buffer, made at
    init). Without them the ipg buffer shows up only once a gradient is a view into it, after the
    loss's buffers are gone, and the fp32 states not at all."""
    if isinstance(opt, torch.optim.Optimizer):
        return [opt]
    out: list[Any] = []
    for v in vars(opt).values() if hasattr(opt, "__dict__") else ():
        if isinstance(v, torch.optim.Optimizer):
            out.append(v)
        for x in v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) else [v]:
            x = getattr(x, "buffer", x)
            if isinstance(x, torch.Tensor):
                out.append(x)
    return out


_CTX: Any = None


def worker_context(config: dict[str, Any]) -> Any:
    """The rank's distributed context, initialised once per process (the bench and commbench workers share it)."""
    global _CTX
    if _CTX is None:
        from prism_strategy.runtime.dist import init_distributed

        rpn = config.get("ranks_per_node") or (config.get("layout") or {}).get(
            "ranks_per_node"
        )  # a commbench replay's, or a row's
        _CTX = init_distributed(ranks_per_node=int(rpn or 0) or None, timeout_s=config.get("timeout_s", 300))
    return _CTX


def finish_group() -> None:
    """End a launched run's process group on every rank (runtime/dist.py end_group)."""
    from prism_strategy.runtime.dist import end_group

    end_group()


def _ckpt(value: Any) -> int | str:
    return "sac" if value == "sac" else int(value)


def engine_options(config: dict[str, Any]) -> dict[str, Any]:
    """wrap() keywords for the row's bucket size (its memory policy's) and reduce dtype (a run
    fact), given only when set."""
    from prism_strategy.inputs.stored import scenario_from_row

    opts = {"bucket_mb": scenario_from_row(config).memory.bucket_mb, "reduce_dtype": config.get("reduce_dtype")}
    return {k: v for k, v in opts.items() if v is not None}


def engine_config_for(config: dict[str, Any], world_size: int) -> dict[str, Any]:
    """wrap()'s engine config keyword where the engine's bf16-pure lives in its own config
    (Engine.bf16_pure_in_config), else nothing."""
    spec = get_strategy(config["strategy"])
    engine = engine_of(spec)
    if config.get("precision") != "bf16-pure" or not engine.bf16_pure_in_config:
        return {}
    spec = spec.with_options(**engine_options(config))
    return {"ds_config": engine.engine_config(spec, micro_batch=1, world_size=world_size, precision="bf16-pure")}


def precision_setup(config: dict[str, Any]) -> tuple[torch.dtype | None, str | None]:
    """(dtype the model is cast to before wrapping, wrap's mixed_precision) for the config's precision.
    bf16-pure: parameters, gradients and AdamW state in bf16, no fp32 master copy (specs/training.py
    from_precision): the model is cast and wrapped without autocast, so DDP all-reduces and FSDP2
    reduce-scatters the bf16 gradients. An engine whose bf16-pure is a setting of its own config
    (Engine.bf16_pure_in_config: DeepSpeed's bf16 master weights) runs with bf16 enabled and that
    config (engine_config_for)."""
    precision = config.get("precision", "fp32")
    if precision == "fp32":
        return None, None
    if precision == "bf16-pure" and not engine_of(get_strategy(config["strategy"])).bf16_pure_in_config:
        return torch.bfloat16, None
    return None, "bf16"


def run(config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from prism_strategy.inputs.stored import scenario_from_row
    from prism_strategy.runtime.wrap import wrap

    sc = scenario_from_row(config)
    ctx = worker_context(config)
    census = bool(config.get("census"))
    if census:
        from prism_strategy.bench.launch.census_record import tag_collectives

        tag_collectives()
    built = build_multimodal(sc) if is_multimodal(sc) else None
    model = built.module if built is not None else build_model(sc)
    from prism_strategy.runtime.optim import optimizer_factory

    cast, mixed = precision_setup(config)
    if cast is not None:  # parameters only: buffers (rotary frequencies) keep fp32, as the engine model counts them
        for p in model.parameters():
            p.data = p.data.to(cast)
    job = wrap(
        model,
        config["strategy"],
        ctx=ctx,
        optimizer=optimizer_factory(sc.memory.optimizer),
        mixed_precision=mixed,
        ckpt_freq=_ckpt(sc.memory.checkpointing),
        block_types=built.block_types if built else None,
        loss=sc.memory.loss,
        **engine_options(config),
        **engine_config_for(config, ctx.world_size),
    )
    runner = Runner(config, sc, job, ctx, args, built)
    warmup, steps = int(config.get("warmup", 1)), int(config.get("steps", 3))
    for i in range(warmup):
        runner.step(i)
    if census:
        from prism_strategy.bench.launch.census_record import record, summarise

        return rank_result(ctx, census=summarise(record(lambda: runner.step(warmup), ctx.world_size)))
    if ctx.device.type == "cuda":  # device-only
        torch.cuda.reset_peak_memory_stats(ctx.device)
    elif ctx.device.type == "xpu":  # device-only
        torch.xpu.reset_peak_memory_stats(ctx.device)
    timed = [runner.step(warmup + i) for i in range(steps)]
    peak = peak_memory(runner, warmup + steps)
    out = {k: statistics.median(t[k] for t in timed) for k in ("step", "forward", "backward", "optimizer")}
    status = "oom" if (args.memory_limit_bytes and peak and peak > args.memory_limit_bytes) else "ok"
    return rank_result(
        ctx,
        status,
        **{f"{k}_s": out[k] for k in ("step", "forward", "backward", "optimizer")},
        step_times=[t["step"] for t in timed],
        peak_memory_bytes=peak,
    )


def rank_result(ctx: Any, status: str = "ok", **measured: Any) -> dict[str, Any]:
    """What one rank reports to the harness for one config: who it is, how the config ended, what it measured."""
    who = {"rank": ctx.rank, "world_size": ctx.world_size, "status": status}
    return who | {"device": str(ctx.device), "backend": ctx.backend} | measured


def run_all(configs: list[dict[str, Any]], args: argparse.Namespace, rank: int) -> list[dict[str, Any]]:
    """Configs run one after another in the same process group (one launch for a scan or a grid)."""
    results = []
    for config in configs:
        try:
            results.append(run(config, args))
        except Exception as e:  # reported to the harness as this config's failure, never swallowed
            results.append(
                {
                    "rank": rank,
                    "status": "oom" if is_oom(e) else "failed",
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-4000:],
                }
            )
        collect_garbage()
    return results


def collect_garbage() -> None:
    """Free the run's cycles (its model, optimizer and engine) before the next run is measured,
    then freeze what survived (modules, caches) out of later collections: a full collection walks
    every object of torch, transformers and DeepSpeed (~0.5 s, half a census launch's CPU time on
    tiny models), DeepSpeed's ZeRO-3 setup runs one too. Frozen objects are still freed by reference
    counting; only a cycle among them that dies later would stay."""
    gc.collect()
    gc.freeze()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    loaded = json.loads(args.config)
    configs = loaded if isinstance(loaded, list) else [loaded]
    rank = int(os.environ.get("RANK", "0"))
    args.out.mkdir(parents=True, exist_ok=True)
    gc.freeze()  # the imports' objects, out of every later collection (collect_garbage)
    results = run_all(configs, args, rank)
    tmp = args.out / f".rank{rank}.json.tmp"
    tmp.write_text(json.dumps(results))
    os.replace(tmp, args.out / f"rank{rank}.json")
    try:
        import torch.distributed as dist

        if dist.is_initialized() and all(r["status"] != "failed" for r in results):
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - teardown problems must not hide the results already written
        pass
    return 0 if all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
