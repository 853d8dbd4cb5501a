"""torch DistributedDataParallel: replicate everything, all-reduce gradient buckets.

What torch 2.13 does (torch/nn/parallel/distributed.py and the C++ Reducer it drives):
- only parameters with requires_grad are bucketed; a bucket is one all_reduce of the flat
  gradients in the parameter dtype (fp32 under autocast);
- buckets are filled in reverse parameter order, rebuilt after the first iteration in the order
  gradients became ready; a bucket closes once it holds >= its cap. With the default cap
  (bucket_cap_mb unset: 25 MiB) the first bucket is capped at dist._DEFAULT_FIRST_BUCKET_BYTES
  (1 MiB) so the first all-reduce starts early; an explicit bucket_cap_mb caps every bucket;
- no_sync() micro-steps skip the reduction: one set of all-reduces per optimizer step.
Memory: gradient_as_bucket_view (the buckets are the gradients); under autocast a bf16 copy of
every linear weight is saved for backward (the embedding lookup and fp32 norms make none; the
LM head, tied or not, makes one); the residual stream stays in the fp32 parameter dtype.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from prism_strategy.engines.base import (
    TORCH_DTYPE,
    Engine,
    MiB,
    Moment,
    Rows,
    StepCollective,
    module_groups,
    sharded_states,
    step_transient,
    trainable,
)
from prism_strategy.engines.runs import Runs
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import DTYPE_BYTES, TrainingSpec

if TYPE_CHECKING:
    from prism_strategy.strategies import StrategySpec

DEFAULT_BUCKET_MB = 25.0
"""torch DDP's own default bucket_cap_mb."""
FIRST_BUCKET_BYTES = 1 * MiB
"""dist._DEFAULT_FIRST_BUCKET_BYTES, used only when bucket_cap_mb is left at its default."""


def bucket_count(tensor_bytes: list[float], first_cap: float, cap: float) -> int:
    """The Reducer's greedy assignment: add tensors (reverse order) until a bucket holds >= its cap."""
    return len(bucket_sizes(tensor_bytes, first_cap, cap))


def _trainable_groups(parts: tuple[Part, ...]) -> list[tuple[tuple[int, ...], int]]:
    """Trainable tensors' elements in forward order, per group of identical blocks (module_groups)."""
    return [(tuple(n for m in mods for n, _ in m), k) for p in parts if p.trains for mods, k in module_groups(p)]


@lru_cache(maxsize=64)  # the planner asks at every micro-batch it tries
def _trainable_totals(parts: tuple[Part, ...]) -> tuple[float, float, int]:
    """sum_and_largest of every trainable tensor, a product per group of identical blocks."""
    groups = _trainable_groups(parts)
    return (
        sum(sum(sizes) * k for sizes, k in groups),
        max((max(sizes, default=0) for sizes, _ in groups), default=0),
        sum(len(sizes) * k for sizes, k in groups),
    )


@lru_cache(maxsize=64)  # the planner asks again for every micro-batch and checkpointing it tries
def _buckets(parts: tuple[Part, ...], elem_bytes: int, first_cap: float, cap: float) -> tuple[float, tuple[float, ...]]:
    """(bytes of every trainable gradient, each bucket's bytes in all-reduce order)."""
    backward = [(tuple(n * elem_bytes for n in reversed(sizes)), k) for sizes, k in reversed(_trainable_groups(parts))]
    return float(sum(sum(b) * k for b, k in backward)), tuple(filled_buckets(backward, first_cap, cap))


def bucket_sizes(tensor_bytes: list[float], first_cap: float, cap: float) -> list[float]:
    """Bytes of each bucket in the order backward fills (and all-reduces) them: reverse parameter order."""
    return filled_buckets([(tuple(reversed(tensor_bytes)), 1)], first_cap, cap)


def filled_buckets(groups: list[tuple[tuple[float, ...], int]], first_cap: float, cap: float) -> list[float]:
    """bucket_sizes over tensors given in fill order as (tensors, copies in a row): the copies that
    leave the open bucket under its cap close nothing and are added in one step, so the walk costs
    per bucket, not per tensor (sizes are whole bytes: the float sums are exact either way)."""
    out: list[float] = []
    size, limit = 0.0, first_cap
    for tensors, count in groups:
        total, left = sum(tensors), count
        while left:
            whole = _copies_below(size, limit, total, left)
            size, left = size + whole * total, left - whole
            if left:  # the next copy reaches the cap: tensor by tensor
                for b in tensors:
                    size += b
                    if size >= limit:
                        out.append(size)
                        size, limit = 0.0, cap
                left -= 1
    return out + ([size] if size > 0 else [])


