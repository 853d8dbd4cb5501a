"""oneCCL's collectives on Intel GPUs as the job's CCL environment makes them run (Aurora).

Sources: uxlfoundation/oneCCL at b382bf7 (version 2021.14; Aurora ships 2021.17: where they may
differ, docs/aurora_comm.md). Per call, in the order oneCCL decides it:
1. GPU kernels or the host (src/coll/algorithms/utils/sycl_selection.cpp can_use_sycl_kernels,
   src/coll/selection/selection.cpp ccl_can_use_topo_algo): any CCL_WORKER_COUNT but 1, or a
   named non-topo algorithm for the op (CCL_ALLREDUCE=ring, CCL_ALLGATHER(V), CCL_REDUCE_SCATTER),
   copies the whole op to the host and runs the host algorithm over every rank
   (doc/rst/source/env-variables.rst, "Collective Algorithms Selection"): priced as one flat host
   ring (comm_oneccl_phases.host_ring_seconds). A node with fewer ranks than the platform's
   ccl_topo_min_ppn takes that path too (its [sources] say why).
2. `topo` (selector_allreduce.cpp / selector_reduce_scatter.cpp / selector_allgatherv.cpp main
   table, every size): inside one node the scale-up phases only; across nodes the three phases of
   allreduce.cpp ccl_coll_build_topo_allreduce_fill: reduce-scatter in the node (MDFI, Xe Link),
   the scale-out on 1/rpn of the data over r2r_comm (rpn groups at once per node, sharing its
   NICs), all-gather in the node; the scale-out staged through the host (coll_util.cpp
   add_scaleout) unless GPU RDMA is on (CCL_ATL_HMEM=1). How much is staged is the platform's
   ccl_host_staging: the scale-out part (the 2021.14 source) or, for all-reduce only (the op the
   torch rows measured it for), the whole buffer.
3. The scale-out algorithm (selector_impl.hpp get, is_scaleout): CCL_<OP>_SCALEOUT by size range,
   else the scale-out table (all-reduce ring, all-gather(v) ring, reduce-scatter naive); one that
   cannot be used falls to the fallback table (all-reduce: recursive doubling up to 8192 bytes over
   OFI, else ring; all-gather(v) flat; reduce-scatter naive): rabenseifner below the element count
   rule (count < the largest power of two <= ranks), direct over OFI.
   The SYCL path (allreduce_sycl.cpp and siblings, thresholds in src/common/env/env.cpp) runs the
   same phases: multi-node all-reduce never in 2021.14 (sycl_allreduce_scaleout_threshold 0),
   all-gather(v) at or below 1 MiB over MPI only, reduce-scatter up to 4 GiB; its scale-out is
   `direct` (host copy + MPI) where the size rules allow; it is named in the algorithm.
Every call pays collective_overhead_us; one crossing nodes also scaleout_overhead_us (schedule,
staging entries, progress by the single worker). CCL_OP_SYNC=1 makes each block the host
(host_blocking_collectives: estimate/host.py exposes them all).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from prism_strategy.estimate.comm_oneccl_phases import (
    host_ring_seconds,
    scale_up_seconds,
    scaleout_seconds,
    staging_seconds,
)
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.errors import SpecError

__all__ = [
    "description",
    "gpu_kernel_route",
    "host_ring_seconds",
    "oneccl_seconds",
    "parse_scaleout",
    "scale_up_seconds",
    "scaleout_choice",
    "with_ccl_env",
]

ALGORITHM_VARS = {"all_gather": ("CCL_ALLGATHER", "CCL_ALLGATHERV"), "reduce_scatter": ("CCL_REDUCE_SCATTER",)}
"""The variables sycl_selection.cpp reads for each op besides CCL_ALLREDUCE (allreduce_algorithm)."""
ALGOS = {
    "all_reduce": ("direct", "rabenseifner", "nreduce", "ring", "ring_rma", "double_tree", "recursive_doubling", "2d"),
    "all_gather": ("direct", "naive", "ring", "flat", "multi_bcast"),
    "reduce_scatter": ("direct", "naive", "ring"),
}
"""Algorithm names each selector knows (src/coll/selection/selector_*.cpp algo_names), `topo` aside."""
SCALEOUT_VARS = {
    "CCL_ALLREDUCE_SCALEOUT": "all_reduce",
    "CCL_ALLGATHER_SCALEOUT": "all_gather",
    "CCL_ALLGATHERV_SCALEOUT": "all_gather",
    "CCL_REDUCE_SCATTER_SCALEOUT": "reduce_scatter",
}
OP_VARS = {"CCL_ALLREDUCE": "all_reduce", "CCL_ALLGATHER": "all_gather", "CCL_ALLGATHERV": "all_gather"}
OP_VARS |= {"CCL_REDUCE_SCATTER": "reduce_scatter"}
DEFAULT_SCALEOUT = {"all_reduce": "ring", "all_gather": "ring", "reduce_scatter": "naive"}
"""selector_*.cpp: insert(scaleout_table, 0, max, ...)."""
ALLREDUCE_SHORT_MSG_SIZE = 8192
"""src/coll/selection/selector.hpp: the OFI fallback's recursive-doubling range (bytes)."""
SYCL_SCALEOUT_MAX = {"all_reduce": 0, "all_gather": 1048576, "reduce_scatter": 4294967296}
"""src/common/env/env.cpp sycl_<op>_scaleout_threshold: bytes up to which the SYCL path crosses nodes."""
SYCL_DIRECT_MAX = 1048576
"""env.cpp sycl_allreduce/reduce_scatter_scaleout_direct_threshold."""
ELEMENT_BYTES = 2
"""bf16: the element count rabenseifner's rule counts (gradients in PRISM's runs)."""
BOOL_VARS = {"CCL_OP_SYNC", "CCL_ATL_HMEM", "CCL_ATL_SYNC_COLL"}


