"""A scenario = model + platform + layout + the run's policies (batch, precision, memory,
environment: specs/policies.py), built and validated once at each edge from user input."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.env_profile import load_env_profile, profile_names
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import collective_prefixes
from prism_strategy.specs.lora import resolve_lora
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.policies import (
    BATCH_KEYS,
    MEMORY_KEYS,
    PLATFORM_DEFAULT,
    SCENARIO_KEYS,
    BatchPolicy,
    EnvironmentPolicy,
    MemoryPolicy,
    batch_policy,
    batch_problem,
    check_keywords,
    checked_int,
    memory_policy,
)
from prism_strategy.specs.presets import load_model, load_platform, spec_from_module
from prism_strategy.specs.scenario import Scenario, image_tokens_of
from prism_strategy.specs.training import TrainingSpec, parse_ckpt, parse_optimizer


def resolve_model(model: Any) -> TransformerSpec:
    if isinstance(model, TransformerSpec):
        return model
    if isinstance(model, str):
        return load_model(model)
    if hasattr(model, "parameters") and hasattr(model, "named_modules"):
        return spec_from_module(model, name=type(model).__name__)
    raise SpecError(
        f"model must be a preset name, a config.json path, a TransformerSpec or an nn.Module, got {type(model).__name__}"
    )


def resolve_platform(platform: Any) -> PlatformSpec:
    """A PlatformSpec as given, else loaded from a preset name or a platform .toml path; any
    other type (None, a dict) is bad input named here, not a TypeError deep in pathlib."""
    if isinstance(platform, PlatformSpec):
        return platform
    if isinstance(platform, os.PathLike):
        platform = os.fspath(platform)
    if not isinstance(platform, str):
        raise SpecError(
            "platform must be a preset name (`prism-strategy platforms`), a platform .toml path or a "
            f"PlatformSpec, got {type(platform).__name__}"
        )
    return load_platform(platform)


def build_scenario(model: Any, **options: Any) -> Scenario:
    """Validated scenario; the keywords are `plan()`'s run options (see its docstring; ckpt_freq
    defaults to 0 here, "auto" there): SCENARIO_KEYS, the batch policy's and the memory policy's.
    ckpt_freq "auto" marks the training for the planner's checkpointing search."""
    check_keywords("build_scenario", options, (*SCENARIO_KEYS, *BATCH_KEYS, *MEMORY_KEYS))
    mm = (
        model
        if isinstance(model, MultimodalSpec)
        else MultimodalSpec(
            backbone=resolve_model(model),
            vision=resolve_model(options["vision"]) if options.get("vision") is not None else None,
            mode=options.get("mode", "e2e"),
            lora=resolve_lora(options.get("lora")),
        )
    )  # type: ignore[arg-type]
    plat = resolve_platform(options.get("platform", "aurora"))
    nodes, rpn = options.get("nodes", 1), options.get("ranks_per_node")
    checked_int("--nodes", nodes)
    rpn = plat.hardware.devices_per_node if rpn is None else checked_int("ranks per node", rpn)
    return scenario_of(
        mm,
        plat,
        Layout(nodes=nodes, ranks_per_node=rpn),
        batch=batch_policy(options),
        precision=options.get("precision", "bf16-mixed"),
        memory=memory_policy(options),
        environment=environment_of(plat, options.get("env_profile")),
    )


COLLECTIVE_PREFIXES = collective_prefixes()
"""The variables of a profile the environment policy carries: the collective libraries' own and
their transports' (specs/libraries.py)."""


def environment_of(platform: PlatformSpec, profile: Any) -> EnvironmentPolicy:
    """The environment policy for `profile`: None = the platform's own env_profile; a profile name
    (data/env_profiles) or a profile .toml path; or an EnvironmentPolicy as it is."""
    if isinstance(profile, EnvironmentPolicy):
        return profile
    if profile is None:
        return EnvironmentPolicy(profile=platform.env_profile, source=PLATFORM_DEFAULT)
    if not isinstance(profile, str) or not profile.strip():
        raise SpecError(f"--env-profile must be a profile name or a profile .toml path, got {profile!r}")
    values = load_env_profile(profile).values_for(platform.name)
    named = profile in profile_names()
    return EnvironmentPolicy(
        profile=profile if named else str(Path(profile).resolve()),  # what emit --from-plan loads again
        variables=tuple((k, v) for k, v in values.items() if k.startswith(COLLECTIVE_PREFIXES)),
        source=f"--env-profile {profile}" if named else f"file {profile}",
    )


def scenario_of(
    mm: MultimodalSpec,
    plat: PlatformSpec,
    layout: Layout,
    *,
    batch: BatchPolicy,
    precision: str,
    memory: MemoryPolicy,
    environment: EnvironmentPolicy | None = None,
) -> Scenario:
    """The one constructor: the policies checked against the model and the layout, and the
    estimates' TrainingSpec derived from them."""
    b, m = batch, memory
    k, policy = parse_ckpt(m.checkpointing)
    if b.image_tokens is not None and mm.vision is None:
        raise SpecError(
            f"--image-tokens {b.image_tokens} needs --vision ENCODER: image tokens come from a vision "
            "encoder; add one (e.g. --vision siglip2-base-patch16-224) or drop --image-tokens"
        )
    algo, impl = parse_optimizer(m.optimizer)
    training = TrainingSpec.from_precision(
        precision,
        seq_len=b.seq_len,
        micro_batch=b.micro_batch,
        global_batch=b.global_batch,
        grad_accum=b.grad_accum,
        mean_seq_len=b.mean_seq_len,
        ckpt_freq=k or 0,
        ckpt_policy=policy,
        ckpt_auto=k is None,
        optimizer=algo,
        optimizer_impl=impl,
        image_tokens=b.image_tokens,
        length_histogram=b.length_histogram,
        length_bucketing=b.length_bucketing,
        compile=bool(m.compile),
        bucket_mb=m.bucket_mb,
        loss=m.loss,
        varying_lengths=((b.mean_seq_len is not None and b.mean_seq_len < b.seq_len) or b.length_histogram is not None)
        if m.varying_lengths is None
        else bool(m.varying_lengths),
        expandable_segments=m.expandable_segments,
        compile_loss=bool(m.compile_loss),
    )
    seq_len = b.seq_len
    total = seq_len + image_tokens_of(mm, training)
    if total > mm.backbone.max_positions:
        extra = f" ({seq_len} text + {total - seq_len} image tokens)" if total != seq_len else ""
        raise SpecError(
            f"sequence {total}{extra} exceeds {mm.backbone.name}'s max positions "
            f"{mm.backbone.max_positions}; lower --seq-len"
        )
    if k is not None and k > mm.backbone.layers:
        raise SpecError(
            f"--ckpt-freq {k} is larger than the model's {mm.backbone.layers} blocks; use 0..{mm.backbone.layers} or auto"
        )
    if (problem := batch_problem(training, layout.world)) is not None:
        raise SpecError(problem)
    env = environment or EnvironmentPolicy(profile=plat.env_profile, source=PLATFORM_DEFAULT)
    return Scenario(model=mm, training=training, platform=plat, layout=layout, environment=env)


def split_options(options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(build_scenario's keywords, the rest) of a mapping of plan() keywords."""
    run = (*SCENARIO_KEYS, *BATCH_KEYS, *MEMORY_KEYS)
    return {k: v for k, v in options.items() if k in run}, {k: v for k, v in options.items() if k not in run}
