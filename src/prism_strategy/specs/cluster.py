"""Where the job runs: a platform (one node type, from data/platforms/*.toml) and a layout
(how many nodes, ranks per node)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.measured import MeasuredCurve

GiB = 1024**3
NCCL_SCALES = ("base_latency", "intra_latency", "net_latency", "intra_bw", "inter_bw")
"""The factors PlatformSpec.nccl_scale may hold."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeTerms:
    """How the achievable fraction varies with the work (estimate/compute_shape.py): a matmul's
    fraction rises with its smallest dimension, attention has its own, and the non-matmul kernels
    of eager PyTorch are bound by memory bandwidth. Fitted per GPU (benchmarks/cuda_fit.py)."""

    gemm_half_dim: float = 128.0
    """A matmul whose smallest dimension (tokens per micro-batch, in or out width) is this reaches
    half of `achievable_fraction`: fraction x d / (d + gemm_half_dim)."""
    attention_ratio: float = 1.0
    """Flash attention's sustained fraction of peak, relative to a large matmul's."""
    elementwise_bytes: float = 0.0
    """Bytes each non-matmul kernel moves per token, in units of hidden x compute-dtype bytes
    (read + write); its time is bytes / hbm_bw_gbps. 0 = not modelled."""
    fitted_on: str = ""
    """The measurement set the terms were fitted to (data/measurements/NAME.toml), or empty."""

    def __post_init__(self) -> None:
        for f in ("gemm_half_dim", "attention_ratio", "elementwise_bytes"):
            if getattr(self, f) < 0 or (f == "attention_ratio" and self.attention_ratio == 0):
                raise SpecError(f"compute_terms.{f} must be > 0 (elementwise_bytes >= 0), got {getattr(self, f)}")