def _copies_below(size: float, limit: float, total: float, most: int) -> int:
    """How many copies of `total` (at most `most`) can join a bucket holding `size` and stay below `limit`."""
    if size + total >= limit:
        return 0
    if total <= 0:
        return most
    k = min(most, max(1, int((limit - size) // total)))
    while k > 1 and size + k * total >= limit:
        k -= 1
    while k < most and size + (k + 1) * total < limit:
        k += 1
    return k


class DDPEngine(Engine):
    name = "ddp"
    title = "DDP"
    traced_with = "single_process"
    declares_static_graph = True
    grads_are_bucket_views = True
    options = ("static_graph", "find_unused_parameters", "bucket_mb")

    def states(self, parts, t, s, layout) -> Rows:
        return sharded_states(parts, t, s, layout)

    def residual_bytes(self, s, t) -> int:
        return t.param_bytes if t.compute_dtype != t.param_dtype else t.compute_bytes

    def moments(
        self,
        parts,
        t,
        s,
        layout,
        *,
        states,
        acts,
        reserve,
        wrap,
        accumulating,
        saved_acts=(),
        late_acts=(),
        step_impl="loop",
    ) -> list[Moment]:
        """Start of backward (autocast copies and activations alive); the optimizer step (every
        gradient still in its bucket, the activations and autocast copies freed, the optimizer's
        own temporaries over every trainable tensor, full size)."""
        step = step_transient(_trainable_totals(parts), t, step_impl, DTYPE_BYTES[t.optim_state_dtype], totals=True)
        return [
            Moment("start of backward", states + _autocast_copies(parts, t) + reserve, acts),
            Moment("optimizer step", states + step + reserve, []),
        ]

    def step_collectives(
        self,
        s: "StrategySpec",
        parts: tuple[Part, ...],
        t: TrainingSpec,
        layout: Layout,
        grad_accum: int = 1,
        wrap: str = "block",
    ) -> tuple[StepCollective, ...]:
        if layout.world <= 1 or trainable(parts) == 0:
            return ()
        e = t.grad_bytes  # DDP reduces .grad as it is: the parameter dtype
        cap = (s.bucket_mb or DEFAULT_BUCKET_MB) * MiB
        first = FIRST_BUCKET_BYTES if s.bucket_mb is None else cap
        total, buckets = _buckets(parts, e, first, cap)
        calls = len(buckets)
        out = [
            StepCollective(
                op="all_reduce",
                group="world",
                group_size=layout.world,
                dtype=TORCH_DTYPE[t.grad_dtype],
                bytes_per_call=total / calls,
                calls=calls,
                phase="backward",
                overlappable=True,
                what=f"gradient buckets ({cap / MiB:g} MiB cap)",
                sizes=Runs(buckets),
            )
        ]
        buffers = sum(_rope_buffer_bytes(p) for p in parts)
        if buffers:  # broadcast_buffers=True: once per synchronized forward (not under no_sync)
            out.append(
                StepCollective(
                    op="broadcast",
                    group="world",
                    group_size=layout.world,
                    dtype="float32",
                    bytes_per_call=buffers,
                    calls=1,
                    phase="forward",
                    overlappable=False,
                    what="module buffers from rank 0 (rotary inv_freq)",
                )
            )
        return tuple(out)

    def describe(self, s) -> str:
        return f"DistributedDataParallel(bucket_cap_mb={s.bucket_mb or DEFAULT_BUCKET_MB:g})"


def _autocast_copies(parts: tuple[Part, ...], t: TrainingSpec) -> Rows:
    if t.compute_dtype == t.param_dtype:
        return []
    n = 0
    for p in parts:
        if not p.trains:
            continue  # frozen parts are stored in the compute dtype: nothing to copy
        if p.spec is None:
            n += p.params
            continue
        sp = p.spec
        n += sp.layers * sp.block_matmul_params
        if sp.kind == "decoder":
            n += sp.vocab * sp.hidden  # the LM head, tied or not (the embedding lookup makes no copy)
    return [("buffers", "autocast bf16 weight copies saved for backward (linear weights)", n * t.compute_bytes)]


def _rope_buffer_bytes(part: Part) -> int:
    """HF rotary embeddings keep inv_freq and original_inv_freq (head_dim / 2 fp32 each) as buffers."""
    if part.spec is None or part.spec.kind != "decoder":
        return 0
    return 2 * (part.spec.head_dim // 2) * 4
