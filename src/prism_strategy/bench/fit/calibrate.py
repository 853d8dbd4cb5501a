"""Fit a platform's efficiency factors to stored measurements.

Time: the planner's own step-time model is re-evaluated with multiplicative factors on the
platform's achieved FLOP/s, link bandwidths, latencies and per-operation / per-tensor / launch
overheads; coordinate descent on log-factors minimises the squared log error of step time
over all runs (the model is not linear once overlap is capped by compute, so no closed form).
Memory: least squares for measured = states_and_buffers + factor x activations + reserve.
Communication (when the store holds collective curves: commbench, imported nccl-tests / oneCCL
logs): the latency and bandwidth terms of the model that prices the plan, fitted to seconds per
call (bench/fit/comm_fit.py); `--fit comm` fits them alone over what the file replaces.

Every fitted value stays inside physical bounds (data/calibration_bounds.toml, each with its
source): a step that would leave them is not taken, and a value a fit still puts outside is held
at the bound and named in the report. A fit whose median error on the same rows is worse than
what it would replace (the calibration file already at the target, else the preset) is not
written: the report says so and `calibrate` exits 1.
"""

from __future__ import annotations

import math
import statistics
from functools import cache
from typing import Any

import numpy as np

from prism_strategy.bench.fit import comm_fit, comm_fit_report
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Result
from prism_strategy.estimate.calibration import with_value
from prism_strategy.specs.cluster import GiB, PlatformSpec
from prism_strategy.specs.errors import SpecError

TIME_KNOBS = (
    "achieved",
    "intra_bw",
    "inter_bw",
    "latency",
    "collective_overhead_us",
    "per_tensor_overhead_us",
    "kernel_launch_us",
)
GRID = (0.25, 0.5, 0.8, 0.9, 1.0, 1.1, 1.25, 2.0, 4.0)


NOT_A_DATASHEET = ("assumption", "fitted", "calibrated")
"""A preset value whose source starts so is a guess or an earlier fit, not a hardware figure."""


@cache
def calibration_bounds() -> dict[str, dict[str, Any]]:
    """data/calibration_bounds.toml: per fitted value, its bounds and their source."""
    from prism_strategy.specs.presets import DATA, read_toml

    return read_toml(DATA / "calibration_bounds.toml")


def bounds_for(base: PlatformSpec, name: str) -> tuple[float, float]:
    """(low, high) of one fitted value of `base` (the preset), from calibration_bounds()."""
    b, v = calibration_bounds()[name], comm_fit.value(base, name)
    lo, hi = float(b.get("min", 0.0)), float(b.get("max", math.inf))
    datasheet = name in base.sources and not base.sources[name].lower().startswith(NOT_A_DATASHEET)
    if "min_vs_preset" in b:
        lo = max(lo, v * b["min_vs_preset"])
    if "max_vs_preset" in b:
        hi = min(hi, v * b["max_vs_preset"])
    if datasheet and "max_vs_spec" in b:
        hi = min(hi, v * b["max_vs_spec"])
    if datasheet and "min_vs_spec" in b:
        lo = max(lo, v * b["min_vs_spec"])
    if "max_vs_memory" in b:
        hi = min(hi, base.hardware.memory_gib * b["max_vs_memory"])
    return lo, hi


def _outside(base: PlatformSpec, p: PlatformSpec) -> list[tuple[str, float, float, float]]:
    out = []
    for name in calibration_bounds():
        v, (lo, hi) = comm_fit.value(p, name), bounds_for(base, name)
        if not lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
            out.append((name, v, lo, hi))
    return out


def held_in_bounds(base: PlatformSpec, p: PlatformSpec) -> tuple[PlatformSpec, list[str]]:
    """p with every bounded value inside its bounds; a note per value that was held."""
    changes, notes = {}, []
    for name, v, lo, hi in _outside(base, p):
        changes[name] = min(hi, max(lo, v))
        notes.append(
            f"{name}: the fit gave {v:.4g}, held at {changes[name]:.4g} ({calibration_bounds()[name]['source']})"
        )
    for name, v in changes.items():
        p = with_value(p, name, v)
    return p, notes


