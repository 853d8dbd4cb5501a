"""Census: the collectives each strategy's real engine issues in one optimizer step, recorded
with torch's profiler (bench/launch/census_record.py), against what the engine model predicts.

All strategies run in one torchrun launch (the bench harness); each rank records one steady-state
optimizer step after a warm-up step, every micro-step of gradient accumulation included. Rank
0's record is compared; the others must agree with it.

Per strategy and per (op, group size, dtype): calls and payload bytes, predicted vs recorded.
Payload: all_reduce the tensor, all_gather the gathered output, reduce_scatter the unscattered
input. A strategy's bytes error is sum over rows of |predicted - recorded| / recorded total, so a
collective predicted under the wrong op, group or dtype counts as wrong twice, never cancels.
Control messages (integer tensors, single elements: flags, norms) are recorded and listed but
not compared: they carry no model data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from prism_strategy.inputs.stored import bench_row, row_values, scenario_from_row
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.training import check_options

TOLERANCE_PCT = 5.0
PRECISIONS = ("fp32", "bf16-mixed", "bf16-pure")
MODES = ("e2e", "projector", "encoder-projector")


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    op: str
    group_size: int
    dtype: str
    calls_predicted: int
    calls_recorded: int | None
    bytes_predicted: float
    bytes_recorded: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StrategyCensus:
    strategy: str
    engine: str
    rows: tuple[Row, ...]
    control: tuple[dict[str, Any], ...] = ()
    recorded_raw: tuple[dict[str, Any], ...] = ()
    """Rank 0's recorded rows as the worker wrote them (with their split by phase)."""
    error: str = ""
    """Why nothing was recorded (the run failed), or where ranks disagreed."""
    ranks_agree: bool = True

    @property
    def recorded(self) -> bool:
        return all(r.bytes_recorded is not None for r in self.rows)

    @property
    def bytes_error_pct(self) -> float | None:
        if not self.recorded:
            return None
        total = sum(r.bytes_recorded or 0.0 for r in self.rows)
        off = sum(abs(r.bytes_predicted - (r.bytes_recorded or 0.0)) for r in self.rows)
        return 100.0 * off / total if total else (0.0 if off == 0 else 100.0)

    @property
    def ok(self) -> bool:
        err = self.bytes_error_pct
        return err is not None and err <= TOLERANCE_PCT and self.ranks_agree

    def as_dict(self) -> dict[str, Any]:
        err = self.bytes_error_pct
        return {
            "strategy": self.strategy,
            "ok": self.ok,
            "bytes_error_pct": None if err is None else round(err, 3),
            "collectives": [dataclasses.asdict(r) for r in self.rows],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class CensusReport:
    world: int
    config: dict[str, Any]
    strategies: tuple[StrategyCensus, ...] = field(default_factory=tuple)
    predicted_by: str = ""

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.strategies)

    def as_dict(self) -> dict[str, Any]:
        """The pinned JSON: {"world", "strategies": [{"strategy", "ok", "bytes_error_pct", "collectives"}]}."""
        return {"world": self.world, "strategies": [s.as_dict() for s in self.strategies]}

    def recorded_dict(self) -> dict[str, Any]:
        """What was recorded, with the scenario it was recorded in (for fitting engine models)."""
        keys = (
            "model",
            "model_spec",
            "vision_spec",
            "mode",
            "lora",
            "micro_batch",
            "seq_len",
            "grad_accum",
            "precision",
            "bucket_mb",
            "reduce_dtype",
            "nproc",
            "ranks_per_node",
        )
        values = row_values(self.config) | {k: self.config.get(k) for k in ("model_spec", "vision_spec")}
        return {
            "world": self.world,
            "config": {k: values.get(k) for k in keys},
            "strategies": [
                {
                    "strategy": s.strategy,
                    "error": s.error,
                    "ranks_agree": s.ranks_agree,
                    "collectives": list(s.recorded_raw),
                    "control": list(s.control),
                }
                for s in self.strategies
            ],
        }


# ----------------------------------------------------------------------------- configs


def check_census(
    precision: str, mode: str, vision: str | None, bucket_mb: float | None, reduce_dtype: str | None
) -> None:
    """Refuse (SpecError) a census setting no launch runs: precision, mode, a projector mode without
    its vision encoder, the engine options (specs/training.py check_options)."""
    if precision not in PRECISIONS:
        raise SpecError(f"--precision {precision!r}: census runs one of {', '.join(PRECISIONS)}")
    if mode not in MODES:
        raise SpecError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    if mode != "e2e" and vision is None:
        raise SpecError(f"--mode {mode} trains a projector: give the vision encoder with --vision")
    check_options(bucket_mb, reduce_dtype)


def census_config(sc: Any, *, reduce_dtype: str | None = None, timeout_s: float = 300) -> dict[str, Any]:
    """A census launch's config for a Scenario: inputs/stored.py bench_row with the census facts."""
    return bench_row(sc, census=True, steps=0, warmup=1, timeout_s=timeout_s, reduce_dtype=reduce_dtype)


# ----------------------------------------------------------------------------- predicted


