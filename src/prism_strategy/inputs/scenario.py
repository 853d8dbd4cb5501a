"""The one builder of a Scenario: model + platform + layout + the run's policies (batch,
precision, memory, environment, what was measured: specs/policies.py), validated once, with the
env profile and the calibration applied to the platform here and nowhere else. Every edge (the
CLI's flags, --script, a framework config, a stored row, a published record) fills the policies
and calls `build_scenario` (or `scenario_of` with a model and platform already resolved);
planning/ takes the Scenario whole (planning/planner.py plan)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prism_strategy.estimate.calibration import calibrated_platform
from prism_strategy.estimate.environment import platform_under
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.env_profile import load_env_profile, profile_names
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import collective_prefixes
from prism_strategy.specs.lora import resolve_lora
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.policies import (
    PLATFORM_DEFAULT,
    BatchPolicy,
    EnvironmentPolicy,
    MeasuredPolicy,
    MemoryPolicy,
    batch_problem,
    checked_int,
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


def multimodal_of(model: Any, *, mode: str = "e2e", vision: Any = None, lora: Any = None) -> MultimodalSpec:
    """What trains: the model (resolve_model; a MultimodalSpec as it is), its vision encoder and
    LoRA adapters (specs/lora.py resolve_lora)."""
    if isinstance(model, MultimodalSpec):
        return model
    return MultimodalSpec(
        backbone=resolve_model(model),
        vision=resolve_model(vision) if vision is not None else None,
        mode=mode,  # type: ignore[arg-type]
        lora=resolve_lora(lora),
    )


def build_scenario(
    model: Any,
    platform: Any = "aurora",
    *,
    nodes: int = 1,
    ranks_per_node: int | None = None,
    mode: str = "e2e",
    vision: Any = None,
    lora: Any = None,
    batch: BatchPolicy = BatchPolicy(),
    memory: MemoryPolicy = MemoryPolicy(),
    precision: str = "bf16-mixed",
    env_profile: Any = None,
    measured: MeasuredPolicy = MeasuredPolicy(),
) -> Scenario:
    """The validated Scenario of a run, its platform under the env profile and calibrated.
    model: a preset name, config.json path, TransformerSpec, nn.Module or MultimodalSpec (then mode,
    vision and lora are its own); platform: a preset name, platform .toml path or PlatformSpec;
    ranks_per_node: None = the platform's devices per node; env_profile: None = the platform's own,
    a profile name or .toml path, or an EnvironmentPolicy (environment_of); memory.checkpointing
    "auto" marks the training for the planner's checkpointing search."""
    mm = multimodal_of(model, mode=mode, vision=vision, lora=lora)
    plat = resolve_platform(platform)
    checked_int("--nodes", nodes)
    rpn = plat.hardware.devices_per_node if ranks_per_node is None else checked_int("ranks per node", ranks_per_node)
    sc = scenario_of(
        mm,
        plat,
        Layout(nodes=nodes, ranks_per_node=rpn),
        batch=batch,
        precision=precision,
        memory=memory,
        environment=environment_of(plat, env_profile),
    )
    return sc.with_platform(platform_as_measured(sc.platform, measured))


def platform_as_measured(p: PlatformSpec, measured: MeasuredPolicy) -> PlatformSpec:
    """p calibrated (estimate/calibration.py: a file, "auto" or "none"), with the measured collective
    curves and the measured per-rank spread the run is priced with."""
    p = calibrated_platform(p, measured.calibration)
    if measured.comm_curves:
        p = p.with_values(measured_collectives=tuple(measured.comm_curves))
    if measured.rank_jitter is not None:
        p = p.with_values(rank_jitter=measured.rank_jitter)
    return p


def check_ranks_per_node(sc: Scenario, asked: int | None) -> None:
    """A planned job places one rank per device: more ranks per node than devices is bad input
    (a bench launch may place more, on CPU)."""
    dev = sc.platform.hardware.devices_per_node
    if asked is not None and asked > dev:
        raise SpecError(
            f"--ranks-per-node {asked} exceeds {sc.platform.name}'s {dev} devices per node "
            f"(one rank per device); use 1..{dev}"
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
    """The one constructor: the policies checked against the model and the layout, the estimates'
    TrainingSpec derived from them, and the platform as the environment runs it (estimate/
    environment.py platform_under: applied here once; a no-op on a platform already under it)."""
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
    return Scenario(model=mm, training=training, platform=platform_under(plat, env), layout=layout, environment=env)
