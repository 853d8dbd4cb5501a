"""oneCCL (Intel GPUs, torch's `xccl`): estimate/comm_oneccl.py prices each call as oneCCL runs it
under the job's CCL environment (with_ccl_env)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from prism_strategy.estimate import comm_oneccl as ccl
from prism_strategy.estimate.backends.base import Call, Term
from prism_strategy.estimate.backends.gloo import RING_TERMS
from prism_strategy.specs.cluster import PlatformSpec


@dataclass(frozen=True)
class OneCcl:
    name: str = "xccl"

    def call(self, op: str, size: float, ranks: int, nodes: int, concurrent: int, p: PlatformSpec) -> Call:
        seconds, algo = ccl.oneccl_seconds(op, size, ranks, nodes, concurrent, p)
        return Call(seconds, algo, 0, "oneCCL as run (estimate/comm_oneccl.py oneccl_seconds)")

    def describe(self, p: PlatformSpec) -> str:
        return ccl.description(p)

    def terms(self, p: PlatformSpec) -> tuple[Term, ...]:
        return RING_TERMS

    def readings(self, p: PlatformSpec) -> dict[str, PlatformSpec]:
        """The platform as shipped, plus each reading of its comm terms the fitted records could not
        rule out: a cross-node collective's fixed cost fitted at 2 nodes, where (nodes-1) = 1, is
        either per operation (shipped) or per peer node (the same 2-node total)."""
        out = {"shipped": p}
        if p.scaleout_overhead_us > 0:
            out["cross-node cost per peer node"] = replace(
                p, scaleout_overhead_us=0.0, inter_latency_us=p.inter_latency_us + p.scaleout_overhead_us
            )
        return out

    def schedules_overlap(self, p: PlatformSpec) -> bool:
        return False

    def with_env(self, p: PlatformSpec, env: Mapping[str, str]) -> PlatformSpec:
        return ccl.with_ccl_env(p, env)


BACKEND = OneCcl()
