"""Accelerate's config YAML (`accelerate config` / `accelerate launch --config_file`), as
accelerate's commands/config/config_args.py ClusterConfig and utils/dataclasses.py
(FullyShardedDataParallelPlugin, DeepSpeedPlugin) read it. num_processes counts every process of
the job (all machines); the FSDP sharding strategy fixes the strategy (FULL_SHARD ->
fsdp_full_shard, SHARD_GRAD_OP -> fsdp_shard_grad_op, HYBRID_SHARD -> hsdp_full_shard,
HYBRID_SHARD_ZERO2 -> hsdp_shard_grad_op, NO_SHARD -> ddp; FSDP2's fsdp_reshard_after_forward
false -> shard_grad_op); DEEPSPEED reads its deepspeed_config_file with the DeepSpeed reader, or
the inline zero_stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prism_strategy.inputs.frameworks import deepspeed
from prism_strategy.inputs.frameworks.base import (
    Collector,
    ConfigInputs,
    boolean,
    integer,
    load,
    refuse_non_dp,
    section,
)
from prism_strategy.specs.errors import SpecError

NAME = "accelerate"
SHARDING = {
    "FULL_SHARD": "fsdp_full_shard",
    "SHARD_GRAD_OP": "fsdp_shard_grad_op",
    "HYBRID_SHARD": "hsdp_full_shard",
    "HYBRID_SHARD_ZERO2": "hsdp_shard_grad_op",
    "_HYBRID_SHARD_ZERO2": "hsdp_shard_grad_op",
    "NO_SHARD": "ddp",
}
SHARDING_BY_NUMBER = dict(
    zip("12345", ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"))
)
"""accelerate's FSDP_SHARDING_STRATEGY order (utils/constants.py): the YAML may hold 1..5."""
DATA_PARALLEL = {
    "MULTI_GPU",
    "MULTI_XPU",
    "MULTI_CPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_SDAA",
    "MULTI_MUSA",
    "MULTI_HPU",
    "NO",
}
NOT_DATA_PARALLEL = {"XLA", "MEGATRON_LM", "MULTI_NEURON", "TP"}
"""accelerate's DistributedType (utils/dataclasses.py at 16cb6eb) members that are not data
parallelism (TP: older accelerate's tensor-parallel type)."""
PRECISION = {"no": "fp32", "bf16": "bf16-mixed", "fp16": "bf16-mixed", "fp8": "bf16-mixed"}
LAUNCH = "how the job is launched (machine rank, addresses, backend): not the step's memory or communication"
FSDP_IGNORED = {
    "fsdp_state_dict_type": "how checkpoints are saved: outside the training step",
    "fsdp_use_orig_params": "FSDP1's flat-parameter view; FSDP2 (what the plan models) is per-parameter",
    "fsdp_cpu_ram_efficient_loading": "model loading, before training",
    "fsdp_sync_module_states": "a broadcast at load, before training",
    "fsdp_backward_prefetch": "prefetch order: the model overlaps the next gather as FSDP2 does",
    "fsdp_forward_prefetch": "prefetch order: the model overlaps the next gather as FSDP2 does",
    "fsdp_transformer_layer_cls_to_wrap": "the block class to wrap: the plan wraps each transformer block",
    "fsdp_min_num_params": "size-based wrapping threshold: the plan wraps each transformer block",
    "fsdp_version": "read with fsdp_reshard_after_forward",
}


def looks_like(syntax: str, data: Any) -> bool:
    return syntax == "yaml" and isinstance(data, dict) and ("distributed_type" in data or "compute_environment" in data)


