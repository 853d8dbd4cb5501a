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

Which path an operation takes follows the environment (gpu_kernel_route), from oneCCL's
`can_use_sycl_kernels` (src/coll/algorithms/utils/sycl_selection.cpp, uxlfoundation/oneCCL
9ac28472b13e1f0831609c3510bc8005f2a3e455): it returns false ("unsupported count of workers")
whenever CCL_WORKER_COUNT != 1, for every collective; and for all-reduce / all-gather(v) /
reduce-scatter whenever CCL_ALLREDUCE / CCL_ALLGATHER(V) / CCL_REDUCE_SCATTER names an algorithm
other than `topo`. A refused call runs oneCCL's schedule-based algorithm, which for GPU buffers
stages through the host (env-variables.rst): priced as host_ring_seconds, the path the ring
all-reduce takes and the Aurora fit measured (intra_ring_bw_gbps, fitted on A1). Assumptions:
torch's XCCL may enter all-gather as allgather or allgatherv, so either variable naming a non-topo
algorithm refuses it; the staged path's bandwidth does not grow with more workers (not measured).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from prism_strategy.estimate.ring import ring_steps
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError

ALGORITHM_VARS = {"all_gather": ("CCL_ALLGATHER", "CCL_ALLGATHERV"), "reduce_scatter": ("CCL_REDUCE_SCATTER",)}
"""The variables sycl_selection.cpp reads for each op besides CCL_ALLREDUCE (allreduce_algorithm)."""


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
    return (
        p.scaleout_overhead_us * 1e-6
        + steps * p.inter_latency_us * 1e-6
        + factor * part * (nodes - 1) / nodes / (bw * _eff(p))
    )


def gpu_kernel_route(op: str, p: PlatformSpec) -> tuple[bool, str]:
    """(whether oneCCL runs its GPU kernels for `op`, why not): can_use_sycl_kernels' worker-count
    and named-algorithm checks (module docstring)."""
    if p.ccl_worker_count != 1:
        return False, f"CCL_WORKER_COUNT={p.ccl_worker_count}"
    if op == "all_reduce" and p.allreduce_algorithm != "topology":
        return False, f"CCL_ALLREDUCE={p.allreduce_algorithm}"
    for var in ALGORITHM_VARS.get(op, ()):
        if p.ccl_algorithms.get(var, "topo") != "topo":
            return False, f"{var}={p.ccl_algorithms[var]}"
    return True, ""


def with_ccl_env(p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec:
    """The platform as this environment routes its collectives (an env profile's values, or a
    live environment): CCL_WORKER_COUNT, CCL_ALLREDUCE, CCL_ALLGATHER(V), CCL_REDUCE_SCATTER;
    an unset variable is oneCCL's default (1 worker is the profile's; topo for GPU buffers)."""
    raw = env.get("CCL_WORKER_COUNT", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError(f"CCL_WORKER_COUNT={raw!r} is not a positive integer; set it to 1 (PRISM's profile)")
    ar = env.get("CCL_ALLREDUCE", "topo")
    algos = {v: env[v] for vs in ALGORITHM_VARS.values() for v in vs if v in env}
    return replace(
        p, ccl_worker_count=int(raw), ccl_algorithms=algos, allreduce_algorithm="topology" if ar == "topo" else "ring"
    )


def oneccl_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> tuple[float, str]:
    """(seconds of one call, the algorithm that runs)."""
    t = p.collective_overhead_us * 1e-6
    gpu, why = gpu_kernel_route(op, p)
    if not gpu:
        return t + host_ring_seconds(op, size, ranks, nodes, concurrent, p), f"oneccl host ring over {ranks} ({why})"
    if nodes == 1:
        return t + scale_up_seconds(op, size, ranks, p), f"oneccl topo scale-up over {ranks}"
    if p.scaleout_algorithm == "ring":
        return t + host_ring_seconds(op, size, ranks, nodes, concurrent, p), f"oneccl host ring over {ranks}"
    rpn = max(1, ranks // nodes)
    t += scale_up_seconds(op, size, rpn, p) + scale_out_seconds(op, size, rpn, nodes, concurrent, p)
    return t, f"oneccl topo: scale-up over {rpn}, scale-out over {nodes} nodes"


def description(p: PlatformSpec) -> str:
    """Which oneCCL path prices each op on this platform, for provenance."""
    routes = {op: gpu_kernel_route(op, p) for op in ("all_reduce", "all_gather", "reduce_scatter")}
    how = "; ".join(
        f"{op} " + ("topo" if gpu else f"host-staged flat ring ({why})") for op, (gpu, why) in routes.items()
    )
    return (
        f"oneCCL as profiled (estimate/comm_oneccl.py): {how} "
        f"(Xe Link {p.intra_bw_gbps:g} GB/s, then scale-out {p.scaleout_overhead_us:g} us + "
        f"{p.inter_latency_us:g} us per peer node, NIC {p.nic_bw_gbps:g} GB/s x {p.nics_per_node})"
    )
