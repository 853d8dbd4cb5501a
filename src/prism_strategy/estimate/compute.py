"""Compute per step: per phase, the larger of FLOPs / achievable peak and kernels x launch cost.

Forward FLOPs per token: 2 x (weights in matmuls) (Kaplan et al. 2020; PaLM appendix B, as
nanoGPT's estimate_mfu) plus attention scores and values, 4 x seq x (heads x head_dim) per layer,
halved for causal masks (flash attention skips the masked half). Backward: 2x forward for a
trainable part (activation and weight gradients); 1x for the matmuls of a frozen part that
gradients flow through (activation gradients only) and 2x its attention; 0 for a frozen part
with nothing trainable below it. Activation checkpointing recomputes the forward of the
checkpointed blocks; selective checkpointing (sac, torchtitan's per-op policy) only the linears its
policy does not save (estimate/memory.py sac_linears: every second bias-free matmul of each block);
the chunked loss recomputes the LM head's logits. A platform with `compute_terms` times each matmul
by its shape, attention and the eager kernels apart (estimate/compute_shape.py); without, every FLOP
runs at one fraction.

Kernels (launch-bound steps, PRISM A1/A2/B1 on Aurora: a 0.6B model launches ~6,900 kernels a
step at ~45 us of host time each, more time than its FLOPs take) are counted from the block's
ops as eager PyTorch (HF modelling code) runs them: see `block_kernels`. Backward launches two
kernels per forward elementwise op and two GEMMs (input and weight gradients) per forward GEMM
of a trainable block, one of a frozen block; checkpointed blocks launch their forward again.
Eager counts; torch.compile fuses the elementwise ops (counted as GEMMs + attention only).

Host time per phase: kernels x kernel_launch_us (Aurora's fitted all-in figure), or, where the
platform gives `host_op_us` (the CUDA presets, issue 36), every aten op the host dispatches x that:
the kernels plus the shape ops that launch none yet pass Python, the dispatcher and autograd
(`step_host_ops`, checked against torch.profiler's count of a real HF Llama step). The device
runs behind the host, so a phase takes the longer of the two: a small model's step is the host's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate import families
from prism_strategy.estimate.memory import checkpointed_blocks, sac_linears
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec

NORM_KERNELS = {"rmsnorm": 7, "layernorm": 1, "layernorm_noparam": 3}
"""HF RMSNorm: cast to fp32, pow, mean, add eps, rsqrt, mul, cast back x weight; LayerNorm is one
fused kernel (OLMo's parameter-free one casts to fp32 and back around it)."""
ROPE_KERNELS = 10
"""q and k each: rotate_half (neg, cat), x cos, rotate_half x sin, add."""
ATTENTION_KERNELS = 2
"""scaled_dot_product_attention and the contiguous copy after the head transpose."""
GQA_KERNELS = 2
"""repeat_kv copies of k and v when kv_heads < heads."""
RESIDUAL_KERNELS = 2
DECODER_ROOT_KERNELS = 8
"""Embedding lookup, LM head GEMM, loss in fp32 (cast, shift copy, log_softmax, nll, mean, scale);
the final norm comes on top."""
VISION_ROOT_KERNELS = 3
"""Patch-embedding convolution, position-embedding add, post-layernorm."""
PROJECTOR_KERNELS = 5
"""Linear, GELU, Linear, and merging image tokens into the text sequence (2)."""
OPTIMIZER_FOREACH_OPS = 8
"""AdamW (foreach): lerp, mul, addcmul, weight decay, sqrt, div, add, addcdiv over tensor lists."""
FOREACH_TENSORS_PER_KERNEL = 36
"""multi_tensor_apply packs at most 36 tensors of a 4-list op into one launch (PyTorch ForeachFunctors)."""
SHAPE_OPS_PER_DECODER_BLOCK = 15
"""Aten ops of an HF decoder block's forward that launch no kernel yet pass the dispatcher (and
autograd) like any other: q, k, v `view` to heads and `transpose` (6), the output's transpose back
and `reshape` (2), the attention mask's transpose (1), rope's cos/sin `unsqueeze` (2) and
rotate_half's two slices of q and of k (4) (transformers modeling_llama.py). Backward runs the
view's backward for each (counted once more)."""
DECODER_ROOT_HOST_OPS = 14
"""Ops of a decoder's root outside the blocks that step_kernels leaves out: the rotary table
(position arange, 2 unsqueezes, 2 casts to fp32, the frequency product, cat, cos, sin, 2 scaling
muls, 2 casts back) and the labels' shifting pad (transformers modeling_llama.py, loss_utils.py)."""
SHAPE_OPS_PER_BLOCK = 8
"""Encoder (vision) blocks: the head split and merge of q, k, v and the output, no rope."""
SHAPE_OPS_PER_BACKWARD_GEMM = 2
"""Each backward GEMM of an nn.Linear transposes its weight or gradient (`t`) and flattens the
3-D activation to 2-D (`reshape`) before `mm` (autograd's linear backward formula)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BlockKernels:
    kernels: int
    """Forward kernels one block launches."""
    gemms: int

    def backward(self, trains: bool) -> int:
        return 2 * (self.kernels - self.gemms) + self.gemms * (2 if trains else 1)


def block_kernels(spec: TransformerSpec, compiled: bool = False) -> BlockKernels:
    """Kernels of one block's forward, from its structure: 2 norms (+ q/k norms), q/k/v/o GEMMs,
    rope (decoders), attention, MLP GEMMs and activation (+ SwiGLU's gate product), residual adds."""
    gemms = 4 + (3 if spec.mlp == "swiglu" else 2)
    extra, extra_gemms = families.extra_block_kernels(spec, compiled)  # Gemma's norms, MoE routing
    if compiled:
        return BlockKernels(kernels=gemms + ATTENTION_KERNELS + extra, gemms=gemms + extra_gemms)
    n = 2 * NORM_KERNELS[spec.norm] + (0 if spec.qk_norm == "none" else 2 * NORM_KERNELS["rmsnorm"])
    n += gemms + ATTENTION_KERNELS + RESIDUAL_KERNELS + (2 if spec.mlp == "swiglu" else 1)
    if spec.kind == "decoder":
        n += ROPE_KERNELS + (GQA_KERNELS if spec.kv_heads < spec.heads else 0)
    return BlockKernels(kernels=n + extra, gemms=gemms + extra_gemms)


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseKernels:
    forward: int
    backward: int
    """Including the forward recomputed under activation checkpointing."""
    optimizer: int
    gemms: int

    @property
    def total(self) -> int:
        return self.forward + self.backward + self.optimizer


def _part_kernels(part: Part, training: TrainingSpec) -> tuple[int, int, int, int]:
    """(forward, backward incl. recompute, gemms forward, gemms backward) of one part, one micro-step."""
    if part.spec is None:
        bwd = 2 * PROJECTOR_KERNELS if part.backward else 0
        return PROJECTOR_KERNELS, bwd, 2, (4 if part.backward else 0)
    spec = part.spec
    blk = block_kernels(spec, training.compile)
    root = (DECODER_ROOT_KERNELS + NORM_KERNELS[spec.norm]) if spec.kind == "decoder" else VISION_ROOT_KERNELS
    root_gemms = 1
    fwd = spec.layers * blk.kernels + root
    if not part.backward:
        return fwd, 0, spec.layers * blk.gemms + root_gemms, 0
    k = checkpointed_blocks(spec.layers, training.ckpt_freq)
    again, again_gemms = blk.kernels, blk.gemms
    if selective_ac(training):  # saved linears and attention are not launched again
        kept = sum(1 for *_, saved in sac_linears(spec) if saved)
        again, again_gemms = blk.kernels - kept - 1, blk.gemms - kept
    bwd = spec.layers * blk.backward(part.trains) + 2 * root + k * again
    g_bwd = (spec.layers * blk.gemms + root_gemms) * (2 if part.trains else 1) + k * again_gemms
    return fwd, bwd, spec.layers * blk.gemms + root_gemms, g_bwd


def step_kernels(
    parts: tuple[Part, ...], training: TrainingSpec, grad_accum: int = 1, trainable_tensors: int | None = None
) -> PhaseKernels:
    """Kernels one rank launches per optimizer step (model only: the engine's own copies and
    collectives are counted by its grad-path term)."""
    f = b = g = 0
    for p in parts:
        pf, pb, gf, gb = _part_kernels(p, training)
        f, b, g = f + pf, b + pb, g + gf + gb
    tensors = sum(p.tensors for p in parts if p.trains) if trainable_tensors is None else trainable_tensors
    opt = OPTIMIZER_FOREACH_OPS * math.ceil(tensors / FOREACH_TENSORS_PER_KERNEL)
    return PhaseKernels(forward=f * grad_accum, backward=b * grad_accum, optimizer=opt, gemms=g * grad_accum)


@dataclass(frozen=True, kw_only=True, slots=True)
class HostOps:
    """Aten ops one rank dispatches per optimizer step, each a trip through Python, the
    dispatcher and autograd before any launch: kernels plus the shape ops that launch none."""

    forward: int
    backward: int


def step_host_ops(parts: tuple[Part, ...], training: TrainingSpec, grad_accum: int = 1) -> HostOps:
    """Eager: the step's kernels (step_kernels) plus each block's shape ops in forward and again
    in backward, a decoder root's rotary table, and the transposes and reshapes around each
    backward GEMM. Checked against torch.profiler's count of top-level aten ops of a real HF Llama
    step (tests/unit/estimate/test_cuda_host_bound.py). Compiled: the kernels
    (the graph replays without the per-op shape ops)."""
    k = step_kernels(parts, training, grad_accum)
    if training.compile:
        return HostOps(forward=k.forward, backward=k.backward)
    fwd = bwd = gemms_fwd = 0
    for p in parts:
        gemms_fwd += _part_kernels(p, training)[2]
        if p.spec is None:
            continue
        decoder = p.spec.kind == "decoder"
        shape = p.spec.layers * (SHAPE_OPS_PER_DECODER_BLOCK if decoder else SHAPE_OPS_PER_BLOCK)
        fwd, bwd = fwd + shape + (DECODER_ROOT_HOST_OPS if decoder else 0), bwd + (shape if p.backward else 0)
    gemms_bwd = k.gemms - gemms_fwd * grad_accum
    return HostOps(
        forward=k.forward + fwd * grad_accum,
        backward=k.backward + bwd * grad_accum + SHAPE_OPS_PER_BACKWARD_GEMM * gemms_bwd,
    )


def selective_ac(training: TrainingSpec) -> bool:
    """The run uses torchtitan's per-op selective checkpointing on every block. Read from the
    training spec's `ckpt_policy == "sac"` or `ckpt_freq == "sac"` (whichever the spec carries)."""
    return getattr(training, "ckpt_policy", None) == "sac" or getattr(training, "ckpt_freq", None) == "sac"


SAC_RECOMPUTED_GEMMS = slice(1, None, 2)
"""Per block, torchtitan's per-op policy recomputes the 2nd, 4th, 6th ... matmul (estimate/compute_shape.py)."""


def block_gemms(spec: TransformerSpec) -> tuple[tuple[int, int], ...]:
    """(in, out) widths of each block matmul in forward order: q, k, v, o, then SwiGLU's gate
    (w1), up (w3), down (w2), as torchtitan's `w2(silu(w1(x)) * w3(x))` runs them, or GELU's up, down."""
    h, q, kv, f = spec.hidden, spec.q_width, spec.kv_width, spec.ffn
    if spec.moe:  # router, routed experts, shared expert (estimate/families.py)
        return ((h, q), (h, kv), (h, kv), (q, h)) + families.moe_block_gemms(spec)
    mlp = ((h, f), (h, f), (f, h)) if spec.mlp == "swiglu" else ((h, f), (f, h))
    return ((h, q), (h, kv), (h, kv), (q, h)) + mlp


@dataclass(frozen=True, kw_only=True, slots=True)
class PartFlops:
    name: str
    forward: float
    backward: float
    recompute: float

    @property
    def total(self) -> float:
        return self.forward + self.backward + self.recompute


def part_flops_per_sample(part: Part, training: TrainingSpec) -> PartFlops:
    if part.spec is None:  # projector MLP
        fwd = 2.0 * part.params * part.tokens
        return PartFlops(name=part.name, forward=fwd, backward=2 * fwd, recompute=0.0)
    spec, t = part.spec, part.tokens
    causal = 0.5 if spec.kind == "decoder" else 1.0
    block_mm = 2.0 * spec.active_matmul_params * t  # MoE: router + top-k experts + shared expert
    block_attn = 4.0 * t * t * spec.q_width * causal
    head = 2.0 * spec.vocab * spec.hidden * t if spec.kind == "decoder" else 0.0
    embed = 2.0 * spec.channels * spec.patch_size**2 * spec.hidden * t if spec.kind == "vision" else 0.0
    fwd = spec.layers * (block_mm + block_attn) + head + embed
    if not part.backward:
        bwd = 0.0
    elif part.trains:
        bwd = 2 * fwd
    else:
        bwd = spec.layers * (block_mm + 2 * block_attn) + head
    k = checkpointed_blocks(spec.layers, training.ckpt_freq) if part.backward else 0
    per_block = block_mm + block_attn
    if part.backward and selective_ac(training):  # only the linears the policy does not save run again
        k, per_block = spec.layers, 2.0 * t * sum(o * i for o, i, saved in sac_linears(spec) if not saved)
    # the chunked loss recomputes each chunk's logits in backward (runtime/loss.py)
    loss = head if training.loss == "chunked" and part.backward else 0.0
    return PartFlops(name=part.name, forward=fwd, backward=bwd, recompute=k * per_block + loss)


def flops_per_sample(parts: tuple[Part, ...], training: TrainingSpec) -> float:
    return sum(part_flops_per_sample(p, training).total for p in parts)


def achieved_flops(platform: PlatformSpec, training: TrainingSpec) -> float:
    peak = (
        platform.hardware.peak_tflops_bf16 if training.compute_dtype == "bf16" else platform.hardware.peak_tflops_fp32
    )
    return peak * 1e12 * platform.compute.achievable_fraction


@dataclass(frozen=True, kw_only=True, slots=True)
class PhaseTimes:
    """Seconds per optimizer step on one rank; each phase max(FLOPs time, launch time)."""

    forward: float
    backward: float
    forward_launch: float
    backward_launch: float
    forward_flops: float
    backward_flops: float

    @property
    def total(self) -> float:
        return self.forward + self.backward

    @property
    def launch_bound(self) -> bool:
        return self.forward_launch + self.backward_launch > self.forward_flops + self.backward_flops


def phase_times(
    parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, micro_batch: int, grad_accum: int = 1
) -> PhaseTimes:
    if platform.compute.compute_terms is not None:  # achievable fraction by matmul shape and operation
        from prism_strategy.estimate.compute_shape import shaped_seconds

        fwd, bwd = shaped_seconds(parts, training, platform, micro_batch)
        f_fwd, f_bwd = grad_accum * fwd, grad_accum * bwd
    else:
        rate = achieved_flops(platform, training)
        fl = [part_flops_per_sample(p, training) for p in parts]
        f_fwd = micro_batch * grad_accum * sum(x.forward for x in fl) / rate
        f_bwd = micro_batch * grad_accum * sum(x.backward + x.recompute for x in fl) / rate
    f_host, b_host = phase_host_s(parts, training, platform, grad_accum)
    return PhaseTimes(
        forward=max(f_fwd, f_host),
        backward=max(f_bwd, b_host),
        forward_launch=f_host,
        backward_launch=b_host,
        forward_flops=f_fwd,
        backward_flops=f_bwd,
    )


def phase_host_s(
    parts: tuple[Part, ...],
    training: TrainingSpec,
    platform: PlatformSpec,
    grad_accum: int = 1,
    op_us: float | None = None,
) -> tuple[float, float]:
    """(forward, backward) host seconds: host ops x host_op_us where the platform has it (the host
    time of each eager op, which the device overlaps: a phase takes the longer of the two), else
    kernels x kernel_launch_us. op_us: another per-op figure (the range's ends)."""
    us = platform.compute.host_op_us if op_us is None else op_us
    if us is None:
        k = step_kernels(parts, training, grad_accum)
        launch = platform.compute.kernel_launch_us * 1e-6
        return k.forward * launch, k.backward * launch
    h = step_host_ops(parts, training, grad_accum)
    return h.forward * us * 1e-6, h.backward * us * 1e-6


def optimizer_time_s(
    trainable_per_device: float, bytes_per_param: float, platform: PlatformSpec, trainable_tensors: int = 0
) -> float:
    """Memory-bound (it reads and writes params, grads and states) or launch-bound (foreach
    kernels over the tensor lists), whichever is longer."""
    memory = 2 * trainable_per_device * bytes_per_param / (platform.hardware.hbm_bw_gbps * 1e9)
    kernels = OPTIMIZER_FOREACH_OPS * math.ceil(trainable_tensors / FOREACH_TENSORS_PER_KERNEL)
    return max(memory, kernels * platform.compute.kernel_launch_us * 1e-6)
