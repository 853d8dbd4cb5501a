"""Communication per optimizer step: price the collectives the engine says a step issues
(engines/*: `step_collectives`, checked against real runs by `census`) on the platform's links.
An all-reduce is priced the same whichever engine issues it; `collective_seconds` prices one
call, `price` one kind of StepCollective. Each backend's term has the form of the algorithm
that runs, with latency per dependent step (so it grows with the ranks a ring crosses):

- nccl (estimate/comm_nccl.py): NCCL's own cost model (src/graph/tuning.cc): per call the
  fastest of ring / tree x LL / LL128 / Simple, ring steps at the latency of the hop each
  crosses (N-1, 2(N-1) for all-reduce; 2(nodes-1) of them on the network), tree all-reduce
  with log2(nodes) network hops, bandwidth channels x per-channel speed.
- xccl (estimate/comm_oneccl.py): oneCCL as the profile forces it: CCL_ALLREDUCE=ring is a
  host-staged flat ring over every rank; all-gather / reduce-scatter are topology-aware
  (scale-up in the node, then a scale-out across nodes with a per-operation and a per-peer cost).
- gloo, and NCCL platforms without `gpu_arch`: the alpha-beta ring (Thakur et al. 2005):
    t = overhead + steps x hop latency + factor x S x (N-1)/N / (bw x efficiency)
  flat over every rank, or hierarchical (intra-node phase, then one over the NICs).
Groups that run at once (HSDP's replicate all-reduce: one group per shard index) share the
node's NICs in every model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from prism_strategy.engines import StepCollective, engine_of, step_collectives
from prism_strategy.estimate.comm_measured import measured_seconds
from prism_strategy.estimate.comm_nccl import nccl_choice, nccl_choice_by_topology, nccl_topology
from prism_strategy.estimate.comm_oneccl import gpu_kernel_route, oneccl_seconds
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.parts import Part
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import StrategySpec


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
    algorithm: str = ""
    """What the backend runs for it ("nccl ring/LL128", "oneccl host ring over 24", ...)."""
    phase: str = "backward"
    """When the engine issues it (forward, backward, step): estimate/overlap.py's schedule."""
    channels: int = 0
    """SMs its kernel occupies while it runs (NCCL: one CUDA block per channel); 0 = none modelled."""
    call_seconds: tuple[float, ...] = ()
    """Seconds of each call of one micro-step in issue order, when the engine gives their sizes
    (scaled so they add up to seconds_per_step); empty: every call the same."""


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


def alpha_beta_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """The generic ring (gloo, or a platform whose backend has no model of its own)."""
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


def collective_call(
    op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec
) -> tuple[float, str]:
    """(seconds of one call, the algorithm the backend runs for it)."""
    return _call(op, size, ranks, nodes, concurrent, p)[:2]


