"""Device memory beyond what the analytic model allocates: the caching allocator and the runtime.

estimate/memory.py predicts the bytes PyTorch's allocator hands out at the step's peak
(`torch.*.max_memory_allocated`) plus the platform's framework reserve (runtime context, kernels,
oneCCL buffers: memory outside PyTorch's allocator). What a run reports as its peak is often
the allocator's *reserved* figure (`max_memory_reserved`): the caching allocator keeps freed
blocks, and when batch shapes vary (PRISM pads each batch to its longest sample, so every step's
activations and loss buffers have a new size) the cache holds blocks of many sizes beside the
live ones. PRISM C6 (OLMo-7B, Aurora): 13.6 GB allocated vs 34.5 GB reserved.

Term (one constant per platform, fitted in bench/fit/fit_terms.py to records that report reserved
memory): reserved = allocated + allocator_cache_factor x (the peak's transient bytes:
activations and buffers, the part of the peak that comes and goes within a step).
Fitted: Aurora 0.99 (PRISM A4, B1, C6: batches padded to varying lengths, see aurora.toml);
CUDA 0.30 (torchtitan PR #165 TT-18/TT-20, fixed-length batches: (reserved - active) / predicted
transient 0.350 FSDP1, 0.255 FSDP2; leave-one-out reserved -5.8% / +6.2%). The two regimes differ by
whether shapes vary; what the rows cannot decide: FSDP1 vs FSDP2, checkpointing, sequence length.

The allocator's block and segment rules (c10/cuda/CUDACachingAllocator.cpp; the XPU allocator
uses the same constants) are below: `block_bytes` and `segment_bytes`. With
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuda-nccl env profile) a stream's segment grows
in place, so the varying-shape part of the cache shrinks; no record measures it, so the fitted
factor (measured without it) is kept as an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.memory import MemoryEstimate
from prism_strategy.specs.cluster import PlatformSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeMemory:
    allocated: float
    """PyTorch's allocator at the peak (max_memory_allocated)."""
    cache: float
    """Freed blocks the caching allocator still holds at the peak."""
    runtime: float
    """Outside PyTorch's allocator: runtime context, kernels, collective-library buffers."""

    @property
    def reserved(self) -> float:
        """max_memory_reserved."""
        return self.allocated + self.cache

    @property
    def device(self) -> float:
        """What the device's own counters show: reserved plus the runtime's memory."""
        return self.reserved + self.runtime


MIN_BLOCK = 512
"""kMinBlockSize: every request is rounded up to a multiple of 512 bytes."""
SMALL_SIZE = 1 << 20
"""kSmallSize: requests up to 1 MiB come from the small pool."""
SMALL_BUFFER = 2 << 20
"""kSmallBuffer: the small pool's segments are 2 MiB."""
MIN_LARGE_ALLOC = 10 << 20
"""kMinLargeAlloc: requests between 1 and 10 MiB get a kLargeBuffer segment."""
LARGE_BUFFER = 20 << 20
"""kLargeBuffer: 20 MiB segments for those mid-sized requests."""
ROUND_LARGE = 2 << 20
"""kRoundLarge: larger requests get a segment rounded up to 2 MiB."""


def block_bytes(request: int) -> int:
    """round_size(): the block a request occupies (multiple of kMinBlockSize)."""
    return max(MIN_BLOCK, -(-request // MIN_BLOCK) * MIN_BLOCK)


def segment_bytes(request: int) -> int:
    """get_allocation_size(): what cudaMalloc is asked for when no cached block fits."""
    size = block_bytes(request)
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def transient_bytes(mem: MemoryEstimate) -> float:
    return mem.activations + mem.buffers


def runtime_memory(mem: MemoryEstimate, platform: PlatformSpec) -> RuntimeMemory:
    return RuntimeMemory(allocated=mem.total - mem.reserve, cache=platform.allocator_cache_factor * transient_bytes(mem),
                         runtime=mem.reserve)


def memory_fields(mem: MemoryEstimate, platform: PlatformSpec) -> dict[str, object]:
    """Plan JSON: which figure `memory_gib.total` is, and the allocator's reserved figure beside it."""
    from prism_strategy.specs.cluster import GiB

    rt = runtime_memory(mem, platform)
    return {"memory_figure": "allocated + runtime reserve (max_memory_allocated + framework_reserve_gib)",
            "memory_allocated_gib": round(rt.allocated / GiB, 3), "memory_reserved_gib": round(rt.reserved / GiB, 3),
            "memory_device_gib": round(rt.device / GiB, 3)}
