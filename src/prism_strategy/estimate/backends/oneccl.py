"""oneCCL (Intel GPUs, torch's `xccl`): estimate/comm_oneccl.py prices each call as oneCCL runs it
under the job's CCL environment (with_ccl_env)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prism_strategy.estimate import comm_oneccl as ccl
from prism_strategy.estimate.backends.base import BackendDefaults, Call, Term
from prism_strategy.specs.cluster import PlatformSpec

ONECCL_TERMS = (
    Term(name="collective_overhead_us", kind="latency", what="fixed host cost of every call"),
    Term(name="scaleout_overhead_us", kind="latency", what="fixed cost of a call crossing nodes (schedule, staging)"),
    Term(name="intra_latency_us", kind="latency", what="latency per dependent step inside a node"),
    Term(name="inter_latency_us", kind="latency", what="latency per dependent scale-out step across nodes"),
    Term(name="intra_bw_gbps", kind="bandwidth", what="Xe Link bandwidth of one card pair (scale-up)"),
    Term(name="mdfi_bw_gbps", kind="bandwidth", what="MDFI bandwidth between a card's two tiles"),
    Term(name="scaleout_rank_bw_gbps", kind="bandwidth", what="host-buffer network bandwidth of one rank"),
    Term(name="host_copy_node_gbps", kind="bandwidth", what="the node's device-to-host copy bandwidth"),
    Term(name="host_copy_gbps", kind="bandwidth", what="one rank's device-to-host copy bandwidth"),
    Term(name="intra_ring_bw_gbps", kind="bandwidth", what="flat host ring bandwidth of one rank"),
)


@dataclass(frozen=True)
class OneCcl(BackendDefaults):
    """oneCCL as run; its collectives hold the host (base.py BackendDefaults: no overlap by schedule)."""

    name: str = "oneccl"

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
        seconds, algo = ccl.oneccl_seconds(op, size, ranks, nodes, concurrent, p)
        return Call(seconds, algo, 0, "oneCCL as run (estimate/comm_oneccl.py oneccl_seconds)")

    def describe(self, p: PlatformSpec) -> str:
        return ccl.description(p)

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]:
        return ONECCL_TERMS

    def readings(self, p: PlatformSpec) -> dict[str, PlatformSpec]:
        """The platform as shipped, plus each reading of its comm terms the collective rows leave
        open (data/measurements/aurora-collectives.toml [stacks]): torch's 2025 stack staged the
        whole buffer of a multi-node topo all-reduce through the host, oneCCL 2021.17's own benchmark
        only the scale-out part (as add_scaleout in 2021.14's source): which one a user's stack
        does is not measured."""
        other = "scale-out part" if p.oneccl.ccl_host_staging == "whole buffer" else "whole buffer"
        out = {"shipped": p}
        if not (p.oneccl.ccl_gpu_rdma or p.links.host_copy_gbps <= 0):
            out[f"host staging of the {other}"] = p.with_values(ccl_host_staging=other)
        if (linear := linear_sync_wait(p)) is not None:
            out["sync wait linear in nodes"] = linear
        return out

    def with_env(self, p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec:
        return ccl.with_ccl_env(p, env)


def linear_sync_wait(p: PlatformSpec) -> PlatformSpec | None:
    """The other reading of the sync wait (estimate/scale_loss.py sync_wait): no cap, through the
    same per-step wait at the fit's largest node count; None where the wait has no cap."""
    from prism_strategy.estimate.ranges import max_measured_nodes
    from prism_strategy.estimate.scale_loss import step_wait_us

    cal = p.calibration
    if cal.sync_wait_max_us <= 0 or cal.sync_wait_us_per_node <= 0:
        return None
    m = max(2, max_measured_nodes(p))
    slope = step_wait_us(m, cal.sync_wait_us_per_node, cal.sync_wait_max_us) / m
    return p.with_values(sync_wait_us_per_node=slope, sync_wait_max_us=0.0)


BACKEND = OneCcl()
