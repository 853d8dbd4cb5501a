"""The environment bench's and commbench's ranks run under (`--env-profile NAME|FILE`, the same
resolver as plan's: specs/env_profile.py load_env_profile): the profile's variables are set in the
launched ranks' environment (its torchrun values: EnvVar.launch_value, as emit's torchrun.sh sets
them) and its `unset` list removed (harness.launch_many, from the config's "rank_env"); the
collective variables (CCL_, NCCL_, FI_) are recorded with the run and the curves, so `plan --db`
can tell which environment a measurement was made under. A backend reads only its own
library's variables (NCCL: NCCL_; oneCCL: CCL_ and libfabric's FI_; gloo: none of them): the rest
are inert in that run, and the report says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prism_strategy.inputs.scenario import COLLECTIVE_PREFIXES
from prism_strategy.specs.env_profile import load_env_profile, profile_names
from prism_strategy.specs.libraries import read_by


@dataclass(frozen=True, kw_only=True, slots=True)
class RankEnv:
    profile: str
    """The profile's name, or its file's resolved path."""
    source: str
    """"--env-profile NAME" or "file PATH"."""
    set_vars: tuple[tuple[str, str], ...]
    """(name, value) set in the ranks' environment."""
    unset: tuple[str, ...]

    @property
    def collective(self) -> dict[str, str]:
        return {k: v for k, v in self.set_vars if k.startswith(COLLECTIVE_PREFIXES)}

    def inert(self, backend: str) -> list[str]:
        """The collective variables `backend`'s library does not read (all of them under gloo)."""
        read = read_by(backend)
        read = COLLECTIVE_PREFIXES if read is None else read
        return [k for k in self.collective if not k.startswith(read)]

    def note(self, backend: str) -> str:
        names = ", ".join(f"{k}={v}" for k, v in self.collective.items()) or "no collective variables"
        inert = self.inert(backend)
        said = f"ranks ran under env profile {self.profile}: {names}"
        if not inert:
            return f"{said}; recorded with the curves"
        which = "none of them" if len(inert) == len(self.collective) else ", ".join(inert)
        return f"{said}; {backend} reads {which}: recorded with the curves, inert in this run"

    def launch_env(self) -> dict[str, Any]:
        """What a launch config carries ("rank_env"): the variables to set and to remove."""
        return {"profile": self.profile, "set": dict(self.set_vars), "unset": list(self.unset)}

    def as_dict(self, backend: str) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "source": self.source,
            "variables": self.collective,
            "inert": self.inert(backend),
            "unset": list(self.unset),
        }


def rank_env(profile: str | None, platform: str) -> RankEnv | None:
    """The environment `--env-profile profile` sets on `platform` under torchrun; None: none given
    (the ranks inherit this shell's environment, as before)."""
    if profile is None:
        return None
    from pathlib import Path

    p = load_env_profile(profile)
    named = profile in profile_names()
    values = ((v.name, v.launch_value(platform, "torchrun")) for v in p.var)
    return RankEnv(
        profile=profile if named else str(Path(profile).resolve()),
        source=f"--env-profile {profile}" if named else f"file {profile}",
        set_vars=tuple((k, val) for k, val in values if val is not None),
        unset=p.unset,
    )


def priced_under(base: dict[str, Any], platform: Any) -> Any:
    """The platform as the run's env profile routes its collectives (estimate/environment.py), so
    the prediction beside each measured kind is the one plan --env-profile makes."""
    from prism_strategy.estimate.environment import platform_under
    from prism_strategy.inputs.scenario import environment_of

    profile = base.get("env_profile")
    return platform if profile is None else platform_under(platform, environment_of(platform, profile))
