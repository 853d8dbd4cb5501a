"""Peak memory per device, itemised, for one strategy and micro-batch.

The peak is the largest of a few moments of the training step, each a sum of live tensors:
- start of backward: model states, saved activations, the loss's fp32 buffers (or, with
  checkpointing, one recomputed block, whichever is larger: the loss is freed first);
- FSDP2 only (per-block units): late backward (every block's sharded grads, the root and two
  blocks still gathered, one block's unsharded grads with their reduce-scatter copy, the LM
  head's unsharded grad) and end of backward (the root unit's unsharded grads with their
  reduce-scatter copy). zero_grad(set_to_none=True) leaves no grads at the start of backward
  unless gradients accumulate over micro-batches.
The estimate reports the items of the moment that peaks.

Sources of the formulas:
- Model states: ZeRO paper (Rajbhandari et al. 2020, sec. 3) generalised to any param / grad /
  optimizer-state dtype; DeepSpeed engines follow DeepSpeed's own accounting
  (`estimate_zero2_model_states_mem_needs`: 2P + 18P/N; `estimate_zero3_...`: L + 18P/N).
- Activations: the saved-tensor count of Korthikanti et al. 2022 ("Reducing Activation
  Recomputation"), redone for pre-norm blocks with fp32 norm statistics (HF RMSNorm/LayerNorm),
  SwiGLU or GELU MLPs, GQA, and flash / memory-efficient attention (no s^2 score matrix).
  Frozen linears save no inputs (autograd saves a matmul input only when the weight needs a grad).
- Loss: HF casts logits to fp32; cross-entropy keeps fp32 log-probs and, in backward, an fp32
  gradient in and out: tokens x vocab x 12 bytes (the low-precision logits are not kept).
- FSDP2 (torch.distributed.fsdp.fully_shard): sharded params in their storage dtype; gathered
  units in the compute dtype; the root unit is not resharded after forward; a unit reshards
  before its reduce-scatter, whose input is always a fresh buffer in the reduce dtype.
- DDP: gradient_as_bucket_view (buckets are the gradients, alive for the whole step); under
  autocast a bf16 copy of every linear weight is saved for backward (embedding lookups and
  the fp32 norms make none; a tied LM head makes one).
Assumptions named here: frozen parts are stored in the compute dtype; one image per sample.
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
CE_BYTES = 3 * FP32  # per token x vocab: fp32 log-probs saved, fp32 grad in, fp32 grad out
KEYS = ("params", "grads", "optimizer", "activations", "buffers", "reserve")
Rows = list[tuple[str, str, float]]


@dataclass(frozen=True, kw_only=True, slots=True)
class MemoryEstimate:
    """Bytes per device at the peak moment. `items` itemises every key as (key, label, bytes)."""

    params: float
    grads: float
    optimizer: float
    activations: float
    buffers: float
    reserve: float
    items: tuple[tuple[str, str, float], ...]
    """(key, label, bytes), one row per contribution, all live at `moment`."""
    per_sample: float
    """Activation bytes one more sample of micro-batch adds (at the start of backward)."""
    moment: str = "start of backward"
    """When in the step the peak happens."""

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.buffers + self.reserve

    def gib(self) -> dict[str, float]:
        d = {k: getattr(self, k) / GiB for k in KEYS}
        d["total"] = self.total / GiB
        return d

    def largest_items(self, n: int = 3) -> list[tuple[str, float]]:
        return [(label, b) for _, label, b in sorted(self.items, key=lambda r: -r[2])[:n]]


@dataclass(frozen=True, slots=True)
class Moment:
    """Tensors live at one moment of the step: fixed rows plus rows per sample of micro-batch."""

    name: str
    fixed: Rows
    per_sample: Rows

    def total(self, micro_batch: int) -> float:
        return sum(b for *_, b in self.fixed) + micro_batch * sum(b for *_, b in self.per_sample)


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
    """Activations one part saves for backward, per sample; 0 when no gradient flows through it."""
    if not part.backward:
        return 0.0
    e = training.compute_bytes
    if part.spec is None:  # projector MLP: its input, the hidden pre- and post-activation
        i, o = part.widths
        return part.tokens * e * (i + 2 * o)
    spec = part.spec
    a = block_activation_bytes_per_token(spec, e, part.trains)
    k = checkpointed_blocks(spec.layers, training.ckpt_freq)
    per_token = (spec.layers - k) * a + k * residual_bytes * spec.hidden
    per_token += FP32 * spec.hidden + e * spec.hidden  # final norm input, LM-head / post-norm input
    return part.tokens * per_token


def transient_bytes_per_sample(parts: tuple[Part, ...], training: TrainingSpec) -> tuple[str, float]:
    """The largest buffer backward adds on top of the saved activations, per sample: the loss's
    fp32 buffers, or one checkpointed block recomputed (the loss is freed before that)."""
    best = ("", 0.0)
    for p in parts:
        if not p.backward or p.spec is None:
            continue
        if p.spec.kind == "decoder":
            best = max(best, ("loss: fp32 log-probs + fp32 logit grads", p.tokens * p.spec.vocab * CE_BYTES),
                       key=lambda r: r[1])
        if training.ckpt_freq > 0:
            a = block_activation_bytes_per_token(p.spec, training.compute_bytes, p.trains)
            best = max(best, (f"{p.name} block recomputed in backward", p.tokens * a), key=lambda r: r[1])
    return best


def residual_bytes(strategy: StrategySpec, training: TrainingSpec) -> int:
    """Under DDP autocast the residual stream stays in the fp32 param dtype."""
    if strategy.engine == "ddp" and training.compute_dtype != training.param_dtype:
        return training.param_bytes
    return training.compute_bytes


def activation_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, platform: PlatformSpec) -> Rows:
    """Per sample of micro-batch: each part's saved activations and the backward transient."""
    res, f = residual_bytes(s, t), platform.activation_factor
    rows = [("activations", f"{p.name} activations", a * f)
            for p in parts if (a := part_activation_bytes_per_sample(p, t, res))]
    label, b = transient_bytes_per_sample(parts, t)
    return rows + ([("activations", label, b * f)] if b else [])


