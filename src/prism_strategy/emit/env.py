"""Named, versioned environment profiles (data/env_profiles/*.toml) and the shell text that
applies them: module loads first, then every variable with a comment saying why.

Shell text is built only from validated names and from values passed through `sh_quote`
(specs/shell_values.py: shlex.quote after refusing control characters), so a user value (a path,
a job name, a script argument, a profile value) stays literal whatever it contains.
"""

from __future__ import annotations

from prism_strategy.specs.env_profile import (  # noqa: F401  (emit's callers read the profiles here)
    CONTROL_CHARS,
    PROFILE_DIR,
    VAR_NAME,
    EnvProfile,
    EnvVar,
    PathPrepend,
    check_text,
    load_env_profile,
    profile_names,
)
from prism_strategy.specs.shell_values import SHELLCHECK_LITERAL
from prism_strategy.specs.shell_values import quote as sh_quote


# --- shell text ------------------------------------------------------------------------------
def comment(text: str) -> str:
    """Text for a `# ...` comment: one line, whatever it contains."""
    return CONTROL_CHARS.sub(" ", text)


def profile_lines(profile: EnvProfile, platform: str, indent: str = "", launcher: str = "mpiexec") -> list[str]:
    """Module use/loads first (and `conda activate`), then each variable with its reason, the
    search-path entries, then the unsets."""
    out = [
        f"{indent}# env profile {comment(profile.name)} ({comment(profile.version)}): {comment(profile.description)}"
    ]
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
        SHELLCHECK_LITERAL,
        "# Source this file: `source env.sh`. The launchers export the same set again inside",
        "# each rank" + (", after its module loads." if profile.modules or profile.module_use else "."),
        *profile_lines(profile, platform),
    ]
    return "\n".join(lines) + "\n"
