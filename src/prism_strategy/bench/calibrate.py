"""Fit a platform's efficiency factors to stored measurements.

Time: the planner's own step-time model is re-evaluated with multiplicative factors on the
platform's achieved FLOP/s, link bandwidths, latencies and per-operation / per-tensor / launch
overheads; coordinate descent on log-factors minimises the squared log error of step time
over all runs (the model is not linear once overlap is capped by compute, so no closed form).
Memory: least squares for measured = states_and_buffers + factor x activations + reserve.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

import numpy as np

from prism_strategy.bench.predict import predict
from prism_strategy.bench.store import Result
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError

TIME_KNOBS = ("achieved", "intra_bw", "inter_bw", "latency", "collective_overhead_us", "per_tensor_overhead_us",
              "kernel_launch_us")
GRID = (0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2.0, 4.0)


def scaled_platform(base: PlatformSpec, f: dict[str, float]) -> PlatformSpec:
    achieved = base.achievable_fraction * f["achieved"]
    peak_scale = max(1.0, achieved)  # a fraction above 1 means the peak itself was underestimated
    return dataclasses.replace(
        base,
        achievable_fraction=min(1.0, achieved), peak_tflops_bf16=base.peak_tflops_bf16 * peak_scale,
        peak_tflops_fp32=base.peak_tflops_fp32 * peak_scale,
        intra_bw_gbps=base.intra_bw_gbps * f["intra_bw"], intra_ring_bw_gbps=base.intra_ring_bw_gbps * f["intra_bw"],
        nic_bw_gbps=base.nic_bw_gbps * f["inter_bw"], intra_latency_us=base.intra_latency_us * f["latency"],
        inter_latency_us=base.inter_latency_us * f["latency"],
        collective_overhead_us=max(base.collective_overhead_us, 1.0) * f["collective_overhead_us"],
        per_tensor_overhead_us=max(base.per_tensor_overhead_us, 1.0) * f["per_tensor_overhead_us"],
        kernel_launch_us=max(base.kernel_launch_us, 0.1) * f["kernel_launch_us"],
    )


def _time_loss(platform: PlatformSpec, runs: list[Result]) -> float:
    return sum(math.log(predict(r.config, platform)["step_time_s"] / r.measured["step_time_s"]) ** 2 for r in runs)


def fit_time(base: PlatformSpec, runs: list[Result], rounds: int = 4) -> PlatformSpec:
    f = {k: 1.0 for k in TIME_KNOBS}
    best = _time_loss(base, runs)
    for _ in range(rounds):
        for k in TIME_KNOBS:
            for g in GRID:
                trial = f | {k: f[k] * g}
                loss = _time_loss(scaled_platform(base, trial), runs)
                if loss < best - 1e-12:
                    best, f = loss, trial
    return scaled_platform(base, f)


def fit_memory(platform: PlatformSpec, runs: list[Result]) -> PlatformSpec:
    """measured - (predicted total - activations - reserve) = factor x activations + reserve."""
    base = dataclasses.replace(platform, activation_factor=1.0, framework_reserve_gib=0.0)
    runs = [r for r in runs if r.measured.get("peak_memory_bytes")]  # published/imported runs may lack one
    rows, target = [], []
    for r in runs:
        p = predict(r.config, base)
        rows.append([p["activation_bytes"], 1.0])
        target.append(r.measured["peak_memory_bytes"] - (p["memory_bytes"] - p["activation_bytes"]))
    if len(runs) < 2:
        return platform
    (factor, reserve), *_ = np.linalg.lstsq(np.array(rows), np.array(target), rcond=None)
    return dataclasses.replace(platform, activation_factor=max(float(factor), 0.05),
                               framework_reserve_gib=max(float(reserve), 0.0) / GiB)


def errors_pct(platform: PlatformSpec, runs: list[Result]) -> dict[str, float]:
    t = [abs(predict(r.config, platform)["step_time_s"] / r.measured["step_time_s"] - 1) * 100 for r in runs]
    m = [abs(predict(r.config, platform)["memory_bytes"] / r.measured["peak_memory_bytes"] - 1) * 100
         for r in runs if r.measured.get("peak_memory_bytes")]
    return {"step_time_median": statistics.median(t) if t else float("nan"),
            "memory_median": statistics.median(m) if m else float("nan")}


def calibrate(base: PlatformSpec, results: list[Result]) -> tuple[PlatformSpec, dict[str, Any]]:
    runs = [r for r in results if r.status == "ok" and r.measured.get("step_time_s")]
    if len(runs) < 3:
        raise SpecError(f"calibration needs at least 3 successful runs on platform {base.name}, found {len(runs)}; "
                        "measure some with `prism-strategy bench`")
    before = errors_pct(base, runs)
    fitted = fit_memory(fit_time(base, runs), runs)
    after = errors_pct(fitted, runs)
    report = {"runs": len(runs), "before": before, "after": after}
    return fitted, report


def fitted_values(p: PlatformSpec) -> dict[str, float]:
    from prism_strategy.estimate.calibration import FITTED

    return {k: float(getattr(p, k)) for k in FITTED}