# --- model states ------------------------------------------------------------------------
def _fsdp_or_ddp_states(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout) -> Rows:
    pt, pf = sum(p.trainable for p in parts), sum(p.frozen for p in parts)
    dp, dg, do = (s.degree(g, layout) for g in (s.param_shard, s.grad_shard, s.optim_shard))
    return [
        ("params", f"trainable params ({t.param_dtype}, 1/{dp})", pt * t.param_bytes / dp),
        ("params", f"frozen params ({t.compute_dtype}, 1/{dp})", pf * t.compute_bytes / dp),
        ("grads", f"grads ({t.grad_dtype}, 1/{dg})", pt * t.grad_bytes / dg),
        ("optimizer", f"{t.optimizer} state ({t.optim_state_dtype}{', + fp32 master' if t.master_weights else ''}, 1/{do})",
         pt * t.optim_bytes / do),
    ]


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
    """Params, grads and optimizer state, as they stand once the first step has run."""
    if s.engine == "deepspeed":
        return _deepspeed_states(parts, t, s, layout)
    return _fsdp_or_ddp_states(parts, t, s, layout)


# --- buffers and moments -----------------------------------------------------------------
def gathered_model_bytes(parts: tuple[Part, ...], t: TrainingSpec) -> float:
    """The whole model gathered in the compute dtype (shard_grad_op, forward to backward)."""
    return sum(p.params for p in parts) * t.compute_bytes


def _gathered_whole_model(parts: tuple[Part, ...], t: TrainingSpec) -> tuple[str, str, float]:
    return ("params", f"gathered params ({t.compute_dtype}, whole model, forward to backward)",
            gathered_model_bytes(parts, t))


def _fsdp_root_wrap_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec) -> Rows:
    """One flat unit: its whole unsharded grads and their reduce-dtype copy, and the whole model
    gathered (full_shard re-gathers it in backward; shard_grad_op never lets it go)."""
    pt = sum(p.trainable for p in parts)
    rows: Rows = [("buffers", "unsharded grads of the single root unit (+ reduce-scatter copy)",
                   pt * (t.compute_bytes + t.grad_bytes))]
    if s.reshard_after_forward:
        return rows + [("buffers", "whole model re-gathered in backward (root-only wrap)",
                        sum(p.params for p in parts) * t.compute_bytes)]
    return rows + [_gathered_whole_model(parts, t)]


