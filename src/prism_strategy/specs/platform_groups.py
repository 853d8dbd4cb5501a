"""The groups of a platform's values (PlatformSpec.hardware, .links, ...): small frozen pydantic
dataclasses whose constraints are declared on the fields (annotated_types) and checked whenever one
is built, from a file or by PlatformSpec.with_values. A field keeps its flat name inside its group
(`platform.links.intra_bw_gbps`), so a flat platform file, a grouped one and `sources` all name it
the same way. The table field -> group -> meaning -> constraint is docs/platform_files.md."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from annotated_types import Ge, Gt, Le, Lt
from pydantic import ConfigDict, Strict, StrictBool
from pydantic.dataclasses import dataclass

GROUP_CONFIG = ConfigDict(use_attribute_docstrings=True, extra="forbid", allow_inf_nan=False)
"""Field docstrings become the fields' descriptions; an unknown field is an error, never dropped;
NaN and infinities are refused (a TOML `inf` is a float)."""

MAX_QUANTITY = 1e9
"""Upper bound of every platform number: none is near a billion in its unit (GB/s, us, TFLOP/s,
GiB, counts; the largest a preset holds is 4,800 GB/s), while a typo such as 1e308 overflows the
models' arithmetic to inf and 0 (issue 38)."""

NCCL_SCALES = ("base_latency", "intra_latency", "net_latency", "intra_bw", "inter_bw")
"""The factors NcclSpec.nccl_scale may hold."""

Positive = Annotated[float, Strict(), Gt(0), Le(MAX_QUANTITY)]
NonNegative = Annotated[float, Strict(), Ge(0), Le(MAX_QUANTITY)]
Fraction = Annotated[float, Strict(), Gt(0), Le(1)]
Count = Annotated[int, Strict(), Gt(0), Le(MAX_QUANTITY)]
"""Strict: `devices_per_node = true` or `"8"` is refused, not read as 1 or 8 (docs/platform_files.md)."""
NonNegativeCount = Annotated[int, Strict(), Ge(0), Le(MAX_QUANTITY)]


def _group(cls: type) -> type:
    return dataclass(frozen=True, kw_only=True, slots=True, config=GROUP_CONFIG)(cls)


@_group
class ComputeTerms:
    """How the achievable fraction varies with the work (estimate/compute_shape.py): a matmul's
    fraction rises with its smallest dimension, attention has its own, and the non-matmul kernels
    of eager PyTorch are bound by memory bandwidth. Fitted per GPU (benchmarks/cuda_fit.py)."""

    gemm_half_dim: NonNegative = 128.0
    """A matmul whose smallest dimension (tokens per micro-batch, in or out width) is this reaches
    half of `achievable_fraction`: fraction x d / (d + gemm_half_dim)."""
    attention_ratio: Positive = 1.0
    """Flash attention's sustained fraction of peak, relative to a large matmul's."""
    elementwise_bytes: NonNegative = 0.0
    """Bytes each non-matmul kernel moves per token, in units of hidden x compute-dtype bytes
    (read + write); its time is bytes / hbm_bw_gbps. 0 = not modelled."""
    fitted_on: str = ""
    """The measurement set the terms were fitted to (data/measurements/NAME.toml), or empty."""


