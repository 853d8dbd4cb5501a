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


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncWait:
    seconds: float
    calls: int
    """Calls per step whose group spans nodes."""
    node_steps: int
    """Sum over those calls of their dependent cross-node steps."""
    us_per_node: float
    max_us: float = 0.0
    host_share: float = 1.0
    """The share of the step's compute on which the host is the critical path (launch time / compute)."""

    @property
    def basis(self) -> str:
        return (
            f"sync wait: {self.calls} cross-node blocking calls, {self.node_steps} dependent cross-node steps, "
            f"each waiting for the last of its nodes ({self.us_per_node:.4g} us per node per step"
            + (f", at most {self.max_us:.4g} us" if self.max_us > 0 else "")
            + f"; the host the critical path for {self.host_share:.0%} of the compute): +{self.seconds:.3g} s"
        )


LOG_STEP_ALGORITHMS = ("rabenseifner", "recursive_doubling", "double_tree", "direct", "tree")
"""Scale-out algorithms whose dependent steps grow as log2 of the nodes (Thakur, Rabenseifner and
Gropp 2005; estimate/comm_oneccl_phases.py scaleout_seconds), named in a call's algorithm."""


def ring_steps(op: str, nodes: int, algorithm: str = "") -> int:
    """Dependent cross-node steps of one call over `nodes` nodes: a ring (the scale-out of PRISM's
    profile: CCL_ALLREDUCE=ring, topo's ring all-gather and naive reduce-scatter, one message per
    peer; estimate/comm_oneccl_phases.py) takes all-reduce 2 (n - 1), the others n - 1; an
    algorithm of LOG_STEP_ALGORITHMS named in `algorithm` 2 or 1 x ceil(log2 n)."""
    factor = 2 if op == "all_reduce" else 1
    if nodes <= 1:
        return 0
    if any(a in algorithm for a in LOG_STEP_ALGORITHMS):
        return factor * (nodes - 1).bit_length()
    return factor * (nodes - 1)


def step_wait_us(nodes: int, us_per_node: float, max_us: float) -> float:
    """One dependent step's expected wait for the last of `nodes` nodes: D (1 - (1 - q)^n), D =
    max_us, q = us_per_node / D (the slope at few nodes); n x slope when max_us is 0."""
    if max_us <= 0:
        return nodes * us_per_node
    return max_us * (1 - (1 - min(1.0, us_per_node / max_us)) ** nodes)


def sync_wait(
    spans: list[tuple[int, int, int]], us_per_node: float, max_us: float = 0.0, host_share: float = 1.0
) -> SyncWait:
    """The wait for the last node at each dependent step of the collectives that cross nodes, per step.

    spans: (calls per step, nodes the call's group spans, its dependent cross-node steps:
    ring_steps) for each collective of the step. Mechanism: a rank (its host, its NIC) is late
    now and then by far more than the work's spread (PRISM's backward spikes of 6-10 s against
    0.35-0.5 s typical, straggler ratios 3-7x: shared/data/aurora_prism_scale.md S-bwd, S-abl).
    A ring's step ends when its last node has sent; with each of the n nodes late at a step with a
    small chance q by D, the step waits E = D (1 - (1 - q)^n) ~ D q n, and a call's (n - 1) or
    2 (n - 1) dependent steps add up: ~ n (n - 1) per call, so 2 nodes pay 2 units and 10 nodes 90
    (PRISM's FSDP step tripled from 2 to 10 nodes, P10), unlike the normal spread's e_N above
    (which grows as sqrt(2 ln N)). The slope D q is the platform's sync_wait_us_per_node, fitted to
    step times (benchmarks/aurora_fit.py), and D its sync_wait_max_us; no record decides D (the
    records at 1-10 nodes fit as well from D = 1.5 ms to no cap): the other reading, linear through
    the same wait at the fit's largest node count, is in every range beyond it (backends/oneccl.py
    readings), which also widens by the error the fits made in scale (ranges.py scale_widening).
    A late host delays its rank only where the host is the critical path: host_share, the launch
    time over the compute of the step's phases (estimate/compute.py phase_times; 1 when launch-bound,
    as PRISM's eager E2E runs: ~7,400 launches, GPU busy 31-61%, aurora_measurements.md A1/A2);
    where the GPU's queue holds more work than the host's enqueueing, a hiccup shorter than that
    slack delays no one, and this term takes the share."""
    crossing = [(k, n, m) for k, n, m in spans if n > 1 and k > 0 and m > 0]
    us = sum(k * m * step_wait_us(n, us_per_node, max_us) for k, n, m in crossing)
    return SyncWait(
        seconds=host_share * us * 1e-6,
        max_us=max_us,
        host_share=host_share,
        calls=sum(k for k, _, _ in crossing),
        node_steps=sum(k * m for k, _, m in crossing),
        us_per_node=us_per_node,
    )
