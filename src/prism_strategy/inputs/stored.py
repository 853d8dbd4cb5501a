"""A bench configuration (a stored run's `config`, a census or commbench base) as the planner's
scenario: the one function `bench`'s predict, census, commbench and worker all build it with.

Two shapes are read. Version 2 (`scenario_record`): the Scenario serialised, `{"scenario":
{"version": 2, "model", "vision", "mode", "layout", "batch", "precision", "memory", "environment"}}`
beside the run's own keys. Version 1, the rows stored before it (bench/launch/run.py base_config,
bench/collectives/census.py census_base, the importers' resolve), is flat: model / model_spec,
vision / vision_spec, mode, nproc, ranks_per_node, micro_batch, grad_accum, seq_len, ckpt_freq,
precision, optimizer, loss, compile, bucket_mb; `migrate` turns it into version 2. A key a config
lacks takes the policies' defaults (adamw, upcast loss, no compile, the engine's bucket), as the
run itself did.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prism_strategy.planning.scenario import Scenario, resolve_model, scenario_of
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.policies import BatchPolicy, EnvironmentPolicy, MemoryPolicy
from prism_strategy.specs.presets import build, load_platform


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


SCENARIO_VERSION = 2
"""The version of the stored scenario record; 1 is the flat bench config (migrate reads it)."""


def scenario_record(sc: Scenario) -> dict[str, Any]:
    """The scenario as stored (version 2): the model by name and architecture, the layout, and
    each policy's fields. Reading it back (config_scenario) gives the same scenario."""
    m = sc.model
    spec = {f.name: getattr(m.backbone, f.name) for f in dataclasses.fields(m.backbone)}
    vision = None if m.vision is None else {f.name: getattr(m.vision, f.name) for f in dataclasses.fields(m.vision)}
    return {
        "version": SCENARIO_VERSION,
        "model": m.backbone.name,
        "model_spec": spec,
        "vision": None if m.vision is None else m.vision.name,
        "vision_spec": vision,
        "mode": m.mode,
        "layout": {"nodes": sc.layout.nodes, "ranks_per_node": sc.layout.ranks_per_node},
        "batch": dataclasses.asdict(sc.batch),
        "precision": sc.precision,
        "memory": dataclasses.asdict(sc.memory),
        "environment": {
            "profile": sc.environment.profile,
            "variables": [list(v) for v in sc.environment.variables],
            "source": sc.environment.source,
        },
    }


def migrate(config: dict[str, Any]) -> dict[str, Any]:
    """A stored config's scenario record at SCENARIO_VERSION: version 2 as stored, version 1
    (the flat bench keys) converted; SpecError for a version this reader does not know."""
    if isinstance(config.get("scenario"), dict):
        record = config["scenario"]
        if record.get("version") != SCENARIO_VERSION:
            raise SpecError(
                f"stored scenario version {record.get('version')!r} is not one this prism-strategy reads "
                f"(it reads 1 and {SCENARIO_VERSION}); upgrade prism-strategy"
            )
        return record
    nproc, rpn = int(config["nproc"]), int(config.get("ranks_per_node") or config["nproc"])
    if nproc % rpn:
        raise SpecError(f"nproc {nproc} is not a multiple of ranks per node {rpn}")
    accum = int(config.get("grad_accum", 1))
    return {
        "version": SCENARIO_VERSION,
        **{k: config[k] for k in ("model", "model_spec", "vision", "vision_spec") if k in config},
        "mode": config.get("mode", "e2e"),
        "layout": {"nodes": nproc // rpn, "ranks_per_node": rpn},
        "batch": {
            "seq_len": int(config["seq_len"]),
            "micro_batch": int(config["micro_batch"]),
            "global_batch": int(config["micro_batch"]) * nproc * accum,
        },
        "precision": config.get("precision", "bf16-mixed"),
        "memory": {
            "checkpointing": config.get("ckpt_freq", 0),
            "optimizer": config.get("optimizer", "adamw"),
            "loss": config.get("loss", "upcast"),
            "compile": bool(config.get("compile", False)),
            "bucket_mb": config.get("bucket_mb"),
        },
    }


def config_scenario(config: dict[str, Any], platform: str | PlatformSpec = "cpu") -> Scenario:
    """The planner's scenario for a bench config (either version). platform: where the run is
    priced; census, commbench and the bench worker replay on CPU (gloo), hence the default."""
    r = migrate(config)
    plat = platform if isinstance(platform, PlatformSpec) else load_platform(platform)
    model = MultimodalSpec(
        backbone=resolve_model(config_model(r)),
        vision=None if (v := config_vision(r)) is None else resolve_model(v),
        mode=r.get("mode", "e2e"),
    )
    env = r.get("environment")
    return scenario_of(
        model,
        plat,
        Layout(**r["layout"]),
        batch=_policy(BatchPolicy, r["batch"], "batch"),
        precision=r.get("precision", "bf16-mixed"),
        memory=_policy(MemoryPolicy, r["memory"], "memory"),
        environment=None
        if not env
        else EnvironmentPolicy(
            profile=env.get("profile", ""),
            variables=tuple(tuple(v) for v in env.get("variables", ())),
            source=env.get("source", "stored run"),
        ),
    )


def _policy(cls: type, data: dict[str, Any], what: str) -> Any:
    try:
        return cls(**data)
    except TypeError as e:
        raise SpecError(f"stored scenario's {what} policy: {e}") from None
