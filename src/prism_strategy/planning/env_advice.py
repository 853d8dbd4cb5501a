"""Environment advice, priced: when another documented env profile of the platform's collective
backend changes the pick's step time by more than CHANGE, or changes the pick, at the asked
scale, the plan says so with both figures, the variables that differ and the profile's
validation status (data/env_validation.toml).

Only the variables the comm model reads move a prediction: oneCCL's CCL_WORKER_COUNT,
CCL_ALLREDUCE, CCL_ALLGATHER(V), CCL_REDUCE_SCATTER and the per-op scale-out choices, applied by
estimate/comm_oneccl.with_ccl_env. NCCL's and gloo's profiles set nothing the model reads, so
they are never priced (no advice rather than a made-up difference). Memory does not depend on
these variables: each feasible option keeps its batch and checkpointing and is re-timed only;
the pick under the other profile is made by the same rule (planning/recommend.pick).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tomllib

from prism_strategy.estimate.entry import PROFILE_VARIABLES, ccl_env_of, scenario_under_variables
from prism_strategy.planning.recommend import pick
from prism_strategy.specs.libraries import libraries, own_prefix
from prism_strategy.specs.presets import DATA
from prism_strategy.strategies import all_strategies

if TYPE_CHECKING:
    from prism_strategy.planning.option import Option
    from prism_strategy.specs.scenario import Scenario

CHANGE = 0.10
"""A profile is worth naming when it moves the pick's step time by more than 10% (the band the
ranking treats as a tie) or changes the pick."""

MODEL_VARS = {lib.name: PROFILE_VARIABLES for lib in libraries() if lib.model_variables}
"""The variables of each library the comm model reads, by library (data/libraries: only oneCCL's
model reads any, estimate/comm_oneccl.py PROFILE_VARIABLES lists them; module docstring)."""

DEFAULTS = {k: v for lib in libraries() for k, v in lib.model_variables.items()}
"""What an unset variable means to the model (data/libraries model_variables: oneCCL's defaults,
as estimate/comm_oneccl.with_ccl_env reads them)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    name: str
    variables: dict[str, str]
    """The backend's variables this profile sets on this platform (unset ones absent)."""


def _profile(path: Any, platform: str, names: frozenset[str], prefix: str) -> Profile | None:
    data = tomllib.loads(path.read_text())
    if not any(v["name"].startswith(prefix) for v in data.get("var", [])):
        return None
    out = {}
    for v in data.get("var", []):
        value = (v.get("platform_values") or {}).get(platform, v.get("value", ""))
        if v["name"] in names and value != "":
            out[v["name"]] = str(value)
    return Profile(name=data.get("name", path.name[:-5]), variables=out)


def backend_profiles(backend: str, platform: str) -> list[Profile]:
    """The documented profiles (data/env_profiles) that set variables of the `backend` library's
    model (a profile belongs to a library when it sets any variable with its own prefix)."""
    names = MODEL_VARS.get(backend)
    if names is None:
        return []
    folder = DATA / "env_profiles"
    paths = sorted((p for p in folder.iterdir() if p.name.endswith(".toml") and not p.name.startswith("_")), key=str)
    prefix = own_prefix(backend)
    found = (_profile(p, platform, names, prefix) for p in paths)
    return [p for p in found if p is not None]


def validation(name: str) -> str:
    table = tomllib.loads((DATA / "env_validation.toml").read_text())
    return table.get(name, {}).get("status", "not validated here")


def _differ(base: dict[str, str], other: dict[str, str]) -> dict[str, list[str | None]]:
    """Variables whose effective values differ (an unset variable taken at its default)."""
    keys = sorted(set(base) | set(other))
    return {
        k: [base.get(k), other.get(k)] for k in keys if base.get(k, DEFAULTS.get(k)) != other.get(k, DEFAULTS.get(k))
    }


def _shown(k: str, v: str | None) -> str:
    return v if v is not None else f"unset ({DEFAULTS[k]})" if k in DEFAULTS else "unset (oneCCL's default)"


def env_advice(
    sc: "Scenario", options: list["Option"], recommended: str | None, retime: Callable[["Scenario", "Option"], float]
) -> list[dict[str, Any]]:
    """One entry per other profile that moves the pick's step by more than CHANGE or changes the
    pick; `retime(scenario, option)` is the option's samples/s under that scenario."""
    p = sc.platform
    feasible = [o for o in options if o.feasible]
    if recommended is None or not feasible:
        return []
    profiles = {x.name: x for x in backend_profiles(p.collective_library, p.name)}
    own = (sc.environment.profile if sc.environment else "") or p.env_profile  # --env-profile, else the platform's
    priced, named = ccl_env_of(p), profiles.get(own)
    same = named is not None and not _differ(named.variables, priced)
    base = Profile(name=own if same else f"platform {p.name}'s own CCL settings", variables=priced)
    chosen = next(o for o in feasible if o.strategy == recommended)
    registry, out = all_strategies(), []
    for other in profiles.values():
        if not _differ(base.variables, other.variables):
            continue
        there = scenario_under_variables(sc, other.variables)
        timed = [o.retimed(rate) for o in feasible if (rate := retime(there, o)) > 0]
        new = pick(timed, registry)
        there_chosen = next(t for t in timed if t.strategy == recommended)
        step = there_chosen.step_time_s
        change = step / chosen.step_time_s - 1
        if abs(change) <= CHANGE and new.strategy == recommended:
            continue
        out.append(
            {
                "profile": other.name,
                "validation": validation(other.name),
                "base_profile": base.name,
                "base_validation": validation(base.name),
                "strategy": recommended,
                "step_time_s": {base.name: chosen.step_time_s, other.name: step},
                "samples_per_s": {base.name: chosen.samples_per_s, other.name: there_chosen.samples_per_s},
                "change": change,
                "recommended_under_profile": new.strategy,
                "recommended_step_time_s": new.step_time_s,
                "recommended_samples_per_s": new.samples_per_s,
                "recommended_global_batch": new.global_batch,
                "variables_differ": _differ(base.variables, other.variables),
            }
        )
    return out


def advice_line(a: dict[str, Any]) -> str:
    """One reason line for the plan's human output."""
    base, other = a["base_profile"], a["profile"]
    steps, rates = a["step_time_s"], a["samples_per_s"]
    var = ", ".join(f"{k} {_shown(k, b)} -> {_shown(k, o)}" for k, (b, o) in a["variables_differ"].items())
    pick_ = (  # in samples/s: the other pick may run another global batch, so its step is not comparable
        f"; the pick there would be {a['recommended_under_profile']} at {a['recommended_samples_per_s']:.1f} "
        f"samples/s (global batch {a['recommended_global_batch']})"
        if a["recommended_under_profile"] != a["strategy"]
        else ""
    )
    return (
        f"environment: under env profile {other} {a['strategy']} is predicted at {steps[other]:.3f} s per step "
        f"({rates[other]:.1f} samples/s) vs {steps[base]:.3f} s ({rates[base]:.1f}) under {base} "
        f"({a['change']:+.0%}){pick_}; variables that differ: {var}; {other}: "
        f"{a['validation']}; {base}: {a['base_validation']}"
    )
