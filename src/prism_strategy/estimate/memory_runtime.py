"""Device memory beyond what the analytic model allocates: the caching allocator and the runtime.

estimate/memory.py predicts the bytes PyTorch's allocator hands out at the step's peak
(`torch.*.max_memory_allocated`) plus the platform's framework reserve (runtime context, kernels,
oneCCL buffers: memory outside PyTorch's allocator). What a run reports as its peak is often
the allocator's *reserved* figure (`max_memory_reserved`): the caching allocator keeps freed
blocks, and when batch shapes vary (PRISM pads each batch to its longest sample, so every step's
activations and loss buffers have a new size) the cache holds blocks of many sizes beside the
live ones. PRISM C6 (OLMo-7B, Aurora): 13.6 GB allocated vs 34.5 GB reserved.

Term (one constant per platform, fitted in bench/fit_terms.py to records that report reserved
memory): reserved = allocated + allocator_cache_factor x (the peak's transient bytes:
activations and buffers, the part of the peak that comes and goes within a step).
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
