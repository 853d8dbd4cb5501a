"""The platform as an env profile runs it (`plan --env-profile NAME|FILE`): the profile's
collective variables reach the comm model through estimate/comm_oneccl.py `with_ccl_env`, and a
platform file's own CCL keys stay overrides.

A key is the file's own when it differs from what the platform's own profile (its `env_profile`)
gives it: the shipped presets set ccl_worker_count and allreduce_algorithm as their profile does,
so another profile moves them; a user's file that pins them keeps them. The platform's own profile
(or none given) leaves the platform as it is."""

from __future__ import annotations

from prism_strategy.estimate.comm_oneccl import MODEL_VARIABLES, NOTED_DEFAULTS, with_ccl_env
from prism_strategy.specs.cluster import PlatformSpec
from prism_strategy.specs.env_profile import load_env_profile
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.libraries import libraries
from prism_strategy.specs.policies import EnvironmentPolicy

READ_PREFIXES = tuple(x for lib in libraries() if lib.model_variables for x in lib.env_prefixes)
"""The own prefixes of the libraries whose cost model reads the environment (oneCCL's CCL_)."""
SCALAR_FIELDS = (
    "ccl_worker_count",
    "allreduce_algorithm",
    "ccl_transport",
    "ccl_gpu_rdma",
    "host_blocking_collectives",
)
"""The single-valued fields a profile moves (ccl_algorithms and ccl_scaleout are per-op maps)."""


def own_variables(p: PlatformSpec) -> dict[str, str]:
    """The collective variables of the platform's own env profile ({} when it has none we can read)."""
    if not p.env_profile:
        return {}
    try:
        return load_env_profile(p.env_profile).values_for(p.name)
    except SpecError:
        return {}


def platform_under(p: PlatformSpec, env: EnvironmentPolicy) -> PlatformSpec:
    """`p` as `env` routes its collectives; the note of what mattered goes into p.sources
    ("env_profile"), which provenance.communication quotes."""
    if env.profile in ("", p.env_profile):  # the platform as its own profile runs it
        return p
    base = with_ccl_env(p, own_variables(p))
    new = with_ccl_env(p, env.env)
    kept = [f for f in SCALAR_FIELDS if p.value(f) != base.value(f)]
    own_algos = {k: v for k, v in p.oneccl.ccl_algorithms.items() if base.oneccl.ccl_algorithms.get(k) != v}
    own_scaleout = {k: v for k, v in p.oneccl.ccl_scaleout.items() if base.oneccl.ccl_scaleout.get(k) != v}
    out = new.with_values(
        ccl_algorithms=new.oneccl.ccl_algorithms | own_algos,
        ccl_scaleout=new.oneccl.ccl_scaleout | own_scaleout,
        **{f: p.value(f) for f in kept},
    )
    overrides = kept + list(own_algos) + list(own_scaleout)
    note = _note(env, p, out, overrides)
    return out.with_values(env_profile=env.profile, sources=p.sources | {"env_profile": note})


def _note(env: EnvironmentPolicy, before: PlatformSpec, after: PlatformSpec, kept: list[str]) -> str:
    read = {k: v for k, v in env.variables if k in MODEL_VARIABLES}
    ccl = any(k.startswith(READ_PREFIXES) for k, _ in env.variables)
    unset = [k for k in NOTED_DEFAULTS if ccl and k not in read]
    said = ", ".join(f"{k}={v}" for k, v in read.items()) or "no variable the comm model reads"
    moved = [
        f"{f} {before.value(f)} -> {after.value(f)}"
        for f in (*SCALAR_FIELDS, "ccl_scaleout")
        if before.value(f) != after.value(f)
    ]
    parts = [f"env profile {env.profile} ({env.source}): {said}"]
    if unset:
        parts.append(f"unset, oneCCL's default: {', '.join(unset)}")
    if moved:
        parts.append("priced as " + ", ".join(moved))
    if kept:
        parts.append(f"the platform file's own {', '.join(kept)} kept (an override)")
    return "; ".join(parts)
