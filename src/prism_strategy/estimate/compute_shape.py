"""Compute time by operation, for platforms whose achievable fraction depends on the work
(`PlatformSpec.compute.compute_terms`, fitted to published runs by benchmarks/cuda_fit.py).

Each matmul of a block (q, k, v, o, then the MLP's) runs at

    achievable_fraction x d / (d + gemm_half_dim) of peak, d = its smallest dimension

of (tokens per micro-batch, in width, out width): a matmul too thin to fill the GPU's output
tiles and waves runs below the large-matmul rate (the form of a tile-quantisation curve; the
half-dimension is an assumption the single-node rows cannot fit, see the data file). Attention
(scores and values, FLOPs as estimate/compute.py counts them) runs at achievable_fraction x
attention_ratio. Every other kernel eager PyTorch launches (norms, rotary, activations, residual
adds, casts: `block_kernels` minus the matmuls and the attention kernel) is bound by memory
bandwidth: elementwise_bytes x hidden x compute-dtype bytes per token, over hbm_bw_gbps.
torch.compile fuses them (block_kernels(compiled=True) leaves only the attention copy).

Backward follows estimate/compute.py: 2x forward for a part that trains; for a frozen part that
gradients flow through, 1x the matmuls (activation gradients only) and 2x attention. Elementwise
kernels launch twice in backward (BlockKernels.backward). Recompute: the whole forward of each
checkpointed block; under selective checkpointing (torchtitan's per-op policy, "sac") every
second matmul of each block (torchtitan `_apply_op_sac`: the mm counter runs per checkpointed
block, `meta[mm_count_key] % 2 == 0` recomputes) and all non-matmul kernels, attention saved.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.compute import SAC_RECOMPUTED_GEMMS, block_gemms, block_kernels, selective_ac
from prism_strategy.estimate.memory import checkpointed_blocks
from prism_strategy.specs.cluster import ComputeTerms, PlatformSpec
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec


def gemm_efficiency(terms: ComputeTerms, fraction: float, m: int, k: int, n: int) -> float:
    d = min(m, k, n)
    return fraction * d / (d + terms.gemm_half_dim)


@dataclass(frozen=True, kw_only=True, slots=True)
class Rates:
    flops: float
    """Peak FLOP/s of the compute dtype."""
    fraction: float
    terms: ComputeTerms
    ew_s_per_byte: float

    def gemms_s(self, gemms: tuple[tuple[int, int], ...], tokens: int) -> float:
        """Seconds of one forward of these matmuls over `tokens` tokens (one micro-batch)."""
        if tokens <= 0:
            return 0.0
        return sum(
            2.0 * i * o * tokens / (self.flops * gemm_efficiency(self.terms, self.fraction, tokens, i, o))
            for i, o in gemms
        )


def _rates(platform: PlatformSpec, training: TrainingSpec) -> Rates:
    assert platform.compute.compute_terms is not None
    peak = (
        platform.hardware.peak_tflops_bf16 if training.compute_dtype == "bf16" else platform.hardware.peak_tflops_fp32
    )
    return Rates(
        flops=peak * 1e12,
        fraction=platform.compute.achievable_fraction,
        terms=platform.compute.compute_terms,
        ew_s_per_byte=1.0 / (platform.hardware.hbm_bw_gbps * 1e9),
    )


def part_seconds(part: Part, training: TrainingSpec, platform: PlatformSpec, micro_batch: int) -> tuple[float, float]:
    """(forward, backward + recompute) seconds of one micro-batch of this part on one device."""
    r = _rates(platform, training)
    m = micro_batch * part.tokens
    if part.spec is None:  # projector MLP: Linear(in, out), Linear(out, out)
        i, o = part.widths
        fwd = r.gemms_s(((i, o), (o, o)), m)
        return fwd, (2 * fwd if part.backward else 0.0)
    spec = part.spec
    gemm = r.gemms_s(block_gemms(spec), m)
    causal = 0.5 if spec.kind == "decoder" else 1.0
    attn = 4.0 * m * part.tokens * spec.q_width * causal / (r.flops * r.fraction * r.terms.attention_ratio)
    blk = block_kernels(spec, training.compile)
    ew_kernels = blk.kernels - blk.gemms - 1  # the attention kernel is counted above
    ew = ew_kernels * r.terms.elementwise_bytes * spec.hidden * training.compute_bytes * m * r.ew_s_per_byte
    if spec.kind == "decoder":
        root = r.gemms_s(((spec.hidden, spec.vocab),), m)
    else:
        root = r.gemms_s(((spec.channels * spec.patch_size**2, spec.hidden),), m)
    fwd = spec.layers * (gemm + attn + ew) + root
    if not part.backward:
        return fwd, 0.0
    if part.trains:
        bwd = 2 * fwd
    else:
        bwd = spec.layers * (gemm + 2 * attn + 2 * ew) + (root if spec.kind == "decoder" else 0.0)
    if selective_ac(training):
        recompute = spec.layers * (r.gemms_s(block_gemms(spec)[SAC_RECOMPUTED_GEMMS], m) + ew)
    else:
        recompute = checkpointed_blocks(spec.layers, training.ckpt_freq) * (gemm + attn + ew)
    return fwd, bwd + recompute


def shaped_seconds(
    parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, micro_batch: int
) -> tuple[float, float]:
    """(forward, backward incl. recompute) seconds of one micro-step over all parts."""
    f = b = 0.0
    for p in parts:
        pf, pb = part_seconds(p, training, platform, micro_batch)
        f, b = f + pf, b + pb
    return f, b


def sac_recompute_s(parts: tuple[Part, ...], training: TrainingSpec, platform: PlatformSpec, micro_batch: int) -> float:
    """Seconds one micro-step spends recomputing under torchtitan's per-op selective policy on every
    block (every second matmul and the non-matmul kernels; attention saved), for a training spec
    that cannot say "sac" itself. Without compute_terms: the recomputed matmul FLOPs at the
    platform's one fraction."""
    from prism_strategy.estimate.compute import achieved_flops

    total = 0.0
    for p in parts:
        if p.spec is None or not p.backward:
            continue
        m = micro_batch * p.tokens
        sac = block_gemms(p.spec)[SAC_RECOMPUTED_GEMMS]
        if platform.compute.compute_terms is None:
            total += p.spec.layers * sum(2.0 * i * o * m for i, o in sac) / achieved_flops(platform, training)
            continue
        r = _rates(platform, training)
        blk = block_kernels(p.spec, training.compile)
        ew = (blk.kernels - blk.gemms - 1) * r.terms.elementwise_bytes * p.spec.hidden * training.compute_bytes * m
        total += p.spec.layers * (r.gemms_s(sac, m) + ew * r.ew_s_per_byte)
    return total
