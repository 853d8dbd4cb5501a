"""A small Llama-style decoder (RMSNorm, RoPE attention, SwiGLU MLP) for examples and tests.

Shaped like a Hugging Face model where it matters to `wrap()`: the blocks sit in
`model.layers` and the class lists `_no_split_modules`, so block classes are found the same
way as for a transformers model. An optional projector maps "image features" into the
sequence (the projector-only / frozen-backbone case of DOMAIN 2).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, kw_only=True, slots=True)
class TinyConfig:
    vocab: int = 128
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    ffn: int = 64
    max_seq: int = 64
    projector_in: int = 0
    """> 0: a projector maps features of this width to `hidden` and prepends them."""
    unused_modality: bool = False
    """Add a second projector the forward never uses (an unused-parameter trap for DDP)."""


def _rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding over the last dim of (batch, heads, seq, head_dim)."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    ang = torch.outer(torch.arange(seq, device=x.device, dtype=torch.float32), inv)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden, bias=False)
        self.out = nn.Linear(cfg.hidden, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(_rope(q), _rope(k), v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden, 2 * cfg.ffn, bias=False)
        self.down = nn.Linear(cfg.ffn, cfg.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class TinyBlock(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.hidden)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.hidden)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TinyLlama(nn.Module):
    _no_split_modules = ["TinyBlock"]

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(TinyBlock(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.projector = nn.Linear(cfg.projector_in, cfg.hidden) if cfg.projector_in else None
        self.audio_projector = nn.Linear(cfg.projector_in or cfg.hidden, cfg.hidden) if cfg.unused_modality else None

    def forward(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for the text positions, shape (batch, seq, vocab)."""
        x = self.embed(tokens)
        n_prefix = 0
        if self.projector is not None and features is not None:
            x = torch.cat((self.projector(features), x), dim=1)
            n_prefix = features.shape[1]
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return logits[:, n_prefix:].clone() if n_prefix else logits


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, mean over the batch's tokens (in fp32)."""
    return F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def freeze_backbone(model: TinyLlama) -> None:
    """Projector-only training: everything but the projector is frozen."""
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith("projector."))


def synthetic_batch(
    step: int, *, batch: int, seq: int, vocab: int, features: int = 0, n_feat_tokens: int = 4, seed: int = 1234
) -> dict[str, torch.Tensor]:
    """The global batch for a step, identical on every rank (each rank then takes its slice)."""
    g = torch.Generator().manual_seed(seed + step)
    out = {"tokens": torch.randint(0, vocab, (batch, seq), generator=g)}
    if features:
        out["features"] = torch.randn(batch, n_feat_tokens, features, generator=g)
    return out
