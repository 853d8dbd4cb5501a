"""An Accelerate config YAML for any pick: MULTI_<device> for ddp, FSDP with fsdp_config for
fsdp/hsdp, DEEPSPEED with an inline deepspeed_config (zero_stage, gradient_accumulation_steps) for
zero1/2/3, plus num_machines, num_processes (all machines') and mixed_precision, as accelerate's
ClusterConfig reads them. From an Accelerate YAML the plan read, only those keys change. The
micro-batch is the script's DataLoader (Accelerate's YAML has none): the header says it."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import yaml

from prism_strategy.strategies import STRATEGY_NAMES, get_strategy

if TYPE_CHECKING:
    from prism_strategy.emit.frameworks import FrameworkChoice

SUPPORTS = STRATEGY_NAMES  # DDP, FSDP (FSDP1 names) and DeepSpeed: Accelerate writes every one
FILE = "accelerate_config.yaml"
SHARDING = {
    "fsdp_full_shard": "FULL_SHARD",
    "fsdp_shard_grad_op": "SHARD_GRAD_OP",
    "hsdp_full_shard": "HYBRID_SHARD",
    "hsdp_shard_grad_op": "HYBRID_SHARD_ZERO2",
}
MULTI = {"cuda": "MULTI_GPU", "xpu": "MULTI_XPU", "cpu": "MULTI_CPU"}
READ_AS = {
    "FULL_SHARD": "FULL_SHARD",
    "1": "FULL_SHARD",
    "SHARD_GRAD_OP": "SHARD_GRAD_OP",
    "2": "SHARD_GRAD_OP",
    "HYBRID_SHARD": "HYBRID_SHARD",
    "4": "HYBRID_SHARD",
    "HYBRID_SHARD_ZERO2": "HYBRID_SHARD_ZERO2",
    "_HYBRID_SHARD_ZERO2": "HYBRID_SHARD_ZERO2",
    "5": "HYBRID_SHARD_ZERO2",
}


def render(choice: "FrameworkChoice", base: dict[str, Any] | None, header: str) -> str:
    cfg = copy.deepcopy(base) if base is not None else {"compute_environment": "LOCAL_MACHINE"}
    p, s = choice.pick, choice.pick.strategy
    notes = [
        header,
        f"the micro-batch ({p.micro_batch}) and accumulation ({p.grad_accum}) are your script's "
        "(DataLoader batch_size, Accelerator(gradient_accumulation_steps=...))",
    ]
    if not get_strategy(s).sharded:  # DDP: nothing sharded
        if str(cfg.get("distributed_type", "")).upper() not in MULTI.values():
            cfg["distributed_type"] = MULTI.get(choice.device, "MULTI_GPU")
        cfg.pop("fsdp_config", None)
        cfg.pop("deepspeed_config", None)
    elif s in SHARDING:
        cfg["distributed_type"] = "FSDP"
        cfg.pop("deepspeed_config", None)
        notes += _fsdp(cfg.setdefault("fsdp_config", {}), s, p.ckpt_freq)
    else:
        cfg["distributed_type"] = "DEEPSPEED"
        cfg.pop("fsdp_config", None)
        ds = cfg.setdefault("deepspeed_config", {})
        if ds.pop("deepspeed_config_file", None) is not None:
            notes.append("the pick is written inline; emit --format deepspeed writes the whole ds_config.json")
        ds["zero_stage"] = get_strategy(s).zero_stage
        ds["gradient_accumulation_steps"] = p.grad_accum
    if isinstance(cfg.get("parallelism_config"), dict):
        _dp_sizes(cfg["parallelism_config"], s, p.nodes, choice.world)
    if cfg.get("num_machines", 1) != p.nodes:
        cfg["num_machines"] = p.nodes
    cfg["num_processes"] = choice.world
    _precision(cfg, p.precision)
    return "".join(f"# {n}\n" for n in notes) + yaml.safe_dump(cfg, sort_keys=False)


def _dp_sizes(pc: dict[str, Any], strategy: str, nodes: int, world: int) -> None:
    """ParallelismConfig's data-parallel sizes for the pick: HSDP replicates over nodes."""
    spec = get_strategy(strategy)
    rep, shard = (world, 1) if not spec.sharded else (nodes, world // nodes) if spec.hybrid else (1, world)
    for key, v in (("parallelism_config_dp_replicate_size", rep), ("parallelism_config_dp_shard_size", shard)):
        if pc.get(key, 1) != v:
            pc[key] = v


def _fsdp(f: dict[str, Any], strategy: str, k: int | str) -> list[str]:
    name = SHARDING[strategy]
    if str(f.get("fsdp_version", 1)) == "2" and "fsdp_reshard_after_forward" in f and not strategy.startswith("hsdp"):
        f["fsdp_reshard_after_forward"] = get_strategy(strategy).reshard_after_forward
    elif READ_AS.get(str(f.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()) != name:
        f["fsdp_sharding_strategy"] = name
    f.setdefault("fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP")
    if f.get("fsdp_activation_checkpointing", False) != (k != 0):
        f["fsdp_activation_checkpointing"] = k != 0
    if k not in (0, 1):
        return [
            f"the plan checkpoints {'selectively (sac)' if k == 'sac' else f'every {k}-th block'}; "
            "fsdp_activation_checkpointing checkpoints every wrapped block: apply the plan's policy in the model"
        ]
    return []


def _precision(cfg: dict[str, Any], precision: str) -> None:
    now = str(cfg.get("mixed_precision", "no")).lower()
    if precision == "fp32" and now != "no":
        cfg["mixed_precision"] = "no"
    elif precision != "fp32" and now not in ("bf16", "fp16", "fp8"):
        cfg["mixed_precision"] = "bf16"
