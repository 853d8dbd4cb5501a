"""Device memory beyond what the analytic model allocates: the caching allocator and the runtime.

estimate/memory.py predicts the bytes PyTorch's allocator hands out at each moment of the step
(`torch.*.max_memory_allocated`) plus the platform's framework reserve (runtime context, kernels,
collective buffers: memory outside PyTorch's allocator). An out-of-memory error happens against
what the allocator has *reserved* plus the request, but only once a failed cudaMalloc has made the
allocator free its whole free segments and retry (torch.cuda.memory_stats: num_alloc_retries,
"failed cudaMalloc calls that result in a cache flush and retry"). So two reserved figures:
unpressed (what `max_memory_reserved` shows when memory is plentiful: allocated + the whole cache)
and at the limit (allocated + what the flush cannot release). Feasibility is judged on reserved at
the limit + the runtime's share (`device_peak`, `max_micro_batch_reserved`). PRISM C6 shows both:
at batch 2, 13.6 GB allocated (a current figure) vs 34.5 reserved; at batch 4, dying, 59.4 vs
62.1: the flush had left 2.7 GiB.

How the caching allocator keeps more than it hands out (c10/cuda/CUDACachingAllocator.cpp; the
PyTorch docs, "CUDA semantics: memory management"; Note [Expandable Segments] in the .cpp; the constants below):
a request is rounded to 512 bytes; requests up to 1 MiB share 2 MiB small-pool segments, 1-10 MiB
ones 20 MiB segments, larger ones get a segment of their own size rounded to 2 MiB. A cached free
block serves a smaller request by splitting (a large-pool remainder over 1 MiB stays a free block
of the same segment); free blocks coalesce only within their segment, and pools are per stream.
Rounding alone is small (under 2 MiB per large segment, 512 bytes per block: some hundreds of
segments for a 7B step, well under 1 GiB), so it sits inside the fitted terms, not a term of its own.
Two regimes follow, one term each, and the part held at the limit (three parameters; fitted in
benchmarks/allocator_fit.py, which also reports leave-one-out and what the records cannot decide):

- fixed shapes (every step makes the same requests: torchtitan packs to a fixed length): within a
  step, freed tensors (the loss buffers, a recomputed block under checkpointing, FSDP's gathered
  units and unsharded grads, each block's temporaries) are re-served to requests of other sizes
  by splitting, and the remainders stay cached. Term: `allocator_cache_factor` x the moment's
  transient bytes (activations and buffers: what comes and goes within a step; it holds the
  recomputed block under checkpointing and the gathered units under FSDP). CUDA 0.30, fitted on
  torchtitan PR #165 TT-18 / TT-20 (their active counter isolates the allocator from the
  allocated model's error).
- varying shapes (PRISM pads each batch to its longest sample, so each step's activations and loss
  buffers have new sizes): a request larger than every cached block gets a new segment while the
  old, smaller segments stay cached, partly filled, "leaving unusable free slices of memory at
  the end of these segments ... this pattern might repeat 50+ times" (Note [Expandable Segments]).
  The slivers sit in segments that hold live blocks, so the flush a failed cudaMalloc triggers
  (memory_stats num_alloc_retries: "result in a cache flush and retry") cannot release them.
  Term: `allocator_varying_factor` x the moment's per-sample activations (the part whose size
  follows the batch's length; gathered units and states do not). Fitted on PRISM C6 (Aurora);
  the length spread of PRISM's data is not recorded, so the factor is PRISM's distribution's and
  a narrower spread (tighter bucketing) would leave fewer slivers: not modelled.
- at the limit: the fixed-shape remainders are taken as released by the flush (whole free
  segments; llm-foundry MF-06 / MF-13 ran where their unpressed reserved figure would exceed the
  device), the slivers are not: `allocator_pinned_factor` x per-sample activations, fitted on C6-b4.
- expandable_segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the cuda-nccl env
  profile): instead of one segment per allocation, "one segment (per stream) that grows as
  necessary" (the same Note), so the varying-shape term is taken as 0 (named assumption: no record
  measures a varying-length run with it). The fixed-shape term is kept: expandable segments only
  merge free ranges, which leaves the within-step split remainders as they were (checked on the
  held-out TT-01, run with it: torchtitan run_llama_train.sh sets it since a5e57e4, 2024-10-22).

device-only: XPU (Aurora) runs c10/xpu/XPUCachingAllocator.cpp, a port of the CUDA allocator with
the same block and segment constants and per-stream pools, and the same flush on a failed
allocation (its malloc: `alloc_block(params) || (release_cached_blocks() && alloc_block(params))`,
with no partial release first, which CUDA's release_available_cached_blocks tries; both end with
every whole free segment freed, so "at the limit" is the same); the fixed-shape term is CUDA's (not
measured on XPU: C6 is the only XPU record with both counters and it varies shapes) and
expandable segments are not modelled there (XPU's ExpandableSegment came in pytorch PR #166299,
2025-10, after PRISM's torch 2.8; PRISM's profile unsets TORCH_XPU_ALLOC_CONF).
"""

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
    return platform.expandable_segments


def varying_factor(platform: PlatformSpec, training: TrainingSpec | None) -> float:
    """The varying-shape term's factor for this run: 0 with fixed shapes or expandable segments."""
    varies = training is not None and training.varying_lengths
    return platform.allocator_varying_factor if varies and not expandable(platform, training) else 0.0


def cache_bytes(
    transient: float, per_sample_activations: float, platform: PlatformSpec, training: TrainingSpec | None
) -> float:
    """What the caching allocator holds beyond allocated at a moment when nothing presses it
    (what max_memory_reserved reports; module docstring)."""
    return platform.allocator_cache_factor * transient + varying_factor(platform, training) * per_sample_activations


def pinned_bytes(per_sample_activations: float, platform: PlatformSpec, training: TrainingSpec | None) -> float:
    """The part of the cache a failed cudaMalloc's flush cannot release: the slivers of varying shapes
    (in segments that hold live blocks). The fixed-shape remainders are taken as released (whole
    free segments: the loss buffers and recomputed blocks freed before the next request)."""
    varies = varying_factor(platform, training) > 0
    return platform.allocator_pinned_factor * per_sample_activations if varies else 0.0


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
