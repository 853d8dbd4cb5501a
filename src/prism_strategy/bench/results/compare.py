"""Prediction beside measurement for every stored configuration, with the error in percent.

Bench runs, imported logs and published records are compared alike; each row says where its
measurement came from (`provenance`). Where a run reported both peak allocated and peak reserved
device memory, each is shown beside the model's figure of the same counter (allocated beside
max_memory_allocated's, reserved beside max_memory_reserved's: estimate/memory_runtime.py); a run
with one peak is shown beside the planner's total.
"""

from __future__ import annotations

from typing import Any

from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or not meas:
        return None
    return (pred - meas) / meas * 100


def _gib(v: float | None) -> float | None:
    return v / GiB if v else None


def _memory(r: Result, p: dict[str, Any]) -> tuple[dict[str, float], dict[str, float | None]]:
    """(predicted, measured) memory quantities, like against like: allocated beside the predicted
    allocated, reserved beside the predicted reserved where the run reported them, else the one
    peak beside the planner's total."""
    if r.peak_allocated_bytes or r.peak_reserved_bytes:
        counters = (
            ("alloc_gib", r.peak_allocated_bytes, p.get("allocated_bytes", p["memory_bytes"])),
            ("reserved_gib", r.peak_reserved_bytes, p.get("reserved_bytes", p["memory_bytes"])),
        )
        pairs = [(k, _gib(v), pred / GiB) for k, v, pred in counters if v]
        return {k: pred for k, _, pred in pairs}, {k: v for k, v, _ in pairs}
    return {"memory_gib": p["memory_bytes"] / GiB}, {"memory_gib": _gib(r.measured.get("peak_memory_bytes"))}


PREDICTED = object()


def _rates(p: dict[str, Any], measured_samples_per_s: Any = PREDICTED) -> dict[str, float | None]:
    """Tokens/s per device and MFU: predicted, or of the measured samples/s (the same tokens and
    model FLOPs per sample, estimate/compute.py, against the same peak; None when none was measured)."""
    if "mfu" not in p:
        return {}
    if measured_samples_per_s is PREDICTED:
        return {"tokens_per_s_per_device": p["tokens_per_s_per_device"], "mfu": p["mfu"]}
    scale = measured_samples_per_s / p["samples_per_s"] if measured_samples_per_s and p["samples_per_s"] else None
    return {k: None if scale is None else p[k] * scale for k in ("tokens_per_s_per_device", "mfu")}


def measured_from(r: Result) -> str:
    if r.provenance == "published":
        return f"published: {r.source}"
    if r.provenance == "imported":
        return f"imported {r.created_at} from {r.source}"
    return f"{r.created_at} on {r.fingerprint.get('host', '?')}, torch {r.fingerprint.get('torch', '?')}"


def compare_row(r: Result, platform: PlatformSpec) -> dict[str, Any]:
    p = predict(r.config, platform)
    m = r.measured
    if r.kind == "ceiling":
        predicted = {"max_micro_batch": p["max_micro_batch"]}
        measured = {"max_micro_batch": m.get("ceiling")}
    else:
        mem_p, mem_m = _memory(r, p)
        predicted = {"samples_per_s": p["samples_per_s"], "step_time_s": p["step_time_s"]} | _rates(p) | mem_p
        measured = (
            {"samples_per_s": m.get("samples_per_s"), "step_time_s": m.get("step_time_s")}
            | _rates(p, m.get("samples_per_s"))
            | mem_m
        )
    errors = {k: _err(predicted[k], measured[k]) for k in predicted}
    phases = (
        {}
        if r.kind == "ceiling"
        else {
            "measured": {k: m.get(f"{k}_s") for k in ("forward", "backward", "optimizer", "step_time")},
            "predicted": {
                "compute": p["compute_s"],
                "exposed_comm": p.get("exposed_comm_s"),
                "optimizer": p.get("optimizer_s"),
                "step_time": p["step_time_s"],
            },
        }
    )
    calibrated = next((v for v in platform.sources.values() if v.startswith("calibrated")), None)
    return {
        "id": r.id,
        "strategy": r.strategy,
        "kind": r.kind,
        "status": r.status,
        "config": r.config,
        "provenance": r.provenance,
        "record": (m.get("published") or {}).get("id"),
        "predicted": predicted,
        "measured": measured,
        "error_pct": errors,
        "phases": phases,
        "platform": platform.name,
        "sources": {
            "predicted": f"analytic model, platform {platform.name}" + (f" ({calibrated})" if calibrated else ""),
            "measured": measured_from(r),
        },
    }


def compare(
    results: list[Result], platform_for: Any = load_platform, skipped: list[str] | None = None
) -> list[dict[str, Any]]:
    """One row per successful bench run (ours, imported or published) and per ceiling search. A
    stored row the model cannot read (a precision or platform this version does not know) is left
    out, and said in `skipped` ("stored result 3 (ddp): unknown precision 'fp8'"), not fatal."""
    rows = []
    for r in results:
        if r.kind not in ("bench", "ceiling") or r.status != "ok":
            continue
        try:
            rows.append(compare_row(r, platform_for(r.platform)))
        except SpecError as e:
            if skipped is not None:
                skipped.append(f"stored result {r.id} ({r.strategy}, {r.platform}): {e}")
    return rows
