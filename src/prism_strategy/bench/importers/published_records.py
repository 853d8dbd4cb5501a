"""Shipped published records (`bench.fit.published`) as results with provenance ``published``.

Each record becomes one result keyed ``published:<set>:<id>``: importing the set again adds
nothing (changed records are updated in place). Measured step time is the record's own, else
derived by `PublishedRecord.step_time_s` (from samples/s or TFLOPS, said in ``measured.derived``).
A record that ran out of memory is stored with status ``oom``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prism_strategy.bench.fit.published import PublishedRecord, load_published, mid
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.inputs.stored import upgraded_row
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform


def _measured(rec: PublishedRecord) -> dict[str, Any]:
    m, s = rec.measured, rec.scenario
    out: dict[str, Any] = {}
    step = rec.step_time_s()
    if step:
        out |= {
            "step_time_s": step,
            "samples_per_s": s.samples_per_step / step,
            "tokens_per_s": s.samples_per_step * s.seq_len / step,
        }
        if m.step_s is None:
            out["derived"] = (
                "step time from samples/s"
                if mid(m.samples_per_s)
                else "step time from tokens/s per device"
                if mid(m.tokens_per_s_per_device)
                else "step time from TFLOPS"
            )
    if isinstance(m.samples_per_s, tuple):
        out["samples_per_s_range"] = list(m.samples_per_s)
    if isinstance(m.tokens_per_s_per_device, tuple):
        out["tokens_per_s_per_device_range"] = list(m.tokens_per_s_per_device)
    for k in ("forward_s", "backward_s", "optimizer_s", "data_s", "tflops_per_device", "mfu"):
        if getattr(m, k) is not None:
            out[k] = getattr(m, k)
    peak = rec.peak_bytes("allocated") or rec.peak_bytes("active") or rec.peak_bytes("peak")
    if peak:
        out["peak_memory_bytes"] = peak
        if rec.peak_bytes("allocated") is None:
            out["peak_memory_kind"] = (
                "active (about max_memory_allocated)"
                if rec.peak_bytes("active")
                else "as reported (allocated or reserved not said)"
            )
    out["published"] = {
        "id": rec.id,
        "section": rec.section,
        "assumed": list(rec.assumed),
        "inconsistent": rec.inconsistent,
        "notes": list(rec.notes),
    }
    return out


def _predicted(config: dict[str, Any], platform: str) -> dict[str, Any]:
    try:
        return predict(config, load_platform(platform))
    except SpecError as e:
        return {"error": str(e)}


def published_results(name: str) -> list[Result]:
    out = []
    for rec in load_published(name):
        config = upgraded_row(rec.as_config())
        out.append(
            Result(
                kind="bench",
                status="oom" if rec.measured.oom else "ok",
                strategy=config["strategy"],
                platform=rec.platform,
                config=config,
                measured=_measured(rec),
                predicted=_predicted(config, rec.platform),
                fingerprint={"host": "", "torch": "", "format": "published"},
                provenance="published",
                source=f"{name} {rec.id}: {rec.source}",
                peak_allocated_bytes=rec.peak_bytes("allocated"),
                peak_reserved_bytes=rec.peak_bytes("reserved"),
                dedup_key=f"published:{name}:{rec.id}",
            )
        )
    return out


def import_published(name: str, store: Store) -> list[tuple[Result, str]]:
    """Store every record of a published set; (result with id, added | updated | unchanged) each."""
    results = published_results(name)
    ids = store.add_many(results)
    return [(dataclasses.replace(r, id=rid), action) for r, (rid, action) in zip(results, ids)]
