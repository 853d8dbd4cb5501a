"""A full ds_config.json for a zero1/2/3 pick: emit/deepspeed.py's build_ds_config (the engine's
own config, so the models and the file agree), or, from a DeepSpeed config the plan read, that
file with only the plan's fields changed: the stage, micro-batch, accumulation, train_batch_size
where it had one, and the precision section. JSON has no comments: the top-level key
`prism_strategy_plan` says which plan wrote it (DeepSpeedConfig ignores keys it does not know)."""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from prism_strategy.emit.deepspeed import build_ds_config
from prism_strategy.strategies import get_strategy

if TYPE_CHECKING:
    from prism_strategy.emit.frameworks import FrameworkChoice

SUPPORTS = ("zero1", "zero2", "zero3")
FILE = "ds_config.json"
STAMP = "prism_strategy_plan"


def render(choice: "FrameworkChoice", base: dict[str, Any] | None, header: str) -> str:
    p = choice.pick
    made = build_ds_config(
        get_strategy(p.strategy),
        micro_batch=p.micro_batch,
        world_size=choice.world,
        grad_accum=p.grad_accum,
        precision=p.precision,
    )
    out = made if base is None else _onto(copy.deepcopy(base), made, choice)
    return json.dumps({**out, STAMP: header}, indent=2) + "\n"


def _onto(cfg: dict[str, Any], made: dict[str, Any], choice: "FrameworkChoice") -> dict[str, Any]:
    """The user's config with the plan's fields set; a section the stage needs and the file lacks
    comes from the generated config."""
    p = choice.pick
    cfg.pop(STAMP, None)
    cfg["train_micro_batch_size_per_gpu"] = p.micro_batch
    cfg["gradient_accumulation_steps"] = p.grad_accum
    if "train_batch_size" in cfg:
        cfg["train_batch_size"] = p.micro_batch * p.grad_accum * choice.world
    zero = cfg.setdefault("zero_optimization", {})
    if zero.get("stage") != made["zero_optimization"]["stage"]:
        zero["stage"] = made["zero_optimization"]["stage"]
        for k, v in made["zero_optimization"].items():
            zero.setdefault(k, v)
    _precision(cfg, p.precision)
    return cfg


def _precision(cfg: dict[str, Any], precision: str) -> None:
    """fp16 stays fp16 (the reader plans it as bf16-mixed); otherwise bf16 on unless fp32."""
    fp16 = isinstance(cfg.get("fp16"), dict) and cfg["fp16"].get("enabled") in (True, "auto")
    if precision == "fp32":
        for key in ("bf16", "fp16"):
            if isinstance(cfg.get(key), dict):
                cfg[key]["enabled"] = False
    elif not fp16:
        cfg.setdefault("bf16", {})
        if not isinstance(cfg["bf16"], dict):
            cfg["bf16"] = {}
        cfg["bf16"]["enabled"] = True
