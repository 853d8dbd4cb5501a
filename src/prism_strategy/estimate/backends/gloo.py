"""gloo (CPU), and any platform whose backend has no model of its own: the alpha-beta ring
(Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in
MPICH"): t = overhead + steps x hop latency + factor x S x (N-1)/N / (bw x efficiency), flat over
every rank, or hierarchical (an intra-node phase, then one over the node's NICs); groups that run
at once share the node's NICs."""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.backends.base import BackendDefaults, Call, Term
from prism_strategy.specs.cluster import PlatformSpec

RING_TERMS = (
    Term(name="collective_overhead_us", kind="latency", what="fixed cost of every call"),
    Term(name="scaleout_overhead_us", kind="latency", what="fixed cost of a call crossing nodes"),
    Term(name="intra_latency_us", kind="latency", what="latency per ring step inside a node"),
    Term(name="inter_latency_us", kind="latency", what="latency per ring step across nodes"),
    Term(name="intra_bw_gbps", kind="bandwidth", what="link bandwidth inside a node"),
    Term(name="intra_ring_bw_gbps", kind="bandwidth", what="flat-ring bandwidth inside a node"),
    Term(name="nic_bw_gbps", kind="bandwidth", what="bandwidth of one NIC"),
)


def alpha_beta_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    factor = 2 if op == "all_reduce" else 1
    eff = p.collectives.bw_efficiency * 1e9
    ring_intra = (
        p.links.intra_ring_bw_gbps
        if (op == "all_reduce" and p.collectives.allreduce_algorithm == "ring")
        else p.links.intra_bw_gbps
    )
    t = p.collectives.collective_overhead_us * 1e-6
    if nodes == 1:
        return t + factor * (
            (ranks - 1) * p.links.intra_latency_us * 1e-6 + size * (ranks - 1) / ranks / (ring_intra * eff)
        )
    nic_total = p.links.nic_bw_gbps * p.links.nics_per_node
    t += p.collectives.scaleout_overhead_us * 1e-6
    if ranks == nodes:  # one rank per node (HSDP replicate groups), `concurrent` of them share the NICs
        bw = min(p.links.nic_bw_gbps * min(p.links.ring_channels, p.links.nics_per_node), nic_total / concurrent)
        return t + factor * ((ranks - 1) * p.links.inter_latency_us * 1e-6 + size * (ranks - 1) / ranks / (bw * eff))
    per_node = ranks // nodes
    if p.collectives.scaleout_algorithm == "ring" or (
        op == "all_reduce" and p.collectives.allreduce_algorithm == "ring"
    ):
        bw = min(p.links.intra_ring_bw_gbps, p.links.nic_bw_gbps * min(p.links.ring_channels, p.links.nics_per_node))
        return t + factor * ((ranks - 1) * p.links.inter_latency_us * 1e-6 + size * (ranks - 1) / ranks / (bw * eff))
    intra = (per_node - 1) * p.links.intra_latency_us * 1e-6 + size * (per_node - 1) / per_node / (
        p.links.intra_bw_gbps * eff
    )
    inter = (nodes - 1) * p.links.inter_latency_us * 1e-6 + size * (nodes - 1) / nodes / (nic_total * eff)
    return t + factor * (intra + inter)


def ring_call(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
    algo = "ring" if nodes == 1 or p.collectives.scaleout_algorithm == "ring" else "hierarchical ring"
    return Call(
        alpha_beta_seconds(op, size, ranks, nodes, concurrent, p),
        f"{p.backend} {algo}",
        0,
        "alpha-beta ring (estimate/backends/gloo.py alpha_beta_seconds)",
    )


def ring_description(p: PlatformSpec) -> str:
    return (
        f"alpha-beta ring (estimate/backends/gloo.py): intra {p.links.intra_bw_gbps:g} GB/s, NIC {p.links.nic_bw_gbps:g} GB/s x "
        f"{p.links.nics_per_node}"
    )


GLOO_REDUCE_SCATTER = (
    "gloo's reduce_scatter is an all_reduce of a copy of the input, then a copy of the rank's chunk "
    "(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp reduce_scatter_tensor_coalesced; measured here, 4 ranks: "
    "16 MiB reduce_scatter 31 ms, all_reduce 26 ms, all_gather 15 ms); priced as the all_reduce, the copies left out"
)


@dataclass(frozen=True)
class Gloo(BackendDefaults):
    """The ring for every call; the defaults for the rest (base.py BackendDefaults)."""

    name: str = "gloo"

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
        if op == "reduce_scatter":  # gloo has no reduce-scatter of its own: see GLOO_REDUCE_SCATTER
            c = ring_call("all_reduce", size, ranks, nodes, concurrent, p)
            return c._replace(algorithm=f"{c.algorithm} all_reduce", route=GLOO_REDUCE_SCATTER)
        return ring_call(op, size, ranks, nodes, concurrent, p)

    def describe(self, p: PlatformSpec) -> str:
        return ring_description(p)

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]:
        return RING_TERMS


BACKEND = Gloo()