@dataclass(frozen=True, kw_only=True, slots=True)
class PlatformSpec:
    """One node type. Every number has an entry in `sources` saying where it came from."""

    name: str
    description: str = ""
    device: Literal["xpu", "cuda", "cpu"]
    backend: Literal["xccl", "nccl", "gloo"]
    launcher: Literal["pbs", "slurm", "torchrun"] = "torchrun"
    env_profile: str = ""
    devices_per_node: int
    memory_gib: float
    """Memory per device."""
    usable_fraction: float = 0.95
    """Part of memory_gib the allocator can hand out."""
    framework_reserve_gib: float = 1.0
    """Runtime context, collective-library buffers, kernels: taken before the model."""
    peak_tflops_bf16: float
    peak_tflops_fp32: float
    achievable_fraction: float = 0.5
    """Sustained fraction of peak in a training step's matmuls (with `compute_terms`: in a large
    matmul; smaller ones and attention are scaled from it)."""
    compute_terms: ComputeTerms | None = None
    """Shape-dependent achievable fraction ([compute_terms] in the platform file); None = one
    fraction for every FLOP."""
    fit_platform: str = ""
    """The fitted platform whose leave-one-out errors set this one's prediction ranges (data/fits);
    empty = its own name. Another name means another GPU than the fit's (the range widens)."""
    kernel_launch_us: float = 5.0
    intra_bw_gbps: float
    """Per-rank bandwidth inside a node for topology-aware collectives, one way (GB/s)."""
    intra_ring_bw_gbps: float
    """Slowest hop of a flat ring over the node's ranks, one way (GB/s)."""
    hbm_bw_gbps: float
    """Device memory bandwidth (GB/s): bounds the optimizer step and buffer copies."""
    allreduce_algorithm: Literal["ring", "topology"] = "topology"
    scaleout_algorithm: Literal["ring", "hierarchical"] = "hierarchical"
    """How a collective spanning nodes runs: one flat ring, or intra-node then inter-node phases."""
    ccl_worker_count: int = 1
    """oneCCL progress workers per rank (CCL_WORKER_COUNT of the env profile): any count but 1 makes
    oneCCL refuse its GPU kernels for every collective (estimate/comm_oneccl.py gpu_kernel_route)."""
    ccl_algorithms: dict[str, str] = field(default_factory=dict)
    """oneCCL algorithms the env profile names, by variable (CCL_ALLGATHER, CCL_ALLGATHERV,
    CCL_REDUCE_SCATTER): any but `topo` routes that collective to the host-staged path."""
    ccl_scaleout: dict[str, str] = field(default_factory=dict)
    """oneCCL's scale-out algorithm per op as CCL_<OP>_SCALEOUT names it (keys all_reduce,
    all_gather, reduce_scatter; values as oneCCL reads them: "rabenseifner" or size-ranged
    "direct:0-1048576;rabenseifner:1048577-max"); absent = oneCCL's default scale-out table
    (estimate/comm_oneccl.py scaleout_choice)."""
    ccl_transport: Literal["ofi", "mpi"] = "ofi"
    """CCL_ATL_TRANSPORT: `direct` scale-out needs MPI (selector_allreduce.cpp can_use)."""
    ccl_gpu_rdma: bool = False
    """CCL_ATL_HMEM=1 (and a transport that takes GPU memory): the scale-out runs on device buffers,
    no host staging (coll_util.cpp add_scaleout); oneCCL's default is 0 (env.cpp)."""
    ccl_topo_min_ppn: int = 1
    """Ranks per node below which a multi-node collective does not take oneCCL's topo path but the
    flat host ring (platform [sources] says why)."""
    ccl_host_staging: Literal["scale-out part", "whole buffer"] = "scale-out part"
    """Bytes a multi-node topo collective stages through the host: the scale-out part (1/ranks per
    node, as add_scaleout in oneCCL 2021.14) or, for all-reduce, the whole buffer (a reading of
    measured rows)."""
    mdfi_bw_gbps: float = 0.0
    """Tile-to-tile bandwidth inside one GPU card (MDFI), one way; 0 = one rank per card."""
    host_copy_gbps: float = 0.0
    """Device-to-host (and back) copy bandwidth of one rank (PCIe); 0 = staging not priced."""
    host_copy_node_gbps: float = 0.0
    """The node's total device-to-host copy bandwidth, shared by the ranks staging at once."""
    scaleout_rank_bw_gbps: float = 0.0
    """Host-buffer network bandwidth one rank reaches (MPI / OFI injection per rank); 0 = the NICs'."""
    host_ring_node_gbps: float = 0.0
    """What a node's ranks together move through a flat host ring (copies and CPU reduction on the
    node's host); each rank's share bounds it beside intra_ring_bw_gbps; 0 = no node limit."""
    """Host-buffer network bandwidth one rank reaches (MPI / OFI injection per rank); 0 = the NICs'."""
    scaleout_overhead_us: float = 0.0
    """Extra fixed cost of each collective that crosses nodes (proxy / progress threads)."""
    intra_latency_us: float
    nic_bw_gbps: float
    nics_per_node: int = 1
    inter_latency_us: float
    ring_channels: int = 1
    """Rings a collective stripes over: how many NICs one node boundary crossing can use."""
    bw_efficiency: float = 0.8
    collective_overhead_us: float = 20.0
    per_tensor_overhead_us: float = 5.0
    comm_overlap: float = 0.8
    """Fraction of communication a backward pass can hide behind compute (0 when collectives block).
    Not read on NCCL platforms: there the engine's schedule sets it (estimate/overlap.py)."""
    sm_count: int = 0
    """Streaming multiprocessors per GPU: a collective's kernel holds one per NCCL channel while
    compute runs beside it (estimate/overlap.py); 0 = not modelled."""
    grad_path_us_per_tensor: dict[str, float] = field(default_factory=dict)
    """Host time per trainable tensor and micro-step of each engine's gradient path (AccumulateGrad
    + hook), keyed by engine name (ddp, fsdp2, deepspeed); estimate/host.py. An engine missing
    here falls back to per_tensor_overhead_us."""
    host_blocking_collectives: bool = False
    """Collectives hold the host until done (oneCCL CCL_OP_SYNC=1): no overlap with compute."""
    allocator_cache_factor: float = 0.0
    """Reserved beyond allocated at a moment, per byte of its activations and buffers, when every
    step has the same shapes (the caching allocator's split remainders); estimate/memory_runtime.py."""
    allocator_varying_factor: float = 0.0
    """Reserved beyond that, per byte of per-sample activations, when batch shapes vary from step to
    step (slivers left at the end of segments sized for other shapes); estimate/memory_runtime.py."""
    allocator_pinned_factor: float = 0.0
    """Of that, per byte of per-sample activations, what the allocator's flush and retry on a failed
    cudaMalloc cannot release (slivers in segments that hold live blocks): counts against the device."""
    expandable_segments: bool = False
    """The platform's env profile sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (checked
    against data/env_profiles in tests/unit/test_memory_runtime.py)."""
    activation_factor: float = 1.0
    """Measured / predicted saved-activation bytes; 1.0 until `prism-strategy calibrate` fits it."""
    gpu_arch: Literal["", "volta", "ampere", "hopper", "blackwell"] = ""
    """GPU generation: picks NCCL's per-generation tuning constants (data/nccl_tuning.toml)."""
    nvlink_links: int = 0
    """NVLinks per GPU (0: GPUs talk over PCI): the bandwidth NCCL's channel search can use."""
    cpu_vendor: Literal["intel", "amd", "other"] = "intel"
    """Host CPU: NCCL's network overhead per step (1 us Intel, 2 us AMD)."""
    nccl_scale: dict[str, float] = field(default_factory=dict)
    """Measured / NCCL-modelled factors over data/nccl_tuning.toml's per-generation constants
    (estimate/comm_nccl.py): base_latency, intra_latency (NVLink/PCI hop), net_latency (network
    hop), intra_bw (one-node bus bandwidth), inter_bw (across nodes); 1.0 when absent. Only
    `prism-strategy calibrate` sets them, from measured collective curves (estimate/comm_fit.py)."""
    compile_multinode_ok: bool = True
    cpu_cores_per_node: int = 0
    rank_jitter: float | None = None
    """Measured per-rank spread of the work between synchronisations (std / mean, e.g. 0.02),
    from this cluster's StepMonitor logs or `plan --rank-jitter`: prices the late-rank term into
    the step (estimate/scale_loss.py). None = unmeasured: only the range's slow side takes it."""
    sources: dict[str, str] = field(default_factory=dict)
    base: str = ""
    """The preset this platform file inherits from (`base = "dgx-a100-40"`); empty = none."""
    defaulted: tuple[str, ...] = ()
    """Fields the platform file (and its base) left to these defaults: said aloud in provenance."""
    measured_collectives: tuple[MeasuredCurve, ...] = ()
    """Collective curves measured on this platform (commbench, nccl-tests, oneCCL benchmark),
    attached from the results store by `plan --db`; estimate/comm_measured.py prices with them."""

    def __post_init__(self) -> None:
        for f in (
            "devices_per_node",
            "memory_gib",
            "peak_tflops_bf16",
            "peak_tflops_fp32",
            "intra_bw_gbps",
            "intra_ring_bw_gbps",
            "hbm_bw_gbps",
            "nic_bw_gbps",
            "nics_per_node",
            "ring_channels",
        ):
            if getattr(self, f) <= 0:
                raise SpecError(f"platform {self.name!r}: {f} must be > 0, got {getattr(self, f)}")
        for f in ("usable_fraction", "achievable_fraction", "bw_efficiency"):
            if not 0 < getattr(self, f) <= 1:
                raise SpecError(f"platform {self.name!r}: {f} must be in (0, 1], got {getattr(self, f)}")
        if self.activation_factor <= 0:
            raise SpecError(f"platform {self.name!r}: activation_factor must be > 0, got {self.activation_factor}")
        for f in ("allocator_cache_factor", "allocator_varying_factor", "allocator_pinned_factor"):
            if getattr(self, f) < 0:
                raise SpecError(f"platform {self.name!r}: {f} must be >= 0, got {getattr(self, f)}")
        if self.rank_jitter is not None and not 0 <= self.rank_jitter < 1:
            raise SpecError(
                f"platform {self.name!r}: rank_jitter must be in [0, 1) (std / mean of one rank's work "
                f"between synchronisations, e.g. 0.02), got {self.rank_jitter}"
            )
        for f in (
            "mdfi_bw_gbps",
            "host_copy_gbps",
            "host_copy_node_gbps",
            "scaleout_rank_bw_gbps",
            "host_ring_node_gbps",
        ):
            if getattr(self, f) < 0:
                raise SpecError(f"platform {self.name!r}: {f} must be >= 0 (0 = not modelled), got {getattr(self, f)}")
        if self.ccl_topo_min_ppn < 1:
            raise SpecError(f"platform {self.name!r}: ccl_topo_min_ppn must be >= 1, got {self.ccl_topo_min_ppn}")
        if self.ccl_worker_count < 1:
            raise SpecError(f"platform {self.name!r}: ccl_worker_count must be >= 1, got {self.ccl_worker_count}")
        if self.sm_count < 0:
            raise SpecError(f"platform {self.name!r}: sm_count must be >= 0, got {self.sm_count}")
        if self.nvlink_links < 0:
            raise SpecError(f"platform {self.name!r}: nvlink_links must be >= 0, got {self.nvlink_links}")
        if any(v <= 0 for v in self.nccl_scale.values()) or set(self.nccl_scale) - set(NCCL_SCALES):
            raise SpecError(f"platform {self.name!r}: nccl_scale takes {', '.join(NCCL_SCALES)}, each > 0")
        if any(v < 0 for v in self.grad_path_us_per_tensor.values()):
            raise SpecError(f"platform {self.name!r}: grad_path_us_per_tensor values must be >= 0")
        if not 0 <= self.comm_overlap <= 1:
            raise SpecError(f"platform {self.name!r}: comm_overlap must be in [0, 1], got {self.comm_overlap}")

    @property
    def usable_bytes(self) -> float:
        return self.memory_gib * self.usable_fraction * GiB

    def source(self, key: str) -> str:
        return self.sources.get(key, f"platform file {self.name}")


