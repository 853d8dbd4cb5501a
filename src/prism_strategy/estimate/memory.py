"""Peak memory per device, itemised, for one strategy and micro-batch.

The peak is the largest of a few moments of the training step, each a sum of live tensors:
- start of backward: model states, saved activations, the loss's fp32 buffers (or, with
  checkpointing, one recomputed block, whichever is larger: the loss is freed first);
- FSDP2 only (per-block units): late backward (every block's sharded grads, the root and two
  blocks still gathered, one block's unsharded grads with their reduce-scatter copy, the LM
  head's unsharded grad, while the bottom block's activations and the lower parts' are alive:
  sharded grads grow and activations shrink block by block, so the extremes are this moment
  and the start of backward) and end of backward (the root unit's unsharded grads with their
  reduce-scatter copy). zero_grad(set_to_none=True) leaves no grads at the start of backward
  unless gradients accumulate over micro-batches.
- optimizer step, every engine: params + grads + optimizer state + the optimizer's own
  temporaries (engines/base.py step_transient: foreach AdamW holds a state-sized temporary per
  (device, dtype) group, the per-tensor loop two of its largest tensor, fused none), with the
  activations freed; the implementation is torch's default on the platform's device unless
  `--optimizer adamw-foreach|adamw-fused|adamw-loop` says which.
The estimate reports the items of the moment that peaks.

Sources of the formulas:
- Model states: ZeRO paper (Rajbhandari et al. 2020, sec. 3) generalised to any param / grad /
  optimizer-state dtype; DeepSpeed engines follow DeepSpeed's own accounting
  (`estimate_zero2_model_states_mem_needs`: 2P + 18P/N; `estimate_zero3_...`: L + 18P/N).
- Activations: the saved-tensor count of Korthikanti et al. 2022 ("Reducing Activation
  Recomputation"; selective checkpointing: sac_saved_bytes_per_token), redone for pre-norm
  blocks with fp32 norm statistics (HF RMSNorm/LayerNorm; RMSNorm's weight product keeps its
  normalised copy, estimate/families.py), SwiGLU or GELU MLPs, GQA, and flash / memory-efficient
  attention (no s^2 score matrix; its saved output is o_proj's input).
  Frozen linears save no inputs (autograd saves a matmul input only when the weight needs a grad).
- Loss (--loss, loss_bytes_per_token): upcast, as HF: logits cast to fp32; cross-entropy keeps
  fp32 log-probs and, in backward, an fp32 gradient in and out: tokens x vocab x 12 bytes (the
  low-precision logits are not kept; a script that holds them through backward, as PRISM's trainer
  does, adds 2 bytes, not modelled). F.cross_entropy on bf16 logits under autocast is this kernel
  too: autocast runs log_softmax in fp32 (aten/src/ATen/autocast_mode.h); fused: low-precision logits and their grad; chunked: one
  chunk of tokens' logits at a time.
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

from prism_strategy.engines import engine_of
from prism_strategy.engines.base import Moment, Rows
from prism_strategy.engines.fsdp2 import gathered_model_bytes
from prism_strategy.estimate import families, memory_compile
from prism_strategy.specs.cluster import GiB, Layout, PlatformSpec
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec

FP32 = 4
CE_BYTES = 3 * FP32  # per token x vocab: fp32 log-probs saved, fp32 grad in, fp32 grad out
KEYS = ("params", "grads", "optimizer", "activations", "buffers", "reserve")
__all__ = ["KEYS", "MemoryEstimate", "Moment", "Rows", "estimate_memory", "gathered_model_bytes", "max_micro_batch"]


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


# --- activations -------------------------------------------------------------------------
def block_activation_bytes_per_token(spec: TransformerSpec, e: int, trains: bool, residual: int | None = None) -> float:
    """Saved tensors of one block for one token (see module docstring). `residual`: bytes per
    element of the residual stream, the pre-norms' input (the compute dtype unless given).
    Attention (flash / memory-efficient SDPA) saves q, k, v, its output and the fp32 logsumexp
    per head; the output is o_proj's input too (the kernel stores it (b, s, heads, d), HF's
    transpose + reshape is a view of it: one storage, as measured on CPU in
    tests/unit/estimate/test_compile_memory.py). Each RMSNorm saves its fp32 input, its rsqrt and, when
    its weight trains, the normalised copy (families.rms_norm_saved_bytes_per_token)."""
    h, q, kv, f = spec.hidden, spec.q_width, spec.kv_width, spec.active_ffn  # MoE: top-k x expert width
    n = 2 * FP32 * h + families.extra_activation_bytes_per_token(spec, e, trains)  # fp32 inputs of the two norms
    pre = e if residual is None else residual
    norm_in = e if spec.hf_model_type in memory_compile.POST_NORM_FAMILIES else pre
    n += spec.block_norms * families.rms_norm_saved_bytes_per_token(spec, norm_in, trains)
    n += e * (q + 2 * kv) + e * q + FP32 * spec.heads  # attention q, k, v, its output and logsumexp
    if spec.qk_norm != "none":
        n += FP32 * (q + kv)
    mlp_saved = 4 if spec.mlp == "swiglu" else 2  # gate, up, act(gate), product | fc1 out, act out
    if trains:
        n += 2 * e * h + mlp_saved * e * f  # linear inputs: the norm outputs (o_proj's is attention's output)
    else:
        n += (mlp_saved - 1) * e * f  # elementwise only: the down/fc2 input is not saved
    return n


def part_block_bytes_per_token(p: Part, t: TrainingSpec, residual: int) -> float:
    """One block of part p, saved bytes per token: a block that trains, a frozen one, or a frozen
    block with LoRA adapters: the frozen block's plus the inputs its adapters keep and their r-wide
    middles (specs/lora.py saved_inputs; not reduced by compile)."""
    if p.spec is None:
        raise ValueError(f"{p.name} has no blocks")
    if p.trains or not p.adapted:
        return saved_block_bytes_per_token(p.spec, t, p.trains, residual)
    spec, e = p.spec, t.compute_bytes
    width = {
        "attention input": spec.hidden,
        "attention output": 0,
        "mlp input": spec.hidden,
        "mlp inner": spec.active_ffn,
    }
    kept = sum(width[i] for i in p.lora_inputs) + p.lora_rank_sum  # attention's output: SDPA keeps it
    return saved_block_bytes_per_token(spec, t, False, residual) + e * kept


def saved_block_bytes_per_token(spec: TransformerSpec, t: TrainingSpec, trains: bool, residual: int) -> float:
    """One block's saved bytes per token as the run keeps them: eager, or compiled (torch.compile:
    estimate/memory_compile.py, the partitioner's recomputed upcasts and act(gate))."""
    a = block_activation_bytes_per_token(spec, t.compute_bytes, trains, residual)
    if t.compile:
        a = (
            a - memory_compile.block_savings_per_token(spec, t.compute_bytes, residual, trains)
        ) * memory_compile.REMAINING_FACTOR
    return a


