"""oneCCL's collectives as the platform's CCL profile makes them run (Aurora, PRISM's profile).

Sources: oneCCL doc/rst/source/env-variables.rst ("Collective Algorithms Selection": for GPU
buffers the default is `topo`, a scale-up phase inside the node then a scale-out phase across
nodes; any other algorithm copies the GPU buffers to the host and runs non-hierarchically) and
src/common/env/vars.hpp (scale-out defaults: all-gather(v) "naive" over OFI, reduce-scatter
"naive", all-reduce "ring"); the SYCL multi-node path (allreduce_sycl.cpp) splits the world
into node_comm (scale-up) and r2r_comm (the ranks of one local index on every node: scale-out).

- all-reduce forced to a ring (`CCL_ALLREDUCE=ring`, allreduce_algorithm = "ring"): the buffer
  is staged through the host and one flat ring runs over every rank of the group: 2(N-1)
  dependent steps, each at the latency of the slowest hop it waits on (any hop crossing nodes
  makes it the inter-node latency), bandwidth the host ring's (intra_ring_bw_gbps: one CCL
  worker copying and reducing on the CPU) or the NICs the ring crosses, whichever is lower.
- all-gather / reduce-scatter (topo, and a topology all-reduce): scale-up over the node's
  ranks ((rpn-1) peer copies at intra_latency_us, Xe Link at intra_bw_gbps), then across nodes
  the scale-out over r2r_comm: a fixed cost per operation (scaleout_overhead_us: staging to
  host and back, schedule, progress by the single worker) plus one message per peer node
  ((nodes-1) at inter_latency_us; 2(nodes-1) ring steps for all-reduce); the rpn scale-out
  groups of a node run at once and share its NICs.
- every operation pays collective_overhead_us (submission, and with CCL_OP_SYNC=1 the wait).
With CCL_OP_SYNC=1 every one of these terms holds the host (estimate/host.py exposes them all).
"""

from __future__ import annotations

from prism_strategy.estimate.ring import ring_steps
from prism_strategy.specs.cluster import PlatformSpec


def _eff(p: PlatformSpec) -> float:
    return p.bw_efficiency * 1e9


def host_ring_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """Flat ring over every rank of the group, staged through the host (CCL_ALLREDUCE=ring)."""
    factor = 2 if op == "all_reduce" else 1
    hop_us = p.inter_latency_us if nodes > 1 else p.intra_latency_us
    bw = p.intra_ring_bw_gbps
    if nodes > 1:
        ring_nics = p.nic_bw_gbps * min(p.ring_channels, p.nics_per_node)
        bw = min(bw, ring_nics, p.nic_bw_gbps * p.nics_per_node / concurrent)
    return factor * ((ranks - 1) * hop_us * 1e-6 + size * (ranks - 1) / ranks / (bw * _eff(p)))


def scale_up_seconds(op: str, size: float, rpn: int, p: PlatformSpec) -> float:
    """Inside the node over Xe Link: one copy per peer, (rpn-1)/rpn of the payload per rank."""
    if rpn <= 1:
        return 0.0
    factor = 2 if op == "all_reduce" else 1
    return factor * ((rpn - 1) * p.intra_latency_us * 1e-6 + size * (rpn - 1) / rpn / (p.intra_bw_gbps * _eff(p)))


def scale_out_seconds(op: str, size: float, rpn: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """Across nodes over r2r_comm on the buffer left after the scale-up phase (size / rpn): one
    message per peer node (naive), or 2(nodes-1) ring steps for all-reduce; `rpn x concurrent`
    such groups per node share its NICs."""
    part = size / rpn
    steps = ring_steps(op, nodes)
    factor = 2 if op == "all_reduce" else 1
    bw = min(p.nic_bw_gbps, p.nic_bw_gbps * p.nics_per_node / (rpn * concurrent))
    return (p.scaleout_overhead_us * 1e-6 + steps * p.inter_latency_us * 1e-6
            + factor * part * (nodes - 1) / nodes / (bw * _eff(p)))


def oneccl_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> tuple[float, str]:
    """(seconds of one call, the algorithm that runs)."""
    t = p.collective_overhead_us * 1e-6
    if op == "all_reduce" and p.allreduce_algorithm == "ring":
        return t + host_ring_seconds(op, size, ranks, nodes, concurrent, p), f"oneccl host ring over {ranks}"
    if nodes == 1:
        return t + scale_up_seconds(op, size, ranks, p), f"oneccl topo scale-up over {ranks}"
    if p.scaleout_algorithm == "ring":
        return t + host_ring_seconds(op, size, ranks, nodes, concurrent, p), f"oneccl host ring over {ranks}"
    rpn = max(1, ranks // nodes)
    t += scale_up_seconds(op, size, rpn, p) + scale_out_seconds(op, size, rpn, nodes, concurrent, p)
    return t, f"oneccl topo: scale-up over {rpn}, scale-out over {nodes} nodes"
