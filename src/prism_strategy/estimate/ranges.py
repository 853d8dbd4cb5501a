"""How far to trust a predicted step time: a [low, high] range from the fit's own leave-one-out
errors, widened on the slow side with what scale adds beyond what was measured.

The fit benchmarks (benchmarks/cuda_fit.py, benchmarks/aurora_fit.py, `--write`) store each fit's
error summary in data/fits/NAME.toml; nothing is fitted at plan time. For an option, in log space:

  base = the fit's leave-one-out half-width (the QUANTILE of |ln(predicted / measured)| over its
         fitted records), and, when the platform borrows another platform's fit (`fit_platform`:
         another GPU than the fit's), the widest spread between fitted variants of one GPU any fit
         measured (H100 at 700 W vs 500 W), in quadrature;
         a platform no fit covers takes the pre-fit half-width of the fits on its device kind (the
         error of the presets' uncalibrated model before their fit; the widest of all for a
         device no fit covers, such as cpu).
  comm = s x ln(1 + log2(N / N_max)) when N nodes exceed the largest node count N_max the fit
         measured on that platform: s = comm_s / (comm_s + compute_s), the communication share of
         the step's work. Communication is modelled, not measured, beyond N_max; the assumption is
         that the model of it may be off by a factor growing with the log of the distance (x2 at
         2 N_max, x4 at 8 N_max, x7 at 64 N_max), the way ring and tree latencies grow.
  late = ln(1 + late_s / step): the late-rank term (estimate/scale_loss.py) at the top of its
         default range when the per-rank spread is unmeasured (a measured one is in the step).
  readings: each reading of the comm terms the records cannot rule out (estimate/comm.comm_readings)
         lies inside: the slow side reaches the slowest reading's step x e^base.

Scale only ever slows a step (more ranks to wait for, more hops), so the fast side stays the fit's
(step x e^-base) and the slow side is step x e^(base + max(comm + late, readings)).
samples_per_s_range is the inverse: its low side carries the scale terms, its high side the fit's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.presets import DATA, read_toml

QUANTILE = 0.8
"""The ranges are 80% ranges: 4 of 5 leave-one-out records fall inside (checked by the fit benchmarks)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FitErrors:
    measurements: str
    platform: str
    max_nodes: int
    halfwidth: float
    """QUANTILE of |ln(1 + leave-one-out error)| over the fit's records (all its platforms)."""
    gpu_spread: float
    """|ln| of the largest ratio between fitted fractions of one GPU generation's variants (0 when
    the fit had one variant: gpu_widening() then takes the widest any fit measured)."""
    prior_halfwidth: float
    """The same quantile of the presets' errors before the fit (the uncalibrated model)."""
    records: int
    device: str = ""
    """The device kind the fit's records ran on (cuda, xpu)."""


def halfwidth(errors_pct: list[float], quantile: float = QUANTILE) -> float:
    """The quantile of |ln(1 + e)| (nearest-rank, rounding up) of signed percent errors."""
    logs = sorted(abs(math.log1p(e / 100)) for e in errors_pct)
    if not logs:
        return float("nan")
    return logs[min(len(logs) - 1, math.ceil(quantile * len(logs)) - 1)]


@cache
def fit_errors() -> dict[str, FitErrors]:
    """Every stored fit summary, keyed by the platform it fitted."""
    folder = DATA / "fits"
    out: dict[str, FitErrors] = {}
    if not folder.is_dir():
        return out
    for f in sorted(folder.iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".toml"):
            continue
        d = read_toml(f)
        for name, p in d.get("platform", {}).items():
            out[name] = FitErrors(
                measurements=d["measurements"],
                platform=name,
                max_nodes=int(p["max_nodes"]),
                halfwidth=float(d["halfwidth"]),
                gpu_spread=float(d.get("gpu_spread", 0.0)),
                prior_halfwidth=float(d["prior_halfwidth"]),
                records=int(d["records"]),
                device=str(d.get("device", "")),
            )
    return out


def gpu_widening() -> float:
    """The widest spread between variants of one GPU that any fit measured (the H100 700 W vs
    500 W fractions of the CUDA fit): the widening for a platform borrowing another's fit."""
    return max((f.gpu_spread for f in fit_errors().values()), default=math.log(1.25))


def uncalibrated_halfwidth(device: str) -> float:
    """The pre-fit half-width of the fits on this device kind (the uncalibrated presets' model
    before its fit), the widest of any fit for a device no fit covers; x2 with no fit at all."""
    fits = list(fit_errors().values())
    same = [f.prior_halfwidth for f in fits if f.device == device]
    return max(same or [f.prior_halfwidth for f in fits] or [math.log(2.0)])


def max_measured_nodes(platform: PlatformSpec) -> int:
    """The largest node count the platform's fit measured (1 for a preset no fit covers)."""
    fit = fit_errors().get(platform.fit_platform or platform.name)
    return 1 if fit is None else fit.max_nodes


def comm_widening(nodes: int, max_nodes: int, comm_share: float) -> float:
    if nodes <= max_nodes:
        return 0.0
    return comm_share * math.log1p(math.log2(nodes / max_nodes))


