"""RCCL (AMD ROCm; torch's backend is "nccl", the library is rccl: specs/libraries.py). RCCL runs
NCCL's algorithms (ROCm/rccl is a fork of NVIDIA/nccl: src/graph/tuning.cc keeps ring and tree and
times each per call as latency + bytes / bandwidth); its per-architecture constants for gfx90a and
gfx942 are not transcribed here, so both algorithms are priced from the platform's own links, each
from its source (the platform file: datasheets and site guides), and the faster one wins:
- ring: the alpha-beta ring of estimate/backends/gloo.py (2(n-1) steps, (n-1)/n of the buffer per
  rank per direction), hierarchical over the node's NICs when the platform says so;
- tree (all-reduce across nodes, NCCL's double binary tree): a reduce and a broadcast, each a
  chain inside the node ((ppn-1) hops) and log2(nodes) network hops, moving the whole buffer once
  each way over the slowest of the node's links, at NCCL's tree refinement of the bus bandwidth
  (tuning.cc `busBw * .92`, data/nccl_tuning.toml refinements.tree_factor).
Across nodes on HPE Slingshot (Frontier, LUMI) RCCL reaches the NICs through the aws-ofi-rccl
plugin (libfabric cxi); without it RCCL falls back to TCP sockets, which this model does not
price: the doctor says so instead (data/rules.toml, ROCm launch rules).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prism_strategy.estimate.backends.base import BackendDefaults, Call, Term
from prism_strategy.estimate.backends.gloo import RING_TERMS, alpha_beta_seconds
from prism_strategy.estimate.comm_nccl import tuning
from prism_strategy.specs.cluster import PlatformSpec

ROUTE = "RCCL ring/tree from the platform's links (estimate/backends/rccl.py)"


def tree_seconds(size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """All-reduce as NCCL's tree: reduce up, broadcast down (2 x the buffer over the NICs)."""
    eff = p.collectives.bw_efficiency * 1e9 * tuning()["refinements"]["tree_factor"]
    ppn = max(1, ranks // nodes)
    nic_total = p.links.nic_bw_gbps * p.links.nics_per_node / max(1, concurrent)
    hops = (ppn - 1) * p.links.intra_latency_us + math.ceil(math.log2(nodes)) * p.links.inter_latency_us
    intra = size / (p.links.intra_bw_gbps * eff) if ppn > 1 else 0.0
    t = (p.collectives.collective_overhead_us + p.collectives.scaleout_overhead_us) * 1e-6
    return t + 2 * (hops * 1e-6 + max(intra, size / (nic_total * eff)))


@dataclass(frozen=True)
class Rccl(BackendDefaults):
    """RCCL's ring and tree; collectives on their own HIP stream (overlap by the engine's schedule)."""

    name: str = "rccl"

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
        ring = alpha_beta_seconds(op, size, ranks, nodes, concurrent, p)
        if op == "all_reduce" and nodes > 1 and ranks > nodes:
            tree = tree_seconds(size, ranks, nodes, concurrent, p)
            if tree < ring:
                return Call(tree, "rccl tree", 0, ROUTE)
        return Call(ring, "rccl ring", 0, ROUTE)

    def describe(self, p: PlatformSpec) -> str:
        return (
            f"RCCL ring/tree from the platform's links (estimate/backends/rccl.py): intra "
            f"{p.links.intra_bw_gbps:g} GB/s, NIC {p.links.nic_bw_gbps:g} GB/s x {p.links.nics_per_node}"
            " (aws-ofi-rccl on Slingshot); RCCL's own tuning constants not transcribed"
        )

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]:
        return RING_TERMS

    def schedules_overlap(self, p: PlatformSpec) -> bool:
        """As NCCL: collectives on their own stream overlap by the engine's schedule."""
        return not p.collectives.host_blocking_collectives


BACKEND = Rccl()
