"""A oneCCL setting that is slow at the job's node count, priced: the launcher's CCL_* variables
(CCL_ALLREDUCE=ring, CCL_ALLGATHER=..., CCL_WORKER_COUNT) routed through the comm model
(the platform backend's with_env: oneCCL's is estimate/comm_oneccl.py with_ccl_env; priced by
estimate/comm.py collective_seconds) against
oneCCL's defaults (the same variables unset), for one DDP gradient bucket all-reduce (25 MiB,
torch DDP's bucket_cap_mb default) over every rank of the job. When the launcher's setting is more
than SLOWER slower beyond the node counts it was validated at, the fact ccl_setting_slow_at_scale is reported with both prices; rules.toml
(ccl-setting-slow-at-scale) decides what it means."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.estimate.backends import backend_of
from prism_strategy.estimate.comm import collective_seconds
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile

BUCKET_BYTES = 25 * 2**20
"""torch DDP's default bucket_cap_mb (25): one all-reduce of the gradient path."""
VALIDATED_NODES = 10
"""The largest node count the named-algorithm profile was run at (PRISM, CCL_ALLREDUCE=ring with
one worker, 1-10 Aurora nodes: data/measurements/aurora-prism.toml): within it the setting is
what was measured to work, beyond it the doctor prices it."""
SLOWER = 1.10
"""More than 10% slower: the threshold at which the plan also reports an environment's cost (#25)."""
ROUTING = ("CCL_ALLREDUCE", "CCL_ALLGATHER", "CCL_ALLGATHERV", "CCL_REDUCE_SCATTER", "CCL_WORKER_COUNT")


def check_ccl_at_scale(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    env = {k: v for k, v in lf.known_env().items() if k in ROUTING}
    if not env:
        return []
    platform = ctx.platform if ctx.platform is not None else load_platform("aurora")
    nodes = ctx.nodes or lf.nodes()
    if not nodes or nodes <= VALIDATED_NODES:
        return []
    rpn = lf.ranks_per_node() or platform.hardware.devices_per_node
    try:
        backend = backend_of(platform)  # NCCL's and gloo's read no CCL variable: the prices agree
        theirs, default = backend.with_env(platform, env), backend.with_env(platform, {})
    except SpecError:
        return []  # a malformed value is the env checks' finding
    ranks = nodes * rpn
    slow = collective_seconds("all_reduce", BUCKET_BYTES, ranks, nodes, 1, theirs)
    fast = collective_seconds("all_reduce", BUCKET_BYTES, ranks, nodes, 1, default)
    if slow <= fast * SLOWER:
        return []
    set_ = " ".join(f"{k}={v}" for k, v in sorted(env.items()))
    detail = (
        f"{set_} at {nodes} nodes x {rpn} ranks: one 25 MiB gradient all-reduce prices at {slow * 1e3:.1f} ms, "
        f"{slow / fast:.1f}x oneCCL's default ({fast * 1e3:.1f} ms; {platform.name}'s comm model, "
        "estimate/comm_oneccl.py)"
    )
    line = next((e.line for e in lf.timeline if e.kind == "export" and e.name in env), 1)
    return check_observed({"ccl_setting_slow_at_scale": True}, ctx, file=str(lf.path), line=line, detail=detail)