def scaled_platform(base: PlatformSpec, f: dict[str, float]) -> PlatformSpec:
    achieved = base.compute.achievable_fraction * f["achieved"]
    peak_scale = max(1.0, achieved)  # a fraction above 1 means the peak itself was underestimated
    return base.with_values(
        achievable_fraction=min(1.0, achieved),
        peak_tflops_bf16=base.hardware.peak_tflops_bf16 * peak_scale,
        peak_tflops_fp32=base.hardware.peak_tflops_fp32 * peak_scale,
        intra_bw_gbps=base.links.intra_bw_gbps * f["intra_bw"],
        intra_ring_bw_gbps=base.links.intra_ring_bw_gbps * f["intra_bw"],
        nic_bw_gbps=base.links.nic_bw_gbps * f["inter_bw"],
        intra_latency_us=base.links.intra_latency_us * f["latency"],
        inter_latency_us=base.links.inter_latency_us * f["latency"],
        collective_overhead_us=max(base.collectives.collective_overhead_us, 1.0) * f["collective_overhead_us"],
        per_tensor_overhead_us=max(base.collectives.per_tensor_overhead_us, 1.0) * f["per_tensor_overhead_us"],
        kernel_launch_us=max(base.compute.kernel_launch_us, 0.1) * f["kernel_launch_us"],
    )


def _time_loss(platform: PlatformSpec, runs: list[Result]) -> float:
    return sum(math.log(predict(r.config, platform)["step_time_s"] / r.measured["step_time_s"]) ** 2 for r in runs)


STEP = 1.25
"""The factor a knob is moved by to see how much each run's step time depends on it."""
NO_EFFECT = 0.005
"""d log(step) / d log(factor) below this on every run: no run decides the knob."""
SAME_DIRECTION = 0.995
"""|cosine| between two knobs' sensitivities over the runs above this: the runs cannot tell them apart."""


def sensitivities(base: PlatformSpec, runs: list[Result]) -> dict[str, np.ndarray]:
    """Per knob, d log(predicted step) / d log(factor) on each run (finite difference at the preset)."""
    t0 = np.array([predict(r.config, base)["step_time_s"] for r in runs])
    out = {}
    for k in TIME_KNOBS:
        moved = scaled_platform(base, {x: 1.0 for x in TIME_KNOBS} | {k: STEP})
        t = np.array([predict(r.config, moved)["step_time_s"] for r in runs])
        out[k] = np.log(t / t0) / math.log(STEP)
    return out


def separable_knobs(base: PlatformSpec, runs: list[Result]) -> tuple[list[str], list[dict[str, str]]]:
    """The knobs the runs can decide (free), and each held one with why: no run's step depends on
    it, or its effect over the runs is another free knob's (the fit could trade one for the other)."""
    free, held = distinct_knobs(sensitivities(base, runs))
    return [k for k in TIME_KNOBS if k in free], held  # the descent's order, as before


def distinct_knobs(sens: dict[str, np.ndarray]) -> tuple[list[str], list[dict[str, str]]]:
    """Knobs some run depends on, each in a direction over the runs no kept knob already has."""
    free: list[str] = []
    held: list[dict[str, str]] = []
    for k in sorted(TIME_KNOBS, key=lambda k: -float(np.linalg.norm(sens[k]))):
        v = sens[k]
        if float(np.max(np.abs(v))) < NO_EFFECT:
            held.append({"term": k, "why": "no run's step time depends on it"})
            continue
        twin = next(
            (
                j
                for j in free
                if abs(float(v @ sens[j])) / (np.linalg.norm(v) * np.linalg.norm(sens[j])) > SAME_DIRECTION
            ),
            None,
        )
        if twin is not None:
            held.append({"term": k, "why": f"these runs cannot tell it apart from {twin}"})
            continue
        free.append(k)
    return free, held


