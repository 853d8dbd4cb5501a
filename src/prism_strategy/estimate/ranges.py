"""How far to trust a predicted step time: a [low, high] range from the fit's own leave-one-out
errors, widened with the distance from what was measured.

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

step_time_s_range = step x [e^-(base+comm), e^(base+comm)]; samples_per_s_range the inverse.
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
            out[name] = FitErrors(measurements=d["measurements"], platform=name, max_nodes=int(p["max_nodes"]),
                                  halfwidth=float(d["halfwidth"]), gpu_spread=float(d.get("gpu_spread", 0.0)),
                                  prior_halfwidth=float(d["prior_halfwidth"]), records=int(d["records"]),
                                  device=str(d.get("device", "")))
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
    halfwidth: float
    """ln(high / predicted) = ln(predicted / low)."""
    basis: str

    def around(self, value: float) -> list[float]:
        return [value * math.exp(-self.halfwidth), value * math.exp(self.halfwidth)]

    @property
    def percent(self) -> tuple[float, float]:
        """(down, up) in percent of the prediction."""
        return 100 * (1 - math.exp(-self.halfwidth)), 100 * (math.exp(self.halfwidth) - 1)


def prediction_range(platform: PlatformSpec, nodes: int, compute_s: float, comm_s: float) -> PredictionRange:
    share = comm_s / (comm_s + compute_s) if comm_s + compute_s > 0 else 0.0
    fit = fit_errors().get(platform.fit_platform or platform.name)
    if fit is None:
        base, max_nodes = uncalibrated_halfwidth(platform.device), 1
        why = (f"predicted range: uncalibrated preset, the pre-fit error of the {platform.device} fits "
               f"(x{math.exp(base):.2f})")
    else:
        other = bool(platform.fit_platform) and platform.fit_platform != platform.name
        base = math.hypot(fit.halfwidth, gpu_widening() if other else 0.0)
        max_nodes = fit.max_nodes
        why = (f"predicted range: {fit.measurements} leave-one-out {QUANTILE:.0%} range "
               f"(x{math.exp(fit.halfwidth):.2f}, "
               f"{fit.records} records)" + (f", another GPU than {fit.platform}'s (x{math.exp(gpu_widening()):.2f})"
                                           if other else ""))
    comm = comm_widening(nodes, max_nodes, share)
    if comm > 0:
        why += (f"; {nodes} nodes beyond the {max_nodes} measured, communication {share:.0%} of the work "
                f"(x{math.exp(comm):.2f}; measure it: prism-strategy commbench at {nodes} nodes)")
    return PredictionRange(halfwidth=base + comm, basis=why)
