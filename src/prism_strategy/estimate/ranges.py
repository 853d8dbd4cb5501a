"""How far to trust a predicted step time: the stored fit errors a range is made of, the slow
side's terms for what scale adds beyond what was measured, and PredictionRange (the plan JSON's
range). One function composes a range: estimate/range_parts.py step_range.

The fit benchmarks (benchmarks/cuda_fit.py, benchmarks/aurora_fit.py, `--write`) store each fit's
error summary in data/fits/NAME.toml; nothing is fitted at plan time. For an option, in log space:

  base = the fit's leave-one-out half-width (the QUANTILE of |ln(predicted / measured)| over its
         fitted records), and, when the platform borrows another platform's fit (`fit_platform`:
         another GPU than the fit's), the widest spread between fitted variants of one GPU any fit
         measured (H100 at 700 W vs 500 W), in quadrature;
         a platform no fit covers takes the pre-fit half-width of the fits on its device kind (the
         error of the presets' uncalibrated model before their fit; the widest of all for a
         device no fit covers, such as cpu).
  comm = when N nodes exceed the largest node count N_max the training fit measured on that
         platform: where a collective fit (data/fits/<name>.toml with kind = "collectives",
         written by benchmarks/aurora_collectives_fit.py) covers N, the sum over the step's
         cross-node collectives of (its share of the step's work) x the collective fit's
         leave-one-node-count-out half-width for its op and size regime (latency-bound <= 1 MiB
         per scale-out rank, else bandwidth-bound; a group with fewer than MIN_GROUP rows takes the
         regime's rows of every op); otherwise the blanket s x ln(1 + log2(N / N_max)), s the
         communication share (the model may be off by a factor growing with the log of the
         distance: x2 at 2 N_max, x4 at 8 N_max, x7 at 64 N_max, the way ring latencies grow).
  late = ln(1 + late_s / step): the late-rank term (estimate/scale_loss.py) at the top of its
         default range when the per-rank spread is unmeasured (a measured one is in the step).
  readings: each reading of the comm terms the records cannot rule out (estimate/comm.comm_readings)
         lies inside: the slow side reaches the slowest reading's step x e^base.

The step is one part with errors +-base (step_range composes it to base on each side), except
where a collective fit covers the platform and its training fit stored the errors of the step's
training part (Aurora): then the step splits into parts, each with the held-out errors of the fit
that decided it (estimate/range_parts.py docstring), its collectives judged by the collective
rows at their layout in place of comm; late ranks and readings widen its slow side the same way.

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
    part_errors_ln: tuple[float, ...] = ()
    """ln(1 + e) of each held-out record's error attributed to the step's training-fit part
    (estimate/range_parts.py); empty when the fit did not store them."""
    comm_knobs: tuple[str, ...] = ()
    """The fit's knobs that price collectives (their share of a collective is the training part's)."""
    scale_errors_ln: tuple[float, ...] = ()
    """ln(1 + e) of the leave-one-scale-out errors: the fit on scale_fit_nodes or fewer nodes on
    the fitted records at scale_check_nodes (benchmarks/aurora_fit.py); empty when not stored."""
    scale_span: float = 0.0
    """log2(scale_check_nodes / scale_fit_nodes): how far in nodes those errors extrapolated."""


def halfwidth(errors_pct: list[float], quantile: float = QUANTILE) -> float:
    """The quantile of |ln(1 + e)| (nearest-rank, rounding up) of signed percent errors."""
    logs = sorted(abs(math.log1p(e / 100)) for e in errors_pct)
    if not logs:
        return float("nan")
    return logs[min(len(logs) - 1, math.ceil(quantile * len(logs)) - 1)]


def _fit_files() -> list[dict]:
    folder = DATA / "fits"
    if not folder.is_dir():
        return []
    return [read_toml(f) for f in sorted(folder.iterdir(), key=lambda p: p.name) if f.name.endswith(".toml")]


MIN_GROUP = 3
"""A collective fit's (op, regime) group with fewer rows than this takes its regime's rows of every op."""
LATENCY_BOUND_BYTES = 2**20
"""Per scale-out rank: at or below, a collective is latency-bound on Aurora's rows (1 MiB)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveRowError:
    op: str
    regime: str
    nodes: int
    per_node: int
    """Ranks per node in the row's groups together (ranks per node x groups at once)."""
    loo_err_pct: float


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveFit:
    measurements: str
    max_nodes: int
    rows: tuple[CollectiveRowError, ...]


