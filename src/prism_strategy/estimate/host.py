"""Host-side step-time terms the Aurora measurements show (PRISM A1/A2/A3, B1), each named:

- grad path: per trainable tensor and micro-step, the host time of the engine's gradient path
  (AccumulateGrad plus the engine's hook: DDP's bucket copy and bookkeeping, FSDP2's per-unit
  reduce-scatter preparation, DeepSpeed's IPG bucket copy), from the platform's
  `grad_path_us_per_tensor` table keyed by engine name. Separate from kernel launch: PRISM A1
  shows AccumulateGrad holding the host 1.49 s over ~525 tensors (~3 ms each), almost all of it
  the blocking all-reduce DDP's hook issues from inside it (xccl:all_reduce 1.46 s), so the
  per-tensor figure is fitted with the collectives modelled separately, not read off that
  profile. A platform without a figure for the engine keeps comm.py's per-tensor overhead.
- host-blocking collectives: with CCL_OP_SYNC=1 every collective returns only when done, so the
  host (and so the launch queue) waits for each: nothing overlaps compute.
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.estimate.comm import CommEstimate
from prism_strategy.estimate.overlap import exposed_collectives, schedules_overlap
from prism_strategy.specs.cluster import Layout, PlatformSpec
from prism_strategy.specs.parts import Part


@dataclass(frozen=True, kw_only=True, slots=True)
class HostTerms:
    grad_path_s: float
    """Host time of the engine's per-tensor gradient path per optimizer step."""
    grad_path_source: str
    collectives_s: float
    exposed_collectives_s: float
    """Collective time not hidden behind compute (all of it when collectives block the host)."""

    @property
    def exposed_s(self) -> float:
        return self.exposed_collectives_s + self.grad_path_s


def grad_path_s(
    parts: tuple[Part, ...], engine: str, layout: Layout, grad_accum: int, platform: PlatformSpec
) -> tuple[float, str] | None:
    """(seconds per step, source), or None when the platform has no figure for this engine."""
    us = platform.calibration.grad_path_us_per_tensor.get(engine)
    if us is None:
        return None
    if layout.world <= 1:  # no wrapper, no hook: AccumulateGrad's kernels are in the launch count
        return 0.0, "one rank: no engine hooks"
    tensors = sum(p.tensors for p in parts if p.trains)
    src = platform.sources.get(f"grad_path_us_per_tensor.{engine}", platform.source("grad_path_us_per_tensor"))
    return tensors * us * 1e-6 * grad_accum, f"{tensors} tensors x {us:g} us x {grad_accum} micro-steps ({src})"


def host_terms(
    parts: tuple[Part, ...],
    comm: CommEstimate,
    engine: str,
    layout: Layout,
    grad_accum: int,
    compute_s: float,
    platform: PlatformSpec,
    phases: tuple[float, float] | None = None,
) -> HostTerms:
    """phases: (forward, backward) compute of the step, for the schedule's overlap (estimate/overlap.py)."""
    grad = grad_path_s(parts, engine, layout, grad_accum, platform)
    if grad is None:
        grad = (comm.per_tensor_s, f"per_tensor_overhead_us ({platform.source('per_tensor_overhead_us')})")
    if platform.collectives.host_blocking_collectives:
        exposed = comm.total_s
    elif phases is not None and schedules_overlap(platform):
        exposed = exposed_collectives(comm, phases[0], phases[1], grad_accum, platform).seconds
    else:
        exposed = comm.exposed_s(compute_s, platform.collectives.comm_overlap) - comm.per_tensor_s
    return HostTerms(
        grad_path_s=grad[0], grad_path_source=grad[1], collectives_s=comm.total_s, exposed_collectives_s=exposed
    )