def _fsdp_block_moments(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout, states: Rows,
                        acts: Rows, reserve: Rows, accumulating: bool) -> list[Moment]:
    """Per-block units (module docstring): start of backward, late backward, end of backward."""
    e, gb = t.compute_bytes, t.grad_bytes
    params_optim = [r for r in states if r[0] != "grads"]
    grads = [r for r in states if r[0] == "grads"]
    block, root = largest_block(parts), root_unit(parts)
    train_block = largest_block(tuple(p for p in parts if p.trains))
    root_trainable = sum((p.spec.root_params if p.spec else p.params) for p in parts if p.trains)
    pt, dg = sum(p.trainable for p in parts), s.degree(s.grad_shard, layout)
    block_grads = [("grads", f"grads of every unit but the root ({t.grad_dtype}, 1/{dg})",
                    (pt - root_trainable) * gb / dg)]  # the root reduces last
    # tied or not, the head's grad is made first in backward and kept (as .grad, or as autograd's
    # buffer waiting for the embedding's share) until the root unit reduces
    head = sum(p.spec.vocab * p.spec.hidden for p in parts if p.trains and p.spec is not None and p.spec.kind == "decoder")
    gathered: Rows = ([("buffers", "root unit gathered (embeddings, LM head)", root * e),
                       ("buffers", "all-gather of the largest block + prefetch", 2 * block * e)])
    start = params_optim + (grads if accumulating else [])
    start += gathered if s.reshard_after_forward else [_gathered_whole_model(parts, t)]
    start += [("buffers", "first block's unsharded grads", train_block * e)]
    late = params_optim + block_grads + gathered + [
        ("buffers", "one block's unsharded grads + reduce-scatter copy", train_block * (e + gb)),
        ("buffers", "LM head's unsharded grad (kept until the root reduces, last)", head * e)]
    end = params_optim + block_grads + [
        ("buffers", "root unit unsharded grads + reduce-scatter copy (reduced last)", root_trainable * (e + gb))]
    if any(p.trains and p.spec is not None and p.spec.tied_embeddings for p in parts):
        # observed, torch 2.13 (traces and a real gloo run): with a tied LM head the root's
        # gathered params are still allocated when its reduce-scatter runs
        end.append(("buffers", "root unit still gathered (tied LM head)", root * e))
    return [Moment("start of backward", start + reserve, acts), Moment("late backward", late + reserve, []),
            Moment("end of backward", end + reserve, [])]


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


def _ddp_autocast_copies(parts: tuple[Part, ...], t: TrainingSpec) -> Rows:
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


def moments(parts: tuple[Part, ...], t: TrainingSpec, platform: PlatformSpec, layout: Layout, s: StrategySpec,
            wrap: str = "block", accumulating: bool = False) -> list[Moment]:
    """The moments of one training step that can hold the peak (module docstring)."""
    states = model_state_rows(parts, t, s, layout)
    acts = activation_rows(parts, t, s, platform)
    reserve: Rows = [("reserve", "framework reserve (runtime, collective buffers)", platform.framework_reserve_gib * GiB)]
    if s.engine == "fsdp2" and wrap == "block":
        return _fsdp_block_moments(parts, t, s, layout, states, acts, reserve, accumulating)
    if s.engine == "fsdp2":
        extra = _fsdp_root_wrap_rows(parts, t, s)
    elif s.engine == "deepspeed":
        extra = _deepspeed_buffers(parts, t, s)
    else:
        extra = _ddp_autocast_copies(parts, t)
    return [Moment("start of backward", states + extra + reserve, acts)]


# --- the estimate ------------------------------------------------------------------------
def estimate_memory(
    parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, layout: Layout,
    strategy: StrategySpec, micro_batch: int, wrap: str = "block", accumulating: bool = False,
) -> MemoryEstimate:
    """Peak bytes per device: the largest moment of the step (module docstring), plus the
    platform's framework reserve. `wrap`: "block" (each transformer block is an FSDP unit) or
    "root" (one unit for the whole model). `accumulating`: gradients accumulate over
    micro-batches, so sharded grads are already there at the start of backward."""
    ms = moments(parts, training, platform, layout, strategy, wrap, accumulating)
    peak = max(ms, key=lambda m: m.total(micro_batch))
    rows = peak.fixed + [(k, f"{label} x{micro_batch}", b * micro_batch) for k, label, b in peak.per_sample]
    sums = {k: sum(b for key, _, b in rows if key == k) for k in KEYS}
    per_sample = max(sum(b for *_, b in m.per_sample) for m in ms)
    return MemoryEstimate(**sums, items=tuple(r for r in rows if r[2] > 0), per_sample=per_sample, moment=peak.name)


def max_micro_batch(parts, training, platform, layout, strategy, wrap: str = "block", accumulating: bool = False,
                    usable_bytes: float | None = None) -> int:
    """Largest micro-batch whose every moment fits the usable memory (each is linear in it);
    `usable_bytes` replaces the platform's."""
    usable = platform.usable_bytes if usable_bytes is None else usable_bytes
    best = 1 << 20
    for m in moments(parts, training, platform, layout, strategy, wrap, accumulating):
        room = usable - m.total(0)
        slope = m.total(1) - m.total(0)
        if room < 0 or (room == 0 and slope > 0):
            return 0
        if slope > 0:
            best = min(best, int(room // slope))
    return best
