"""What the results store measured at a plan's own layout: for each option of the plan, the newest
stored run (local `bench`, `bench --launched` in an allocation, an imported log) of the same model,
sequence length, precision, nodes x ranks per node, strategy, micro-batch, accumulation and
checkpointing. `plan --db` shows it beside the prediction, said so per option; an option without such
a run stays predicted (by the calibrated platform when a calibration applies, as the plan says)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prism_strategy.bench.results.store import Result, Store
from prism_strategy.inputs.stored import scenario_from_row
from prism_strategy.specs.errors import SpecError


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredAtLayout:
    """One option's measurement at the plan's layout."""

    strategy: str
    result_id: int | None
    status: str
    """ok | oom | failed | timeout, as stored."""
    samples_per_s: float | None
    predicted_samples_per_s: float
    """The plan's own prediction for the option (the same scenario)."""
    measured_on: str
    """Where and when: the row's kind, host and date."""

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, the sign compare uses."""
        if not self.samples_per_s:
            return None
        return (self.predicted_samples_per_s - self.samples_per_s) / self.samples_per_s

    def as_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "result_id": self.result_id,
            "status": self.status,
            "samples_per_s": self.samples_per_s,
            "predicted_samples_per_s": self.predicted_samples_per_s,
            "error": self.error,
            "measured_on": self.measured_on,
        }


def _same_run(sc: Any, option: Any, row_sc: Any, row: Result) -> bool:
    b, rb = sc.batch, row_sc.batch
    return (
        row.strategy == option.strategy
        and row_sc.model == sc.model
        and (row_sc.layout.nodes, row_sc.layout.ranks_per_node) == (sc.layout.nodes, sc.layout.ranks_per_node)
        and rb.seq_len == b.seq_len
        and row_sc.precision == sc.precision
        and (rb.micro_batch, rb.grad_accum or 1) == (option.micro_batch, option.grad_accum)
        and str(row_sc.memory.checkpointing) == str(option.ckpt_freq)
    )


def _readable(rows: list[Result]) -> list[tuple[Result, Any]]:
    out = []
    for r in rows:
        try:
            out.append((r, scenario_from_row(r.config)))
        except SpecError:
            continue  # a row this version cannot read is not a measurement of this plan
    return out


def measured_at_layout(plan: Any, store: Store, platform_names: set[str]) -> list[MeasuredAtLayout]:
    """The newest stored run matching each feasible option of `plan`, on one of `platform_names`
    (the preset's name, or a platform file's absolute path, as the store keeps them)."""
    rows = _readable([r for r in store.query() if r.platform in platform_names and r.kind == "bench"])
    out = []
    for o in plan.options:
        if not o.feasible:
            continue
        same = [r for r, rsc in rows if _same_run(plan.scenario, o, rsc, r)]
        if not same:
            continue
        newest = max(same, key=lambda r: (r.created_at, r.id or 0))
        fp = newest.fingerprint or {}
        out.append(
            MeasuredAtLayout(
                strategy=o.strategy,
                result_id=newest.id,
                status=newest.status,
                samples_per_s=newest.measured.get("samples_per_s") if newest.status == "ok" else None,
                predicted_samples_per_s=o.samples_per_s,
                measured_on=f"{newest.provenance} on {fp.get('host', '?')}, {newest.created_at[:10]}",
            )
        )
    return out
