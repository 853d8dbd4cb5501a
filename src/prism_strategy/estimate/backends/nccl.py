"""NCCL: its own cost model (estimate/comm_nccl.py, from NVIDIA/nccl src/graph/tuning.cc): per
call the fastest of ring / tree x LL / LL128 / Simple. A platform without `gpu_arch` (no
per-generation constants) is priced by the alpha-beta ring (estimate/backends/gloo.py)."""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.backends.base import BackendDefaults, Call, Term
from prism_strategy.estimate.backends.gloo import RING_TERMS, ring_call, ring_description
from prism_strategy.estimate.comm_nccl import nccl_choice
from prism_strategy.specs.cluster import PlatformSpec

NCCL_TERMS = (
    Term(name="nccl_scale.base_latency", kind="latency", what="NCCL base latency of every call"),
    Term(name="nccl_scale.intra_latency", kind="latency", what="NCCL NVLink/PCI hop latency"),
    Term(name="nccl_scale.net_latency", kind="latency", what="NCCL network hop latency"),
    Term(name="nccl_scale.intra_bw", kind="bandwidth", what="NCCL bus bandwidth inside a node"),
    Term(name="nccl_scale.inter_bw", kind="bandwidth", what="NCCL bus bandwidth across nodes"),
)


@dataclass(frozen=True)
class Nccl(BackendDefaults):
    """NCCL's cost model; one reading (its model has no undecided fitted term) and no environment
    variable it reads (base.py BackendDefaults)."""

    name: str = "nccl"

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
        if not p.hardware.gpu_arch:
            return ring_call(op, size, ranks, nodes, concurrent, p)
        c = nccl_choice(p, op, size, ranks, nodes, concurrent)
        return Call(c.seconds, c.name, c.channels, "NCCL's cost model (estimate/comm_nccl.py nccl_choice)")

    def describe(self, p: PlatformSpec) -> str:
        if not p.hardware.gpu_arch:
            return ring_description(p)
        scaled = ", ".join(f"{k} x{v:.3g}" for k, v in p.nccl.nccl_scale.items() if v != 1.0)
        return (
            f"NCCL's cost model (data/nccl_tuning.toml from NCCL src/graph/tuning.cc; {p.hardware.gpu_arch}, "
            f"{p.hardware.nvlink_links} NVLinks, NIC {p.links.nic_bw_gbps:g} GB/s x {p.links.nics_per_node}"
            + (f"; fitted to measured curves: {scaled}" if scaled else "")
            + "), estimate/comm_nccl.py"
        )

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]:
        return NCCL_TERMS if p.hardware.gpu_arch else RING_TERMS

    def schedules_overlap(self, p: PlatformSpec) -> bool:
        """Collectives on NCCL's own stream that do not hold the host: overlap comes from the
        engine's schedule (estimate/overlap.py), not from `comm_overlap`."""
        return not p.collectives.host_blocking_collectives


BACKEND = Nccl()
