"""The strategy.toml that `prism-strategy emit` writes and `wrap_from_file()` reads.

    strategy = "hsdp_shard_grad_op"      # required: a catalogue name
    mixed_precision = "bf16"             # "bf16" or "none"
    ckpt_freq = 1                        # checkpoint every k-th block; 0 = none
    static_graph = true                  # optional (ddp)
    find_unused_parameters = false       # (ddp)
    bucket_cap_mb = 25                   # optional (ddp)
    compile = false
    ranks_per_node = 12                  # informational: what the plan assumed
    ds_config = "ds_config.json"         # optional (zero*): relative to this file
    micro_batch = 4                      # optional, from `emit --from-plan`: the DataLoader's batch
    grad_accum = 2                       #   micro-batches per optimizer step
    precision = "bf16-mixed"             #   and what the plan assumed: precision, platform, nodes
    platform = "aurora"
    nodes = 2

Missing keys take wrap()'s defaults; unknown keys and wrong types are a SpecError. wrap_from_file
applies ckpt_freq and mixed_precision; micro_batch and grad_accum are for the training loop
(read_strategy_file(path).micro_batch / .grad_accum).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import read_toml
from prism_strategy.specs.training import PRECISIONS
from prism_strategy.strategies import get_strategy


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyFile:
    strategy: str
    mixed_precision: str | None = "bf16"
    """"bf16", or None for full fp32 ("none" in the file)."""
    ckpt_freq: int = 0
    static_graph: bool | None = None
    find_unused_parameters: bool = False
    bucket_cap_mb: int | None = None
    compile: bool = False
    ranks_per_node: int | None = None
    """Informational: the ranks per node the plan assumed."""
    ds_config: Path | None = None
    """Absolute path of the DeepSpeed JSON (zero* only)."""
    micro_batch: int | None = None
    """Samples per device per forward the plan chose (the training loop's batch)."""
    grad_accum: int | None = None
    """Micro-batches per optimizer step the plan chose."""
    precision: str | None = None
    platform: str | None = None
    nodes: int | None = None


# key -> (accepted types, type name for the error)
_KEYS: dict[str, tuple[tuple[type, ...], str]] = {
    "strategy": ((str,), "a string"),
    "mixed_precision": ((str,), '"bf16" or "none"'),
    "ckpt_freq": ((int,), "an integer >= 0"),
    "static_graph": ((bool,), "true or false"),
    "find_unused_parameters": ((bool,), "true or false"),
    "bucket_cap_mb": ((int,), "a positive integer"),
    "compile": ((bool,), "true or false"),
    "ranks_per_node": ((int,), "a positive integer"),
    "ds_config": ((str,), "a path relative to the toml file"),
    "micro_batch": ((int,), "a positive integer"),
    "grad_accum": ((int,), "a positive integer"),
    "precision": ((str,), '"bf16-mixed", "bf16-pure" or "fp32"'),
    "platform": ((str,), "a platform name"),
    "nodes": ((int,), "a positive integer"),
}


def _check_types(data: dict[str, Any], where: str) -> None:
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(_KEYS)}")
    if "strategy" not in data:
        raise SpecError(f"{where}: missing key 'strategy'; add e.g. strategy = \"ddp\"")
    for key, value in data.items():
        types, text = _KEYS[key]
        is_int_key = int in types
        if not isinstance(value, types) or (is_int_key and isinstance(value, bool)):
            raise SpecError(f"{where}: {key} must be {text}, got {value!r}")
    for key in ("bucket_cap_mb", "ranks_per_node", "micro_batch", "grad_accum", "nodes"):
        if key in data and data[key] <= 0:
            raise SpecError(f"{where}: {key} must be a positive integer, got {data[key]}")
    if data.get("precision", "bf16-mixed") not in PRECISIONS:
        raise SpecError(f"{where}: precision must be one of {', '.join(PRECISIONS)}, got {data['precision']!r}")
    if data.get("ckpt_freq", 0) < 0:
        raise SpecError(f"{where}: ckpt_freq must be >= 0 (0 = no checkpointing), got {data['ckpt_freq']}")


def _mixed_precision(value: str, where: str) -> str | None:
    if value not in ("bf16", "none"):
        raise SpecError(f'{where}: mixed_precision must be "bf16" or "none", got {value!r}')
    return None if value == "none" else value


def read_strategy_file(path: str | Path) -> StrategyFile:
    """Parse and check a strategy.toml; the ds_config path is resolved against its folder."""
    path = Path(path)
    where = str(path)
    data = read_toml(path)
    _check_types(data, where)
    spec = get_strategy(data["strategy"])
    fields = dict(data)
    if "mixed_precision" in fields:
        fields["mixed_precision"] = _mixed_precision(fields["mixed_precision"], where)
    if "ds_config" in fields:
        if spec.zero_stage is None:
            raise SpecError(f"{where}: ds_config is only for zero1/zero2/zero3, not {spec.name}; remove it")
        ds = (path.parent / fields["ds_config"]).resolve()
        if not ds.is_file():
            raise SpecError(f"{where}: ds_config {fields['ds_config']!r} not found next to it ({ds})")
        fields["ds_config"] = ds
    return StrategyFile(**fields)
