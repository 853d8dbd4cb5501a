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
    sharded_states,
    step_transient,
    sum_and_largest,
    tensor_sizes,
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


@lru_cache(maxsize=64)  # the planner asks at every micro-batch it tries
def _trainable_totals(parts: tuple[Part, ...]) -> tuple[float, float, int]:
    return sum_and_largest([n for p in parts if p.trains for n in tensor_sizes(p)])


@lru_cache(maxsize=64)  # the planner asks again for every micro-batch and checkpointing it tries
def _buckets(parts: tuple[Part, ...], elem_bytes: int, first_cap: float, cap: float) -> tuple[float, tuple[float, ...]]:
    """(bytes of every trainable gradient, each bucket's bytes in all-reduce order)."""
    sizes = [n * elem_bytes for p in parts if p.trains for n in tensor_sizes(p)]
    return float(sum(sizes)), tuple(bucket_sizes(sizes, first_cap, cap))


def bucket_sizes(tensor_bytes: list[float], first_cap: float, cap: float) -> list[float]:
    """Bytes of each bucket in the order backward fills (and all-reduces) them: reverse parameter order."""
    out: list[float] = []
    size, limit = 0.0, first_cap
    for b in reversed(tensor_bytes):
        size += b
        if size >= limit:
            out.append(size)
            size, limit = 0.0, cap
    return out + ([size] if size > 0 else [])


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
