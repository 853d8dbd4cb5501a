"""A predicted step with only the figures a range test sets (compute, communication, late ranks'
slow side, the step), the rest zero: what estimate/range_parts.step_range reads of an option's
StepEstimate (estimate/option.py). No collectives: the comm terms take the blanket comm share."""

from __future__ import annotations

from prism_strategy.estimate.comm import CommEstimate
from prism_strategy.estimate.option import StepEstimate
from prism_strategy.estimate.scale_loss import LateRanks, SyncWait


def step_of(compute_s: float, comm_s: float, *, late_s: float = 0.0, step_s: float = 0.0) -> StepEstimate:
    late = LateRanks(seconds=0.0, slow_seconds=late_s, cv=0.0, measured=False, sync_points=1, ranks=1, measured_ranks=1)
    return StepEstimate(
        comm=CommEstimate(collectives=(), per_tensor_s=0.0),
        compute_s=compute_s,
        comm_s=comm_s,
        exposed_comm_s=comm_s,
        optimizer_s=0.0,
        late_ranks=late,
        sync_wait=SyncWait(seconds=0.0, calls=0, node_steps=0, us_per_node=0.0),
        step_time_s=step_s,
        samples_per_s=0.0,
        tokens_per_s_per_device=0.0,
        mfu=0.0,
        bound="compute",
    )
