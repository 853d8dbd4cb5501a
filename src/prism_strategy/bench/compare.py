"""Prediction beside measurement for every stored configuration, with the error in percent."""

from __future__ import annotations

from typing import Any

from prism_strategy.bench.predict import predict
from prism_strategy.bench.store import Result
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or not meas:
        return None
    return (pred - meas) / meas * 100


def compare_row(r: Result, platform: PlatformSpec) -> dict[str, Any]:
    p = predict(r.config, platform)
    m = r.measured
    if r.kind == "ceiling":
        predicted = {"max_micro_batch": p["max_micro_batch"]}
        measured = {"max_micro_batch": m.get("ceiling")}
        errors = {"max_micro_batch": _err(p["max_micro_batch"], m.get("ceiling"))}
    else:
        predicted = {"samples_per_s": p["samples_per_s"], "step_time_s": p["step_time_s"],
                     "memory_gib": p["memory_bytes"] / GiB}
        mem = m.get("peak_memory_bytes")
        measured = {"samples_per_s": m.get("samples_per_s"), "step_time_s": m.get("step_time_s"),
                    "memory_gib": mem / GiB if mem else None}
        errors = {k: _err(predicted[k], measured[k]) for k in predicted}
    return {"id": r.id, "strategy": r.strategy, "kind": r.kind, "status": r.status, "config": r.config,
            "predicted": predicted, "measured": measured, "error_pct": errors,
            "provenance": {"predicted": f"analytic model, platform {platform.name}"
                                        f"{' (calibrated)' if any(v.startswith('calibrated') for v in platform.sources.values()) else ''}",
                           "measured": f"{r.created_at} on {r.fingerprint.get('host', '?')}, torch {r.fingerprint.get('torch', '?')}"}}


def compare(results: list[Result], platform_for: Any = load_platform) -> list[dict[str, Any]]:
    """One row per successful bench run and per ceiling search."""
    rows = []
    for r in results:
        if r.kind not in ("bench", "ceiling") or r.status != "ok":
            continue
        try:
            rows.append(compare_row(r, platform_for(r.platform)))
        except SpecError as e:
            raise SpecError(f"stored result {r.id}: {e}") from None
    return rows