@_group
class HardwareSpec:
    """The node's devices and host: counts, memory, peaks, what NCCL's topology search reads."""

    devices_per_node: Count
    """Devices (ranks at one rank per device) in one node."""
    memory_gib: Positive
    """Memory per device (GiB)."""
    peak_tflops_bf16: Positive
    """Peak dense BF16 matmul throughput of one device (TFLOP/s)."""
    peak_tflops_fp32: Positive
    """Peak FP32 throughput of one device (TFLOP/s)."""
    hbm_bw_gbps: Positive
    """Device memory bandwidth (GB/s): bounds the optimizer step and buffer copies."""
    gpu_arch: Literal["", "volta", "ampere", "hopper", "blackwell"] = ""
    """GPU generation: picks NCCL's per-generation tuning constants (data/nccl_tuning.toml)."""
    nvlink_links: NonNegativeCount = 0
    """NVLinks per GPU (0: GPUs talk over PCI): the bandwidth NCCL's channel search can use."""
    sm_count: NonNegativeCount = 0
    """Streaming multiprocessors per GPU: a collective's kernel holds one per NCCL channel while
    compute runs beside it (estimate/overlap.py); 0 = not modelled."""
    cpu_vendor: Literal["intel", "amd", "other"] = "intel"
    """Host CPU: NCCL's network overhead per step (1 us Intel, 2 us AMD)."""
    cpu_cores_per_node: NonNegativeCount = 0
    """Host CPU cores of one node (0 = not given): split among its ranks for CPU binding (emit/launch.py)."""


@_group
class ComputeSpec:
    """How fast the device runs a step's kernels."""

    achievable_fraction: Fraction = 0.5
    """Sustained fraction of peak in a training step's matmuls (with `compute_terms`: in a large
    matmul; smaller ones and attention are scaled from it)."""
    compute_terms: ComputeTerms | None = None
    """Shape-dependent achievable fraction ([compute_terms] in the platform file); None = one
    fraction for every FLOP."""
    kernel_launch_us: NonNegative = 5.0
    """Host time to launch one eager kernel (us)."""
    host_op_us: NonNegative | None = None
    """Host time of one eager aten op, launch included (Python, dispatcher, autograd, launch; us):
    a phase's host time is then its host ops x this (estimate/compute.py step_host_ops); None:
    its kernels x kernel_launch_us (the Aurora fit's form)."""
    host_op_us_low: NonNegative | None = None
    """The least per-op host time its source allows (us): a host-bound step's range widens to it."""
    host_op_us_high: NonNegative | None = None
    """The most per-op host time its source allows (us): a host-bound step's range widens to it."""
    compile_multinode_ok: StrictBool = True
    """torch.compile works across nodes with this collective library (false where it deadlocked)."""


@_group
class LinkSpec:
    """The wires: inside a node (scale-up, MDFI, host copies) and between nodes (NICs)."""

    intra_bw_gbps: Positive
    """Per-rank bandwidth inside a node for topology-aware collectives, one way (GB/s)."""
    intra_ring_bw_gbps: Positive
    """Slowest hop of a flat ring over the node's ranks, one way (GB/s)."""
    intra_latency_us: NonNegative
    """One dependent step of a collective inside a node (us)."""
    nic_bw_gbps: Positive
    """Bandwidth of one network interface, one way (GB/s)."""
    nics_per_node: Count = 1
    """Network interfaces of one node."""
    inter_latency_us: NonNegative
    """One dependent step of a collective across nodes (us)."""
    ring_channels: Count = 1
    """Rings a collective stripes over: how many NICs one node boundary crossing can use."""
    mdfi_bw_gbps: NonNegative = 0.0
    """Tile-to-tile bandwidth inside one GPU card (MDFI), one way; 0 = one rank per card."""
    host_copy_gbps: NonNegative = 0.0
    """Device-to-host (and back) copy bandwidth of one rank (PCIe); 0 = staging not priced."""
    host_copy_node_gbps: NonNegative = 0.0
    """The node's total device-to-host copy bandwidth, shared by the ranks staging at once."""
    scaleout_rank_bw_gbps: NonNegative = 0.0
    """Host-buffer network bandwidth one rank reaches (MPI / OFI injection per rank); 0 = the NICs'."""
    host_ring_node_gbps: NonNegative = 0.0
    """What a node's ranks together move through a flat host ring (copies and CPU reduction on the
    node's host); each rank's share bounds it beside intra_ring_bw_gbps; 0 = no node limit."""