def fit_time(
    base: PlatformSpec, runs: list[Result], rounds: int = 4, knobs: tuple[str, ...] | list[str] = TIME_KNOBS
) -> PlatformSpec:
    """Coordinate descent on the free knobs' log-factors; a knob not in `knobs` stays at the preset."""
    return scaled_platform(base, fit_factors(base, runs, rounds, knobs))


def fit_factors(
    base: PlatformSpec,
    runs: list[Result],
    rounds: int = 4,
    knobs: tuple[str, ...] | list[str] = TIME_KNOBS,
) -> dict[str, float]:
    f = {k: 1.0 for k in TIME_KNOBS}
    best = _time_loss(base, runs)
    for _ in range(rounds):
        for k in knobs:
            for g in GRID:
                trial = f | {k: f[k] * g}
                scaled = scaled_platform(base, trial)
                if _outside(base, scaled):
                    continue
                loss = _time_loss(scaled, runs)
                if loss < best - 1e-12:
                    best, f = loss, trial
    return f


def fit_memory(platform: PlatformSpec, runs: list[Result]) -> PlatformSpec:
    """measured - (predicted total - activations - reserve) = factor x activations + reserve."""
    base = platform.with_values(activation_factor=1.0, framework_reserve_gib=0.0)
    runs = [r for r in runs if r.measured.get("peak_memory_bytes")]  # published/imported runs may lack one
    rows, target = [], []
    for r in runs:
        p = predict(r.config, base)
        rows.append([p["activation_bytes"], 1.0])
        target.append(r.measured["peak_memory_bytes"] - (p["memory_bytes"] - p["activation_bytes"]))
    if len(runs) < 2:
        return platform
    a, y = np.array(rows), np.array(target)
    (factor, reserve), *_ = np.linalg.lstsq(a, y, rcond=None)
    if reserve < 0:  # a reserve cannot be negative: the least-squares optimum then lies on reserve = 0
        (factor,), *_ = np.linalg.lstsq(a[:, :1], y, rcond=None)
        reserve = 0.0
    if factor <= 0:  # the runs' activations cannot decide a factor (peaks below the model's states)
        return platform
    return platform.with_values(activation_factor=float(factor), framework_reserve_gib=float(reserve) / GiB)


def errors_pct(platform: PlatformSpec, runs: list[Result]) -> dict[str, float]:
    """Median absolute error in percent of step time, and of peak memory where the runs have it
    (absent, not NaN, when none has)."""
    t = [abs(predict(r.config, platform)["step_time_s"] / r.measured["step_time_s"] - 1) * 100 for r in runs]
    m = [
        abs(predict(r.config, platform)["memory_bytes"] / r.measured["peak_memory_bytes"] - 1) * 100
        for r in runs
        if r.measured.get("peak_memory_bytes")
    ]
    out = {"step_time_median": statistics.median(t)} if t else {}
    return out | ({"memory_median": statistics.median(m)} if m else {})


def calibrate(base: PlatformSpec, results: list[Result]) -> tuple[PlatformSpec, dict[str, Any]]:
    runs = [r for r in results if r.status == "ok" and r.measured.get("step_time_s")]
    if len(runs) < 3:
        raise SpecError(
            f"calibration needs at least 3 successful runs on platform {base.name}, found {len(runs)}; "
            "measure some with `prism-strategy bench`"
        )
    free, held_terms = separable_knobs(base, runs)
    report: dict[str, Any] = {
        "runs": len(runs),
        "free_terms": free,
        "held_terms": held_terms,
        "score": lambda p: errors_pct(p, runs),
    }  # run_calibrate scores what the fit replaces
    if len(runs) < len(free):
        report |= {"before": errors_pct(base, runs), "after": {}, "held_at_bounds": []}
        report["too_few_rows"] = (
            f"{len(runs)} runs cannot decide {len(free)} free terms ({', '.join(free)}); measure at least "
            f"{len(free)} runs that differ in what they stress (nodes, micro-batch, strategy)"
        )
        return base, report
    fitted, held = held_in_bounds(base, fit_memory(fit_time(base, runs, knobs=free), runs))
    report |= {
        "before": errors_pct(base, runs),
        "after": errors_pct(fitted, runs),
        "held_at_bounds": held,
        "leave_one_out": leave_one_out(base, runs, free),
    }
    return fitted, report


