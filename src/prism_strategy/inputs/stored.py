"""A bench configuration (a stored run's `config`, a census or commbench base) as the planner's
scenario: the one function `bench`'s predict, census, commbench and worker all build it with.

The config keys are the bench's (bench/run.py base_config, bench/census.py census_base, the
importers' resolve): model / model_spec, vision / vision_spec, mode, nproc, ranks_per_node,
micro_batch, grad_accum, seq_len, ckpt_freq, precision, optimizer, loss, compile, bucket_mb.
A key a config lacks takes build_scenario's default (adamw, upcast loss, no compile, the engine's
bucket), as the run itself did.
"""

from __future__ import annotations

from typing import Any

from prism_strategy.planning.scenario import Scenario, build_scenario
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.presets import build


def config_model(config: dict[str, Any]) -> Any:
    """The stored architecture when present (files move), else the preset name or path."""
    if isinstance(config.get("model_spec"), dict):
        return build(TransformerSpec, config["model_spec"], "stored model_spec")
    if "model" not in config:
        raise SpecError("stored config has neither model_spec nor model")
    return config["model"]


def config_vision(config: dict[str, Any]) -> Any:
    """The stored vision encoder's architecture when present, else its preset name or path (or None)."""
    if isinstance(config.get("vision_spec"), dict):
        return build(TransformerSpec, config["vision_spec"], "stored vision_spec")
    return config.get("vision")


def config_scenario(config: dict[str, Any], platform: str | PlatformSpec = "cpu") -> Scenario:
    """The planner's scenario for a bench config. platform: where the run is priced; census,
    commbench and the bench worker replay on CPU (gloo), hence the default."""
    nproc, rpn = int(config["nproc"]), int(config.get("ranks_per_node") or config["nproc"])
    if nproc % rpn:
        raise SpecError(f"nproc {nproc} is not a multiple of ranks per node {rpn}")
    accum = int(config.get("grad_accum", 1))
    return build_scenario(
        config_model(config),
        mode=config.get("mode", "e2e"),
        vision=config_vision(config),
        platform=platform,
        nodes=nproc // rpn,
        ranks_per_node=rpn,
        seq_len=int(config["seq_len"]),
        micro_batch=int(config["micro_batch"]),
        global_batch=int(config["micro_batch"]) * nproc * accum,
        ckpt_freq=config.get("ckpt_freq", 0),
        precision=config.get("precision", "bf16-mixed"),
        optimizer=config.get("optimizer", "adamw"),
        loss=config.get("loss", "upcast"),
        compile=bool(config.get("compile", False)),
        bucket_mb=config.get("bucket_mb"),
    )