def sac_linears(spec: TransformerSpec) -> list[tuple[int, int, bool]]:
    """(out width, in width, saved) of each linear of a block in forward order, under torchtitan's
    selective per-op policy (torchtitan/distributed/activation_checkpoint.py SelectiveAC at
    b5bcd76): outputs of ops in the save list are kept, "except every second mm": a linear
    without bias dispatches to aten.mm, counted from 1 within the block's forward, saved when the
    count is odd, recomputed when even; a linear with bias dispatches to aten.addmm (in the save
    list, not counted): always saved."""
    h, q, kv, f = spec.hidden, spec.q_width, spec.kv_width, spec.ffn
    mlp = [(f, h), (f, h), (h, f)] if spec.mlp == "swiglu" else [(f, h), (h, f)]
    linears = [(q, h, spec.qkv_bias), (kv, h, spec.qkv_bias), (kv, h, spec.qkv_bias), (h, q, spec.o_bias)]
    linears += [(o, i, spec.mlp_bias) for o, i in mlp]
    out, count = [], 0
    for o, i, bias in linears:
        if not bias:
            count += 1
        out.append((o, i, bias or count % 2 == 1))
    return out


def sac_saved_bytes_per_token(spec: TransformerSpec, e: int, residual: int) -> float:
    """What one block keeps under selective checkpointing, per token: its input (the checkpoint's
    argument), the saved linears' outputs and attention's outputs (output and fp32 logsumexp per
    head; the attention kernels are in the save list). Everything else is recomputed."""
    saved = sum(o for o, _, keep in sac_linears(spec) if keep)
    return residual * spec.hidden + e * (saved + spec.q_width) + FP32 * spec.heads


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
    a = part_block_bytes_per_token(part, training, residual_bytes)
    k = checkpointed_blocks(spec.layers, training.ckpt_freq)
    sac = training.ckpt_policy == "sac"
    kept = sac_saved_bytes_per_token(spec, e, residual_bytes) if sac else residual_bytes * spec.hidden
    if sac and training.compile:  # compile: the residual-only linears' outputs are not kept
        kept -= memory_compile.sac_savings_per_token(spec, e, sac_linears(spec))
        kept *= memory_compile.REMAINING_FACTOR
    per_token = (spec.layers - k) * a + k * kept
    final_norm = residual_bytes if training.compile else FP32  # compile: the input, not its fp32 copy
    per_token += final_norm * spec.hidden + e * spec.hidden  # final norm input, LM-head / post-norm input
    return part.tokens * per_token