def leave_one_out(base: PlatformSpec, runs: list[Result], free: list[str]) -> dict[str, Any]:
    """Each run predicted by the fit to the others (the same free terms, two rounds of descent):
    the error a run the fit did not see can expect, beside the in-sample error."""
    errs = []
    for i, r in enumerate(runs):
        others = runs[:i] + runs[i + 1 :]
        fitted, _ = held_in_bounds(base, fit_time(base, others, rounds=2, knobs=free))
        errs.append(abs(predict(r.config, fitted)["step_time_s"] / r.measured["step_time_s"] - 1) * 100)
    return {"step_time_median": statistics.median(errs), "per_run": [round(e, 2) for e in errs]}


def fitted_values(p: PlatformSpec) -> dict[str, float]:
    from prism_strategy.bench.fit.fit_terms import get_value
    from prism_strategy.estimate.calibration import FITTED

    return {k: float(v) for k in FITTED if (v := get_value(p, k)) is not None}


def published_for(platform: str) -> list[str]:
    """Shipped measurement files whose records ran on this platform."""
    from prism_strategy.bench.fit.published import load_published, published_names

    return [n for n in published_names() if any(r.platform == platform for r in load_published(n))]


def _db_observations(results: list[Result]) -> list[Any]:
    """Stored runs (bench or imported) as step-time observations; copies of published records
    (config["published"]) are skipped: the records themselves are read from the package."""
    from prism_strategy.bench.fit.fit_terms import FigureObservation

    out = []
    for r in results:
        if r.status != "ok" or not r.measured.get("step_time_s") or r.config.get("published"):
            continue
        out.append(
            FigureObservation(
                id=f"db:{r.id}",
                what="step_s",
                measured=float(r.measured["step_time_s"]),
                predict=lambda p, c=r.config: predict(c, p)["step_time_s"],
            )
        )
    return out


def calibrate_terms(base: PlatformSpec, results: list[Result], names: list[str]) -> tuple[PlatformSpec, dict[str, Any]]:
    """Fit the host/launch/collective terms (bench/fit/fit_terms.py) to the published records of
    `names` and the stored runs, from the fit's priors (reproducible without a DB); then the
    allocator's cache factor to the records' reserved memory."""
    from prism_strategy.bench.fit import fit_terms as ft
    from prism_strategy.bench.fit.published import load_published

    records = [r for n in names for r in load_published(n) if r.platform == base.name]
    obs = [o for r in records if ft.fit_reason(r) is None for o in ft.record_observations(r)] + _db_observations(
        results
    )
    if len({o.id for o in obs}) < 3:
        raise SpecError(
            f"calibration needs at least 3 measured step times on platform {base.name}, found "
            f"{len({o.id for o in obs})}; import runs with `prism-strategy results import`"
        )
    prior = ft.prior_platform(base)
    fitted = ft.fit(prior, obs)
    fitted = fitted.with_values(allocator_cache_factor=ft.fit_allocator_cache(ft.memory_points(records, fitted)))
    fitted, held = held_in_bounds(base, fitted)
    before, after = ft.errors(base, obs), ft.errors(fitted, obs)
    rows = [{"id": k, "before_err_pct": before[k], "after_err_pct": after[k]} for k in after]
    report = {
        "runs": len(rows),
        "records": rows,
        "held_at_bounds": held,
        "not_fitted": [{"id": r.id, "why": ft.fit_reason(r)} for r in records if ft.fit_reason(r)],
        "before": {"step_time_median": ft.median_abs(before)},
        "after": {"step_time_median": ft.median_abs(after)},
    }
    report["score"] = lambda p: {"step_time_median": ft.median_abs(ft.errors(p, obs))}
    return fitted, report


