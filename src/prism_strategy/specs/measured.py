"""A measured collective curve: seconds per call against payload bytes for one op on one group
shape, as commbench or an imported nccl-tests / oneCCL benchmark log measured it.

Plain data: the results store (bench/results/curves.py) loads curves, the CLI attaches them to the
platform (`PlatformSpec.measured_collectives`), and estimate/comm_measured.py prices with them.
Payload bytes follow census: all_reduce and broadcast the tensor, all_gather the gathered
output, reduce_scatter the unscattered input (nccl-tests' `size` column is the same quantity:
max(send, receive) bytes, src/common.cu).
"""

from __future__ import annotations

from dataclasses import dataclass

from prism_strategy.specs.errors import SpecError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasuredCurve:
    op: str
    ranks: int
    """Ranks in one group."""
    nodes: int
    """Nodes the group spans."""
    concurrent: int = 1
    """Groups of this shape that ran at once per node (HSDP's replicate groups share the NICs)."""
    points: tuple[tuple[float, float], ...]
    """(payload bytes per call, seconds per call), ascending in bytes."""
    label: str
    """Who measured it: "nccl-tests", "oneccl-benchmark" or "commbench"."""
    date: str
    """When it was measured or imported (YYYY-MM-DD)."""
    source: str = ""

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise SpecError(f"measured curve: op {self.op!r} is not one of {', '.join(OPS)}")
        if self.ranks < 2 or self.nodes < 1 or self.ranks % self.nodes or self.concurrent < 1:
            raise SpecError(f"measured curve: {self.ranks} ranks over {self.nodes} nodes is not a group shape")
        if not self.points or any(b <= 0 or s <= 0 for b, s in self.points):
            raise SpecError(f"measured curve {self.label} {self.op}: needs positive (bytes, seconds) points")
        if any(a[0] >= b[0] for a, b in zip(self.points, self.points[1:])):
            raise SpecError(f"measured curve {self.label} {self.op}: points must ascend in bytes, each size once")

    @property
    def shape(self) -> str:
        """nodes x ranks per node, as people write it ("2x8")."""
        return f"{self.nodes}x{self.ranks // self.nodes}"
