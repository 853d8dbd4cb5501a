"""The planner's prediction for one measured configuration (a stored result's `config`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prism_strategy.estimate.option import estimate_option
from prism_strategy.inputs.stored import config_scenario
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
    e = estimate_option(sc, get_strategy(config["strategy"]))
    step = e.step
    return {
        "step_time_s": step.step_time_s,
        "samples_per_s": step.samples_per_s,
        "memory_bytes": e.memory.total,
        # the counters a run reports, predicted as such (estimate/memory_runtime.memory_fields)
        "allocated_bytes": e.memory_runtime["memory_allocated_gib"] * GiB,
        "reserved_bytes": e.memory_runtime["memory_reserved_gib"] * GiB,
        "activation_bytes": e.memory.activations,
        "max_micro_batch": e.batch.max_micro_batch,
        "compute_s": step.compute_s,
        "comm_s": step.comm_s,
        "exposed_comm_s": step.exposed_comm_s,
        "optimizer_s": step.optimizer_s,
        "tokens_per_s_per_device": step.tokens_per_s_per_device,
        "mfu": step.mfu,
    }
