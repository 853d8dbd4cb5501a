"""Compute per step from FLOPs.

Forward FLOPs per token: 2 x (weights in matmuls) (Kaplan et al. 2020; PaLM appendix B, as
nanoGPT's estimate_mfu) plus attention scores and values, 4 x seq x (heads x head_dim) per layer,
halved for causal masks (flash attention skips the masked half). Backward: 2x forward for a
trainable part (activation and weight gradients); 1x for the matmuls of a frozen part that
gradients flow through (activation gradients only) and 2x its attention; 0 for a frozen part
with nothing trainable below it. Activation checkpointing recomputes the forward of the
checkpointed blocks. Time = FLOPs / (peak x achievable fraction), bounded below by the CPU
time to launch the step's kernels (small models on Level Zero are launch-bound).
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.memory import checkpointed_blocks
from prism_strategy.estimate.parts import Part
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.training import TrainingSpec

KERNELS_PER_BLOCK_FWD = 25
"""Kernels one transformer block launches in forward (norms, projections, rope, attention,
MLP, residual adds, casts); backward launches about twice as many. An assumption; calibrate."""


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
    block_mm = 2.0 * spec.block_matmul_params * t
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
    return PartFlops(name=part.name, forward=fwd, backward=bwd, recompute=k * (block_mm + block_attn))


def flops_per_sample(parts: tuple[Part, ...], training: TrainingSpec) -> float:
    return sum(part_flops_per_sample(p, training).total for p in parts)


def achieved_flops(platform: PlatformSpec, training: TrainingSpec) -> float:
    peak = platform.peak_tflops_bf16 if training.compute_dtype == "bf16" else platform.peak_tflops_fp32
    return peak * 1e12 * platform.achievable_fraction


def kernel_launch_s(parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec) -> float:
    """CPU time to launch one micro-step's kernels."""
    n = 0
    for p in parts:
        if p.spec is None:
            continue
        mult = 1 + (2 if p.backward else 0) + (1 if training.ckpt_freq and p.backward else 0)
        n += p.spec.layers * KERNELS_PER_BLOCK_FWD * mult
    return n * platform.kernel_launch_us * 1e-6


def compute_time_s(parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, micro_batch: int) -> float:
    """One micro-step (forward + backward + recompute) on one device."""
    flops_s = micro_batch * flops_per_sample(parts, training) / achieved_flops(platform, training)
    return max(flops_s, kernel_launch_s(parts, training, platform))


def optimizer_time_s(trainable_per_device: float, bytes_per_param: float, platform: PlatformSpec) -> float:
    """The optimizer step is memory-bound: it reads and writes params, grads and states."""
    return 2 * trainable_per_device * bytes_per_param / (platform.hbm_bw_gbps * 1e9)