def loss_bytes_per_token(spec: TransformerSpec, training: TrainingSpec) -> tuple[str, float]:
    """The loss kernel's buffers at their largest, per token (TrainingSpec.loss):
    - upcast: fp32 log-probs saved, fp32 grad in and out: vocab x 12 bytes (module docstring);
    - fused (flash-attn's CrossEntropyLoss, inplace_backward=False as llm-foundry builds it): the
      low-precision logits saved and their gradient, a new tensor: vocab x 2 x compute bytes;
    - chunked: logits only for a chunk of tokens, sized as Liger's fused linear cross-entropy
      does (chunk x vocab ~ tokens x hidden, liger_kernel/ops/fused_linear_cross_entropy.py);
      one chunk recomputed in backward (runtime/loss.py) holds the upcast kernel's 12 bytes per
      logit (the chunk's low-precision logits are freed once cast): hidden x 12 per token.
      Liger's own kernel writes the gradient in place into the chunk's logits, below this."""
    e, v, h = training.compute_bytes, spec.vocab, spec.hidden
    if training.loss == "upcast" and training.compile and training.compile_loss:
        return memory_compile.loss_label_and_bytes(v, e)
    if training.loss == "fused":
        return "loss: low-precision logits + their grad (fused cross-entropy)", v * 2 * e
    if training.loss == "chunked":
        return "loss: one chunk of logits (chunked cross-entropy)", h * CE_BYTES
    return "loss: fp32 log-probs + fp32 logit grads", v * CE_BYTES


def transient_bytes_per_sample(
    parts: tuple[Part, ...], training: TrainingSpec, residual: int | None = None
) -> tuple[str, float]:
    """The largest buffer backward adds on top of the saved activations, per sample: the loss
    kernel's buffers, or one checkpointed block recomputed (the loss is freed before that;
    compiled, the recomputed block holds what the compiled graph saves)."""
    res = training.compute_bytes if residual is None else residual
    best = ("", 0.0)
    for p in parts:
        if not p.backward or p.spec is None:
            continue
        if p.spec.kind == "decoder":
            label, per_token = loss_bytes_per_token(p.spec, training)
            best = max(best, (label, p.tokens * per_token), key=lambda r: r[1])
        if training.ckpt_freq > 0:
            a = part_block_bytes_per_token(p, training, res)
            best = max(
                best, (f"{p.name} block recomputed in backward{_compiled(training)}", p.tokens * a), key=lambda r: r[1]
            )
    return best


