"""A scenario = model + training + platform + layout, built and validated from user input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prism_strategy.planning.search import batch_problem
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.presets import (
    load_model,
    load_platform,
    model_argument,
    platform_argument,
    spec_from_module,
)
from prism_strategy.specs.training import TrainingSpec, parse_ckpt, parse_optimizer


@dataclass(frozen=True, kw_only=True, slots=True)
class Scenario:
    model: MultimodalSpec
    training: TrainingSpec
    platform: PlatformSpec
    layout: Layout

    def with_layout(self, layout: Layout) -> "Scenario":
        return Scenario(model=self.model, training=self.training, platform=self.platform, layout=layout)

    def with_training(self, training: TrainingSpec) -> "Scenario":
        return Scenario(model=self.model, training=training, platform=self.platform, layout=self.layout)

    def with_platform(self, platform: PlatformSpec) -> "Scenario":
        return Scenario(model=self.model, training=self.training, platform=platform, layout=self.layout)

    def inputs(self) -> dict[str, Any]:
        m, t = self.model, self.training
        return {
            "model": m.backbone.name,
            "vision": m.vision.name if m.vision else None,
            "mode": m.mode,
            "platform": self.platform.name,
            "nodes": self.layout.nodes,
            "ranks_per_node": self.layout.ranks_per_node,
            "world_size": self.layout.world,
            "seq_len": t.seq_len,
            "mean_seq_len": t.mean_seq_len,
            "image_tokens": _image_tokens(m, t),
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


def _image_tokens(m: MultimodalSpec, t: TrainingSpec) -> int:
    if m.vision is None:
        return 0
    return m.vision.num_patches if t.image_tokens is None else t.image_tokens


MAX_COUNT = 2**24
"""Largest node count, batch or accumulation accepted: far above any real job (the largest systems
have ~10^4 nodes), and low enough that a typo fails at once instead of after minutes of search."""


def _int(name: str, v: Any, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{name} must be an integer, got {v!r}")
    if v < minimum:
        raise SpecError(f"{name} must be >= {minimum}, got {v}")
    if v > maximum:
        raise SpecError(f"{name} must be <= {maximum:,} (no real job is larger), got {v}")
    return v


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


def build_scenario(
    model: Any,
    *,
    mode: str = "e2e",
    platform: str | PlatformSpec = "aurora",
    nodes: int = 1,
    ranks_per_node: int | None = None,
    seq_len: int = 1024,
    micro_batch: int | None = None,
    global_batch: int | None = None,
    ckpt_freq: int | str = 0,
    precision: str = "bf16-mixed",
    optimizer: str = "adamw",
    vision: str | TransformerSpec | None = None,
    image_tokens: int | None = None,
    compile: bool = False,
    grad_accum: int | None = None,
    mean_seq_len: int | None = None,
    bucket_mb: float | None = None,
    loss: str = "upcast",
    varying_lengths: bool | None = None,
    expandable_segments: bool | None = None,
    compile_loss: bool = False,
) -> Scenario:
    """Validated scenario; the arguments are `plan()`'s (see its docstring). ckpt_freq "auto" marks
    the training for the planner's checkpointing search."""
    mm = (
        model
        if isinstance(model, MultimodalSpec)
        else MultimodalSpec(
            backbone=resolve_model(model), vision=resolve_model(vision) if vision is not None else None, mode=mode
        )
    )  # type: ignore[arg-type]
    plat = platform if isinstance(platform, PlatformSpec) else load_platform(platform)
    _int("--nodes", nodes)
    rpn = plat.devices_per_node if ranks_per_node is None else _int("ranks per node", ranks_per_node)
    _int("--seq-len", seq_len)
    for name, v in (
        ("--micro-batch", micro_batch),
        ("--global-batch", global_batch),
        ("--grad-accum", grad_accum),
        ("--mean-seq-len", mean_seq_len),
    ):
        if v is not None:
            _int(name, v)
    k, policy = parse_ckpt(ckpt_freq)
    if image_tokens is not None:
        _int("--image-tokens", image_tokens, 0)
        if mm.vision is None:
            raise SpecError(
                f"--image-tokens {image_tokens} needs --vision ENCODER: image tokens come from a vision "
                "encoder; add one (e.g. --vision siglip2-base-patch16-224) or drop --image-tokens"
            )
    if compile_loss and not compile:
        raise SpecError("--compile-loss needs --compile: the loss is compiled with the model, or not at all")
    algo, impl = parse_optimizer(optimizer)
    training = TrainingSpec.from_precision(
        precision,
        seq_len=seq_len,
        micro_batch=micro_batch,
        global_batch=global_batch,
        grad_accum=grad_accum,
        mean_seq_len=mean_seq_len,
        ckpt_freq=k or 0,
        ckpt_policy=policy,
        ckpt_auto=k is None,
        optimizer=algo,
        optimizer_impl=impl,
        image_tokens=image_tokens,
        compile=bool(compile),
        bucket_mb=bucket_mb,
        loss=loss,
        varying_lengths=(mean_seq_len is not None and mean_seq_len < seq_len)
        if varying_lengths is None
        else bool(varying_lengths),
        expandable_segments=expandable_segments,
        compile_loss=bool(compile_loss),
    )
    total = seq_len + _image_tokens(mm, training)
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
    layout = Layout(nodes=nodes, ranks_per_node=rpn)
    if (problem := batch_problem(training, layout.world)) is not None:
        raise SpecError(problem)
    return Scenario(model=mm, training=training, platform=plat, layout=layout)
