"""Peak memory per device, itemised, for one strategy and micro-batch.

Sources of the formulas:
- Model states: ZeRO paper (Rajbhandari et al. 2020, sec. 3) generalised to any param / grad /
  optimizer-state dtype; DeepSpeed engines follow DeepSpeed's own accounting
  (`estimate_zero2_model_states_mem_needs`: 2P + 18P/N; `estimate_zero3_...`: L + 18P/N).
- Activations: the saved-tensor count of Korthikanti et al. 2022 ("Reducing Activation
  Recomputation"), redone for pre-norm blocks with fp32 norm statistics (HF RMSNorm/LayerNorm),
  SwiGLU or GELU MLPs, GQA, and flash / memory-efficient attention (no s^2 score matrix).
  Frozen linears save no inputs (autograd saves a matmul input only when the weight needs a grad).
- Loss: HF casts logits to fp32; cross-entropy keeps fp32 log-probs and, in backward, an fp32
  gradient in and out: tokens x vocab x (compute bytes + 12) at the start of backward.
- FSDP2: sharded params in their storage dtype; gathered units in the compute dtype; the root
  unit's unsharded gradients live until the end of backward (its reduce-scatter runs last).
Assumptions named here: frozen parts are stored in the compute dtype; one image per sample;
DDP uses gradient_as_bucket_view (buckets are the gradients) and autocast for bf16-mixed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate.parts import Part, largest_block, root_unit
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.training import OPTIMIZER_STATES, TrainingSpec
from prism_strategy.strategies import DS_BUCKETS, DS_OVERLAP_COMM, StrategySpec

FP32 = 4
CE_FP32_COPIES = 3  # fp32 log-probs saved, fp32 grad in, fp32 grad out (bytes x 4 each)
KEYS = ("params", "grads", "optimizer", "activations", "buffers", "reserve")


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Bytes per device. `items` itemises every key as (label, bytes)."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    reserve: float
    items: tuple[tuple[str, str, float], ...]
    """(key, label, bytes), one row per contribution."""
    per_sample: float
    """Activation bytes one more sample of micro-batch adds."""

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers + self.reserve

    def gib(self) -> dict[str, float]:
        d = {k: getattr(self, k) / GiB for k in KEYS}
        d["total"] = self.total / GiB
        return d

    def largest_items(self, n: int = 3) -> list[tuple[str, float]]:
        return [(label, b) for _, label, b in sorted(self.items, key=lambda r: -r[2])[:n]]


# --- activations -------------------------------------------------------------------------
def block_activation_bytes_per_token(spec: TransformerSpec, e: int, trains: bool) -> float:
    """Saved tensors of one block for one token (see module docstring)."""
    h, q, kv, f = spec.hidden, spec.q_width, spec.kv_width, spec.ffn
    n = 2 * FP32 * h  # fp32 inputs of the two norms
    n += e * (q + 2 * kv) + e * q  # attention q, k, v and its output (flash/SDPA)
    if spec.qk_norm != "none":
        n += FP32 * (q + kv)
    mlp_saved = 4 if spec.mlp == "swiglu" else 2  # gate, up, act(gate), product | fc1 out, act out
    if trains:
        n += 2 * e * h + e * q + mlp_saved * e * f  # linear inputs: norm outputs, o_proj input
    else:
        n += (mlp_saved - 1) * e * f  # elementwise only: the down/fc2 input is not saved
    return n


def checkpointed_blocks(layers: int, ckpt_freq: int) -> int:
    """Checkpoint every k-th block (blocks 0, k, 2k, ...); 0 = none."""
    return 0 if ckpt_freq <= 0 else math.ceil(layers / ckpt_freq)


def part_activation_bytes_per_sample(part: Part, training: TrainingSpec, residual_bytes: int) -> float:
    """Saved activations of one part for one sample; 0 when no gradient flows through it."""
    if not part.backward:
        return 0.0
    e = training.compute_bytes
    if part.spec is None:  # projector MLP: its input, the hidden pre- and post-activation
        i, o = part.widths
        return part.tokens * e * (i + 2 * o)
    spec = part.spec
    a = block_activation_bytes_per_token(spec, e, part.trains)
    k = checkpointed_blocks(spec.layers, training.ckpt_freq)
    per_token = (spec.layers - k) * a + k * residual_bytes * spec.hidden + (a if k else 0)
    per_token += FP32 * spec.hidden + e * spec.hidden  # final norm input, LM-head / post-norm input
    total = part.tokens * per_token
    if spec.kind == "decoder":
        total += part.tokens * spec.vocab * (e + FP32 * CE_FP32_COPIES)
    return total


def residual_bytes(strategy: StrategySpec, training: TrainingSpec) -> int:
    """Under DDP autocast the residual stream stays in the fp32 param dtype."""
    if strategy.engine == "ddp" and training.compute_dtype != training.param_dtype:
        return training.param_bytes
    return training.compute_bytes


# --- model states ------------------------------------------------------------------------
Rows = list[tuple[str, str, float]]


def _fsdp_or_ddp_states(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout) -> Rows:
    pt, pf = sum(p.trainable for p in parts), sum(p.frozen for p in parts)
    dp, dg, do = (s.degree(g, layout) for g in (s.param_shard, s.grad_shard, s.optim_shard))
    e = t.compute_bytes
    rows: Rows = [
        ("params", f"trainable params ({t.param_dtype}, 1/{dp})", pt * t.param_bytes / dp),
        ("params", f"frozen params ({t.compute_dtype}, 1/{dp})", pf * e / dp),
        ("grads", f"grads ({t.grad_dtype}, 1/{dg})", pt * t.grad_bytes / dg),
        ("optimizer", f"{t.optimizer} state ({t.optim_state_dtype}{', + fp32 master' if t.master_weights else ''}, 1/{do})",
         pt * t.optim_bytes / do),
    ]
    if s.engine == "fsdp2" and not s.reshard_after_forward:
        rows.append(("params", f"gathered params ({t.compute_dtype}, whole model, forward to backward)", (pt + pf) * e))
    return rows


def _deepspeed_states(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout) -> Rows:
    """DeepSpeed bf16 keeps bf16 params/grads and fp32 master + fp32 moments, whatever the preset."""
    pt, pf, n = sum(p.trainable for p in parts), sum(p.frozen for p in parts), layout.world
    e = t.compute_bytes
    low = e < FP32
    dp = n if s.zero_stage == 3 else 1
    grads = {1: pt * e + (pt * FP32 / n if low else 0), 2: pt * (e + (FP32 if low else 0)) / n, 3: pt * FP32 / n}
    optim = pt * (OPTIMIZER_STATES[t.optimizer] * FP32 + (FP32 if low else 0)) / n
    return [
        ("params", f"params ({t.compute_dtype}{', 1/' + str(dp) if dp > 1 else ', full'})", (pt + pf) * e / dp),
        ("grads", {1: "bf16 grads (full) + fp32 partition", 2: "grad partition (bf16 + fp32)",
                   3: "fp32 grad partition"}[s.zero_stage or 1] if low else f"fp32 grads (stage {s.zero_stage})",
         grads[s.zero_stage or 1]),
        ("optimizer", f"{t.optimizer} state (fp32{' + fp32 master' if low else ''}, 1/{n})", optim),
    ]


def model_state_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout) -> Rows:
    if s.engine == "deepspeed":
        return _deepspeed_states(parts, t, s, layout)
    return _fsdp_or_ddp_states(parts, t, s, layout)


# --- buffers -----------------------------------------------------------------------------
def _fsdp_buffers(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, wrap: str) -> Rows:
    e, gb = t.compute_bytes, t.grad_bytes
    pt = sum(p.trainable for p in parts)
    cast = gb if gb != e else 0  # reduce-dtype copy made before the reduce-scatter
    if wrap == "root":
        rows: Rows = [("buffers", "unsharded grads of the single root unit (+ reduce-dtype copy)", pt * (e + cast))]
        if s.reshard_after_forward:
            rows.append(("buffers", "whole model re-gathered in backward (root-only wrap)",
                         sum(p.params for p in parts) * e))
        return rows
    block, root = largest_block(parts), root_unit(parts)
    root_trainable = sum((p.spec.root_params if p.spec else p.params) for p in parts if p.trains)
    rows = [
        ("buffers", "root unit unsharded grads (reduced at the end of backward)", root_trainable * e),
        ("buffers", "block grad reduce-scatter in flight", block * (e + cast)),
    ]
    if s.reshard_after_forward:
        rows += [("buffers", "root unit gathered (embeddings, LM head)", root * e),
                 ("buffers", "all-gather of the largest block + prefetch", 2 * block * e)]
    return rows


def _deepspeed_buffers(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec) -> Rows:
    e, pt = t.compute_bytes, sum(p.trainable for p in parts)
    b = DS_BUCKETS
    if s.zero_stage == 3:
        largest = max(_largest_layer(p.spec) for p in parts if p.spec is not None)
        return [("buffers", "largest layer gathered, params + grads (DeepSpeed's L)", 2 * e * largest),
                ("buffers", "stage-3 prefetch bucket", min(b.stage3_prefetch_bucket_size, pt) * e),
                ("buffers", "reduce bucket", min(b.reduce_bucket_size, pt) * e)]
    # DeepSpeed allocates whole reduce buckets whatever the model size: fp32 accumulators in
    # stage 1, low-precision staging in stage 2, double-buffered when overlap_comm is on.
    n = 2 if DS_OVERLAP_COMM[s.zero_stage or 1] else 1
    width = FP32 if s.zero_stage == 1 else e
    return [("buffers", f"reduce buckets ({n} x {b.reduce_bucket_size:.0e} elements)", n * b.reduce_bucket_size * width)]


def _largest_layer(spec: TransformerSpec) -> int:
    """Largest single module (DeepSpeed gathers per module under ZeRO-3)."""
    return max(spec.vocab * spec.hidden, spec.hidden * spec.ffn, spec.hidden * spec.q_width)


def buffer_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, wrap: str) -> Rows:
    if s.engine == "fsdp2":
        return _fsdp_buffers(parts, t, s, wrap)
    if s.engine == "deepspeed":
        return _deepspeed_buffers(parts, t, s)
    if t.compute_dtype != t.param_dtype:
        pt = sum(p.trainable for p in parts)
        return [("buffers", "autocast bf16 weight copies saved for backward", pt * t.compute_bytes)]
    return []


# --- the estimate ------------------------------------------------------------------------
def estimate_memory(
    parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, layout: Layout,
    strategy: StrategySpec, micro_batch: int, wrap: str = "block",
) -> MemoryEstimate:
    """Peak bytes per device: model states + saved activations at the start of backward +
    communication buffers + the platform's framework reserve. `wrap`: "block" (each transformer
    block is an FSDP unit) or "root" (one unit for the whole model)."""
    rows = model_state_rows(parts, training, strategy, layout) + buffer_rows(parts, training, strategy, wrap)
    res = residual_bytes(strategy, training)
    per_sample = 0.0
    for p in parts:
        a = part_activation_bytes_per_sample(p, training, res) * platform.activation_factor
        per_sample += a
        if a:
            rows.append(("activations", f"{p.name} activations x{micro_batch}", a * micro_batch))
    rows.append(("reserve", "framework reserve (runtime, collective buffers)", platform.framework_reserve_gib * GiB))
    sums = {k: sum(b for key, _, b in rows if key == k) for k in KEYS}
    return MemoryEstimate(**sums, items=tuple(r for r in rows if r[2] > 0), per_sample=per_sample)


def max_micro_batch(parts, training, platform, layout, strategy, wrap: str = "block") -> int:
    """Largest micro-batch whose peak fits the usable memory (memory is linear in it)."""
    base = estimate_memory(parts, training, platform, layout, strategy, 0, wrap)
    room = platform.usable_bytes - base.total
    if room <= 0 or base.per_sample <= 0:
        return 0 if room <= 0 else 1 << 20
    return int(room // base.per_sample)