@cache
def collective_fits() -> dict[str, CollectiveFit]:
    """Every stored collective fit summary (kind = "collectives"), keyed by platform."""
    out = {}
    for d in _fit_files():
        if d.get("kind") != "collectives":
            continue
        rows = tuple(
            CollectiveRowError(
                op=r["op"],
                regime=r["regime"],
                nodes=int(r["nodes"]),
                per_node=int(r["per_node"]),
                loo_err_pct=float(r["loo_err_pct"]),
            )
            for r in d["row"]
        )
        for name, p in d.get("platform", {}).items():
            out[name] = CollectiveFit(measurements=d["measurements"], max_nodes=int(p["max_nodes"]), rows=rows)
    return out


def collective_rows(fit: CollectiveFit, part_bytes: float, nodes: int, per_node: int) -> tuple[list[float], str]:
    """(signed leave-one-node-count-out errors in percent, which rows) judging one collective of
    `part_bytes` per scale-out rank at `nodes` with `per_node` ranks per node: the rows that cover
    its layout (its regime and ranks per node, node counts within 2x of it), else widening the
    match: any node count, then any layout."""
    regime = "latency" if part_bytes <= LATENCY_BOUND_BYTES else "bandwidth"
    picks = (
        (
            f"{regime} rows at {per_node} per node, {max(1, nodes // 2)}-{2 * nodes} nodes",
            lambda r: r.regime == regime and r.per_node == per_node and nodes / 2 <= r.nodes <= 2 * nodes,
        ),
        (f"{regime} rows at {per_node} per node", lambda r: r.regime == regime and r.per_node == per_node),
        (f"{regime} rows", lambda r: r.regime == regime),
    )
    for label, keep in picks:
        errs = [r.loo_err_pct for r in fit.rows if keep(r)]
        if len(errs) >= MIN_GROUP:
            return errs, label
    return [r.loo_err_pct for r in fit.rows], "all rows"


def collective_halfwidth(
    fit: CollectiveFit, op: str, part_bytes: float, nodes: int, per_node: int
) -> tuple[float, str]:
    """(half-width, which rows) for one collective (collective_rows)."""
    errs, label = collective_rows(fit, part_bytes, nodes, per_node)
    return halfwidth(errs), label