@dataclass(frozen=True, kw_only=True, slots=True)
class PredictionRange:
    fast: float
    """ln(predicted step / low step): the fit's leave-one-out half-width (the `base` above)."""
    slow: float
    """ln(high step / predicted step): base + the one-sided scale terms."""
    terms: dict[str, float]
    """The slow side's widening beyond base, by name (comm beyond measured, late ranks, readings:
    slow - fast is comm + late, or readings when that is wider)."""
    basis: str

    def step_range(self, step_s: float) -> list[float]:
        return [step_s * math.exp(-self.fast), step_s * math.exp(self.slow)]

    def rate_range(self, rate: float) -> list[float]:
        return [rate * math.exp(-self.slow), rate * math.exp(self.fast)]

    def to_measure(self) -> list[str]:
        """The scale terms worth measuring, largest first: when together they widen the slow side
        more than the fit's own error does, each that makes a quarter or more of that widening."""
        total = self.slow - self.fast  # readings replace comm + late when wider: not their sum
        if total <= self.fast:
            return []
        return [k for k, v in sorted(self.terms.items(), key=lambda kv: -kv[1]) if v >= 0.25 * total]

    def with_readings(self, step_s: float, readings_s: dict[str, float]) -> "PredictionRange":
        """The slow side reaching every reading's step x e^base (the readings the fit cannot rule out)."""
        far = max(readings_s.values(), default=step_s)
        w = math.log(far / step_s) if far > step_s > 0 else 0.0
        if w + self.fast <= self.slow:
            return self
        terms = self.terms | {READINGS: w}
        return PredictionRange(
            fast=self.fast,
            slow=self.fast + w,
            terms=terms,
            basis=self.basis + f"; the slowest reading of the cross-node cost the fit cannot rule out "
            f"is x{math.exp(w):.2f} the step (provenance.communication_beyond_fit): inside the range",
        )


COMM, LATE, READINGS = "communication beyond the measured nodes", "late ranks", "comm readings"


def _base(platform: PlatformSpec) -> tuple[float, int, str]:
    fit = fit_errors().get(platform.fit_platform or platform.name)
    if fit is None:
        base = uncalibrated_halfwidth(platform.device)
        calibrated = any(v.startswith("calibrated") for v in platform.sources.values())
        what = "calibrated (provenance.calibration), its width still" if calibrated else "uncalibrated preset,"
        return (
            base,
            1,
            f"predicted range: {what} the pre-fit error of the {platform.device} fits (x{math.exp(base):.2f})",
        )
    other = bool(platform.fit_platform) and platform.fit_platform != platform.name
    base = math.hypot(fit.halfwidth, gpu_widening() if other else 0.0)
    why = (
        f"predicted range: {fit.measurements} leave-one-out {QUANTILE:.0%} range (x{math.exp(fit.halfwidth):.2f}, "
        f"{fit.records} records)"
        + (f", another GPU than {fit.platform}'s (x{math.exp(gpu_widening()):.2f})" if other else "")
    )
    return base, fit.max_nodes, why


def prediction_range(
    platform: PlatformSpec,
    nodes: int,
    compute_s: float,
    comm_s: float,
    late_s: float = 0.0,
    step_s: float = 0.0,
    late_basis: str = "",
) -> PredictionRange:
    """late_s: the late-rank seconds the slow side takes (estimate/scale_loss.LateRanks.slow_seconds),
    against the predicted step_s."""
    share = comm_s / (comm_s + compute_s) if comm_s + compute_s > 0 else 0.0
    base, max_nodes, why = _base(platform)
    terms = {}
    if (comm := comm_widening(nodes, max_nodes, share)) > 0:
        terms[COMM] = comm
        why += (
            f"; slower side: {nodes} nodes beyond the {max_nodes} measured, communication {share:.0%} of the work "
            f"(x{math.exp(comm):.2f}; measure it: prism-strategy commbench at {nodes} nodes)"
        )
    if late_s > 0 and step_s > 0:
        terms[LATE] = math.log1p(late_s / step_s)
        why += (
            f"; slower side: {late_basis} (x{math.exp(terms[LATE]):.3f}; measure the per-rank spread: "
            "--rank-jitter FOLDER of StepMonitor logs)"
        )
    return PredictionRange(fast=base, slow=base + sum(terms.values()), terms=terms, basis=why)


def coverage(loo_pct: dict[str, float], slow_extra: dict[str, float] | None = None) -> tuple[int, int]:
    """(inside, records) of the leave-one-out rows: each record's measured step against the range
    around its leave-one-out prediction, base from the other records' leave-one-out errors, the
    slow side widened by the record's own scale terms (slow_extra, ln; 0 where it was measured).
    err = predicted / measured - 1, so inside when -(base + extra) <= ln(1 + err) <= base."""
    extra = slow_extra or {}
    inside = 0
    for rid, e in loo_pct.items():
        w = halfwidth([v for k, v in loo_pct.items() if k != rid])
        inside += -(w + extra.get(rid, 0.0)) <= math.log1p(e / 100) <= w
    return inside, len(loo_pct)
