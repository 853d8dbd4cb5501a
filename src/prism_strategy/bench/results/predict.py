"""The planner's prediction for one measured configuration (a stored result's `config`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from prism_strategy.planning.planner import evaluate
from prism_strategy.planning.scenario import build_scenario
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.presets import build, load_model, model_names
from prism_strategy.strategies import get_strategy


def config_model(config: dict[str, Any]) -> Any:
    """The stored architecture when present (files move), else the preset name or path."""
    if isinstance(config.get("model_spec"), dict):
        return build(TransformerSpec, config["model_spec"], "stored model_spec")
    if "model" not in config:
        raise SpecError("stored config has neither model_spec nor model")
    return config["model"]


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


def config_vision(config: dict[str, Any]) -> Any:
    """The stored vision encoder's architecture when present, else its preset name or path (or None)."""
    if isinstance(config.get("vision_spec"), dict):
        return build(TransformerSpec, config["vision_spec"], "stored vision_spec")
    return config.get("vision")


def predict(config: dict[str, Any], platform: PlatformSpec) -> dict[str, float]:
    nproc, rpn = int(config["nproc"]), int(config.get("ranks_per_node") or config["nproc"])
    if nproc % rpn:
        raise SpecError(f"nproc {nproc} is not a multiple of ranks per node {rpn}")
    sc = build_scenario(
        config_model(config), mode=config.get("mode", "e2e"), vision=config_vision(config), platform=platform,
        nodes=nproc // rpn, ranks_per_node=rpn, seq_len=int(config["seq_len"]),
        micro_batch=int(config["micro_batch"]), global_batch=int(config["micro_batch"]) * nproc * int(config.get("grad_accum", 1)),
        ckpt_freq=config.get("ckpt_freq", 0), precision=config.get("precision", "bf16-mixed"),
        optimizer=config.get("optimizer", "adamw"), loss=config.get("loss", "upcast"),
        compile=bool(config.get("compile", False)))
    o = evaluate(sc, get_strategy(config["strategy"]))
    return {"step_time_s": o.step_time_s, "samples_per_s": o.samples_per_s, "memory_bytes": o.memory.total,
            "activation_bytes": o.memory.activations, "max_micro_batch": o.max_micro_batch,
            "compute_s": o.compute_s, "comm_s": o.comm_s, "exposed_comm_s": o.exposed_comm_s,
            "optimizer_s": o.optimizer_s, "tokens_per_s_per_device": o.tokens_per_s_per_device,
            "mfu": o.mfu}
