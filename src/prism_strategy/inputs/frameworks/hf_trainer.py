"""HF transformers' TrainingArguments, as a JSON dump (`TrainingArguments.to_json_string()`, or
the `training_args` a run saved). Fields as transformers' training_args.py names them: fsdp
("full_shard auto_wrap", or a list), deepspeed (a ds_config path or dict, read with the DeepSpeed
reader), per_device_train_batch_size, gradient_accumulation_steps, bf16/fp16,
gradient_checkpointing, torch_compile, optim, ddp_bucket_cap_mb, use_liger_kernel (Liger's fused
linear cross-entropy: the chunked loss). The sequence length is the data's: --seq-len says it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.inputs.frameworks import deepspeed
from prism_strategy.inputs.frameworks.base import Collector, ConfigInputs, boolean, integer, load, number, refuse_non_dp

NAME = "hf-trainer"
FSDP = {
    "full_shard": "fsdp_full_shard",
    "shard_grad_op": "fsdp_shard_grad_op",
    "hybrid_shard": "hsdp_full_shard",
    "hybrid_shard_zero2": "hsdp_shard_grad_op",
    "no_shard": "ddp",
}
OPTIM = {
    "adamw_torch": "adamw",
    "adamw_torch_fused": "adamw-fused",
    "adamw_hf": "adamw",
    "sgd": "sgd",
    "adamw_apex_fused": "adamw-fused",
}
OTHER = (
    "a training-loop setting (logging, evaluation, saving, hub, data, schedule): not the step's memory or communication"
)


def looks_like(syntax: str, data: Any) -> bool:
    return (
        syntax == "json"
        and isinstance(data, dict)
        and "output_dir" in data
        and ("per_device_train_batch_size" in data or "gradient_accumulation_steps" in data)
    )


def read(path: Path) -> ConfigInputs:
    _, data = load(path)
    c = Collector(path=path)
    pc = data.get("parallelism_config")
    if isinstance(pc, dict):  # accelerate's ParallelismConfig: dp_replicate/dp_shard/tp/cp sizes
        refuse_non_dp(
            c,
            {
                f"parallelism_config.{k}": v
                for k, v in pc.items()
                if k.endswith("_size") and not k.startswith("dp_") and isinstance(v, int) and v > 1
            },
        )
    _strategy(c, data, path)
    for key, keyword in (("per_device_train_batch_size", "micro_batch"), ("gradient_accumulation_steps", "grad_accum")):
        if key in data:
            c.use(key, data[key], keyword, integer(c, key, data[key], 1))
    bf16, fp16 = (boolean(c, k, data.get(k, False)) for k in ("bf16", "fp16"))
    if "precision" not in c.options or bf16 or fp16:
        c.use(
            "bf16, fp16",
            f"{bf16} / {fp16}",
            "precision",
            "bf16-mixed" if bf16 or fp16 else "fp32",
            note="fp16 has bf16's bytes: planned as bf16-mixed"
            if fp16
            else "autocast over fp32 weights"
            if bf16
            else "fp32 throughout",
        )
    if "gradient_checkpointing" in data:
        on = boolean(c, "gradient_checkpointing", data["gradient_checkpointing"])
        c.use("gradient_checkpointing", on, "ckpt_freq", 1 if on else 0, note="every decoder layer" if on else "")
    if "torch_compile" in data:
        on = boolean(c, "torch_compile", data["torch_compile"])
        c.use("torch_compile", on, "compile", on)
    optim = str(data.get("optim", "adamw_torch"))
    if optim in OPTIM:
        c.use("optim", optim, "optimizer", OPTIM[optim])
    else:
        c.ignore("optim", optim, "only torch's AdamW and SGD are modelled: planned as adamw")
    if data.get("ddp_bucket_cap_mb") is not None:
        mb = number(c, "ddp_bucket_cap_mb", data["ddp_bucket_cap_mb"], 0.0)
        c.use("ddp_bucket_cap_mb", data["ddp_bucket_cap_mb"], "bucket_mb", mb)
    if data.get("use_liger_kernel"):
        c.use("use_liger_kernel", True, "loss", "chunked", note="Liger's fused linear cross-entropy")
    read_keys = {
        "fsdp",
        "fsdp_config",
        "deepspeed",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "bf16",
        "fp16",
        "gradient_checkpointing",
        "torch_compile",
        "optim",
        "ddp_bucket_cap_mb",
        "use_liger_kernel",
    }
    named = {n for f in (*c.used, *c.ignored) for n in f.field.split(", ")}
    for k, v in data.items():
        if k not in read_keys:
            c.ignore(k, v, OTHER)
        elif k not in named:
            c.use(k, v, note="unset or off: nothing to plan")
    _adapter_beside(c, path)
    return c.result(NAME, data)


def _adapter_beside(c: Collector, path: Path) -> None:
    """TrainingArguments has no LoRA fields: a PEFT run's output folder holds the adapter's
    adapter_config.json beside them (Trainer.save_model on a PeftModel), read as `lora`."""
    adapter = path.parent / "adapter_config.json"
    if adapter.is_file() and adapter != path:
        c.assume(f"lora: read from {adapter} beside the file (TrainingArguments does not say it)")
        c.use(
            "adapter_config.json (beside the file)",
            str(adapter),
            "lora",
            str(adapter),
            note="the PEFT adapter saved with the run: the base frozen, the adapters train",
        )


def _strategy(c: Collector, data: dict[str, Any], path: Path) -> None:
    ds, fsdp = data.get("deepspeed"), data.get("fsdp") or ""
    if not isinstance(fsdp, str | list):
        raise c.bad(
            "fsdp", f"must be a string or a list of FSDP options, got {fsdp!r}", 'write e.g. "full_shard auto_wrap"'
        )
    words = fsdp.split() if isinstance(fsdp, str) else [str(w) for w in fsdp]
    if ds and words:
        raise c.bad("deepspeed / fsdp", "are both set", "choose DeepSpeed or FSDP, as TrainingArguments requires")
    if ds:
        if isinstance(ds, str):
            target = Path(ds) if Path(ds).is_absolute() else path.parent / ds
            if not target.is_file():
                raise c.bad("deepspeed", f"= {ds}: no such file (looked at {target})", "give the ds_config's path")
            _, ds = load(target)
        if not isinstance(ds, dict):
            raise c.bad("deepspeed", f"must be a ds_config path or object, got a {type(ds).__name__}", "fix the file")
        deepspeed.read_into(c, ds, prefix="deepspeed:")
        c.use("deepspeed", data["deepspeed"], note="read with the DeepSpeed reader")
    elif words:
        mode = next((w for w in words if w in FSDP), None)
        if mode is None:
            raise c.bad("fsdp", f"= {fsdp!r} names no sharding mode", f"include one of {', '.join(FSDP)}")
        c.strategy = FSDP[mode]
        c.use("fsdp", fsdp, note=f"runs {c.strategy}")
        if "offload" in words:
            c.offload |= {"params", "optimizer"}
            c.offload_engine = "fsdp"
            c.ignore("fsdp", "offload", "CPU offload is not modelled: the plan overstates device memory")
    else:
        c.strategy = "ddp"
        c.use("fsdp, deepspeed", "unset", note="Trainer runs DDP over the processes torchrun starts")
    if data.get("fsdp_config"):
        c.ignore("fsdp_config", data["fsdp_config"], "wrap classes and FSDP details: the plan wraps each block")