def _call(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> tuple[float, str, int]:
    """(seconds of one call, the algorithm, the SMs its kernel occupies: NCCL's channels, else 0)."""
    if ranks <= 1 or size <= 0:
        return 0.0, "none", 0
    if p.backend == "nccl" and p.gpu_arch:
        c = nccl_choice(p, op, size, ranks, nodes, concurrent)
        return c.seconds, c.name, c.channels
    if p.backend == "xccl":
        return (*oneccl_seconds(op, size, ranks, nodes, concurrent, p), 0)
    algo = "ring" if nodes == 1 or p.scaleout_algorithm == "ring" else "hierarchical ring"
    return alpha_beta_seconds(op, size, ranks, nodes, concurrent, p), f"{p.backend} {algo}", 0


def comm_readings(p: PlatformSpec) -> dict[str, PlatformSpec]:
    """The platform as shipped, plus each reading of its comm terms the fitted records could not
    rule out. oneCCL: a cross-node collective's fixed cost fitted at 2 nodes, where (nodes-1) = 1,
    is either per operation (shipped) or per peer node (the same 2-node total as (nodes-1) x
    inter_latency_us). Pricing an option under each gives the spread its node count allows."""
    out = {"shipped": p}
    if p.backend == "xccl" and p.scaleout_overhead_us > 0:
        out["cross-node cost per peer node"] = replace(
            p, scaleout_overhead_us=0.0, inter_latency_us=p.inter_latency_us + p.scaleout_overhead_us
        )
    return out


def model_description(p: PlatformSpec) -> str:
    """Which collective model prices this platform, for provenance."""
    if p.backend == "nccl" and p.gpu_arch:
        scaled = ", ".join(f"{k} x{v:.3g}" for k, v in p.nccl_scale.items() if v != 1.0)
        return (
            f"NCCL's cost model (data/nccl_tuning.toml from NCCL src/graph/tuning.cc; {p.gpu_arch}, "
            f"{p.nvlink_links} NVLinks, NIC {p.nic_bw_gbps:g} GB/s x {p.nics_per_node}"
            + (f"; fitted to measured curves: {scaled}" if scaled else "")
            + "), estimate/comm_nccl.py"
        )
    if p.backend == "xccl":
        routes = {op: gpu_kernel_route(op, p) for op in ("all_reduce", "all_gather", "reduce_scatter")}
        how = "; ".join(
            f"{op} " + ("topo" if gpu else f"host-staged flat ring ({why})") for op, (gpu, why) in routes.items()
        )
        return (
            f"oneCCL as profiled (estimate/comm_oneccl.py): {how} "
            f"(Xe Link {p.intra_bw_gbps:g} GB/s, then scale-out {p.scaleout_overhead_us:g} us + "
            f"{p.inter_latency_us:g} us per peer node, NIC {p.nic_bw_gbps:g} GB/s x {p.nics_per_node})"
        )
    return (
        f"alpha-beta ring (estimate/comm.py): intra {p.intra_bw_gbps:g} GB/s, NIC {p.nic_bw_gbps:g} GB/s x "
        f"{p.nics_per_node}"
    )


def collective_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """Seconds of one call of `size` bytes (census payload) over a group of `ranks` spanning
    `nodes`, with `concurrent` such groups per node sharing its NICs: the single pricing entry point."""
    return collective_call(op, size, ranks, nodes, concurrent, p)[0]


def price(c: StepCollective, layout: Layout, p: PlatformSpec) -> CollectiveCost:
    """Seconds per step of one kind of collective: calls x the time of one call."""
    ranks, nodes, conc = group_geometry(c.group, layout)
    one, algorithm, channels = _call(c.op, c.bytes_per_call, ranks, nodes, conc, p)
    hit = measured_seconds(p.measured_collectives, c.op, c.bytes_per_call, ranks, nodes, conc)
    if (
        hit is not None
    ):  # a matching measured curve wins (estimate/comm_measured.py); the kernel's channels stay the model's
        one, algorithm = hit.seconds, f"measured: {hit.curve.label} {hit.curve.shape} ({hit.how})"
    link = "intra-node" if nodes == 1 else ("inter-node" if ranks == nodes else "spans nodes")
    return CollectiveCost(
        op=c.op,
        group=c.group,
        link=link,
        ranks=ranks,
        bytes_per_call=c.bytes_per_call,
        calls_per_step=c.calls,
        seconds_per_step=one * c.calls,
        overlappable=c.overlappable,
        algorithm=algorithm,
        phase=c.phase,
        channels=channels,
        call_seconds=_call_seconds(c, one * c.calls, ranks, nodes, conc, p),
    )


LOG_BAND = math.log(1.02)


def schedules_overlap(p: PlatformSpec) -> bool:
    """NCCL platforms whose collectives do not hold the host: overlap comes from the engine's
    schedule (estimate/overlap.py), not from `comm_overlap`."""
    return p.backend == "nccl" and not p.host_blocking_collectives


def _call_seconds(
    c: StepCollective, total: float, ranks: int, nodes: int, conc: int, p: PlatformSpec
) -> tuple[float, ...]:
    """Each call of one micro-step priced at its own size, scaled to the kind's total (priced at the
    mean size, as census counts it): the schedule sees the large root unit apart from the blocks."""
    sizes = getattr(c, "sizes", ())
    if not sizes or total <= 0 or not schedules_overlap(p):
        return ()
    if p.gpu_arch:
        raw = _nccl_calls(sizes, c.op, ranks, nodes, conc, nccl_topology(p))
    else:
        raw = _banded_calls(sizes, lambda b: _call(c.op, b, ranks, nodes, conc, p)[0])
    scale = total / (sum(raw) * (c.calls / len(sizes))) if sum(raw) > 0 else 0.0
    return tuple(x * scale for x in raw)


def _banded_calls(sizes: tuple[float, ...], seconds) -> tuple[float, ...]:
    """One price per 2% band of sizes (DDP's buckets differ by a few bytes)."""
    priced: dict[int, float] = {}
    out = []
    for b in sizes:
        band = round(math.log(max(b, 1.0)) / LOG_BAND)
        if band not in priced:
            priced[band] = seconds(b)
        out.append(priced[band])
    return tuple(out)


@lru_cache(maxsize=1024)
def _nccl_calls(sizes: tuple[float, ...], op: str, ranks: int, nodes: int, conc: int, topo: tuple) -> tuple[float, ...]:
    """The same calls recur for every batch and checkpointing a plan tries: priced once."""
    return _banded_calls(sizes, lambda b: nccl_choice_by_topology(topo, op, b, ranks, nodes, conc).seconds)


@lru_cache(maxsize=1024)
def _cached_collectives(s, parts, t, layout, grad_accum, wrap) -> tuple[StepCollective, ...]:
    return tuple(step_collectives(s, parts, t, layout, grad_accum, wrap))


def _step_collectives(s, parts, t, layout, grad_accum, wrap) -> tuple[StepCollective, ...]:
    """The engine's collectives do not depend on the platform: a plan's sweep and a fit's
    thousands of evaluations ask for the same ones again (frozen specs, so cached by value)."""
    try:
        return _cached_collectives(s, parts, t, layout, grad_accum, wrap)
    except TypeError:  # an unhashable spec (a user's live module): compute it
        return tuple(step_collectives(s, parts, t, layout, grad_accum, wrap))


def estimate_comm(
    parts: tuple[Part, ...],
    t: TrainingSpec,
    p: PlatformSpec,
    layout: Layout,
    s: StrategySpec,
    grad_accum: int = 1,
    wrap: str = "block",
) -> CommEstimate:
    out = tuple(price(c, layout, p) for c in _step_collectives(s, parts, t, layout, grad_accum, wrap))
    tensors = sum(x.tensors for x in parts if x.trains)
    hooks = (
        tensors * p.per_tensor_overhead_us * 1e-6 * grad_accum
        if engine_of(s).per_tensor_hooks and layout.world > 1
        else 0.0
    )
    return CommEstimate(collectives=out, per_tensor_s=hooks)
