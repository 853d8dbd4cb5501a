"""The phases of one oneCCL collective on Intel GPUs, each priced from the links it uses.

Sources: uxlfoundation/oneCCL at b382bf7 (2021.14; Aurora ships 2021.17, see docs/aurora_comm.md):
- scale-up (src/coll/algorithms/allreduce/allreduce.cpp ccl_coll_build_topo_allreduce_fill): the
  node's ranks as pair_comm (the two tiles of a card, over MDFI) and even_comm (one tile per card,
  over Xe Link): a reduce-scatter of S over the pair, then of S/2 over the cards; the all-gather
  back is the mirror. Each tile has its own Xe Link ports, so a tile reaches (cards-1) peers at
  once: the card phase moves (g-1)/g x S/pair over (g-1) links = S / (pair x g x link).
- staging (src/coll/coll_util.cpp add_scaleout): without GPU RDMA (CCL_ATL_HMEM, default 0 in
  src/common/env/env.cpp) the scale-out part is copied device-to-host, reduced / moved by the host
  algorithm, and copied back; the node's ranks copy at once and share its PCIe.
- scale-out (src/coll/algorithms/*: ring, naive, rabenseifner, recursive doubling, double tree;
  `direct` hands the host buffer to MPI): over r2r_comm (one rank per node per local index), the
  ranks-per-node groups running at once and sharing the node's NICs; each rank's host-buffer
  injection (scaleout_rank_bw_gbps) bounds it.
Latency per dependent step: intra_latency_us inside the node, inter_latency_us across nodes.
"""

from __future__ import annotations

import math

from prism_strategy.specs.cluster import PlatformSpec


def _gbps(bw: float) -> float:
    return bw * 1e9


def scale_up_phase(size: float, rpn: int, p: PlatformSpec) -> float:
    """One reduce-scatter (or all-gather) of `size` bytes over the node's rpn ranks."""
    if rpn <= 1:
        return 0.0
    eff = p.collectives.bw_efficiency
    pair = 2 if p.links.mdfi_bw_gbps > 0 and rpn % 2 == 0 else 1
    cards = rpn // pair
    t = (rpn - 1) * p.links.intra_latency_us * 1e-6
    if pair > 1:
        t += size / 2 / _gbps(p.links.mdfi_bw_gbps * eff)
    if cards > 1:
        t += size / (pair * cards) / _gbps(p.links.intra_bw_gbps * eff)
    return t


def scale_up_seconds(op: str, size: float, rpn: int, p: PlatformSpec) -> float:
    """all-reduce: reduce-scatter then all-gather inside the node; the others: one phase."""
    return (2 if op == "all_reduce" else 1) * scale_up_phase(size, rpn, p)


def staging_seconds(op: str, part: float, groups: int, p: PlatformSpec) -> float:
    """Device-to-host of the scale-out input and host-to-device of its output (add_scaleout), the
    node's `groups` staging ranks sharing its PCIe. part = the scale-out call's payload (census:
    all_gather's output, reduce_scatter's input)."""
    if p.oneccl.ccl_gpu_rdma or p.links.host_copy_gbps <= 0:
        return 0.0
    bw = p.links.host_copy_gbps
    if p.links.host_copy_node_gbps > 0:
        bw = min(bw, p.links.host_copy_node_gbps / max(groups, 1))
    return 2 * part / _gbps(bw)


def rank_bw(nodes: int, groups: int, p: PlatformSpec) -> float:
    """Bytes/s one scale-out rank moves: its host injection, or its share of the node's NICs."""
    nic = p.links.nic_bw_gbps * p.links.nics_per_node * p.collectives.bw_efficiency / max(groups, 1)
    inj = p.links.scaleout_rank_bw_gbps or p.links.nic_bw_gbps * p.collectives.bw_efficiency
    return _gbps(min(inj, nic))


def scaleout_seconds(algo: str, op: str, part: float, n: int, groups: int, p: PlatformSpec) -> float:
    """The host algorithm over n nodes on `part` bytes per rank (the all-reduce forms of Thakur,
    Rabenseifner and Gropp 2005, as oneCCL builds them: coll/algorithms/allreduce/allreduce.cpp)."""
    if n <= 1:
        return 0.0
    a, b = p.links.inter_latency_us * 1e-6, rank_bw(n, groups, p)
    logn = math.ceil(math.log2(n))
    spread = (n - 1) / n * part / b
    if op != "all_reduce":  # ring / naive / flat / direct all-gather and reduce-scatter: one message per peer
        return (logn if algo == "direct" else n - 1) * a + spread
    if algo == "rabenseifner":  # recursive halving reduce-scatter + recursive doubling all-gather
        return 2 * logn * a + 2 * spread
    if algo in ("recursive_doubling", "direct"):  # the whole buffer at each of log2 n exchanges
        return logn * (a + part / b)
    if algo == "double_tree":  # two trees, half the data each, up then down, not pipelined
        return 2 * logn * (a + part / 2 / b)
    return 2 * (n - 1) * a + 2 * spread  # ring


def host_ring_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """A non-topo algorithm on GPU buffers (CCL_ALLREDUCE=ring, a worker count other than 1): the
    whole buffer staged to the host, then one flat ring over every rank of the group: (N-1) steps
    per phase at the latency of the slowest hop, at the host ring's rate, the rank's share of the
    node's host ring, or the rank's injection, whichever is lowest."""
    factor = 2 if op == "all_reduce" else 1
    rpn = max(1, ranks // max(nodes, 1))
    hop_us = p.links.inter_latency_us if nodes > 1 else p.links.intra_latency_us
    bw = _gbps(p.links.intra_ring_bw_gbps * p.collectives.bw_efficiency)
    if p.links.host_ring_node_gbps > 0:
        bw = min(bw, _gbps(p.links.host_ring_node_gbps * p.collectives.bw_efficiency / (rpn * concurrent)))
    if nodes > 1:
        ring_nics = p.links.nic_bw_gbps * min(p.links.ring_channels, p.links.nics_per_node)
        bw = min(
            bw,
            _gbps(
                min(ring_nics, p.links.nic_bw_gbps * p.links.nics_per_node / concurrent) * p.collectives.bw_efficiency
            ),
        )
        if p.links.scaleout_rank_bw_gbps > 0:
            bw = min(bw, _gbps(p.links.scaleout_rank_bw_gbps))
    ring = factor * ((ranks - 1) * hop_us * 1e-6 + size * (ranks - 1) / ranks / bw)
    return ring + staging_seconds(op, size, rpn * concurrent, p)