def replaced_platform(base: PlatformSpec, path: Any) -> tuple[PlatformSpec, str]:
    """What a new calibration at `path` would replace: the file already there (when it is a
    calibration of this platform), else the preset."""
    from prism_strategy.estimate.calibration import apply_calibration, load_calibration

    try:
        if path.is_file():
            return apply_calibration(base, load_calibration(path), str(path)), f"the calibration in {path}"
    except (SpecError, OSError):
        pass
    return base, f"the {base.name} preset"


MEMORY_VALUES = ("activation_factor", "framework_reserve_gib")
"""What fit_memory sets; step time does not depend on them, so they are kept or replaced apart."""
WORSE_BY_PCT = 0.05
"""Percentage points an error must grow by to count as worse: below the 0.1% the report prints,
a refit that reproduces what it replaces (float round-off) is not refused."""


def worse_than(after: dict[str, float], replaced: dict[str, float]) -> str | None:
    """The first error the fit makes worse than what it replaces, in words; None when none is."""
    for key, what in (
        ("step_time_median", "step-time"),
        ("memory_median", "peak-memory"),
        ("comm_median", "collective-time"),
    ):
        if key in after and key in replaced and after[key] > replaced[key] + WORSE_BY_PCT:
            return f"median {what} error {after[key]:.1f}% vs {replaced[key]:.1f}%"
    return None


FITS = ("all", "steps", "comm")
"""`calibrate --fit`: every part the stored rows allow; the step-time (and memory) terms only; the
communication terms only, from collective curve rows (bench/fit/comm_fit.py)."""


def _step_fit(base: PlatformSpec, stored: list[Result], names: list[str]) -> tuple[PlatformSpec, dict[str, Any], dict]:
    """The step-time fit: to the published records and stored runs, else to this tool's bench runs."""
    if names:
        fitted, report = calibrate_terms(base, [r for r in stored if r.kind != "ceiling-trial"], names)
        own = [r for r in stored if not r.config.get("published")]
        fp = (
            own[-1].fingerprint
            if own
            else {
                "host": f"published records {', '.join(names)}",
                "platform": base.name,
                "backend": base.backend,
                "torch": "as recorded",
            }
        )
        report["published"] = names
    else:
        rows = [r for r in stored if r.kind == "bench"]
        fitted, report = calibrate(base, rows)
        fp = rows[-1].fingerprint
    return fitted, report, fp


def _comm_only(replaced: PlatformSpec, stored: list[Result], curves) -> tuple[PlatformSpec, dict[str, Any], dict]:
    """No step-time fit: the comm terms fitted over what the file replaces (its other values kept)."""
    own = [r for r in stored if not r.config.get("published")]
    fp = (
        own[-1].fingerprint
        if own
        else {"host": "collective curves " + ", ".join(sorted({c.label for c in curves})), "torch": "as measured"}
    )
    report = {
        "runs": sum(len(c.points) for c in curves),
        "rows": "collective points",
        "before": {},
        "after": {},
        "held_at_bounds": [],
        "score": lambda p: {},
    }
    return replaced, report, fp


def shipped_collective_points(platform: str) -> list[Any]:
    """The published collective rows shipped for this platform (data/measurements/*.toml with
    [[row]] tables, bench/fit/comm_rows.py) as comm-fit points: `--fit comm` fits them with the
    store's curves."""
    from prism_strategy.bench.fit.comm_rows import collective_row_files, load_rows, row_points

    out: list[Any] = []
    for name in collective_row_files():
        head, rows = load_rows(name)
        if head.get("platform") == platform:
            out += row_points([r for r in rows if not r.check])
    return out