def _predicted(
    spec: Any, sc: Any, *, grad_accum: int, bucket_mb: float | None, reduce_dtype: str | None
) -> tuple[list[dict[str, Any]], str]:
    """The engine model's collectives of one optimizer step, as (rows, where they came from).
    Rows: op, group_size, dtype, calls, bytes (summed over the step)."""
    from prism_strategy.engines import step_collectives
    from prism_strategy.specs.parts import model_parts

    parts = model_parts(sc.model, sc.training)

    opts = {k: v for k, v in (("bucket_mb", bucket_mb), ("reduce_dtype", reduce_dtype)) if v is not None}
    s = spec.with_options(**opts) if opts else spec
    rows = [
        {"op": c.op, "group_size": int(c.group_size), "dtype": c.dtype, "calls": int(c.calls), "bytes": float(c.bytes)}
        for c in step_collectives(s, parts, sc.training, sc.layout, grad_accum=grad_accum, wrap="block")
    ]
    return rows, "engines.step_collectives"


# ----------------------------------------------------------------------------- compare


def _key(r: dict[str, Any]) -> tuple[str, int, str]:
    return (r["op"], int(r["group_size"]), r["dtype"])


def _totals(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str], tuple[int, float]]:
    out: dict[tuple[str, int, str], tuple[int, float]] = {}
    for r in rows:
        c, b = out.get(_key(r), (0, 0.0))
        out[_key(r)] = (c + int(r["calls"]), b + float(r["bytes"]))
    return out


def compare(
    strategy: str,
    engine: str,
    predicted: list[dict[str, Any]],
    recorded: list[dict[str, Any]] | None,
    *,
    control: list[dict[str, Any]] = (),
    error: str = "",
    ranks_agree: bool = True,
) -> StrategyCensus:
    """Predicted and recorded rows joined on (op, group size, dtype); recorded None = run failed."""
    pred, rec = _totals(predicted), _totals(recorded or [])
    keys = list(pred) + [k for k in rec if k not in pred]
    rows = tuple(
        Row(
            op=k[0],
            group_size=k[1],
            dtype=k[2],
            calls_predicted=pred.get(k, (0, 0.0))[0],
            bytes_predicted=pred.get(k, (0, 0.0))[1],
            calls_recorded=None if recorded is None else rec.get(k, (0, 0.0))[0],
            bytes_recorded=None if recorded is None else rec.get(k, (0, 0.0))[1],
        )
        for k in keys
    )
    return StrategyCensus(
        strategy=strategy,
        engine=engine,
        rows=rows,
        control=tuple(control),
        error=error,
        ranks_agree=ranks_agree,
        recorded_raw=tuple(recorded or ()),
    )


def _from_outcome(spec: Any, predicted: list[dict[str, Any]], outcome: Any) -> StrategyCensus:
    if outcome.status != "ok":
        return compare(spec.name, spec.engine, predicted, None, error=f"{outcome.status}: {outcome.error}")
    ranks = sorted(outcome.ranks, key=lambda r: r["rank"])
    first = ranks[0]["census"]
    disagree = [r["rank"] for r in ranks[1:] if r["census"] != first]
    note = f"ranks {disagree} recorded other collectives than rank 0" if disagree else ""
    return compare(
        spec.name,
        spec.engine,
        predicted,
        first["collectives"],
        control=first["control"],
        error=note,
        ranks_agree=not disagree,
    )


def run_census(base: dict[str, Any], strategies: list[str]) -> CensusReport:
    """Every strategy in one launch; the report compares each with its engine model."""
    return run_censuses([base], strategies)[0]


def run_censuses(bases: list[dict[str, Any]], strategies: list[str]) -> list[CensusReport]:
    """Several scenarios (same nproc) x strategies in ONE launch: the process start, imports and
    process group are paid once (CI runs its model shapes this way). One report per base."""
    return run_census_jobs([(b, strategies) for b in bases])


def run_census_jobs(jobs: list[tuple[dict[str, Any], list[str]]]) -> list[CensusReport]:
    """run_censuses with each base's own strategies: (base, strategies) per scenario, ONE launch."""
    from prism_strategy.bench.launch.harness import launch_many
    from prism_strategy.strategies import get_strategy

    if not jobs or any(not names for _, names in jobs):
        raise SpecError("--strategies is empty; give a comma-separated list or 'all'")
    runs = [(b, get_strategy(name)) for b, names in jobs for name in names]
    configs = [b | {"strategy": s.name} for b, s in runs]
    predicted = []
    for b, names in jobs:
        sc = scenario_from_row(b)
        ga, bucket = int(sc.training.grad_accum or 1), sc.memory.bucket_mb
        predicted += [
            _predicted(get_strategy(n), sc, grad_accum=ga, bucket_mb=bucket, reduce_dtype=b.get("reduce_dtype"))
            for n in names
        ]
    outcomes = launch_many(configs, timeout_s=sum(float(c["timeout_s"]) for c in configs))
    results = [_from_outcome(s, p[0], o) for (_, s), p, o in zip(runs, predicted, outcomes)]
    reports, start = [], 0
    for b, names in jobs:
        reports.append(
            CensusReport(
                world=int(b["nproc"]),
                config=b,
                predicted_by=predicted[start][1],
                strategies=tuple(results[start : start + len(names)]),
            )
        )
        start += len(names)
    return reports