def residual_bytes(strategy: StrategySpec, training: TrainingSpec) -> int:
    """Bytes per element of the residual stream (fp32 under DDP autocast: the engine says)."""
    return engine_of(strategy).residual_bytes(strategy, training)


def activation_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, platform: PlatformSpec) -> Rows:
    """Per sample of micro-batch: each part's saved activations and the backward transient."""
    rows = saved_activation_rows(parts, t, s, platform)
    label, b = transient_bytes_per_sample(parts, t, residual_bytes(s, t))
    return rows + ([("activations", label, b * platform.calibration.activation_factor)] if b else [])


def saved_activation_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, platform: PlatformSpec) -> Rows:
    """Per sample: each part's saved activations (what is left once the backward transient is freed)."""
    res, f = residual_bytes(s, t), platform.calibration.activation_factor
    return [
        ("activations", f"{p.name} activations{_compiled(t)}", a * f)
        for p in parts
        if (a := part_activation_bytes_per_sample(p, t, res))
    ]


def _compiled(t: TrainingSpec) -> str:
    return f" ({memory_compile.SOURCE})" if t.compile else ""


def late_backward_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, platform: PlatformSpec) -> Rows:
    """Per sample, alive while the top part's bottom block runs backward (the blocks above it have
    made their gradients): that block's activations (saved, or recomputed under checkpointing)
    and all that the parts below it saved (their backward comes later)."""
    *below, top = parts
    rows = saved_activation_rows(tuple(below), t, s, platform)
    if top.backward and top.spec is not None:
        a = part_block_bytes_per_token(top, t, residual_bytes(s, t)) * top.tokens
        rows.append(
            (
                "activations",
                f"{top.name} bottom block's activations (saved or recomputed){_compiled(t)}",
                a * platform.calibration.activation_factor,
            )
        )
    return rows


# --- model states and moments: the engine's (engines/*) ----------------------------------
def model_state_rows(parts: tuple[Part, ...], t: TrainingSpec, s: StrategySpec, layout: Layout) -> Rows:
    """Params, grads and optimizer state, as they stand once the first step has run."""
    return engine_of(s).states(parts, t, s, layout)


def moments(
    parts: tuple[Part, ...],
    t: TrainingSpec,
    platform: PlatformSpec,
    layout: Layout,
    s: StrategySpec,
    wrap: str = "block",
    accumulating: bool = False,
) -> list[Moment]:
    """The moments of one training step that can hold the peak (module docstring)."""
    states = model_state_rows(parts, t, s, layout)
    acts = activation_rows(parts, t, s, platform)
    reserve: Rows = [
        ("reserve", "framework reserve (runtime, collective buffers)", platform.allocator.framework_reserve_gib * GiB)
    ]
    return engine_of(s).moments(
        parts,
        t,
        s,
        layout,
        states=states,
        acts=acts,
        reserve=reserve,
        wrap=wrap,
        accumulating=accumulating,
        saved_acts=saved_activation_rows(parts, t, s, platform),
        late_acts=late_backward_rows(parts, t, s, platform),
        step_impl=t.optimizer_impl_on(platform.device),
    )


# --- the estimate ------------------------------------------------------------------------
def estimate_memory(
    parts: tuple[Part, ...],
    training: TrainingSpec,
    platform: PlatformSpec,
    layout: Layout,
    strategy: StrategySpec,
    micro_batch: int,
    wrap: str = "block",
    accumulating: bool = False,
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


def max_micro_batch(
    parts,
    training,
    platform,
    layout,
    strategy,
    wrap: str = "block",
    accumulating: bool = False,
    usable_bytes: float | None = None,
) -> int:
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
