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
    from prism_strategy.bench.fit_terms import get_value
    from prism_strategy.estimate.calibration import FITTED

    return {k: float(v) for k in FITTED if (v := get_value(p, k)) is not None}


def published_for(platform: str) -> list[str]:
    """Shipped measurement files whose records ran on this platform."""
    from prism_strategy.bench.published import load_published, published_names

    return [n for n in published_names() if any(r.platform == platform for r in load_published(n))]


def _db_observations(results: list[Result]) -> list[Any]:
    """Stored runs (bench or imported) as step-time observations; copies of published records
    (config["published"]) are skipped: the records themselves are read from the package."""
    from prism_strategy.bench.fit_terms import Observation

    out = []
    for r in results:
        if r.status != "ok" or not r.measured.get("step_time_s") or r.config.get("published"):
            continue
        out.append(Observation(id=f"db:{r.id}", what="step_s", measured=float(r.measured["step_time_s"]),
                               predict=lambda p, c=r.config: predict(c, p)["step_time_s"]))
    return out


def calibrate_terms(base: PlatformSpec, results: list[Result], names: list[str]) -> tuple[PlatformSpec, dict[str, Any]]:
    """Fit the host/launch/collective terms (bench/fit_terms.py) to the published records of
    `names` and the stored runs, from the fit's priors (reproducible without a DB); then the
    allocator's cache factor to the records' reserved memory."""
    from prism_strategy.bench import fit_terms as ft
    from prism_strategy.bench.published import load_published

    records = [r for n in names for r in load_published(n) if r.platform == base.name]
    obs = [o for r in records if ft.fit_reason(r) is None for o in ft.record_observations(r)] + _db_observations(results)
    if len({o.id for o in obs}) < 3:
        raise SpecError(f"calibration needs at least 3 measured step times on platform {base.name}, found "
                        f"{len({o.id for o in obs})}; import runs with `prism-strategy results import`")
    prior = ft.prior_platform(base)
    fitted = ft.fit(prior, obs)
    fitted = dataclasses.replace(fitted, allocator_cache_factor=ft.fit_allocator_cache(ft.memory_points(records, fitted)))
    before, after = ft.errors(base, obs), ft.errors(fitted, obs)
    rows = [{"id": k, "before_err_pct": before[k], "after_err_pct": after[k]} for k in after]
    held = [{"id": r.id, "why": ft.fit_reason(r)} for r in records if ft.fit_reason(r)]
    report = {"runs": len(rows), "records": rows, "not_fitted": held,
              "before": {"step_time_median": ft.median_abs(before)}, "after": {"step_time_median": ft.median_abs(after)}}
    return fitted, report


def run_calibrate(platform: str, db: str | None, out: str | None) -> dict[str, Any]:
    """`prism-strategy calibrate`: fit, write the calibration file, return the report. A platform
    with published records (data/measurements) fits the step-time terms to them and to every
    stored run; otherwise the efficiency factors to this tool's own bench runs."""
    from pathlib import Path

    from prism_strategy.bench.store import Store
    from prism_strategy.estimate.calibration import default_calibration_dir, write_calibration
    from prism_strategy.specs.presets import load_platform

    base = load_platform(platform)
    stored = Store(db).query(platform=base.name)
    names = published_for(base.name)
    if names:
        fitted, report = calibrate_terms(base, [r for r in stored if r.kind != "ceiling-trial"], names)
        own = [r for r in stored if not r.config.get("published")]
        fp = own[-1].fingerprint if own else {"host": f"published records {', '.join(names)}", "platform": base.name,
                                               "backend": base.backend, "torch": "as recorded"}
        report["published"] = names
    else:
        rows = [r for r in stored if r.kind == "bench"]
        fitted, report = calibrate(base, rows)
        fp = rows[-1].fingerprint
    path = Path(out) if out else default_calibration_dir() / f"{base.name}.toml"
    write_calibration(path, platform=base.name, fingerprint=fp, values=fitted_values(fitted), runs=report["runs"],
                      errors={k: v for k, v in report["after"].items() if v == v})
    return report | {"platform": base.name, "file": str(path), "values": fitted_values(fitted)}