@_group
class CollectiveSpec:
    """What every collective backend's model reads: algorithms, efficiencies, fixed costs, overlap."""

    allreduce_algorithm: Literal["ring", "topology"] = "topology"
    """Inside a node: one flat ring over the ranks, or the topology-aware algorithm."""
    scaleout_algorithm: Literal["ring", "hierarchical"] = "hierarchical"
    """How a collective spanning nodes runs: one flat ring, or intra-node then inter-node phases."""
    bw_efficiency: Fraction = 0.8
    """Achievable fraction of link bandwidth for large messages."""
    collective_overhead_us: NonNegative = 20.0
    """Fixed host cost of every collective call (us)."""
    per_tensor_overhead_us: NonNegative = 5.0
    """Host cost per gradient tensor of an engine without its own grad_path_us_per_tensor (us)."""
    scaleout_overhead_us: NonNegative = 0.0
    """Extra fixed cost of each collective that crosses nodes (proxy / progress threads)."""
    comm_overlap: Annotated[float, Strict(), Ge(0), Le(1)] = 0.8
    """Fraction of communication a backward pass can hide behind compute (0 when collectives block).
    Not read on NCCL platforms: there the engine's schedule sets it (estimate/overlap.py)."""
    host_blocking_collectives: StrictBool = False
    """Collectives hold the host until done (oneCCL CCL_OP_SYNC=1): no overlap with compute."""


@_group
class NcclSpec:
    """NCCL's model (estimate/comm_nccl.py) beyond the hardware facts it reads."""

    nccl_scale: dict[Literal[NCCL_SCALES], Positive] = dataclasses.field(default_factory=dict)
    """Measured / NCCL-modelled factors over data/nccl_tuning.toml's per-generation constants
    (estimate/comm_nccl.py): base_latency, intra_latency (NVLink/PCI hop), net_latency (network
    hop), intra_bw (one-node bus bandwidth), inter_bw (across nodes); 1.0 when absent. Only
    `prism-strategy calibrate` sets them, from measured collective curves (bench/fit/comm_fit.py)."""


@_group
class OnecclSpec:
    """oneCCL's settings as the env profile gives them (estimate/comm_oneccl.py)."""

    ccl_worker_count: Annotated[int, Strict(), Ge(1), Le(MAX_QUANTITY)] = 1
    """oneCCL progress workers per rank (CCL_WORKER_COUNT of the env profile): any count but 1 makes
    oneCCL refuse its GPU kernels for every collective (estimate/comm_oneccl.py gpu_kernel_route)."""
    ccl_algorithms: dict[str, str] = dataclasses.field(default_factory=dict)
    """oneCCL algorithms the env profile names, by variable (CCL_ALLGATHER, CCL_ALLGATHERV,
    CCL_REDUCE_SCATTER): any but `topo` routes that collective to the host-staged path."""
    ccl_scaleout: dict[str, str] = dataclasses.field(default_factory=dict)
    """oneCCL's scale-out algorithm per op as CCL_<OP>_SCALEOUT names it (keys all_reduce,
    all_gather, reduce_scatter; values as oneCCL reads them: "rabenseifner" or size-ranged
    "direct:0-1048576;rabenseifner:1048577-max"); absent = oneCCL's default scale-out table
    (estimate/comm_oneccl.py scaleout_choice)."""
    ccl_transport: Literal["ofi", "mpi"] = "ofi"
    """CCL_ATL_TRANSPORT: `direct` scale-out needs MPI (selector_allreduce.cpp can_use)."""
    ccl_gpu_rdma: StrictBool = False
    """CCL_ATL_HMEM=1 (and a transport that takes GPU memory): the scale-out runs on device buffers,
    no host staging (coll_util.cpp add_scaleout); oneCCL's default is 0 (env.cpp)."""
    ccl_topo_min_ppn: Annotated[int, Strict(), Ge(1), Le(MAX_QUANTITY)] = 1
    """Ranks per node below which a multi-node collective does not take oneCCL's topo path but the
    flat host ring (platform [sources] says why)."""
    ccl_host_staging: Literal["scale-out part", "whole buffer"] = "scale-out part"
    """Bytes a multi-node topo collective stages through the host: the scale-out part (1/ranks per
    node, as add_scaleout in oneCCL 2021.14) or, for all-reduce, the whole buffer (a reading of
    measured rows)."""