def run_calibrate(platform: str, db: str | None, out: str | None, fit: str = "all") -> dict[str, Any]:
    """`prism-strategy calibrate`: fit, write the calibration file, return the report. A platform
    with published records (data/measurements) fits the step-time terms to them and to every
    stored run; otherwise the efficiency factors to this tool's own bench runs. Collective curve
    rows (commbench, imported nccl-tests / oneCCL logs) fit the communication terms (report["comm"]).
    Nothing is written when the fit is worse, on the same rows, than what it replaces
    (report["written"] is False and report["refused"] says why)."""
    from pathlib import Path

    from prism_strategy.bench.results.curves import load_curves
    from prism_strategy.bench.results.predict import check_readable
    from prism_strategy.bench.results.store import Store
    from prism_strategy.estimate.calibration import default_calibration_dir, write_calibration
    from prism_strategy.specs.presets import load_platform

    if fit not in FITS:
        raise SpecError(f"--fit {fit!r}: one of {', '.join(FITS)}")
    base = load_platform(platform)
    store = Store(db)
    stored, names = store.query(platform=base.name), published_for(base.name)
    check_readable([r for r in stored if r.kind == "bench" and r.status == "ok"])
    curves = load_curves(store, base.name) if fit != "steps" else ()
    rows = shipped_collective_points(base.name) if fit == "comm" else []
    if fit == "comm" and not curves and not rows:
        raise SpecError(
            f"--fit comm: the store holds no collective curves for {base.name} and none are shipped; import a log "
            f"with `prism-strategy results import FILE --format nccl-tests --platform {platform}` or run "
            f"`prism-strategy commbench --platform {platform}` on its nodes"
        )
    path = Path(out) if out else default_calibration_dir() / f"{base.name}.toml"
    replaced, label = replaced_platform(base, path)
    steps = fit == "steps" or (fit == "all" and (names or not curves or any(r.kind == "bench" for r in stored)))
    fitted, report, fp = _step_fit(base, stored, names) if steps else _comm_only(replaced, stored, curves)
    score = report.pop("score")
    if "too_few_rows" in report:  # a fit the rows cannot decide: a finding, nothing written
        refused = {"written": False, "refused": f"not written: {report['too_few_rows']}"}
        return report | {"platform": base.name, "file": str(path), "replaces": {"what": label}} | refused
    if curves or rows:
        fitted, report["comm"] = comm_fit_report.calibrate_comm(fitted, curves, lambda n: bounds_for(base, n), rows)
        step_score, score = (
            score,
            lambda p: step_score(p) | {"comm_median": comm_fit_report.comm_median(p, curves, rows)},
        )
        report["after"] = score(fitted)
        report["before"] |= {"comm_median": comm_fit_report.comm_median(base, curves, rows)}
        if rows:
            report["comm"]["published_rows"] = len(rows)
            report["runs"] += 0 if steps else len(rows)
    report["replaces"] = {"what": label} | score(replaced)
    if worse_than({k: v for k, v in report["after"].items() if k == "memory_median"}, report["replaces"]):
        fitted = fitted.with_values(**{k: replaced.value(k) for k in MEMORY_VALUES})
        report["kept"] = (
            f"memory values ({', '.join(MEMORY_VALUES)}) kept from {label}: the refit's median "
            f"peak-memory error was {report['after']['memory_median']:.1f}% vs "
            f"{report['replaces']['memory_median']:.1f}%"
        )
        report["after"] = score(fitted)
    worse = worse_than(report["after"], report["replaces"])
    report |= {"platform": base.name, "file": str(path), "values": fitted_values(fitted), "written": worse is None}
    if worse is not None:
        rows = f"{report['runs']} {report.get('rows', 'runs')}"
        report["refused"] = f"not written: the fit is worse than {label} on the same {rows} ({worse})"
        if curves and fit == "all":
            report["refused"] += "; `--fit comm` fits the collective terms alone, `--fit steps` the step time alone"
        return report
    write_calibration(
        path,
        platform=base.name,
        fingerprint=fp | {"platform": base.name, "backend": base.backend},
        values=fitted_values(fitted),
        runs=report["runs"],
        errors=report["after"],
        terms=fitted_terms(report),
    )
    return report


def fitted_terms(report: dict[str, Any]) -> list[str]:
    """The terms the fit set (time knobs it could decide, memory, comm terms): what a plan using
    the file names."""
    terms = list(report.get("free_terms", TIME_KNOBS if "records" not in report else ("host terms",)))
    terms += [] if report.get("kept") else list(MEMORY_VALUES)
    comm = report.get("comm") or {}
    terms += [t["name"] for t in comm.get("terms", []) if isinstance(t, dict) and t.get("decided_by")]
    return terms
