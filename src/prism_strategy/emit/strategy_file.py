"""strategy.toml: the wrap() arguments the plan chose, for `wrap_from_file(model, "strategy.toml", ctx=ctx, optimizer=...)`.

Format (top-level keys): strategy (str), mixed_precision ("bf16" | "none"), ckpt_freq (int),
static_graph (bool, DDP only), find_unused_parameters (bool), bucket_cap_mb (int, optional),
compile (bool), ranks_per_node (int), ds_config (zero* only: a path relative to this file).
`emit --from-plan` adds what the plan chose: micro_batch, grad_accum (int), precision, platform
(str), nodes (int); ckpt_freq is then the plan's.
The runtime reads it with prism_strategy.runtime.strategy_file.read_strategy_file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy

STRATEGY_FILE = "strategy.toml"
DS_CONFIG_FILE = "ds_config.json"


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyFile:
    strategy: str
    mixed_precision: Literal["bf16", "none"] = "bf16"
    ckpt_freq: int = 0
    static_graph: bool | None = None
    """DDP only; None for every other strategy (the key is omitted)."""
    find_unused_parameters: bool = False
    bucket_cap_mb: int | None = None
    compile: bool = False
    ranks_per_node: int = 1
    ds_config: str | None = None
    """zero* only: the DeepSpeed config, relative to strategy.toml."""

    def __post_init__(self) -> None:
        spec = get_strategy(self.strategy)
        if self.mixed_precision not in ("bf16", "none"):
            raise SpecError(f"mixed_precision must be 'bf16' or 'none', got {self.mixed_precision!r}")
        if self.ckpt_freq < 0 or self.ranks_per_node < 1:
            raise SpecError("ckpt_freq must be >= 0 and ranks_per_node >= 1")
        if self.static_graph is not None and spec.engine != "ddp":
            raise SpecError(f"static_graph applies to ddp only, not {self.strategy}")
        if (self.ds_config is not None) != (spec.engine == "deepspeed"):
            raise SpecError(f"ds_config is required for zero* strategies and only for them ({self.strategy})")


def precision_to_mixed(precision: str) -> Literal["bf16", "none"]:
    """--precision bf16-mixed / bf16-pure -> "bf16"; fp32 -> "none"."""
    return "none" if precision == "fp32" else "bf16"


def render_strategy_toml(sf: StrategyFile, header: str) -> str:
    lines = [
        header,
        "# wrap() arguments the plan chose. Read with wrap_from_file(model, path, ctx=ctx, optimizer=...).",
        f"strategy = {json.dumps(sf.strategy)}",
        f"mixed_precision = {json.dumps(sf.mixed_precision)}",
        f"ckpt_freq = {sf.ckpt_freq}",
    ]
    if sf.static_graph is not None:
        lines.append(f"static_graph = {_bool(sf.static_graph)}")
    lines.append(f"find_unused_parameters = {_bool(sf.find_unused_parameters)}")
    if sf.bucket_cap_mb is not None:
        lines.append(f"bucket_cap_mb = {sf.bucket_cap_mb}")
    lines += [f"compile = {_bool(sf.compile)}", f"ranks_per_node = {sf.ranks_per_node}"]
    if sf.ds_config is not None:
        lines.append(f"ds_config = {json.dumps(sf.ds_config)}")
    return "\n".join(lines) + "\n"


def _bool(v: bool) -> str:
    return "true" if v else "false"


def render_plan_keys(*, micro_batch: int, grad_accum: int, precision: str, platform: str, nodes: int,
                     plan_file: str) -> str:
    """Top-level keys `emit --from-plan` appends to strategy.toml (valid TOML after the others)."""
    return "\n".join([
        f"# from the plan {re.sub(r'[^A-Za-z0-9_.-]', '_', plan_file)}: batch, accumulation, precision, layout",
        f"micro_batch = {micro_batch}",
        f"grad_accum = {grad_accum}",
        f"precision = {json.dumps(precision)}",
        f"platform = {json.dumps(platform)}",
        f"nodes = {nodes}",
    ]) + "\n"
