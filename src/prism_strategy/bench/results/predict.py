"""The planner's prediction for one measured configuration (a stored result's `config`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prism_strategy.planning.planner import evaluate
from prism_strategy.planning.stored_config import config_scenario
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.presets import load_model, model_names
from prism_strategy.strategies import get_strategy


def stored_model(model: str, vision: str | None = None) -> dict[str, Any]:
    """The architectures themselves (model_spec, vision_spec) and absolute paths for models given as
    files: a stored row is read from any directory, and after the config.json moves."""
    out: dict[str, Any] = {}
    for key, name in (("model", model), ("vision", vision)):
        if name is None:
            continue
        spec = load_model(name)
        if name not in model_names():
            out[key] = str(Path(name).resolve())
        out[f"{key}_spec"] = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    return out


def predict(config: dict[str, Any], platform: PlatformSpec) -> dict[str, float]:
    sc = config_scenario(config, platform)
    o = evaluate(sc, get_strategy(config["strategy"]))
    return {
        "step_time_s": o.step_time_s,
        "samples_per_s": o.samples_per_s,
        "memory_bytes": o.memory.total,
        # the counters a run reports, predicted as such (estimate/memory_runtime.memory_fields)
        "allocated_bytes": o.memory_runtime["memory_allocated_gib"] * GiB,
        "reserved_bytes": o.memory_runtime["memory_reserved_gib"] * GiB,
        "activation_bytes": o.memory.activations,
        "max_micro_batch": o.max_micro_batch,
        "compute_s": o.compute_s,
        "comm_s": o.comm_s,
        "exposed_comm_s": o.exposed_comm_s,
        "optimizer_s": o.optimizer_s,
        "tokens_per_s_per_device": o.tokens_per_s_per_device,
        "mfu": o.mfu,
    }
