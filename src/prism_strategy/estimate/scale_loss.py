"""What a step loses as synchronous data parallelism adds ranks, beyond the collectives' own
cost (estimate/comm.py prices those, with the form of the algorithm that runs).

Late ranks (the one term here). Every blocking collective waits for the slowest rank: after a
synchronisation all ranks start level, and the next one ends when the last of N arrives. With
iid per-rank spread sigma_j over interval j, a step of k intervals pays

    late = sum_j sigma_j x e_N,    e_N = E[max of N iid standard normals]

(e_N < sqrt(2 ln N) and tends to it slowly: e_8 = 1.42, e_512 = 3.04, against 2.04 and 3.53).
Spread proportional to the work (sigma_j = cv x d_j: a slower GPU, a stretched kernel) gives
cv x compute x e_N for any k, and the same when a rank is slow for the whole step (a persistent
power-management gap: max_i sum_j = sum_j max_i). The fits' records already ran at M ranks and
hold e_M of it: what a plan at N adds is cv x compute x (e_N - e_M). An upper bound where a
prefetched collective leaves slack (a rank late by less than the slack delays no one), and it
leaves out spread that does not scale with the work (host hiccups, k x sigma_0 x e_N).

cv: no shipped record measures it (data/scale_loss.toml). A measured cv (`plan --rank-jitter`,
a platform's `rank_jitter`) prices the term into the step; without one, the point takes the
published prior (Sinha et al. SC22: 8% average variation across a cluster's GPUs, cv 1.0%) and
the range's slow side the rest of the way to the worst cluster's 22% (cv 2.7%). At fixed work
per GPU this is the one node-count term of the point with a source beyond NCCL's own model:
Llama 3.1 8B FSDP on 16 -> 64 DGX H100 nodes loses 0.44% of compute from it (e_128 2.60 -> e_512
3.04), next to the exposed collectives' growth (docs/model.md "At scale").

What NCCL's own model says about scale is already estimate/comm_nccl.py's (checked against
NVIDIA/nccl src/graph/tuning.cc at 5067397c): ring latency (N-1 or 2(N-1) steps, 2(nodes-1) of
them on the network), tree log2(nodes) hops, the >2-node bandwidth caps (index2), the ring
plateau x1.4 across nodes, the network tree latency at one GPU per node. Its one node-count term
left out only makes 2 nodes faster than more: search.cc raises a tree graph's bwIntra up to 2x
bwInter "for trees (2 nodes or collnet)", and tuning.cc prices 2 nodes at bwIntra, more at
bwInter; and a tree graph of pattern TREE (not BALANCED_TREE, the one found first) takes busBw x
0.85. The net plugins report no latency of their own (net_ib, net_socket: props->latency =
0), so graph->latencyInter adds nothing. Neither NCCL nor this module models the fabric (per-hop
tails, congestion, oversubscription): that is the range's comm-share widening (estimate/ranges.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, lru_cache
from statistics import NormalDist

from prism_strategy.specs.presets import DATA, read_toml

_PHI = NormalDist().cdf
_STEP = 0.02
_LO, _HI = -9.0, 9.0


@lru_cache(maxsize=4096)
def expected_max_normal(n: int) -> float:
    """E[max of n iid standard normals]: for X within [a, b], E[X] = b - int_a^b F(x) dx with
    F = Phi^n (the max's CDF); Simpson's rule over [-9, 9] (beyond it, < 1e-18 for n <= 1e9)."""
    if n <= 1:
        return 0.0
    steps = int(round((_HI - _LO) / _STEP))  # even
    f = [_PHI(_LO + i * _STEP) ** n for i in range(steps + 1)]
    area = (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2])) * _STEP / 3
    return _HI - area


def late_rank_seconds(ranks: int, measured_ranks: int, sync_points: int, sigma_per_sync_s: float) -> float:
    """Extra seconds per step at `ranks` over a fit that ran at `measured_ranks`: k sync points x
    sigma per point x (e_N - e_M); 0 at or below the measured ranks."""
    if ranks <= measured_ranks or sync_points <= 0 or sigma_per_sync_s <= 0:
        return 0.0
    return sync_points * sigma_per_sync_s * (expected_max_normal(ranks) - expected_max_normal(max(1, measured_ranks)))


@dataclass(frozen=True, kw_only=True, slots=True)
class JitterRange:
    low: float
    high: float
    point: float
    """The prior the point prediction takes when cv is unmeasured (the published average)."""
    source: str


@cache
def default_jitter() -> JitterRange:
    """The default range of cv (per-rank relative spread of the work between synchronisations),
    from data/scale_loss.toml: the published variation over its cluster, / (2 e_n)."""
    d = read_toml(DATA / "scale_loss.toml")["rank_jitter"]
    lo, hi = (float(v) for v in d["variation"])
    spread = 2 * expected_max_normal(int(d["cluster_gpus"]))
    return JitterRange(low=lo / spread, high=hi / spread, point=float(d["point"]) / spread, source=str(d["source"]))


@dataclass(frozen=True, kw_only=True, slots=True)
class LateRanks:
    seconds: float
    """Added to the step: at the measured cv, else at the published prior (default_jitter().point)."""
    slow_seconds: float
    """What the range's slow side adds beyond `seconds` when cv is unmeasured (from the prior up to
    the top of the default range), else 0."""
    cv: float
    measured: bool
    sync_points: int
    ranks: int
    measured_ranks: int

    @property
    def basis(self) -> str:
        en, em = expected_max_normal(self.ranks), expected_max_normal(max(1, self.measured_ranks))
        j = default_jitter()
        how = (
            "measured (--rank-jitter)"
            if self.measured
            else f"(the published average, {j.source}; up to {j.high:.1%} on the range's slow side: "
            f"+{self.slow_seconds:.3g} s more)"
        )
        return (
            f"late ranks: {self.sync_points} sync points, cv {self.cv:.1%} {how}, E[max] of {self.ranks} ranks "
            f"{en:.2f} vs {em:.2f} at the {self.measured_ranks} the fit measured: +{self.seconds:.3g} s"
        )


def late_ranks(ranks: int, measured_ranks: int, compute_s: float, sync_points: int, cv: float | None) -> LateRanks:
    """The late-rank term of one step: cv x compute split over its sync points (sigma per point =
    cv x compute / k), priced by late_rank_seconds; an unmeasured cv takes the published prior in
    the point and the top of the default range on the slow side."""
    k = max(1, sync_points)
    j = default_jitter()
    use = cv if cv is not None else j.point
    s = late_rank_seconds(ranks, measured_ranks, k, use * compute_s / k)
    top = 0.0 if cv is not None else late_rank_seconds(ranks, measured_ranks, k, j.high * compute_s / k)
    return LateRanks(
        seconds=s,
        slow_seconds=max(0.0, top - s),
        cv=use,
        measured=cv is not None,
        sync_points=k,
        ranks=ranks,
        measured_ranks=measured_ranks,
    )