def read(path: Path) -> ConfigInputs:
    _, data = load(path)
    c = Collector(path=path)
    raw = data.get("distributed_type", "NO")
    kind = "NO" if raw is False else str(raw).upper()  # YAML 1.1 reads a bare NO as false
    if kind == "FSDP":
        c.use("distributed_type", kind)
        _fsdp(c, section(c, data, "fsdp_config"))
    elif kind == "DEEPSPEED":
        c.use("distributed_type", kind)
        _deepspeed(c, section(c, data, "deepspeed_config"), path)
    elif kind == "NO":
        _one_process(c, data)
    elif kind in DATA_PARALLEL:
        c.use("distributed_type", kind)
        c.strategy = "ddp"
    elif kind in NOT_DATA_PARALLEL:
        raise c.bad(
            "distributed_type",
            f"= {kind}: not data parallelism (TP, Megatron-LM and XLA are outside what prism-strategy plans)",
            "use MULTI_GPU, FSDP or DEEPSPEED",
        )
    else:
        raise c.bad(
            "distributed_type",
            f"= {kind}: not one of accelerate's distributed types",
            f"use one of {', '.join(sorted(DATA_PARALLEL | {'FSDP', 'DEEPSPEED'}))}",
        )
    _parallelism_config(c, section(c, data, "parallelism_config"))
    if kind != "NO":
        _layout(c, data)
    raw_mp = data.get("mixed_precision", "no")
    mp = "no" if raw_mp is False else str(raw_mp).lower()  # YAML 1.1 reads a bare `no` as false
    if mp not in PRECISION:
        raise c.bad("mixed_precision", f"= {mp!r}", "use no, bf16, fp16 or fp8")
    if "mixed_precision" in data or "precision" not in c.options:
        note = {
            "fp16": "fp16 has bf16's bytes: planned as bf16-mixed",
            "fp8": "fp8 matmuls (Transformer Engine / MS-AMP / torchao) are not modelled: planned as bf16-mixed, "
            "so the plan overstates matmul time and activation memory",
        }.get(mp, "")
        if mp == "fp8":
            c.assume("precision: the file says fp8, which is not modelled; planned as bf16-mixed")
        c.use("mixed_precision", mp, "precision", PRECISION[mp], note=note, default="mixed_precision" not in data)
    dyn = section(c, data, "dynamo_config")
    if dyn:
        backend = str(dyn.get("dynamo_backend", "NO")).upper()
        c.use("dynamo_config.dynamo_backend", backend, "compile", backend != "NO")
    if "fp8_config" in data:
        c.ignore("fp8_config", data["fp8_config"], "fp8 recipe details: fp8 is not modelled (planned as bf16-mixed)")
    read_keys = {
        "fp8_config",
        "distributed_type",
        "fsdp_config",
        "deepspeed_config",
        "num_machines",
        "num_processes",
        "mixed_precision",
        "dynamo_config",
        "parallelism_config",
    }
    for k, v in data.items():
        if k not in read_keys:
            c.ignore(k, v, LAUNCH)
    return c.result(NAME, data)


def _one_process(c: Collector, data: dict[str, Any]) -> None:
    """distributed_type NO: accelerate launches one process (commands/launch.py simple_launcher),
    whatever num_processes says; the plan is one rank on one node."""
    c.use("distributed_type", "NO", note="one process: no data parallelism, planned as 1 rank on 1 node")
    c.use("distributed_type", "NO", "nodes", 1)
    c.use("distributed_type", "NO", "ranks_per_node", 1)
    c.strategy = "ddp"
    for k in ("num_machines", "num_processes"):
        if k in data:
            c.ignore(k, data[k], "distributed_type NO runs one process: accelerate does not read it")


def _parallelism_config(c: Collector, pc: dict[str, Any]) -> None:
    """accelerate's ParallelismConfig (parallelism_config_<axis>_size): tensor, context or sequence
    parallelism above 1 is refused; dp_replicate x dp_shard above 1 each is HSDP on that mesh."""
    name = "parallelism_config.{}".format
    sizes = {k: integer(c, name(k), v, 1) for k, v in pc.items() if k.endswith("_size")}
    refuse_non_dp(c, {name(k): v for k, v in sizes.items() if v > 1 and "_dp_" not in k})
    rep = sizes.get("parallelism_config_dp_replicate_size", 1)
    shard = sizes.get("parallelism_config_dp_shard_size", 1)
    for k, v in pc.items():
        c.use(name(k), v, note="data-parallel degree" if "_dp_" in k else "1: none")
    if rep > 1 and c.strategy is not None and c.strategy.startswith("fsdp_"):
        c.strategy = "hsdp_" + c.strategy.removeprefix("fsdp_")
        c.dp_degrees = (rep, shard if shard > 1 else -1)
        c.dp_fields = "parallelism_config.parallelism_config_dp_replicate_size x dp_shard_size"


