"""Communication per optimizer step: price the collectives the engine says a step issues
(engines/*: `step_collectives`, checked against real runs by `census`) on the platform's links.
An all-reduce is priced the same whichever engine issues it; `collective_seconds` prices one
call, `price` one kind of StepCollective. The platform's backend prices a call (a registry,
estimate/backends/: one module each, chosen by `backend`). Each backend's term has the form of
the algorithm that runs, with latency per dependent step (so it grows with the ranks a ring crosses):

- nccl (estimate/comm_nccl.py): NCCL's own cost model (src/graph/tuning.cc): per call the
  fastest of ring / tree x LL / LL128 / Simple, ring steps at the latency of the hop each
  crosses (N-1, 2(N-1) for all-reduce; 2(nodes-1) of them on the network), tree all-reduce
  with log2(nodes) network hops, bandwidth channels x per-channel speed.
- xccl (estimate/comm_oneccl.py, docs/aurora_comm.md): oneCCL as the job's CCL environment
  routes each op (with_ccl_env): a named non-topo algorithm (CCL_ALLREDUCE=ring) is a staged
  flat host ring over every rank; topo is scale-up in the node (MDFI, Xe Link), a host-staged
  scale-out across nodes by the algorithm oneCCL selects for the op and size, and scale-up back.
- gloo, and NCCL platforms without `gpu_arch` (estimate/backends/gloo.py): the alpha-beta ring
  (Thakur et al. 2005):
    t = overhead + steps x hop latency + factor x S x (N-1)/N / (bw x efficiency)
  flat over every rank, or hierarchical (intra-node phase, then one over the NICs).
Groups that run at once (HSDP's replicate all-reduce: one group per shard index) share the
node's NICs in every model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from prism_strategy.engines import StepCollective, engine_of, step_collectives
from prism_strategy.engines.runs import Runs
from prism_strategy.estimate.backends import NO_CALL, Call, backend_of
from prism_strategy.estimate.comm_measured import measured_seconds
from prism_strategy.estimate.comm_nccl import nccl_choice_by_topology, nccl_topology
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
    call_seconds: Runs = Runs()
    """Seconds of each call of one micro-step in issue order, when the engine gives their sizes
    (scaled so they add up to seconds_per_step); empty: every call the same. Runs of equal calls
    (engines/runs.py), like the sizes they price."""


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


def collective_call(
    op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec
) -> tuple[float, str]:
    """(seconds of one call, the algorithm the backend runs for it)."""
    c = _call(op, size, ranks, nodes, concurrent, p)
    return c.seconds, c.algorithm


def _call(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
    """The platform's backend prices the call (estimate/backends: seconds, algorithm, SMs, route)."""
    if ranks <= 1 or size <= 0:
        return NO_CALL
    return backend_of(p).call(op, size, ranks, nodes, concurrent, p)


def comm_readings(p: PlatformSpec) -> dict[str, PlatformSpec]:
    """The platform as shipped, plus each reading of its comm terms the fitted records could not
    rule out (the backend's `readings`); pricing an option under each gives the spread its node
    count allows."""
    return backend_of(p).readings(p)


def model_description(p: PlatformSpec) -> str:
    """Which collective model prices this platform, for provenance."""
    return backend_of(p).describe(p)


def collective_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> float:
    """Seconds of one call of `size` bytes (census payload) over a group of `ranks` spanning
    `nodes`, with `concurrent` such groups per node sharing its NICs: the single pricing entry point."""
    return collective_call(op, size, ranks, nodes, concurrent, p)[0]


def price(c: StepCollective, layout: Layout, p: PlatformSpec) -> CollectiveCost:
    """Seconds per step of one kind of collective: calls x the time of one call."""
    ranks, nodes, conc = group_geometry(c.group, layout)
    one, algorithm, channels, _ = _call(c.op, c.bytes_per_call, ranks, nodes, conc, p)
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
    """Whether overlap comes from the engine's schedule (estimate/overlap.py: NCCL platforms whose
    collectives do not hold the host), not from `comm_overlap`: the backend says."""
    return backend_of(p).schedules_overlap(p)


def _call_seconds(c: StepCollective, total: float, ranks: int, nodes: int, conc: int, p: PlatformSpec) -> Runs:
    """Each call of one micro-step priced at its own size, scaled to the kind's total (priced at the
    mean size, as census counts it): the schedule sees the large root unit apart from the blocks."""
    sizes = c.sizes
    if not sizes or total <= 0 or not schedules_overlap(p):
        return Runs()
    if p.hardware.gpu_arch:
        raw = _nccl_calls(sizes, c.op, ranks, nodes, conc, nccl_topology(p))
    else:
        raw = _banded_calls(sizes, lambda b: _call(c.op, b, ranks, nodes, conc, p).seconds)
    return _scaled(raw, total, c.calls)


@lru_cache(maxsize=256)  # by value (runs hash per run): the same calls recur for every option a plan tries
def _scaled(raw: Runs, total: float, calls: int) -> Runs:
    """The calls' own prices scaled so that the step's calls add up to `total` (per run). The sum
    runs call by call, in issue order (C-speed iteration): the same float as the tuple it replaced."""
    s = sum(raw)
    scale = total / (s * (calls / len(raw))) if s > 0 else 0.0
    return raw.map(lambda x: x * scale)


def _banded_calls(sizes: Runs, seconds) -> Runs:
    """One price per 2% band of sizes (DDP's buckets differ by a few bytes), one look-up per run."""
    priced: dict[int, float] = {}
    out = []
    for b, n in sizes.runs:
        band = round(math.log(max(b, 1.0)) / LOG_BAND)
        if band not in priced:
            priced[band] = seconds(b)
        out.append((priced[band], n))
    return Runs.of_runs(out)


@lru_cache(maxsize=1024)  # keyed by the runs: a deep stack's sizes hash per run
def _nccl_calls(sizes: Runs, op: str, ranks: int, nodes: int, conc: int, topo: tuple) -> Runs:
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
        tensors * p.collectives.per_tensor_overhead_us * 1e-6 * grad_accum
        if engine_of(s).per_tensor_hooks and layout.world > 1
        else 0.0
    )
    return CommEstimate(collectives=out, per_tensor_s=hooks)