MAX_RANKS = 262_144
"""The largest job a plan is made for (2^18 ranks): above every data-parallel job reported so far
(Aurora's 10,624 nodes x 12 tiles = 127,488; 100,000-200,000 GPU clusters); beyond it the ring and
tree models have never been checked, and a typo (--nodes 1000000) is caught."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """Nodes x ranks per node; -1 ranks_per_node means "all devices of the platform"."""

    nodes: int
    ranks_per_node: int

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise SpecError(f"--nodes must be >= 1, got {self.nodes}")
        if self.ranks_per_node < 1:
            raise SpecError(f"ranks per node must be >= 1, got {self.ranks_per_node}")
        if self.nodes * self.ranks_per_node > MAX_RANKS:
            raise SpecError(
                f"--nodes {self.nodes} x {self.ranks_per_node} ranks per node = {self.nodes * self.ranks_per_node:,} "
                f"ranks, above the {MAX_RANKS:,} a plan is made for (larger than any reported job); give at most "
                f"{MAX_RANKS // self.ranks_per_node} nodes"
            )

    @classmethod
    def for_platform(cls, platform: PlatformSpec, nodes: int) -> "Layout":
        return cls(nodes=nodes, ranks_per_node=platform.devices_per_node)

    @property
    def world(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def __str__(self) -> str:
        return f"NODES({self.nodes})-RPN({self.ranks_per_node})"