def _layout(c: Collector, data: dict[str, Any]) -> None:
    machines = integer(c, "num_machines", data.get("num_machines", 1), 1)
    c.use("num_machines", machines, "nodes", machines, default="num_machines" not in data)
    if "num_processes" in data:
        procs = integer(c, "num_processes", data["num_processes"], 1)
        if procs % machines:
            raise c.bad(
                "num_processes",
                f"= {procs} is not a multiple of num_machines {machines}",
                "num_processes counts every process of the job: make it machines x processes per machine",
            )
        c.use("num_processes", procs, "ranks_per_node", procs // machines, note="all machines' processes")


def _fsdp(c: Collector, f: dict[str, Any]) -> None:
    raw = str(f.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
    name = SHARDING_BY_NUMBER.get(raw, raw)
    if name not in SHARDING:
        raise c.bad("fsdp_config.fsdp_sharding_strategy", f"= {raw!r}", f"use one of {', '.join(SHARDING)}")
    strategy = SHARDING[name]
    if str(f.get("fsdp_version", 1)) == "2" and "fsdp_reshard_after_forward" in f:
        reshard = boolean(c, "fsdp_config.fsdp_reshard_after_forward", f["fsdp_reshard_after_forward"])
        strategy = "fsdp_full_shard" if reshard else "fsdp_shard_grad_op"
        c.use("fsdp_config.fsdp_reshard_after_forward", reshard, note=f"FSDP2: runs {strategy}")
    else:
        c.use("fsdp_config.fsdp_sharding_strategy", raw, note=f"runs {strategy}")
    c.strategy = strategy
    if "fsdp_activation_checkpointing" in f:
        on = boolean(c, "fsdp_config.fsdp_activation_checkpointing", f["fsdp_activation_checkpointing"])
        c.use(
            "fsdp_config.fsdp_activation_checkpointing",
            on,
            "ckpt_freq",
            1 if on else 0,
            note="every wrapped block" if on else "",
        )
    policy = str(f.get("fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP")).upper()
    if policy == "TRANSFORMER_BASED_WRAP":
        c.use("fsdp_config.fsdp_auto_wrap_policy", policy, note="each transformer block, as the plan models")
    else:
        c.ignore(
            "fsdp_config.fsdp_auto_wrap_policy",
            policy,
            "the plan models a wrap per transformer block"
            + (
                "; NO_WRAP wraps only the root (one flat parameter: see doctor --config)" if policy == "NO_WRAP" else ""
            ),
        )
    if f.get("fsdp_offload_params") not in (None, False, "false"):
        c.offload |= {"params", "optimizer"}  # FSDP's CPUOffload moves the sharded params, grads and states
        c.offload_engine = "fsdp"
        c.ignore(
            "fsdp_config.fsdp_offload_params",
            f["fsdp_offload_params"],
            "CPU offload is not modelled: the plan holds these states on the device, so it overstates device memory",
        )
    read_keys = {
        "fsdp_sharding_strategy",
        "fsdp_reshard_after_forward",
        "fsdp_activation_checkpointing",
        "fsdp_auto_wrap_policy",
        "fsdp_offload_params",
    }
    for k, v in f.items():
        if k not in read_keys:
            c.ignore(f"fsdp_config.{k}", v, FSDP_IGNORED.get(k, "not an FSDP setting the plan models"))
        elif k == "fsdp_offload_params" and v in (False, "false"):
            c.use(f"fsdp_config.{k}", v, note="no offload, as modelled")


def _deepspeed(c: Collector, d: dict[str, Any], path: Path) -> None:
    file = d.get("deepspeed_config_file")
    name = "deepspeed_config.deepspeed_config_file"
    if file not in (None, "", "none"):
        if not isinstance(file, str):
            raise c.bad(name, f"must be a path, got {type(file).__name__}", "give the ds_config.json's path")
        target = (path.parent / file) if not Path(file).is_absolute() else Path(file)
        if not target.is_file():
            raise c.bad(
                name, f"= {file}: no such file (looked at {target})", "put the ds_config.json there, or give its path"
            )
        try:
            _, ds = load(target)
        except SpecError as e:
            raise c.bad(
                name, f"= {file}: {str(e).removeprefix(f'--from {target}: ')}", "point it at a ds_config.json"
            ) from None
        if not isinstance(ds, dict):
            raise c.bad(
                name, f"= {file}: a {type(ds).__name__}, not a ds_config object", "point it at a ds_config.json"
            )
        deepspeed.read_into(c, ds, prefix=f"{file}:")
        c.use("deepspeed_config.deepspeed_config_file", str(file), note="read with the DeepSpeed reader")
    else:
        stage = integer(c, "deepspeed_config.zero_stage", d.get("zero_stage", 2), 0)
        c.strategy = f"zero{stage}" if stage else "ddp"
        c.use("deepspeed_config.zero_stage", stage, note=f"runs {c.strategy}")
        if "gradient_accumulation_steps" in d:
            c.use(
                "deepspeed_config.gradient_accumulation_steps",
                d["gradient_accumulation_steps"],
                "grad_accum",
                integer(c, "deepspeed_config.gradient_accumulation_steps", d["gradient_accumulation_steps"], 1),
            )
        for k in ("offload_optimizer_device", "offload_param_device"):
            if str(d.get(k, "none")) == "cpu":
                c.offload.add("optimizer" if k == "offload_optimizer_device" else "params")
                c.offload_engine = "deepspeed"
            if str(d.get(k, "none")) != "none":
                c.ignore(f"deepspeed_config.{k}", d[k], "offload is not modelled: the plan overstates device memory")
    for k, v in d.items():
        if k not in (
            "deepspeed_config_file",
            "zero_stage",
            "gradient_accumulation_steps",
            "offload_optimizer_device",
            "offload_param_device",
        ):
            c.ignore(
                f"deepspeed_config.{k}",
                v,
                "model loading and saving (zero3_init_flag, 16-bit save): not the step's memory or communication",
            )
