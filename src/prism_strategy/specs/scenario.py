"""A scenario = model + platform + layout + the run's policies (batch, precision, memory,
environment: specs/policies.py). Built and validated once at each edge (planning/scenario.py
scenario_of, from inputs/); the estimates and the planner read it, never keyword lists."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.policies import BatchPolicy, EnvironmentPolicy, MemoryPolicy
from prism_strategy.specs.presets import model_argument, platform_argument
from prism_strategy.specs.training import TrainingSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    model: MultimodalSpec
    platform: PlatformSpec
    layout: Layout
    training: TrainingSpec
    """The estimates' view of the batch, precision and memory policies, built from them once
    (scenario_of); the planner's search varies it (the checkpointing tried, the timed sequence)."""
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    """The env profile the ranks run under and the collective variables it sets."""

    def with_layout(self, layout: Layout) -> "Scenario":
        return replace(self, layout=layout)

    def with_training(self, training: TrainingSpec) -> "Scenario":
        return replace(self, training=training)

    def with_platform(self, platform: PlatformSpec) -> "Scenario":
        return replace(self, platform=platform)

    @property
    def batch(self) -> BatchPolicy:
        t = self.training
        return BatchPolicy(
            seq_len=t.seq_len,
            mean_seq_len=t.mean_seq_len,
            micro_batch=t.micro_batch,
            global_batch=t.global_batch,
            grad_accum=t.grad_accum,
            image_tokens=t.image_tokens,
        )

    @property
    def memory(self) -> MemoryPolicy:
        t = self.training
        return MemoryPolicy(
            checkpointing="auto" if t.ckpt_auto else t.ckpt_name,
            loss=t.loss,
            optimizer=t.optimizer_name,
            compile=t.compile,
            compile_loss=t.compile_loss,
            bucket_mb=t.bucket_mb,
            expandable_segments=t.expandable_segments,
            varying_lengths=t.varying_lengths,
        )

    @property
    def precision(self) -> str:
        return self.training.precision

    def inputs(self) -> dict[str, Any]:
        m, t = self.model, self.training
        return {
            "model": m.backbone.name,
            "vision": m.vision.name if m.vision else None,
            "mode": m.mode,
            "platform": self.platform.name,
            "env_profile": self.environment.profile,
            "nodes": self.layout.nodes,
            "ranks_per_node": self.layout.ranks_per_node,
            "world_size": self.layout.world,
            "seq_len": t.seq_len,
            "mean_seq_len": t.mean_seq_len,
            "image_tokens": image_tokens_of(m, t),
            "micro_batch": t.micro_batch,
            "global_batch": t.global_batch,
            "grad_accum": t.grad_accum,
            "ckpt_freq": "auto" if t.ckpt_auto else t.ckpt_name,
            "precision": t.precision,
            "optimizer": t.optimizer_name,
            "optimizer_impl": t.optimizer_impl_on(self.platform.device),
            "loss": t.loss,
            "compile": t.compile,
            "compile_loss": t.compile_loss,
            "model_argument": model_argument(m.backbone),
            "vision_argument": model_argument(m.vision) if m.vision else None,
            "platform_argument": platform_argument(self.platform),
            "params": {
                "total": m.total_params,
                "trainable": m.trainable_params,
                "frozen": m.frozen_params,
                "source": m.backbone.source,
            },
        }


def image_tokens_of(m: MultimodalSpec, t: TrainingSpec) -> int:
    if m.vision is None:
        return 0
    return m.vision.num_patches if t.image_tokens is None else t.image_tokens
