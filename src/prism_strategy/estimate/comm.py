"""Communication per optimizer step: price the collectives the engine says a step issues
(engines/*: `step_collectives`, checked against real runs by `census`) on the platform's links.
An all-reduce is priced the same whichever engine issues it.

Cost of one collective of S bytes over N ranks (alpha-beta model, Thakur et al. 2005; ring
algorithms move (N-1)/N of the payload per rank, twice for all-reduce):
    t = overhead + steps x alpha + factor x S x (N-1)/N / (bw x efficiency)
Inside a node, all-gather / reduce-scatter use the topology-aware bandwidth; all-reduce uses
the flat-ring bandwidth when the platform's profile forces a ring (Aurora: CCL_ALLREDUCE=ring).
A group spanning nodes pays the platform's per-operation scale-out overhead, and runs as its
scale-out algorithm says (all-reduce as a flat ring where the profile forces one): one flat ring over
every rank ((N-1) steps at the inter-node latency; bandwidth = the slowest of the intra-node
ring hop and the NICs one ring can use), or hierarchical (an intra-node phase, then an
inter-node phase whose bytes cross all the node's NICs). HSDP's replicate all-reduce runs one
ring per shard index concurrently: the node's NICs are shared between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.engines import StepCollective, step_collectives
from prism_strategy.specs.parts import Part
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec
from prism_strategy.engines import engine_of


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectiveCost:
    op: str
    group: str
    link: str
    """intra-node, inter-node, or spans nodes."""
    ranks: int
    bytes_per_call: float
    calls_per_step: int
    seconds_per_step: float
    overlappable: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class CommEstimate:
    collectives: tuple[CollectiveCost, ...]
    per_tensor_s: float
    """Per-tensor hook / AccumulateGrad / launch cost per step (host time, not overlappable)."""

    @property
    def total_s(self) -> float:
        return sum(c.seconds_per_step for c in self.collectives)

    @property
    def overlappable_s(self) -> float:
        return sum(c.seconds_per_step for c in self.collectives if c.overlappable)

    def exposed_s(self, compute_s: float, overlap: float) -> float:
        hidden = min(self.overlappable_s * overlap, compute_s)
        return self.total_s - hidden + self.per_tensor_s


def group_geometry(group: str, layout: Layout) -> tuple[int, int, int]:
    """(ranks in the group, nodes it spans, groups of this kind running at once per node)."""
    if group == "world":
        return layout.world, layout.nodes, 1
    if group == "node":
        return layout.ranks_per_node, 1, 1
    return layout.nodes, layout.nodes, layout.ranks_per_node


def collective_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    if ranks <= 1 or size <= 0:
        return 0.0
    factor = 2 if op == "all_reduce" else 1
    eff = p.bw_efficiency * 1e9
    ring_intra = p.intra_ring_bw_gbps if (op == "all_reduce" and p.allreduce_algorithm == "ring") else p.intra_bw_gbps
    t = p.collective_overhead_us * 1e-6
    if nodes == 1:
        return t + factor * ((ranks - 1) * p.intra_latency_us * 1e-6 + size * (ranks - 1) / ranks / (ring_intra * eff))
    nic_total = p.nic_bw_gbps * p.nics_per_node
    t += p.scaleout_overhead_us * 1e-6
    if ranks == nodes:  # one rank per node (HSDP replicate groups), `concurrent` of them share the NICs
        bw = min(p.nic_bw_gbps * min(p.ring_channels, p.nics_per_node), nic_total / concurrent)
        return t + factor * ((ranks - 1) * p.inter_latency_us * 1e-6 + size * (ranks - 1) / ranks / (bw * eff))
    per_node = ranks // nodes
    if p.scaleout_algorithm == "ring" or (op == "all_reduce" and p.allreduce_algorithm == "ring"):
        bw = min(p.intra_ring_bw_gbps, p.nic_bw_gbps * min(p.ring_channels, p.nics_per_node))
        return t + factor * ((ranks - 1) * p.inter_latency_us * 1e-6 + size * (ranks - 1) / ranks / (bw * eff))
    intra = (per_node - 1) * p.intra_latency_us * 1e-6 + size * (per_node - 1) / per_node / (p.intra_bw_gbps * eff)
    inter = (nodes - 1) * p.inter_latency_us * 1e-6 + size * (nodes - 1) / nodes / (nic_total * eff)
    return t + factor * (intra + inter)


def price(c: StepCollective, layout: Layout, p: PlatformSpec) -> CollectiveCost:
    """Seconds per step of one kind of collective: calls x the alpha-beta time of one call."""
    ranks, nodes, conc = group_geometry(c.group, layout)
    one = collective_seconds(c.op, c.bytes_per_call, ranks, nodes, conc, p)
    link = "intra-node" if nodes == 1 else ("inter-node" if ranks == nodes else "spans nodes")
    return CollectiveCost(op=c.op, group=c.group, link=link, ranks=ranks, bytes_per_call=c.bytes_per_call,
                          calls_per_step=c.calls, seconds_per_step=one * c.calls, overlappable=c.overlappable)


def estimate_comm(
    parts: tuple[Part, ...], t: TrainingSpec, p: PlatformSpec, layout: Layout, s: StrategySpec,
    grad_accum: int = 1, wrap: str = "block",
) -> CommEstimate:
    out = tuple(price(c, layout, p) for c in step_collectives(s, parts, t, layout, grad_accum, wrap))
    tensors = sum(x.tensors for x in parts if x.trains)
    hooks = tensors * p.per_tensor_overhead_us * 1e-6 * grad_accum if engine_of(s).per_tensor_hooks and layout.world > 1 else 0.0
    return CommEstimate(collectives=out, per_tensor_s=hooks)
