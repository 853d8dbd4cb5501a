"""Named, versioned environment profiles (data/env_profiles/*.toml) and the shell text that
applies them: module loads first, then every variable with a comment saying why.

Shell text is built only from validated names and from values passed through `sh_quote`, so a
user value (a path, a job name, a script argument) stays literal whatever it contains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, build, read_toml

VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SAFE_WORD = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
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
    raise SpecError(
        f"unknown env profile {name_or_path!r}; use one of {', '.join(profile_names())} or a path to a profile .toml"
    )


# --- shell text ------------------------------------------------------------------------------
def check_text(label: str, text: str) -> str:
    """User text may contain anything printable; control characters (newlines) are refused
    because they would end a comment or a directive line."""
    if _CONTROL.search(text):
        raise SpecError(f"{label} {text!r} contains a control character (newline, tab, ...); remove it")
    return text


def sh_quote(text: str) -> str:
    """One shell word that expands to exactly `text`: bare when it is plain, else double quotes
    with $, `, \\ and \" escaped (nothing inside is expanded or executed)."""
    check_text("value", text)
    if text and _SAFE_WORD.match(text):
        return text
    return '"' + re.sub(r'([\\$`"])', r"\\\1", text) + '"'


def comment(text: str) -> str:
    """Text for a `# ...` comment: one line, whatever it contains."""
    return _CONTROL.sub(" ", text)


def profile_lines(profile: EnvProfile, platform: str, indent: str = "", launcher: str = "mpiexec") -> list[str]:
    """Module use/loads first (and `conda activate`), then each variable with its reason, the
    search-path entries, then the unsets."""
    out = [f"{indent}# env profile {profile.name} ({comment(profile.version)}): {comment(profile.description)}"]
    out += [f"{indent}module use {sh_quote(p)}" for p in profile.module_use]
    out += [f"{indent}module load {sh_quote(m)}" for m in profile.modules]
    if profile.conda_activate is not None:
        out.append(
            f"{indent}conda activate" + (f" {sh_quote(profile.conda_activate)}" if profile.conda_activate else "")
        )
    if profile.modules or profile.module_use:
        out.append(f"{indent}# exported after the module loads: a module load can set or reset these variables")
    dropped = []
    for v in profile.var:
        value = v.launch_value(platform, launcher)
        if value is None:
            dropped.append(v.name)
            continue
        out.append(f"{indent}# {comment(v.why)} [{comment(v.source)}]")
        out.append(f"{indent}export {v.name}={sh_quote(value)}")
    if dropped:
        out.append(f"{indent}# {launcher} starts no mpiexec/PMIx job: its settings stay unset")
        out.append(f"{indent}unset {' '.join(dropped)}")
    for e in profile.prepend:
        out.append(f"{indent}# {comment(e.why)} [{comment(e.source)}]")
        out.append(f"{indent}export {e.name}={sh_quote(e.value)}${{{e.name}:+:${e.name}}}")
    if profile.unset:
        out.append(f"{indent}# never set here: each cost a real run [{comment(profile.source)}]")
        out.append(f"{indent}unset {' '.join(profile.unset)}")
    return out


def render_env_sh(profile: EnvProfile, platform: str, header: str) -> str:
    """env.sh: source it (`source env.sh`) in a shell on the compute node."""
    lines = [
        "#!/bin/bash",
        header,
        "# Source this file: `source env.sh`. The launchers export the same set again inside",
        "# each rank" + (", after its module loads." if profile.modules or profile.module_use else "."),
        *profile_lines(profile, platform),
    ]
    return "\n".join(lines) + "\n"
