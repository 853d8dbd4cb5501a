"""What the user trains: a transformer backbone, an optional vision encoder, a projector.

Parameter counts are exact for the architectures transformers builds (tests compare them with
models built on the meta device); every count is a formula over the fields below.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from prism_strategy.specs.errors import SpecError

Norm = Literal["rmsnorm", "layernorm", "layernorm_noparam"]
QKNorm = Literal["none", "per_head", "full"]
Mlp = Literal["swiglu", "gelu"]
Kind = Literal["decoder", "vision"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TransformerSpec:
    """One transformer stack, decoder (causal LM) or vision encoder (ViT/SigLIP)."""

    name: str
    kind: Kind = "decoder"
    hf_model_type: str = "llama"
    """transformers' model_type this architecture corresponds to (for building it on meta)."""
    source: str = ""
    """Where the numbers came from (a config.json, a paper)."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int = 0
    """0 for vision encoders."""
    tied_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    mlp: Mlp = "swiglu"
    norm: Norm = "rmsnorm"
    qk_norm: QKNorm = "none"
    """per_head: RMSNorm over head_dim (Qwen3); full: over heads*head_dim (OLMo-2/3)."""
    max_positions: int = 0
    image_size: int = 0
    patch_size: int = 0
    channels: int = 3
    pooling_head: bool = False
    """SigLIP attention-pooling head; VLMs drop it (vision_use_head=False)."""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn"):
            if getattr(self, f) <= 0:
                raise SpecError(f"model {self.name!r}: {f} must be > 0, got {getattr(self, f)}")
        if self.heads % self.kv_heads:
            raise SpecError(f"model {self.name!r}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")
        if self.kind == "decoder" and (self.vocab <= 0 or self.max_positions <= 0):
            raise SpecError(f"model {self.name!r}: a decoder needs vocab > 0 and max_positions > 0")
        if self.kind == "vision" and (self.image_size <= 0 or self.patch_size <= 0):
            raise SpecError(f"model {self.name!r}: a vision encoder needs image_size and patch_size > 0")

    # --- parameter counts (exact) -------------------------------------------------------
    def norm_params(self, width: int) -> int:
        return {"rmsnorm": width, "layernorm": 2 * width, "layernorm_noparam": 0}[self.norm]

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def attn_params(self) -> int:
        h, q, kv = self.hidden, self.q_width, self.kv_width
        n = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            n += q + 2 * kv
        if self.o_bias:
            n += h
        n += {"none": 0, "per_head": 2 * self.head_dim, "full": q + kv}[self.qk_norm]
        return n

    @property
    def mlp_params(self) -> int:
        h, f = self.hidden, self.ffn
        if self.mlp == "swiglu":
            return 3 * h * f + ((2 * f + h) if self.mlp_bias else 0)
        return 2 * h * f + ((f + h) if self.mlp_bias else 0)

    @property
    def block_params(self) -> int:
        return self.attn_params + self.mlp_params + 2 * self.norm_params(self.hidden)

    @property
    def block_matmul_params(self) -> int:
        """Weights that take part in a matmul per token (2 FLOPs each in forward)."""
        h, q, kv, f = self.hidden, self.q_width, self.kv_width, self.ffn
        return h * q + 2 * h * kv + q * h + (3 if self.mlp == "swiglu" else 2) * h * f

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2 if self.kind == "vision" else 0

    @property
    def embed_params(self) -> int:
        if self.kind == "vision":
            h = self.hidden
            return self.channels * self.patch_size**2 * h + h + self.num_patches * h
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        """Final norm, LM head (untied) or SigLIP post-layernorm and pooling head."""
        h = self.hidden
        n = self.norm_params(h)
        if self.kind == "decoder":
            return n + (0 if self.tied_embeddings else self.vocab * h)
        if self.pooling_head:
            n += h + (4 * h * h + 4 * h) + self.norm_params(h) + (2 * h * self.ffn + self.ffn + h)
        return n

    @property
    def total_params(self) -> int:
        return self.embed_params + self.layers * self.block_params + self.head_params

    @property
    def root_params(self) -> int:
        """Parameters outside the transformer blocks (the FSDP root unit when blocks are wrapped)."""
        return self.total_params - self.layers * self.block_params


@dataclass(frozen=True, kw_only=True, slots=True)
class ProjectorSpec:
    """LLaVA-style 2-layer MLP: Linear(enc, hid) + GELU + Linear(hid, hid), with biases."""

    in_width: int
    out_width: int

    @property
    def params(self) -> int:
        i, o = self.in_width, self.out_width
        return i * o + o + o * o + o


Mode = Literal["e2e", "projector", "encoder-projector"]
MODES: tuple[str, ...] = ("e2e", "projector", "encoder-projector")


@dataclass(frozen=True, kw_only=True, slots=True)
class MultimodalSpec:
    """Backbone + optional vision encoder + projector, and which of them train."""

    backbone: TransformerSpec
    vision: TransformerSpec | None = None
    mode: Mode = "e2e"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.mode != "e2e" and self.vision is None:
            raise SpecError(f"mode {self.mode!r} trains a projector: add a vision encoder with --vision (e.g. siglip2-so400m-patch14-384)")
        if self.backbone.kind != "decoder":
            raise SpecError(f"backbone {self.backbone.name!r} is a {self.backbone.kind} model; use a decoder")
        if self.vision is not None and self.vision.kind != "vision":
            raise SpecError(f"--vision {self.vision.name!r} is not a vision encoder")

    @property
    def projector(self) -> ProjectorSpec | None:
        if self.vision is None:
            return None
        return ProjectorSpec(in_width=self.vision.hidden, out_width=self.backbone.hidden)

    @property
    def name(self) -> str:
        return self.backbone.name + (f"+{self.vision.name}" if self.vision else "")

    # Which parts train, by mode.
    @property
    def backbone_trains(self) -> bool:
        return self.mode == "e2e"

    @property
    def vision_trains(self) -> bool:
        return self.vision is not None and self.mode in ("e2e", "encoder-projector")

    @property
    def projector_trains(self) -> bool:
        return self.vision is not None

    @property
    def total_params(self) -> int:
        return self.backbone.total_params + self.frozen_or_trainable_extra

    @property
    def frozen_or_trainable_extra(self) -> int:
        p = self.projector
        return (self.vision.total_params if self.vision else 0) + (p.params if p else 0)

    @property
    def trainable_params(self) -> int:
        n = self.backbone.total_params if self.backbone_trains else 0
        if self.vision_trains:
            n += self.vision.total_params  # type: ignore[union-attr]
        if self.projector is not None:
            n += self.projector.params
        return n

    @property
    def frozen_params(self) -> int:
        return self.total_params - self.trainable_params


def replace(spec: TransformerSpec, **changes) -> TransformerSpec:
    return dataclasses.replace(spec, **changes)