def scaleout_bytes(c, nodes: int) -> float:
    """A collective's bytes per scale-out rank (a group spanning nodes splits its call over its
    ranks per node; an intra-node or one-rank-per-node group does not)."""
    return c.bytes_per_call / (max(1, c.ranks // nodes) if c.link == "spans nodes" else 1)


def collective_widening(fit: CollectiveFit, collectives, nodes: int, work_s: float, per_node: int) -> tuple[float, str]:
    """Sum over the cross-node collectives of share x its rows' half-width, and the rows used.
    per_node: ranks per node of the layout (a one-rank-per-node group runs that many at once)."""
    total, used = 0.0, set()
    for c in collectives:
        if c.link == "intra-node" or c.seconds_per_step <= 0 or work_s <= 0:
            continue
        w, key = collective_halfwidth(fit, c.op, scaleout_bytes(c, nodes), nodes, per_node)
        total += c.seconds_per_step / work_s * w
        used.add(key)
    return total, "; ".join(sorted(used))


@cache
def fit_errors() -> dict[str, FitErrors]:
    """Every stored training-run fit summary, keyed by the platform it fitted."""
    out: dict[str, FitErrors] = {}
    for d in _fit_files():
        if d.get("kind") == "collectives":
            continue
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
                part_errors_ln=tuple(math.log1p(float(v) / 100) for v in d.get("part_err_pct", {}).values()),
                comm_knobs=tuple(d.get("comm_knobs", ())),
                scale_errors_ln=tuple(math.log1p(float(v) / 100) for v in d.get("scale_err_pct", {}).values()),
                scale_span=math.log2(d["scale_check_nodes"] / d["scale_fit_nodes"]) if "scale_fit_nodes" in d else 0.0,
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
    fit = fit_errors().get(platform.calibration.fit_platform or platform.name)
    return 1 if fit is None else fit.max_nodes


def scale_widening(platform: PlatformSpec, nodes: int) -> tuple[float, str]:
    """(ln widening of the slow side, why) beyond the nodes the platform's fit saw: the QUANTILE of
    the fit's leave-one-scale-out |ln errors| (a fit on fewer nodes predicting more), times the
    distance in log2 nodes over the distance those errors were made at: a 1-2 node fit missed the
    10-node rows by that much, so a 1-10 node fit is held to the same per doubling beyond 10."""
    fit = fit_errors().get(platform.calibration.fit_platform or platform.name)
    if fit is None or not fit.scale_errors_ln or nodes <= fit.max_nodes or fit.scale_span <= 0:
        return 0.0, ""
    q = halfwidth([100 * math.expm1(e) for e in fit.scale_errors_ln])
    w = q * math.log2(nodes / fit.max_nodes) / fit.scale_span
    return w, (
        f"{nodes} nodes beyond the {fit.max_nodes} the fit saw: its leave-one-scale-out error "
        f"(x{math.exp(q):.2f} over x{2**fit.scale_span:.0f} the nodes, {len(fit.scale_errors_ln)} records) "
        f"per doubling: x{math.exp(w):.2f}"
    )


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
    slow_base: float | None = None
    """The slow side before the scale terms when it differs from the fast side (a range composed
    from the step's parts, estimate/range_parts.py); None: the fit's symmetric half-width, fast."""

    def step_range(self, step_s: float) -> list[float]:
        return [step_s * math.exp(-self.fast), step_s * math.exp(self.slow)]

    def rate_range(self, rate: float) -> list[float]:
        return [rate * math.exp(-self.slow), rate * math.exp(self.fast)]

    def to_measure(self) -> list[str]:
        """The scale terms worth measuring, largest first: when together they widen the slow side
        more than the fit's own error does, each that makes a quarter or more of that widening."""
        total = self.slow - self.fast  # readings replace comm + late when wider: not their sum
        own = self.fast
        if self.slow_base is not None:  # composed: the collectives' part is inside slow_base
            total = self.slow - self.slow_base + self.terms.get("collectives (collective fit)", 0.0)
            own = self.slow - total
        if total <= own:
            return []
        return [k for k, v in sorted(self.terms.items(), key=lambda kv: -kv[1]) if v >= 0.25 * total]

    def with_readings(self, step_s: float, readings_s: dict[str, float]) -> "PredictionRange":
        """The range reaching every reading's step x e^(+-base) (the readings the fits cannot rule
        out): the slowest on the slow side, the fastest on the fast side."""
        far = max(readings_s.values(), default=step_s)
        near = min(readings_s.values(), default=step_s)
        w = math.log(far / step_s) if far > step_s > 0 else 0.0
        f = math.log(step_s / near) if 0 < near < step_s else 0.0
        base = self.fast if self.slow_base is None else self.slow_base
        if w + base <= self.slow and f == 0:
            return self
        slow = max(self.slow, base + w)
        terms = self.terms | ({READINGS: w} if base + w > self.slow else {})
        return PredictionRange(
            fast=self.fast + f,
            slow=slow,
            terms=terms,
            slow_base=self.slow_base,
            basis=self.basis + f"; the readings of the comm terms the fits cannot rule out span x{math.exp(-f):.2f}-"
            f"x{math.exp(w):.2f} the step (provenance.communication_beyond_fit): inside the range",
        )


COMM, LATE, READINGS = "communication beyond the measured nodes", "late ranks", "comm readings"
SCALE = "beyond the fit's nodes (leave-one-scale-out)"
