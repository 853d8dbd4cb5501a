"""The model as the estimators see it: an ordered stack of parts (vision encoder, projector,
backbone), each with its parameters, tokens per sample, and whether it trains or only passes
gradients through. Shared by the memory, compute and communication models."""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.specs import lora
from prism_strategy.specs.model import MultimodalSpec, TransformerSpec
from prism_strategy.specs.training import TrainingSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class Part:
    name: str
    spec: TransformerSpec | None
    """None for the projector (an MLP, not a transformer)."""
    params: int
    trains: bool
    backward: bool
    """Gradients flow through it: it trains, or a trainable part sits below it."""
    tokens: int
    """Tokens per sample this part processes."""
    tensors: int
    """Parameter tensors (per-tensor hooks, AccumulateGrad, DDP buckets)."""
    widths: tuple[int, int] = (0, 0)
    """Projector only: (input width, output width)."""
    lora_blocks: tuple[tuple[tuple[tuple[int, int, int], ...], int], ...] = ()
    """LoRA adapters only: per group of identical blocks, ((r, in, out) per adapted Linear, blocks)."""
    adapted: bool = False
    """LoRA adapters on its Linear layers (specs/lora.py): frozen weights, but the adapters keep
    their inputs for their weight gradients (lora_inputs, lora_rank_sum)."""
    lora_inputs: frozenset[str] = frozenset()
    """Adapted only: the block inputs its adapters keep (specs/lora.py saved_inputs)."""
    lora_rank_sum: float = 0.0
    """Adapted only: the adapters' ranks summed per block (their r-wide middles, kept by lora_B)."""

    @property
    def trainable(self) -> int:
        return self.params if self.trains else 0

    @property
    def frozen(self) -> int:
        return 0 if self.trains else self.params


def transformer_tensors(spec: TransformerSpec) -> int:
    """Parameter tensors (per-tensor hooks, AccumulateGrad, foreach lists): the spec's modules."""
    ends = spec.embed_modules() + spec.head_modules()
    return sum(len(m) for m in ends) + sum(n * sum(len(m) for m in b) for b, n in spec.stack_groups)


def image_tokens(model: MultimodalSpec, training: TrainingSpec) -> int:
    if model.vision is None:
        return 0
    return model.vision.num_patches if training.image_tokens is None else training.image_tokens


def backbone_tokens(model: MultimodalSpec, training: TrainingSpec) -> int:
    """Sequence the backbone sees per sample: text tokens plus image tokens (one image per sample)."""
    return training.seq_len + image_tokens(model, training)


def model_parts(model: MultimodalSpec, training: TrainingSpec) -> tuple[Part, ...]:
    """Bottom to top: vision encoder, projector, backbone."""
    parts: list[Part] = []
    below_trains = False
    if model.vision is not None:
        v, p = model.vision, model.projector
        assert p is not None
        parts.append(
            Part(
                name="vision",
                spec=v,
                params=v.total_params,
                trains=model.vision_trains,
                backward=model.vision_trains,
                tokens=v.positions,
                tensors=transformer_tensors(v),
            )
        )
        below_trains = model.vision_trains
        parts.append(
            Part(
                name="projector",
                spec=None,
                params=p.params,
                trains=True,
                backward=True,
                tokens=image_tokens(model, training),
                tensors=4,
                widths=(p.in_width, p.out_width),
            )
        )
        below_trains = True
    b = model.backbone
    parts.append(
        Part(
            name="backbone",
            spec=b,
            params=b.total_params,
            trains=model.backbone_trains,
            backward=model.backbone_trains or below_trains or model.lora is not None,
            tokens=backbone_tokens(model, training),
            tensors=transformer_tensors(b),
            adapted=model.lora is not None,
            **_lora_saved(b, model.lora),
        )
    )
    if model.lora is not None:
        parts.append(
            Part(
                name="adapters",
                spec=None,
                params=lora.adapter_params(b, model.lora),
                trains=True,
                backward=True,
                tokens=0,  # what they keep for backward is counted with the backbone's blocks (lora_inputs)
                tensors=lora.adapter_tensors(b, model.lora),
                lora_blocks=lora.adapter_blocks(b, model.lora),
            )
        )
    return tuple(parts)


def _lora_saved(b: TransformerSpec, spec: "lora.LoraSpec | None") -> dict[str, object]:
    if spec is None:
        return {}
    inputs, ranks = lora.saved_inputs(b, spec)
    return {"lora_inputs": inputs, "lora_rank_sum": ranks}


def trainable_params(parts: tuple[Part, ...]) -> int:
    return sum(p.trainable for p in parts)


def frozen_params(parts: tuple[Part, ...]) -> int:
    return sum(p.frozen for p in parts)


def largest_block(parts: tuple[Part, ...]) -> int:
    """Largest FSDP unit among transformer blocks (parameters)."""
    return max((p.spec.block_params for p in parts if p.spec is not None), default=0)


def root_unit(parts: tuple[Part, ...]) -> int:
    """Parameters outside every transformer block: embeddings, LM head, norms, projector."""
    return sum(p.spec.root_params if p.spec is not None else p.params for p in parts)
