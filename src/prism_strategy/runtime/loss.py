"""The loss kernel wrap(loss=...) installs (issue 17 item 3; the memory model's loss_bytes_per_token).

- "upcast": the model's own loss (HF transformers' ForCausalLMLoss casts the logits to fp32); nothing
  is changed.
- "chunked": the causal LM's forward computes the loss from the last hidden state chunk by chunk, so
  the whole batch's logits never exist. With Liger installed and the model on a device, Liger's
  fused linear cross-entropy (liger_kernel.transformers.LigerFusedLinearCrossEntropyLoss: the
  gradient is computed in the forward, chunk by chunk); else `chunked_cross_entropy` below, plain
  torch: each chunk's logits recomputed in backward (torch.utils.checkpoint).
- "fused": the logits in the compute dtype and flash-attn's CrossEntropyLoss (no fp32 copies).
Both replace the forward of an HF *ForCausalLM (its `model` and `lm_head`) when labels are given;
without labels the model's own forward runs.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.training import LOSSES

IGNORE_INDEX = -100
"""HF's and torch's ignore_index: labels that take no part in the loss."""


def chunk_tokens(tokens: int, vocab: int, hidden: int) -> int:
    """Tokens per chunk so that one chunk's logits are about the size of the hidden states: Liger's
    rule (liger_kernel/ops/fused_linear_cross_entropy.py: inc_factor = cdiv(V, H), chunk =
    cdiv(BT, inc_factor)), without its rounding up to a power of two."""
    return max(1, -(-tokens // -(-vocab // hidden)))


def _chunk_loss_sum(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(head(hidden).float(), labels, ignore_index=IGNORE_INDEX, reduction="sum")


def shifted_labels(labels: torch.Tensor) -> torch.Tensor:
    """HF's causal shift as one flat tensor: position t is scored against labels[t + 1], the last
    position of each sequence against nothing (ForCausalLMLoss pads with ignore_index)."""
    return F.pad(labels[..., 1:], (0, 1), value=IGNORE_INDEX).reshape(-1)


def chunked_cross_entropy(
    head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Mean next-token cross-entropy of head(hidden) against labels (B, T), HF's shift and
    ignore_index, computed `chunk` tokens at a time; each chunk's logits are recomputed in backward,
    so at most one chunk's logits (and their fp32 copies) exist at once."""
    h = hidden.reshape(-1, hidden.shape[-1])
    y = shifted_labels(labels)
    weight = getattr(head, "weight", None)
    vocab = weight.shape[0] if weight is not None and weight.dim() == 2 else h.shape[-1]
    c = chunk or chunk_tokens(h.shape[0], vocab, h.shape[-1])
    total = sum(
        checkpoint(_chunk_loss_sum, head, h[i : i + c], y[i : i + c], use_reentrant=False)
        for i in range(0, h.shape[0], c)
    )
    return total / (y != IGNORE_INDEX).sum().clamp(min=1)


def _liger_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
    """device-only: Liger's fused linear cross-entropy when installed and the model is on a device."""
    if hidden.device.type == "cpu" or getattr(head, "weight", None) is None or head.weight.numel() == 0:
        return None
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
    except ImportError:
        return None
    h = hidden.reshape(-1, hidden.shape[-1])
    return LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE_INDEX)(
        head.weight, h, shifted_labels(labels), getattr(head, "bias", None)
    )


def _fused_loss(head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """device-only: flash-attn's CrossEntropyLoss on the low-precision logits."""
    from flash_attn.losses.cross_entropy import CrossEntropyLoss

    logits = head(hidden)
    return CrossEntropyLoss(ignore_index=IGNORE_INDEX)(logits.reshape(-1, logits.shape[-1]), shifted_labels(labels))


def apply_loss(model: nn.Module, loss: str) -> str:
    """Install the loss kernel on `model` (in place, before data parallelism wraps it); returns
    what runs ("upcast", "chunked (liger)", "chunked (torch)", "fused (flash-attn)")."""
    if loss not in LOSSES:
        raise SpecError(f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")
    if loss == "upcast":
        return "upcast"
    base, head = getattr(model, "model", None), getattr(model, "lm_head", None)
    if not isinstance(base, nn.Module) or not isinstance(head, nn.Module):
        raise SpecError(
            f"loss={loss!r} needs a causal LM with `model` and `lm_head` (an HF *ForCausalLM), not "
            f"{type(model).__name__}; compute the loss with "
            "prism_strategy.runtime.loss.chunked_cross_entropy(head, hidden, labels) instead"
        )
    if loss == "fused":
        try:
            import flash_attn.losses.cross_entropy  # noqa: F401
        except ImportError:
            raise SpecError(
                "loss='fused' needs flash-attn's CrossEntropyLoss (pip install flash-attn, CUDA only); "
                "use loss='chunked' instead"
            ) from None
    original = model.forward

    def forward(self: nn.Module, input_ids: Any = None, labels: Any = None, **kw: Any) -> Any:
        if labels is None:
            return original(input_ids=input_ids, **kw)
        from transformers.modeling_outputs import CausalLMOutputWithPast

        kw.pop("logits_to_keep", None)
        out = base(input_ids=input_ids, **kw)
        hidden = out.last_hidden_state
        if loss == "fused":
            value = _fused_loss(head, hidden, labels)
        else:
            value = _liger_loss(head, hidden, labels)
            value = chunked_cross_entropy(head, hidden, labels) if value is None else value
        return CausalLMOutputWithPast(loss=value, logits=None)

    model.forward = types.MethodType(forward, model)
    if loss == "fused":
        return "fused (flash-attn)"
    try:
        import liger_kernel  # noqa: F401

        return "chunked (liger on a device, torch on cpu)"
    except ImportError:
        return "chunked (torch)"
