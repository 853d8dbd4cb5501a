"""What the user trains: a transformer backbone, an optional vision encoder, a projector.

Parameter counts are exact for the architectures transformers builds (tests compare them with
models built on the meta device, family by family); every count is a sum over the module lists
below, which the engines also shard and bucket.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Literal

from prism_strategy.specs import lora
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.lora import LoraSpec

Norm = Literal["rmsnorm", "layernorm", "layernorm_noparam"]
QKNorm = Literal["none", "per_head", "full"]
Mlp = Literal["swiglu", "gelu"]
Kind = Literal["decoder", "vision"]


Tensor = tuple[int, int]
"""One parameter tensor: (elements, rows of dim 0) (FSDP2 shards and pads dim 0)."""
Module = list[Tensor]

MAX_LAYERS = 100_000
"""Most transformer blocks in one stack taken as a real model: the deepest trained transformer
published has 1,000 layers (DeepNet, Wang et al. 2022, arXiv:2203.00555), 100x that is taken as a
model, more as a mangled config. Every cost here is per group of identical blocks
(`stack_groups`), not per block, so the bound is about honesty, not speed (docs/model.md)."""


def _linear(out: int, inp: int, bias: bool) -> Module:
    return [(out * inp, out)] + ([(out, out)] if bias else [])


@dataclass(frozen=True, kw_only=True, slots=True)
class TransformerSpec:
    """One transformer stack, decoder (causal LM) or vision encoder (ViT/SigLIP/CLIP).

    The module lists (`embed_modules`, `stack`, `head_modules`) are the tensors transformers
    builds, in forward order; every parameter count is their sum."""

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
    """MLP width of a dense block (MoE: of the blocks that stay dense)."""
    vocab: int = 0
    """0 for vision encoders."""
    tied_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    mlp: Mlp = "swiglu"
    """swiglu: any gated MLP (gate, up, down: SwiGLU, GeGLU); gelu: two matrices (fc1, fc2)."""
    norm: Norm = "rmsnorm"
    qk_norm: QKNorm = "none"
    """per_head: RMSNorm over head_dim (Qwen3, Gemma 3); full: over heads*head_dim (OLMo-2/3, OLMoE)."""
    block_norms: int = 2
    """Norms per block: pre-attention and pre-MLP; Gemma 2/3 add post-attention and post-MLP (4)."""
    fused_qkv: bool = False
    """One q|k|v matrix (GPT-2, GPT-NeoX, Phi-3): the same parameters in one tensor."""
    fused_gate_up: bool = False
    """One gate|up matrix (Phi-3)."""
    position_embeddings: int = 0
    """Rows of a learned absolute position table (GPT-2's wpe); 0 with rotary positions."""
    max_positions: int = 0
    sliding_window: int = 0
    """Tokens a sliding-window attention layer attends to (0 = none); no parameters, only reach."""
    sliding_layers: int = 0
    """Layers that attend within sliding_window (Gemma 2: every other one; Gemma 3: 5 of 6)."""
    experts: int = 0
    """Routed experts per MoE block; 0 = dense model. Every expert is a gated MLP of expert_ffn."""
    experts_per_token: int = 0
    """Top-k: experts each token is routed to."""
    expert_ffn: int = 0
    shared_expert_ffn: int = 0
    """Qwen2-MoE's always-on shared expert (a gated MLP); 0 = none."""
    shared_expert_gate: bool = False
    """Qwen2-MoE: a sigmoid gate Linear(hidden, 1) on the shared expert."""
    dense_layers: int = 0
    """MoE stacks: blocks whose MLP stays dense (mlp_only_layers, decoder_sparse_step)."""
    image_size: int = 0
    patch_size: int = 0
    channels: int = 3
    pooling_head: bool = False
    """SigLIP attention-pooling head; VLMs drop it (vision_use_head=False)."""
    cls_token: bool = False
    """CLIP: a learned class embedding prepended to the patches (one more token and position)."""
    patch_bias: bool = True
    """Patch-embedding convolution bias (SigLIP yes, CLIP no)."""
    pre_norm: bool = False
    """CLIP's pre_layrnorm before the first block."""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn"):
            if getattr(self, f) <= 0:
                raise SpecError(f"model {self.name!r}: {f} must be > 0, got {getattr(self, f)}")
        if self.layers > MAX_LAYERS:
            raise SpecError(
                f"model {self.name!r}: {self.layers:,} layers is more than any real model has (at most "
                f"{MAX_LAYERS:,} taken, docs/model.md); check the layer count (num_hidden_layers)"
            )
        if self.heads % self.kv_heads:
            raise SpecError(
                f"model {self.name!r}: heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.kind == "decoder" and (self.vocab <= 0 or self.max_positions <= 0):
            raise SpecError(f"model {self.name!r}: a decoder needs vocab > 0 and max_positions > 0")
        if self.kind == "vision" and (self.image_size <= 0 or self.patch_size <= 0):
            raise SpecError(f"model {self.name!r}: a vision encoder needs image_size and patch_size > 0")
        if self.kind == "vision" and self.image_size < self.patch_size:
            raise SpecError(
                f"model {self.name!r}: image_size {self.image_size} is smaller than patch_size "
                f"{self.patch_size}: no patch fits"
            )
        if self.block_norms not in (2, 4):
            raise SpecError(f"model {self.name!r}: block_norms must be 2 or 4, got {self.block_norms}")
        if self.experts and not (
            0 < self.experts_per_token <= self.experts and self.expert_ffn > 0 and 0 <= self.dense_layers < self.layers
        ):
            raise SpecError(
                f"model {self.name!r}: an MoE needs 0 < experts_per_token <= experts, expert_ffn > 0 "
                f"and 0 <= dense_layers < layers"
            )

    # --- structure: the tensors transformers builds ----------------------------------------
    def norm_params(self, width: int) -> int:
        return {"rmsnorm": width, "layernorm": 2 * width, "layernorm_noparam": 0}[self.norm]

    def norm_module(self, width: int) -> Module:
        return {"rmsnorm": [(width, width)], "layernorm": [(width, width)] * 2, "layernorm_noparam": []}[self.norm]

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.moe else 0

    def attention_modules(self) -> list[Module]:
        h, q, kv, b = self.hidden, self.q_width, self.kv_width, self.qkv_bias
        mods = (
            [_linear(q + 2 * kv, h, b)] if self.fused_qkv else [_linear(q, h, b), _linear(kv, h, b), _linear(kv, h, b)]
        )
        if self.qk_norm != "none":
            qn, kn = (self.head_dim, self.head_dim) if self.qk_norm == "per_head" else (q, kv)
            mods += [[(qn, qn)], [(kn, kn)]]
        return mods + [_linear(h, q, self.o_bias)]

    def mlp_modules(self, width: int, bias: bool | None = None) -> list[Module]:
        h, f, b = self.hidden, width, self.mlp_bias if bias is None else bias
        if self.mlp == "gelu":
            return [_linear(f, h, b), _linear(h, f, b)]
        if self.fused_gate_up:
            return [_linear(2 * f, h, b), _linear(h, f, b)]
        return [_linear(f, h, b), _linear(f, h, b), _linear(h, f, b)]

    def moe_modules(self) -> list[Module]:
        """Router Linear(hidden, E), the experts as transformers 5 stores them (gate_up_proj
        [E, 2I, H] and down_proj [E, H, I]), then the shared expert and its gate."""
        h, e, i = self.hidden, self.experts, self.expert_ffn
        mods = [[(e * h, e)], [(e * 2 * i * h, e)], [(e * h * i, e)]]
        if self.shared_expert_ffn:
            mods += self.mlp_modules(self.shared_expert_ffn, bias=False)
        return mods + ([[(h, 1)]] if self.shared_expert_gate else [])

    def block_modules(self, sparse: bool = False) -> list[Module]:
        norm, extra = self.norm_module(self.hidden), self.block_norms == 4
        mlp = self.moe_modules() if sparse else self.mlp_modules(self.ffn)
        mods = [norm, *self.attention_modules(), norm, *([norm] if extra else []), *mlp, *([norm] if extra else [])]
        return [m for m in mods if m]

    @property
    def stack(self) -> list[list[Module]]:
        """Each block's modules, bottom to top (an MoE stack's dense blocks first): one entry per
        block, for tests on small models; the estimators read `stack_groups`."""
        return [mods for mods, n in self.stack_groups for _ in range(n)]

    @property
    def stack_groups(self) -> list[tuple[list[Module], int]]:
        """The stack as (a block's modules, how many such blocks), bottom to top: identical blocks
        counted once, so a sum over the stack costs the same at 28 or 100,000 layers."""
        groups = [
            (self.block_modules(False), self.layers - self.moe_layers),
            (self.block_modules(True), self.moe_layers),
        ]
        return [(mods, n) for mods, n in groups if n > 0]

    def embed_modules(self) -> list[Module]:
        h = self.hidden
        if self.kind == "vision":
            c, p, n = self.channels, self.patch_size, self.positions
            return [
                m
                for m in (
                    [(h, h)] if self.cls_token else [],
                    [(c * p * p * h, h)] + ([(h, h)] if self.patch_bias else []),
                    [(n * h, n)],
                )
                if m
            ]
        pos = [[(self.position_embeddings * h, self.position_embeddings)]] if self.position_embeddings else []
        return [[(self.vocab * h, self.vocab)]] + pos

    def head_modules(self) -> list[Module]:
        """Final norm and LM head (untied); vision: post-layernorm, the pooling head, CLIP's pre-layernorm
        (listed here, outside every block, though it runs first)."""
        h, norm = self.hidden, self.norm_module(self.hidden)
        if self.kind == "decoder":
            return [m for m in [norm] + ([] if self.tied_embeddings else [[(self.vocab * h, self.vocab)]]) if m]
        mods = [norm]
        if self.pooling_head:
            mods += [
                [(h, 1), (3 * h * h, 3 * h), (3 * h, 3 * h)],
                _linear(h, h, True),
                norm,
                *self.mlp_modules(self.ffn, bias=True),
            ]
        return [m for m in mods + ([norm] if self.pre_norm else []) if m]

    # --- parameter counts (exact) -------------------------------------------------------
    @staticmethod
    def _count(mods: list[Module]) -> int:
        return sum(n for m in mods for n, _ in m)

    @property
    def block_params(self) -> int:
        """The largest block (the largest FSDP unit among the blocks)."""
        return _param_counts(self)[0]

    @property
    def stack_params(self) -> int:
        return _param_counts(self)[1]

    def _matmul(self, sparse: bool, routed: int) -> int:
        """Matmul weights of one block, with `routed` experts of each sparse block."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        n = h * q + 2 * h * kv + q * h
        if not sparse:
            return n + (3 if self.mlp == "swiglu" else 2) * h * self.ffn
        n += self.experts * h + routed * 3 * h * self.expert_ffn + 3 * h * self.shared_expert_ffn
        return n + (h if self.shared_expert_gate else 0)

    def _mean_matmul(self, routed: int) -> float:
        d = self.layers - self.moe_layers
        return (d * self._matmul(False, 0) + self.moe_layers * self._matmul(True, routed)) / self.layers

    @property
    def block_matmul_params(self) -> float:
        """Weights of the block's F.linear calls, mean over the blocks: what autocast casts to the
        compute dtype. MoE experts are not among them: transformers' grouped_mm experts are not
        autocast-enabled and run at the weights' dtype (integrations/moe.py, _grouped_mm)."""
        return self._mean_matmul(0)

    @property
    def active_matmul_params(self) -> float:
        """Weights one token passes through per block (2 FLOPs each in forward), mean over the
        blocks: MoE blocks count the router, the top-k experts and the shared expert."""
        return self._mean_matmul(self.experts_per_token)

    @property
    def active_ffn(self) -> float:
        """MLP width one token passes through per block, mean over the blocks (MoE: top-k x
        expert_ffn + shared expert): the MLP's saved activations scale with it."""
        d = self.layers - self.moe_layers
        sparse = self.experts_per_token * self.expert_ffn + self.shared_expert_ffn
        return (d * self.ffn + self.moe_layers * sparse) / self.layers

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2 if self.kind == "vision" else 0

    @property
    def positions(self) -> int:
        """Vision encoders: tokens per image inside the encoder (patches, plus CLIP's class token)."""
        return self.num_patches + (1 if self.cls_token else 0)

    @property
    def embed_params(self) -> int:
        return _param_counts(self)[2]

    @property
    def head_params(self) -> int:
        """Final norm, LM head (untied) or the vision post-layernorm, pooling head, pre-layernorm."""
        return _param_counts(self)[3]

    @property
    def total_params(self) -> int:
        return self.embed_params + self.stack_params + self.head_params

    @property
    def root_params(self) -> int:
        """Parameters outside the transformer blocks (the FSDP root unit when blocks are wrapped)."""
        return self.total_params - self.stack_params


@functools.lru_cache(maxsize=256)  # bounded: a loop over many configs must not keep them all
def _param_counts(spec: TransformerSpec) -> tuple[int, int, int, int]:
    """(largest block, stack, embeddings, head) of a spec: counted once per spec (frozen, hashable),
    since the planner asks for them thousands of times per plan."""
    blocks = [(spec._count(b), n) for b, n in spec.stack_groups]
    largest, stack = max(c for c, _ in blocks), sum(c * n for c, n in blocks)
    return largest, stack, spec._count(spec.embed_modules()), spec._count(spec.head_modules())


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
    lora: LoraSpec | None = None
    """LoRA adapters on the backbone (specs/lora.py): its base weights frozen, the adapters train."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.mode != "e2e" and self.vision is None:
            raise SpecError(
                f"mode {self.mode!r} trains a projector: add a vision encoder with --vision (e.g. siglip2-so400m-patch14-384)"
            )
        if self.backbone.kind != "decoder":
            raise SpecError(f"backbone {self.backbone.name!r} is a {self.backbone.kind} model; use a decoder")
        if self.vision is not None and self.vision.kind != "vision":
            raise SpecError(f"--vision {self.vision.name!r} is not a vision encoder")
        if self.lora is not None:
            if self.mode != "e2e":
                raise SpecError(f"LoRA with mode {self.mode!r} is not modelled; LoRA adapts the backbone in mode e2e")
            lora.adapted(self.backbone, self.lora)  # a target that is no Linear of the model: SpecError now

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
        return self.mode == "e2e" and self.lora is None

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
        extra = lora.adapter_params(self.backbone, self.lora) if self.lora else 0
        return (self.vision.total_params if self.vision else 0) + (p.params if p else 0) + extra

    @property
    def trainable_params(self) -> int:
        n = self.backbone.total_params if self.backbone_trains else 0
        if self.vision_trains:
            n += self.vision.total_params  # type: ignore[union-attr]
        if self.projector is not None:
            n += self.projector.params
        return n + (lora.adapter_params(self.backbone, self.lora) if self.lora else 0)

    @property
    def frozen_params(self) -> int:
        return self.total_params - self.trainable_params


def replace(spec: TransformerSpec, **changes) -> TransformerSpec:
    return dataclasses.replace(spec, **changes)
