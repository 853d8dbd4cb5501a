"""Device memory beyond what the analytic model allocates: the caching allocator and the runtime.
Feasibility is judged on reserved at the limit + the runtime's share (device_peak,
max_micro_batch_reserved); the allocator's terms and their sources: docs/memory_runtime.md."""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.engines.base import Moment
from prism_strategy.estimate.memory import MemoryEstimate
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.training import TrainingSpec


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


def expandable(platform: PlatformSpec, training: TrainingSpec | None) -> bool:
    """The run's allocator config: the training's when given, else the platform's env profile's."""
    # device-only: on XPU the config is TORCH_XPU_ALLOC_CONF and ExpandableSegment exists only from
    # pytorch PR #166299 (2025-10); the aurora presets set expandable_segments = false (PRISM, torch 2.8).
    if training is not None and training.expandable_segments is not None:
        return training.expandable_segments
    return platform.allocator.expandable_segments


def varying_factor(platform: PlatformSpec, training: TrainingSpec | None) -> float:
    """The varying-shape term's factor for this run: 0 with fixed shapes or expandable segments."""
    varies = training is not None and training.varying_lengths
    return platform.allocator.allocator_varying_factor if varies and not expandable(platform, training) else 0.0


def cache_bytes(
    transient: float, per_sample_activations: float, platform: PlatformSpec, training: TrainingSpec | None
) -> float:
    """What the caching allocator holds beyond allocated at a moment when nothing presses it
    (what max_memory_reserved reports; module docstring)."""
    return (
        platform.allocator.allocator_cache_factor * transient
        + varying_factor(platform, training) * per_sample_activations
    )


def pinned_bytes(per_sample_activations: float, platform: PlatformSpec, training: TrainingSpec | None) -> float:
    """The part of the cache a failed cudaMalloc's flush cannot release: the slivers of varying shapes
    (in segments that hold live blocks). The fixed-shape remainders are taken as released (whole
    free segments: the loss buffers and recomputed blocks freed before the next request)."""
    varies = varying_factor(platform, training) > 0
    return platform.allocator.allocator_pinned_factor * per_sample_activations if varies else 0.0


def transient_bytes(mem: MemoryEstimate) -> float:
    return mem.activations + mem.buffers


def runtime_memory(mem: MemoryEstimate, platform: PlatformSpec, training: TrainingSpec | None = None) -> RuntimeMemory:
    """At the estimate's moment (the allocated peak). training None: fixed shapes."""
    cache = cache_bytes(transient_bytes(mem), mem.activations, platform, training)
    return RuntimeMemory(allocated=mem.total - mem.reserve, cache=cache, runtime=mem.reserve)


TRANSIENT_KEYS = ("activations", "buffers")


def _moment_device(
    m: Moment, micro_batch: int, platform: PlatformSpec, training: TrainingSpec | None, at_limit: bool = True
) -> float:
    """A moment's allocated + framework reserve + the allocator's share: the pinned part at the
    device's limit (at_limit), or the whole cache as an unpressed run reserves it."""
    rows = m.fixed + [(k, label, b * micro_batch) for k, label, b in m.per_sample]
    transient = sum(b for k, _, b in rows if k in TRANSIENT_KEYS)
    per_sample = micro_batch * sum(b for k, _, b in m.per_sample if k == "activations")
    extra = (
        pinned_bytes(per_sample, platform, training)
        if at_limit
        else cache_bytes(transient, per_sample, platform, training)
    )
    return m.total(micro_batch) + extra


def device_peak(
    ms: list[Moment], micro_batch: int, platform: PlatformSpec, training: TrainingSpec | None, at_limit: bool = True
) -> float:
    """Reserved + the runtime's share at the step's worst moment. at_limit: reserved as it stands when
    a request fails (after the allocator's flush and retry), what must fit the usable memory; else
    what an unpressed run's max_memory_reserved shows. Reserved never shrinks unpressed (no
    empty_cache), so the worst moment sets it."""
    return max(_moment_device(m, micro_batch, platform, training, at_limit) for m in ms)


def max_micro_batch_reserved(
    ms: list[Moment], platform: PlatformSpec, training: TrainingSpec | None, usable_bytes: float | None = None
) -> int:
    """Largest micro-batch whose every moment's reserved-at-the-limit + runtime fits (each is linear in it)."""
    usable = platform.usable_bytes if usable_bytes is None else usable_bytes
    best = 1 << 20
    for m in ms:
        base = _moment_device(m, 0, platform, training)
        room, slope = usable - base, _moment_device(m, 1, platform, training) - base
        if room < 0 or (room == 0 and slope > 0):
            return 0
        if slope > 0:
            best = min(best, int(room // slope))
    return best


def memory_fields(
    mem: MemoryEstimate,
    platform: PlatformSpec,
    training: TrainingSpec | None = None,
    ms: list[Moment] | None = None,
    micro_batch: int = 1,
    limit: float | None = None,
) -> dict[str, object]:
    """Plan JSON: which figure `memory_gib.total` is; the allocator's reserved figure unpressed
    (max_memory_reserved) and at the limit (after the flush and retry), each + the runtime at the
    worst moment; feasibility is judged on the latter. limit: device_peak(ms, ...) when the caller
    already has it."""
    from prism_strategy.specs.cluster import GiB

    rt = runtime_memory(mem, platform, training)
    unpressed = rt.device if ms is None else device_peak(ms, micro_batch, platform, training, at_limit=False)
    if limit is None:
        limit = rt.allocated + rt.runtime if ms is None else device_peak(ms, micro_batch, platform, training)
    return {
        "memory_figure": "allocated + runtime reserve (max_memory_allocated + framework_reserve_gib)",
        "memory_allocated_gib": round(rt.allocated / GiB, 3),
        "memory_reserved_gib": round(rt.reserved / GiB, 3),
        "memory_device_gib": round(unpressed / GiB, 3),
        "memory_at_limit_gib": round(limit / GiB, 3),
        "memory_judged_on": "memory_at_limit_gib: allocated + runtime + the cache a flush cannot release "
        "(estimate/memory_runtime.py)",
    }
