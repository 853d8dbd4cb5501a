"""Named, versioned environment profiles (data/env_profiles/*.toml) as data: what a job's ranks
run under (module loads, variables with their reasons). The loader is pure, so the planner reads a
profile's collective variables (plan --env-profile) as emit writes its shell text (emit/env.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, build, nearest, read_toml
from prism_strategy.specs.shell_values import CONTROL_CHARS, check_text  # noqa: F401  (emit reads them here)

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PROFILE_DIR = "env_profiles"


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvVar:
    name: str
    value: str
    why: str
    source: str
    platform_values: dict[str, str] = field(default_factory=dict)
    """Per-platform overrides of `value` (e.g. COMPOSITE on aurora-composite)."""
    torchrun_value: str | None = None
    """Under torchrun (no mpiexec, no PMIx): this value instead ("" = leave the variable unset)."""

    def value_for(self, platform: str) -> str:
        return self.platform_values.get(platform, self.value)

    def launch_value(self, platform: str, launcher: str) -> str | None:
        """The value for this launcher; None: not set under it."""
        if launcher == "torchrun" and self.torchrun_value is not None:
            return self.torchrun_value or None
        return self.value_for(platform)


@dataclass(frozen=True, kw_only=True, slots=True)
class PathPrepend:
    """A folder put in front of a search path (LD_LIBRARY_PATH, PATH), keeping what was there."""

    name: str
    value: str
    why: str
    source: str


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvProfile:
    name: str
    version: str
    description: str
    source: str
    modules: tuple[str, ...] = ()
    """`module load` arguments, in order."""
    module_use: tuple[str, ...] = ()
    """`module use` paths, applied before the loads."""
    conda_activate: str | None = None
    """After the loads: `conda activate` ("" = the base environment, else that environment)."""
    unset: tuple[str, ...] = ()
    """Variables removed after the loads (setting them cost real runs)."""
    var: tuple[EnvVar, ...] = ()
    prepend: tuple[PathPrepend, ...] = ()
    """Search-path entries put in front after the variables (e.g. a NCCL network plugin)."""

    def __post_init__(self) -> None:
        names = [v.name for v in self.var] + list(self.unset)
        for n in names + [e.name for e in self.prepend]:
            if not VAR_NAME.match(n):
                raise SpecError(f"env profile {self.name!r}: {n!r} is not a valid variable name")
        if len(set(names)) != len(names):
            raise SpecError(f"env profile {self.name!r}: a variable is listed twice (or both set and unset)")
        for text in (
            *self.modules,
            *self.module_use,
            *(v.value for v in self.var),
            *(e.value for e in self.prepend),
            *((self.conda_activate,) if self.conda_activate else ()),
            *(v.torchrun_value for v in self.var if v.torchrun_value),
            *(x for v in self.var for x in v.platform_values.values()),
        ):
            check_text("env profile value", text)

    def values_for(self, platform: str) -> dict[str, str]:
        return {v.name: v.value_for(platform) for v in self.var}


def profile_names() -> list[str]:
    folder = DATA / PROFILE_DIR
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml") and not p.name.startswith("_"))


def load_env_profile(name_or_path: str) -> EnvProfile:
    """A profile name (data/env_profiles/NAME.toml) or a path to a profile .toml."""
    if name_or_path in profile_names():
        return build(EnvProfile, read_toml(DATA / PROFILE_DIR / f"{name_or_path}.toml"), f"env profile {name_or_path}")
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.is_file():
        return build(EnvProfile, read_toml(p), str(p))
    names = profile_names()
    if p.suffix == ".toml":  # a path that is not there: say so, with where it was looked for
        raise SpecError(f"env profile file {p.resolve()} does not exist; use one of {', '.join(names)} or a .toml path")
    raise SpecError(
        f"unknown env profile {name_or_path!r}; {nearest(name_or_path, names)}use one of {', '.join(names)} or a path to a profile .toml"
    )