@lru_cache(maxsize=256)
def parse_scaleout(var: str, raw: str) -> tuple[tuple[str, int, float], ...]:
    """oneCCL's selection string (selector_impl.hpp fill_table_from_str): "algo" or
    "algo:lo-hi;algo:lo-hi" with byte bounds or `max`; impossible values raise SpecError."""
    op, out = SCALEOUT_VARS[var], []
    for block in filter(None, (b.strip() for b in raw.split(";"))):
        algo, _, rng = block.partition(":")
        if algo not in ALGOS[op]:
            raise SpecError(f"{var}={raw!r}: {algo!r} is not a oneCCL {op} algorithm ({', '.join(ALGOS[op])})")
        lo, hi = 0, float("inf")
        if rng:
            a, dash, b = rng.partition("-")
            if not dash or not a.isdigit() or not (b.isdigit() or b == "max") or (b != "max" and int(a) > int(b)):
                raise SpecError(f"{var}={raw!r}: size range {rng!r} is not <bytes>-<bytes|max> with low <= high")
            lo, hi = int(a), float("inf") if b == "max" else int(b)
        out.append((algo, lo, hi))
    if not out:
        raise SpecError(f"{var}={raw!r}: names no algorithm; e.g. rabenseifner or direct:0-1048576;ring:1048577-max")
    return tuple(out)


def _bool(env: Mapping[str, str], var: str) -> bool | None:
    if var not in env:
        return None
    if env[var] not in ("0", "1"):
        raise SpecError(f"{var}={env[var]!r}: oneCCL reads 0 or 1")
    return env[var] == "1"