@_group
class AllocatorSpec:
    """What of a device's memory the caching allocator hands out and what it keeps beyond it."""

    usable_fraction: Fraction = 0.95
    """Part of memory_gib the allocator can hand out."""
    framework_reserve_gib: NonNegative = 1.0
    """Runtime context, collective-library buffers, kernels: taken before the model."""
    allocator_cache_factor: NonNegative = 0.0
    """Reserved beyond allocated at a moment, per byte of its activations and buffers, when every
    step has the same shapes (the caching allocator's split remainders); estimate/memory_runtime.py."""
    allocator_varying_factor: NonNegative = 0.0
    """Reserved beyond that, per byte of per-sample activations, when batch shapes vary from step to
    step (slivers left at the end of segments sized for other shapes); estimate/memory_runtime.py."""
    allocator_pinned_factor: NonNegative = 0.0
    """Of that, per byte of per-sample activations, what the allocator's flush and retry on a failed
    cudaMalloc cannot release (slivers in segments that hold live blocks): counts against the device."""
    expandable_segments: StrictBool = False
    """The platform's env profile sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (checked
    against data/env_profiles in tests/unit/estimate/test_memory_runtime.py)."""


@_group
class CalibrationSpec:
    """Values measured on this cluster that scale the model's terms."""

    activation_factor: Positive = 1.0
    """Measured / predicted saved-activation bytes; 1.0 until `prism-strategy calibrate` fits it."""
    rank_jitter: Annotated[float, Strict(), Ge(0), Lt(1)] | None = None
    """Measured per-rank spread of the work between synchronisations (std / mean, e.g. 0.02),
    from this cluster's StepMonitor logs or `plan --rank-jitter`: prices the late-rank term into
    the step (estimate/scale_loss.py late_ranks). None = unmeasured: the point takes the published
    average spread (data/scale_loss.toml [rank_jitter]: Sinha et al. SC22, 8% variation across a
    cluster's GPUs, cv ~1.0%) and the range's slow side the rest of the way to the worst cluster's
    22% (cv ~2.7%)."""
    sync_wait_us_per_node: NonNegative = 0.0
    """Per dependent cross-node step of a blocking collective and per node it spans, the expected
    wait for the last node (estimate/scale_loss.py sync_wait): rare per-node delays make the chance
    that one of them is late grow with the nodes. Fitted (benchmarks/aurora_fit.py); 0 = not
    modelled on this platform."""
    sync_wait_max_us: NonNegative = 0.0
    """D, the most one such step waits (the late node's delay): the wait saturates as q n nears 1;
    0 = no cap (linear in the nodes, the upper reading)."""
    fit_platform: str = ""
    """The fitted platform whose leave-one-out errors set this one's prediction ranges (data/fits);
    empty = its own name. Another name means another GPU than the fit's (the range widens)."""
    grad_path_us_per_tensor: dict[str, NonNegative] = dataclasses.field(default_factory=dict)
    """Host time per trainable tensor and micro-step of each engine's gradient path (AccumulateGrad
    + hook), keyed by engine name (ddp, fsdp2, deepspeed); estimate/host.py. An engine missing
    here falls back to per_tensor_overhead_us."""


GROUPS: dict[str, type] = {
    "hardware": HardwareSpec,
    "compute": ComputeSpec,
    "links": LinkSpec,
    "collectives": CollectiveSpec,
    "nccl": NcclSpec,
    "oneccl": OnecclSpec,
    "allocator": AllocatorSpec,
    "calibration": CalibrationSpec,
}
"""PlatformSpec's groups, by attribute name (also the table a grouped platform file writes)."""

FIELD_GROUP: dict[str, str] = {f.name: g for g, cls in GROUPS.items() for f in dataclasses.fields(cls)}
"""Each grouped field's flat name -> its group."""
