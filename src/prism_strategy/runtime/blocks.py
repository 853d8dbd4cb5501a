"""Transformer blocks: find them, checkpoint every k-th, compile them.

Blocks are the unit every strategy works on: FSDP shards each block, activation checkpointing
and torch.compile apply per block. Found, in order: the caller's `block_types`; an HF model's
`_no_split_modules` (class names); else the longest `nn.ModuleList` of one class.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from prism_strategy.specs.errors import SpecError

BlockTypes = type | str | Sequence[type | str] | None


@dataclass(frozen=True, slots=True)
class BlockSlot:
    """A block and where it hangs, so it can be replaced by a wrapped version."""

    parent: nn.Module
    name: str
    module: nn.Module


def _type_names(block_types: BlockTypes) -> tuple[tuple[type, ...], frozenset[str]]:
    items = [block_types] if isinstance(block_types, (type, str)) else list(block_types or ())
    bad = [t for t in items if not isinstance(t, (type, str))]
    if bad:
        raise SpecError(
            f"block_types must be module classes or class names, got {bad[0]!r}; "
            "pass e.g. block_types=(LlamaDecoderLayer,)"
        )
    classes = tuple(t for t in items if isinstance(t, type))
    return classes, frozenset(t for t in items if isinstance(t, str))


def _hf_block_names(model: nn.Module) -> frozenset[str]:
    for m in model.modules():
        names = getattr(m, "_no_split_modules", None)
        if names:
            return frozenset(names)
    return frozenset()


def _largest_module_list(model: nn.Module) -> list[BlockSlot]:
    """The children of the longest nn.ModuleList whose entries share one class."""
    best: nn.ModuleList | None = None
    for m in model.modules():
        if isinstance(m, nn.ModuleList) and len(m) > (len(best) if best is not None else 1):
            if len({type(c) for c in m}) == 1:
                best = m
    return [BlockSlot(best, name, child) for name, child in best.named_children()] if best is not None else []


def _outermost(model: nn.Module, hit) -> list[BlockSlot]:
    """Matching modules not nested inside another match, in module order."""
    found: list[BlockSlot] = []

    def visit(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if hit(child):
                found.append(BlockSlot(parent, name, child))
            else:
                visit(child)

    visit(model)
    return found


def find_blocks(model: nn.Module, block_types: BlockTypes = None) -> list[BlockSlot]:
    """The transformer blocks of `model` (outermost matches, module order); [] if none."""
    classes, names = _type_names(block_types)
    if block_types is None:
        names = _hf_block_names(model)
    blocks = _outermost(model, lambda m: isinstance(m, classes) or type(m).__name__ in names)
    if block_types is None and not blocks:
        return _largest_module_list(model)
    if not blocks:
        raise SpecError(
            f"no module of block_types {block_types!r} in {type(model).__name__}; "
            "pass the model's transformer block class"
        )
    return blocks


def apply_checkpointing(blocks: list[BlockSlot], *, every: int | str) -> list[BlockSlot]:
    """Activation checkpointing on blocks every, 2*every, ... (1-based, as torchtitan's
    ac_freq), non-reentrant; every="sac": every block with torchtitan's selective per-op policy
    (runtime/sac.py). Each block is replaced in its parent by its checkpoint wrapper
    (state-dict names are unchanged through torch.distributed.checkpoint.state_dict)."""
    if every == 0:
        return blocks
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    from prism_strategy.runtime.sac import sac_wrapper

    wrap = sac_wrapper if every == "sac" else checkpoint_wrapper
    k = 1 if every == "sac" else int(every)
    out = []
    for i, slot in enumerate(blocks):
        if (i + 1) % k == 0:
            wrapped = wrap(slot.module)
            slot.parent.register_module(slot.name, wrapped)
            slot = BlockSlot(slot.parent, slot.name, wrapped)
        out.append(slot)
    return out


def apply_compile(model: nn.Module, blocks: list[BlockSlot]) -> None:
    """torch.compile each block in place (names unchanged); the whole model when it has none."""
    for slot in blocks or [BlockSlot(model, "", model)]:
        slot.module.compile()


def checkpointed_count(blocks: list[BlockSlot]) -> int:
    return sum(type(s.module).__name__ == "CheckpointWrapper" for s in blocks)
