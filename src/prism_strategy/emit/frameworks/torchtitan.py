"""A torchtitan job TOML for a ddp/fsdp/hsdp pick: the sections the plan decides, [parallelism],
[activation_checkpoint], [training] and [compile] (+ [model] when the preset is one of
torchtitan's flavors), as JobConfig at 238fa99 reads them (torchtitan/config/job_config.py).
From a torchtitan TOML the plan read, a key is written only where the plan's value differs from
what the file already says (its own value or JobConfig's default), so a round trip keeps every
other field. TOML comments are not kept (the file is parsed, then written back whole)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import tomli_w

from prism_strategy.emit.frameworks.models import current_names, file_names, model_for
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy

if TYPE_CHECKING:
    from prism_strategy.emit.frameworks import FrameworkChoice

ENTRY = ("-m", "torchtitan.train", "--job.config_file")
"""What each rank runs: torchtitan's entry point with the TOML (torchtitan's run_train.sh:
`torchrun ... -m torchtitan.train --job.config_file X`), the file's path appended."""

SUPPORTS = ("ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "hsdp_full_shard", "hsdp_shard_grad_op")
FILE = "torchtitan.toml"
DEFAULTS = {
    ("training", "local_batch_size"): 8,
    ("training", "global_batch_size"): -1,
    ("training", "seq_len"): 2048,
    ("training", "dtype"): "float32",
    ("training", "mixed_precision_param"): "bfloat16",
    ("parallelism", "data_parallel_replicate_degree"): 1,
    ("parallelism", "data_parallel_shard_degree"): -1,
    ("parallelism", "fsdp_reshard_after_forward"): "default",
    ("activation_checkpoint", "mode"): "selective",
    ("activation_checkpoint", "selective_ac_option"): "2",
    ("compile", "enable"): False,
    ("compile", "components"): ["model", "loss"],
}
"""JobConfig's defaults of the keys written here."""


def render(choice: "FrameworkChoice", base: dict[str, Any] | None, header: str) -> str:
    # an older JobConfig's file is edited under today's names and written back under its own
    cfg, moved = current_names("torchtitan", base) if base is not None else ({}, [])
    p = choice.pick
    if base is None:
        named = model_for("torchtitan", choice.model)
        if named is None:
            raise SpecError(
                f"--format torchtitan: {choice.model} is none of torchtitan's model flavors that "
                "prism-strategy knows; plan from a torchtitan TOML (plan --from) to keep its [model]"
            )
        cfg["model"] = {"name": named[0], "flavor": named[1]}
    _training(cfg, choice)
    _parallelism(cfg, choice)
    _checkpointing(cfg, p.ckpt_freq)
    _set(cfg, "compile", "enable", p.compile)
    if p.compile and ("loss" in _get(cfg, "compile", "components")) != choice.compile_loss:
        _set(cfg, "compile", "components", ["model", "loss"] if choice.compile_loss else ["model"])
    return "".join(f"# {line}\n" for line in header.split("\n")) + tomli_w.dumps(file_names(cfg, moved))


def _get(cfg: dict[str, Any], table: str, key: str) -> Any:
    return cfg.get(table, {}).get(key, DEFAULTS.get((table, key)))


def _set(cfg: dict[str, Any], table: str, key: str, value: Any) -> None:
    """Write only a value that differs from what the file already runs."""
    if _get(cfg, table, key) != value:
        cfg.setdefault(table, {})[key] = value


def _training(cfg: dict[str, Any], choice: "FrameworkChoice") -> None:
    p = choice.pick
    _set(cfg, "training", "local_batch_size", p.micro_batch)
    _set(cfg, "training", "seq_len", choice.seq_len)
    wanted = -1 if p.grad_accum == 1 else p.micro_batch * p.grad_accum * choice.world
    if _get(cfg, "training", "global_batch_size") not in (
        wanted,
        p.micro_batch * choice.world if wanted == -1 else None,
    ):
        _set(cfg, "training", "global_batch_size", wanted)
    dtype, param = {
        "bf16-pure": ("bfloat16", None),
        "bf16-mixed": ("float32", "bfloat16"),
        "fp32": ("float32", "float32"),
    }[p.precision]
    _set(cfg, "training", "dtype", dtype)
    if param is not None:
        _set(cfg, "training", "mixed_precision_param", param)


def _parallelism(cfg: dict[str, Any], choice: "FrameworkChoice") -> None:
    s, nodes = choice.pick.strategy, choice.pick.nodes
    rep, shard = {"ddp": (choice.world, 1), "fsdp_full_shard": (1, -1), "fsdp_shard_grad_op": (1, -1)}.get(
        s, (nodes, choice.world // nodes)
    )
    if _get(cfg, "parallelism", "data_parallel_shard_degree") not in (shard, choice.world if shard == -1 else None):
        _set(cfg, "parallelism", "data_parallel_shard_degree", shard)
    _set(cfg, "parallelism", "data_parallel_replicate_degree", rep)
    spec = get_strategy(s)
    keeps = spec.param_shard != "none" and not spec.reshard_after_forward  # shard_grad_op: kept gathered
    if keeps != (_get(cfg, "parallelism", "fsdp_reshard_after_forward") == "never") and spec.sharded:
        _set(cfg, "parallelism", "fsdp_reshard_after_forward", "never" if keeps else "default")


def _checkpointing(cfg: dict[str, Any], k: int | str) -> None:
    mode, option = (
        _get(cfg, "activation_checkpoint", "mode"),
        str(_get(cfg, "activation_checkpoint", "selective_ac_option")),
    )
    now = {"none": 0, "full": 1}.get(mode, "sac" if option == "op" else int(option) if option.isdigit() else None)
    if mode == "memory_budget":
        now = None
    if now == k:
        return
    if k == 0:
        _set(cfg, "activation_checkpoint", "mode", "none")
    elif k == 1:
        _set(cfg, "activation_checkpoint", "mode", "full")
    else:
        _set(cfg, "activation_checkpoint", "mode", "selective")
        _set(cfg, "activation_checkpoint", "selective_ac_option", "op" if k == "sac" else str(k))
