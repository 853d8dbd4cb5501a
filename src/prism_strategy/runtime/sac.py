"""Selective activation checkpointing: torchtitan's per-op policy (`--ckpt-freq sac`).

As torchtitan's SelectiveAC (torchtitan/distributed/activation_checkpoint.py at b5bcd76): within
each checkpointed block, the outputs of the ops in the save list are kept (matmuls, attention,
max), except every second aten.mm / aten.linear of the block's forward, counted from 1, which is
recomputed with everything else. The save list is functorch's compute-intensive ops
(torch._functorch.partitioners.get_default_op_list: mm, addmm, bmm, the SDPA kernels, ...) plus
aten.max and aten.linear; and, beyond torchtitan's list, the CPU kernel of SDPA
(_scaled_dot_product_flash_attention_for_cpu), so a CPU run saves attention as a GPU run does.
The memory model is estimate/memory.py sac_saved_bytes_per_token.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

MM_OPS = (torch.ops.aten.mm.default, torch.ops.aten.linear.default)


def save_ops() -> set[Any]:
    """torchtitan's default save list (compute ops; its comm ops matter for TP only), plus the CPU SDPA kernel."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {torch.ops.aten.max.default, torch.ops.aten.linear.default}
    for name in (
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
    ):
        if hasattr(torch.ops.aten, name):
            ops.add(getattr(torch.ops.aten, name).default)
    return ops


def sac_context() -> Any:
    """A fresh policy per checkpointed forward (and recompute): its mm counter starts at 0."""
    saved = save_ops()
    count = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        key = "recompute" if ctx.is_recompute else "forward"
        if func in MM_OPS:
            count[key] += 1
        if func in saved:
            if func in MM_OPS and count[key] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def sac_wrapper(module: torch.nn.Module) -> torch.nn.Module:
    """`module` under non-reentrant checkpointing with the selective policy."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(module, context_fn=sac_context)