def with_ccl_env(p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec:
    """The platform as this environment routes its collectives (an env profile's values, or a live
    environment): CCL_WORKER_COUNT, CCL_ALLREDUCE / ALLGATHER(V) / REDUCE_SCATTER, CCL_<OP>_SCALEOUT,
    CCL_ATL_TRANSPORT, CCL_ATL_HMEM (GPU RDMA), CCL_OP_SYNC. An unset variable is oneCCL's default
    (env.cpp: 1 worker, topo for GPU buffers, OFI, no HMEM); CCL_OP_SYNC unset keeps the platform's."""
    raw = env.get("CCL_WORKER_COUNT", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise SpecError(f"CCL_WORKER_COUNT={raw!r} is not a positive integer; set it to 1 (PRISM's profile)")
    for var, op in OP_VARS.items():
        if var in env and env[var] != "topo" and env[var] not in ALGOS[op]:
            raise SpecError(f"{var}={env[var]!r}: not a oneCCL {op} algorithm (topo, {', '.join(ALGOS[op])})")
    transport = env.get("CCL_ATL_TRANSPORT", "ofi")
    if transport not in ("ofi", "mpi"):
        raise SpecError(f"CCL_ATL_TRANSPORT={transport!r}: oneCCL takes ofi or mpi")
    flags = {v: _bool(env, v) for v in BOOL_VARS}
    scaleout = {SCALEOUT_VARS[v]: env[v] for v in SCALEOUT_VARS if v in env and parse_scaleout(v, env[v])}
    ar = env.get("CCL_ALLREDUCE", "topo")
    sync = flags["CCL_OP_SYNC"]
    return p.with_values(
        ccl_worker_count=int(raw),
        ccl_algorithms={v: env[v] for vs in ALGORITHM_VARS.values() for v in vs if v in env},
        allreduce_algorithm="topology" if ar == "topo" else "ring",
        ccl_scaleout=scaleout,
        ccl_transport=transport,  # type: ignore[arg-type]
        ccl_gpu_rdma=bool(flags["CCL_ATL_HMEM"]),
        host_blocking_collectives=p.collectives.host_blocking_collectives if sync is None else sync,
    )


def gpu_kernel_route(op: str, p: PlatformSpec) -> tuple[bool, str]:
    """(whether oneCCL runs its GPU (topo) path for `op`, why not): can_use_sycl_kernels' and
    ccl_can_use_topo_algo's worker-count check and the op's named algorithm."""
    if p.oneccl.ccl_worker_count != 1:
        return False, f"CCL_WORKER_COUNT={p.oneccl.ccl_worker_count}"
    if op == "all_reduce" and p.collectives.allreduce_algorithm != "topology":
        return False, f"CCL_ALLREDUCE={p.collectives.allreduce_algorithm}"
    for var in ALGORITHM_VARS.get(op, ()):
        if p.oneccl.ccl_algorithms.get(var, "topo") != "topo":
            return False, f"{var}={p.oneccl.ccl_algorithms[var]}"
    return True, ""


def _usable(algo: str, op: str, part: float, n: int, p: PlatformSpec) -> bool:
    """selector_allreduce.cpp / selector_reduce_scatter.cpp can_use, the rules a scale-out meets."""
    if algo == "direct" and p.oneccl.ccl_transport == "ofi":
        return False
    if algo == "rabenseifner" and part / ELEMENT_BYTES < 2 ** (n.bit_length() - 1):
        return False
    return algo in ("ring", "naive", "flat", "direct", "rabenseifner", "recursive_doubling", "double_tree")


def scaleout_choice(op: str, part: float, n: int, p: PlatformSpec) -> tuple[str, str]:
    """(the scale-out algorithm for `part` bytes over n nodes, why): CCL_<OP>_SCALEOUT's range that
    holds the size, else the scale-out table; unusable -> the fallback table."""
    spec = p.oneccl.ccl_scaleout.get(op)
    named = next((a for a, lo, hi in parse_scaleout(_var(op), spec) if lo <= part <= hi), None) if spec else None
    algo, why = (named, f"CCL_{_var(op)[4:]}") if named else (DEFAULT_SCALEOUT[op], "oneCCL's scale-out default")
    if _usable(algo, op, part, n, p):
        return algo, why
    rule = {"direct": "direct needs MPI transport", "rabenseifner": "rabenseifner: elements < pof2(ranks)"}.get(
        algo,
        f"{algo}: no scale-out form here (2d is refused in scale-out; nreduce, ring_rma, multi_bcast not modelled)",
    )
    if op == "all_reduce":
        fb = "recursive_doubling" if p.oneccl.ccl_transport == "ofi" and part <= ALLREDUCE_SHORT_MSG_SIZE else "ring"
    else:
        fb = "flat" if op == "all_gather" else "naive"
    return fb, f"{algo} refused ({rule}): fallback table"


def _var(op: str) -> str:
    return next(v for v, o in SCALEOUT_VARS.items() if o == op)


def _sycl_path(op: str, size: float, part: float, p: PlatformSpec) -> bool:
    if op == "all_gather" and p.oneccl.ccl_transport == "ofi":
        return False  # allgatherv_sycl.cpp: OFI falls back for the multi-node case
    return size <= SYCL_SCALEOUT_MAX.get(op, 0) and not p.oneccl.ccl_scaleout.get(op)


def oneccl_seconds(op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> tuple[float, str]:
    """(seconds of one call, the algorithm that runs, as a phrase for provenance)."""
    t = p.collectives.collective_overhead_us * 1e-6
    gpu, why = gpu_kernel_route(op, p)
    rpn = max(1, ranks // max(nodes, 1))
    if gpu and nodes > 1 and 1 < rpn < p.oneccl.ccl_topo_min_ppn:
        gpu, why = False, f"{rpn} ranks per node < {p.oneccl.ccl_topo_min_ppn}: topo refused"
    if gpu and nodes > 1 and op not in DEFAULT_SCALEOUT:
        gpu, why = False, f"topo refuses a multi-node {op} (selection.cpp ccl_can_use_topo_algo)"
    if not gpu or p.collectives.scaleout_algorithm == "ring":
        return t + host_ring_seconds(op, size, ranks, nodes, concurrent, p), f"oneccl host ring over {ranks} ({why})"
    if nodes == 1:
        return t + scale_up_seconds(op, size, ranks, p), f"oneccl topo scale-up over {ranks}"
    part, groups = size / rpn, rpn * concurrent
    algo, how = scaleout_choice(op, part, nodes, p)
    if _sycl_path(op, size, part, p) and part <= SYCL_DIRECT_MAX and p.oneccl.ccl_transport == "mpi":
        algo, how = "direct", "SYCL path, at or below its direct threshold"
    staged = size if p.oneccl.ccl_host_staging == "whole buffer" and op == "all_reduce" else part
    t += p.collectives.scaleout_overhead_us * 1e-6 + scale_up_seconds(op, size, rpn, p)
    t += staging_seconds(op, staged, groups, p) + scaleout_seconds(algo, op, part, nodes, groups, p)
    host = (
        "GPU RDMA"
        if p.oneccl.ccl_gpu_rdma
        else f"host-staged ({'whole buffer' if staged == size else 'scale-out part'})"
    )
    return t, f"oneccl topo: scale-up over {rpn}, {algo} scale-out over {nodes} nodes x {groups} groups, {host} ({how})"


def description(p: PlatformSpec) -> str:
    """Which oneCCL path prices each op on this platform, for provenance."""
    parts = []
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        gpu, why = gpu_kernel_route(op, p)
        algo = p.oneccl.ccl_scaleout.get(op) or DEFAULT_SCALEOUT[op]
        parts.append(f"{op} " + (f"topo + {algo} scale-out" if gpu else f"host flat ring ({why})"))
    return (
        f"oneCCL as the env routes it (estimate/comm_oneccl.py, oneCCL 2021.14 source): {'; '.join(parts)}; "
        f"{p.oneccl.ccl_transport}, {'GPU RDMA' if p.oneccl.ccl_gpu_rdma else 'host-staged scale-out'}, "
        f"{'blocking (CCL_OP_SYNC=1)' if p.collectives.host_blocking_collectives else 'non-blocking'} "
        f"(Xe Link {p.links.intra_bw_gbps:g} GB/s, scale-out {p.links.inter_latency_us:g} us per step, "
        f"{p.links.scaleout_rank_bw_gbps or p.links.nic_bw_gbps:g} GB/s per rank, NIC {p.links.nic_bw_gbps:g} GB/s x {p.links.nics_per_node})"
    )


MODEL_VARIABLES: dict[str, str] = {
    "CCL_WORKER_COUNT": "ccl_worker_count",
    "CCL_ALLREDUCE": "allreduce_algorithm",
    **{v: "ccl_algorithms" for vs in ALGORITHM_VARS.values() for v in vs},
    **{v: "ccl_scaleout" for v in SCALEOUT_VARS},
    "CCL_ATL_TRANSPORT": "ccl_transport",
    "CCL_ATL_HMEM": "ccl_gpu_rdma",
    "CCL_OP_SYNC": "host_blocking_collectives",
}
"""The variables with_ccl_env reads, and the PlatformSpec field each sets."""
PROFILE_VARIABLES = frozenset(v for v in MODEL_VARIABLES if v != "CCL_OP_SYNC")
"""The variables an env profile chooses (CCL_OP_SYNC is the platform's host_blocking_collectives,
not a profile choice)."""
NOTED_DEFAULTS = ("CCL_WORKER_COUNT", "CCL_ALLREDUCE")
"""The variables an env profile's note names when a profile leaves them unset (oneCCL's default)."""


def ccl_env_of(p: PlatformSpec) -> dict[str, str]:
    """The platform's own CCL fields (its profile, or a platform file's overrides) written as the
    variables with_ccl_env reads: the environment a plan priced."""
    scaleout_var = {op: var for var, op in reversed(SCALEOUT_VARS.items())}  # the first variable per op
    return {
        "CCL_WORKER_COUNT": str(p.oneccl.ccl_worker_count),
        "CCL_ALLREDUCE": "topo" if p.collectives.allreduce_algorithm == "topology" else "ring",
        "CCL_ATL_TRANSPORT": p.oneccl.ccl_transport,
        "CCL_ATL_HMEM": "1" if p.oneccl.ccl_gpu_rdma else "0",
        **dict(p.oneccl.ccl_algorithms),
        **{scaleout_var[op]: spec for op, spec in p.oneccl.ccl_scaleout.items()},
    }
