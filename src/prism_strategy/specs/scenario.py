"""A scenario = model + platform + layout + the run's policies (batch, precision, memory,
environment: specs/policies.py). Built and validated once at each edge (inputs/scenario.py
scenario_of, from inputs/); the estimates and the planner read it, never keyword lists."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.lora import LoraSpec
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.policies import PLATFORM_DEFAULT, BatchPolicy, EnvironmentPolicy, MemoryPolicy
from prism_strategy.specs.presets import model_argument, model_names, platform_argument
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
            "lora": lora_inputs(m) if m.lora else None,
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


ROW_SCHEMA = 1
"""Version of the stored scenario row (scenario_to_row). A row without "schema" is version 0: the
flat bench config stored before it (inputs/stored.py scenario_from_row reads both)."""
ROW_KEYS = (
    "schema",
    "model",
    "model_spec",
    "vision",
    "vision_spec",
    "mode",
    "lora",
    "layout",
    "batch",
    "precision",
    "memory",
    "environment",
)
"""The keys scenario_to_row writes ("lora" only for a LoRA run); a stored run's other keys are the
run's own facts."""


def scenario_to_row(sc: Scenario) -> dict[str, Any]:
    """The scenario as stored (a results row's `config`, a bench or census launch's base): the model
    by label and architecture, the layout, and each policy's fields; JSON-ready. The platform is not
    in it (a run is priced on the platform it is read with); the environment is None when it is the
    platform's own; "lora" (LoraConfig's r and target_modules, specs/lora.py lora_row) only for a
    LoRA run, so a full-training row is as it always was. inputs/stored.py scenario_from_row reads
    it back to the same Scenario."""
    m = sc.model
    default_env = EnvironmentPolicy(profile=sc.platform.env_profile, source=PLATFORM_DEFAULT)
    env = sc.environment
    return {
        "schema": ROW_SCHEMA,
        "model": model_label(m.backbone),
        "model_spec": spec_fields(m.backbone),
        "vision": None if m.vision is None else model_label(m.vision),
        "vision_spec": None if m.vision is None else spec_fields(m.vision),
        "mode": m.mode,
        **({"lora": lora_row(m.lora)} if m.lora else {}),
        "layout": {"nodes": sc.layout.nodes, "ranks_per_node": sc.layout.ranks_per_node},
        "batch": asdict(sc.batch),
        "precision": sc.precision,
        "memory": asdict(sc.memory),
        "environment": None
        if env == default_env
        else {"profile": env.profile, "variables": [list(v) for v in env.variables], "source": env.source},
    }


def lora_row(spec: LoraSpec) -> dict[str, Any]:
    """A LoRA run's adapters as stored: adapter_config.json's names (specs/lora.py lora_from_dict
    reads them back); where they were read is no part of the run."""
    targets = list(spec.targets) if isinstance(spec.targets, tuple) else spec.targets
    return {"r": spec.rank, "target_modules": targets}


def spec_fields(spec: TransformerSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in fields(spec)}


def model_label(spec: TransformerSpec) -> str:
    """The preset name, or the absolute path of the file the architecture was loaded from (the
    row keeps the architecture itself too: files move)."""
    arg = model_argument(spec)
    return arg if arg in model_names() or not Path(arg).exists() else str(Path(arg).resolve())


def lora_inputs(m: Any) -> dict[str, Any]:
    """`inputs.lora` of plan --json: rank, the adapted Linear layers, trainable parameters, the source."""
    from prism_strategy.specs import lora

    names = sorted({a[0] for a in lora.adapted(m.backbone, m.lora)})
    return {
        "rank": m.lora.rank,
        "targets": names,
        "params": lora.adapter_params(m.backbone, m.lora),
        "source": m.lora.source,
        "note": lora.describe(m.backbone, m.lora) + " (r x (in + out) per adapted Linear); the base is frozen",
    }
