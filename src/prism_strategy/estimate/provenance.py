"""The provenance prose of an option: where each of its numbers comes from (model, terms and
their sources). Set when the option is estimated (estimate/option.py), so it stays below report/;
report/plan_json.py prints it."""

from __future__ import annotations

from prism_strategy.estimate import memory_compile
from prism_strategy.estimate.comm import model_description as comm_model_description
from prism_strategy.estimate.overlap import description as overlap_description
from prism_strategy.estimate.overlap import schedules_overlap
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.platform_file import defaults_text
from prism_strategy.specs.scenario import Scenario


def _shape_text(p: PlatformSpec) -> str:
    t = p.compute.compute_terms
    assert t is not None
    return (
        f" x d / (d + {t.gemm_half_dim:g}) per matmul of smallest dimension d, attention x {t.attention_ratio:g}; "
        f"eager kernels {t.elementwise_bytes:g} x hidden bytes per token at {p.hardware.hbm_bw_gbps:g} GB/s: "
        f"estimate/compute_shape.py, {p.source('compute_terms')}"
    )


def _varying_text(sc: Scenario) -> str:
    """The varying-shape terms as this run gets them (estimate/memory_runtime.py)."""
    from prism_strategy.estimate.memory_runtime import varying_factor

    p, t = sc.platform, sc.training
    if not t.varying_lengths:
        return "; batch shapes fixed (no varying-shape term)"
    if varying_factor(p, t) == 0:
        return "; batch shapes vary, but expandable segments leave no slivers (assumption, no record)"
    return (
        f"; batch shapes vary: + {p.allocator.allocator_varying_factor:g} x per-sample activations, of which "
        f"{p.allocator.allocator_pinned_factor:g} x stays at the limit (fitted on PRISM C6)"
    )


def _platform_file(p: PlatformSpec) -> dict[str, str]:
    """A platform file's inherited and defaulted values (specs/platform_file.py), when it has any."""
    out = {"platform_base": f"{p.name} inherits every value it does not set from preset {p.base}"} if p.base else {}
    return out | ({"platform_defaults": defaults_text(p)} if p.defaulted else {})


def provenance(sc: Scenario) -> dict[str, str]:
    p = sc.platform
    calibrated = next((v for v in p.sources.values() if v.startswith("calibrated")), None)
    kind = "predicted (calibrated)" if calibrated else "predicted"
    return {
        "memory": f"{kind}: analytic model (estimate/memory.py: ZeRO model states, saved-tensor activations, fp32 loss logits); "
        "the figure is allocated (max_memory_allocated) + framework reserve; reserved adds the caching "
        f"allocator's {p.allocator.allocator_cache_factor:g} x activations and buffers ({p.source('allocator_cache_factor')})"
        + _varying_text(sc)
        + "; feasibility is judged at the limit (estimate/memory_runtime.py)"
        + (f"; {memory_compile.description(sc.training.compile_loss)}" if sc.training.compile else ""),
        "compute": f"{kind}: per phase max(FLOPs / ({p.hardware.peak_tflops_bf16:g} TF/s bf16 x {p.compute.achievable_fraction:g}"
        + (_shape_text(p) if p.compute.compute_terms else "")
        + f"), kernels x {p.compute.kernel_launch_us:g} us launch); peak: {p.source('peak_tflops_bf16')}; "
        f"fraction: {p.source('achievable_fraction')}; launch: {p.source('kernel_launch_us')}",
        "communication": f"{kind}: {comm_model_description(p)} on platform {p.name}, "
        + (
            overlap_description(p)
            if schedules_overlap(p)
            else f"overlap {p.collectives.comm_overlap:g} ({p.source('comm_overlap')})"
        )
        + ("; collectives block the host" if p.collectives.host_blocking_collectives else "")
        + "; gradient path per tensor: "
        + (
            ", ".join(f"{k} {v:g} us" for k, v in p.calibration.grad_path_us_per_tensor.items())
            or f"{p.collectives.per_tensor_overhead_us:g} us"
        )
        + " (estimate/host.py)"
        + (f"; {p.sources['env_profile']}" if "env_profile" in p.sources else ""),
        "calibration": calibrated or "none",
        **_platform_file(p),
        "mfu": f"{kind}: model FLOPs per sample (estimate/compute.py: 2 x matmul params x tokens + causal attention, "
        f"backward 2 x forward, recompute excluded, as PaLM's MFU) x samples/s per device / peak "
        f"{p.hardware.peak_tflops_bf16:g} TF/s bf16 or {p.hardware.peak_tflops_fp32:g} fp32 ({p.source('peak_tflops_bf16')})",
    }
