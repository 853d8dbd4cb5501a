"""How far a host-bound step's range widens with the per-op host cost (issue 36).

Where the platform times eager ops on the host (`host_op_us`, estimate/compute.py phase_host_s),
a phase takes the longer of its device time and its host ops x host_op_us. The per-op figure is
an assumption inside a sourced low..high (the platform's sources): the step is timed again at
each end, so the range widens by the host-bound share of the step times that uncertainty, and
not at all where every phase is device-bound (a large model: its host time hides behind FLOPs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from prism_strategy.estimate.ranges import PredictionRange
from prism_strategy.specs.cluster import PlatformSpec

NEGLIGIBLE = 1e-3
"""A widening under 0.1% of the step is not reported (the step is device-bound)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HostWidening:
    fast: float
    """ln(step / step at host_op_us_low)."""
    slow: float
    """ln(step at host_op_us_high / step)."""
    basis: str


def host_widening(
    platform: PlatformSpec, step_s: float, host_s: float, step_at: Callable[[PlatformSpec], float]
) -> HostWidening | None:
    """step_at: the step time on a platform (the caller's estimate_step); host_s: the step's host
    seconds of its eager ops. None where the platform has no per-op range or the step hides it."""
    c = platform.compute
    if c.host_op_us is None or c.host_op_us_low is None or c.host_op_us_high is None or step_s <= 0:
        return None
    low = step_at(platform.with_values(host_op_us=c.host_op_us_low))
    high = step_at(platform.with_values(host_op_us=c.host_op_us_high))
    fast, slow = max(0.0, math.log(step_s / low)), max(0.0, math.log(high / step_s))
    if max(fast, slow) < NEGLIGIBLE:
        return None
    held = "host-bound" if fast >= NEGLIGIBLE else f"host-bound only toward {c.host_op_us_high:g} us an op"
    basis = (
        f"eager host ops ({held}): they hold the host {host_s * 1e3:.2f} ms of the {step_s * 1e3:.2f} ms step at "
        f"{c.host_op_us:g} us an op ({platform.source('host_op_us')[:40]}...); at {c.host_op_us_low:g}-"
        f"{c.host_op_us_high:g} us (host_op_us_low/high sources) the step is {low * 1e3:.2f}-{high * 1e3:.2f} ms: "
        f"range x{math.exp(-fast):.2f}/x{math.exp(slow):.2f} wider"
    )
    return HostWidening(fast=fast, slow=slow, basis=basis)


def widened(r: PredictionRange, w: HostWidening | None) -> PredictionRange:
    """The range with the per-op uncertainty added on each side (its basis says so)."""
    if w is None:
        return r
    return replace(
        r,
        fast=r.fast + w.fast,
        slow=r.slow + w.slow,
        slow_base=None if r.slow_base is None else r.slow_base + w.slow,
        basis=f"{r.basis}; {w.basis}",
    )
