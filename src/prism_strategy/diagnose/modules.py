"""What a `module load` sets: known facts from data/modules/*.toml (with their sources), or the
exact set from `module show` output (--module-show). Lmod prints `setenv("X","v")`,
`pushenv(...)`, `unsetenv("X")`, `prepend_path("X","v")`; Tcl modules print `setenv X v`,
`prepend-path X v`. A module neither knows is unknown: the checks say so instead of guessing.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import DATA, read_toml

_LMOD = re.compile(
    r"""^\s*(setenv|pushenv|unsetenv|prepend_path|append_path)\s*\(\s*["']([A-Za-z_]\w*)["']"""
    r"""(?:\s*,\s*["']([^"']*)["'])?"""
)
_TCL = re.compile(r"^\s*(setenv|unsetenv|prepend-path|append-path)\s+([A-Za-z_]\w*)(?:\s+(\S.*?))?\s*$")
_HEADER = re.compile(r"^\s*(/\S+?)(?:\.lua)?:\s*$")
SETS = frozenset({"setenv", "pushenv", "unsetenv"})


@dataclass(frozen=True, kw_only=True, slots=True)
class ModuleFacts:
    name: str
    """Module family (frameworks), or family/version from a module show header."""
    sets: dict[str, str | None]
    """Variables a load sets (None: value not known), or unsets ("" with unset)."""
    complete: bool
    """True when every variable the load sets is listed (module show output)."""
    source: str

    def matches(self, loaded: str) -> bool:
        family, _, version = loaded.partition("/")
        mine, _, my_version = self.name.partition("/")
        return family == mine and (not version or not my_version or version == my_version)


@cache
def known_modules() -> tuple[ModuleFacts, ...]:
    out = []
    for path in sorted((DATA / "modules").glob("*.toml")):
        for m in read_toml(path).get("module", []):
            out.append(
                ModuleFacts(name=m["name"], sets={v: None for v in m["sets"]}, complete=False, source=m["source"])
            )
    return tuple(out)


def parse_module_show(text: str, where: str) -> tuple[ModuleFacts, ...]:
    """Every module in `module show` output; a file with no header names one module '*'."""
    blocks: list[tuple[str, dict[str, str | None]]] = []
    name, sets = "*", {}
    for line in text.splitlines():
        head = _HEADER.match(line)
        if head:
            if sets or name != "*":
                blocks.append((name, sets))
            name, sets = _module_name(head.group(1)), {}
            continue
        m = _LMOD.match(line) or _TCL.match(line)
        if m and m.group(1) in SETS:
            value = m.group(3)
            sets[m.group(2)] = "" if m.group(1) == "unsetenv" else (value.strip("{}\"'") if value is not None else None)
    if sets or name != "*":
        blocks.append((name, sets))
    if not blocks:
        raise SpecError(
            f"--module-show {where}: no setenv/pushenv/unsetenv line and no module header: "
            f"pass the output of `module show <module>`"
        )
    return tuple(ModuleFacts(name=n, sets=s, complete=True, source=f"module show output ({where})") for n, s in blocks)


def _module_name(path: str) -> str:
    """frameworks/2025.3.1 from /opt/aurora/.../modulefiles/frameworks/2025.3.1(.lua)."""
    parts = [p for p in path.split("/") if p]
    return "/".join(parts[-2:]) if len(parts) >= 2 else parts[-1]


def read_module_show(path: Path) -> tuple[ModuleFacts, ...]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as e:
        raise SpecError(f"cannot read --module-show {str(path)[:120]}: {e.strerror}") from None
    return parse_module_show(text, str(path))


LIVE = "live"
"""--module-show live: run `module show` for each module the launchers load."""
LIVE_TIMEOUT_S = 60.0


def module_show_live(names: list[str], timeout_s: float = LIVE_TIMEOUT_S) -> tuple[ModuleFacts, ...]:
    """`module show NAME` in a login shell (where Lmod or Environment Modules define `module`,
    as on an Aurora login node), for each module name; its output read as --module-show FILE."""
    out: list[ModuleFacts] = []
    for name in dict.fromkeys(names):
        try:
            res = subprocess.run(
                ["bash", "-lc", 'module show "$1" 2>&1', "module-show", name],
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SpecError(
                f"--module-show live: `module show {name}` did not run ({type(e).__name__}); "
                f"pass saved `module show` output as --module-show FILE"
            ) from None
        first = next((ln.strip() for ln in res.stdout.splitlines() if ln.strip()), "no output")[:120]
        try:
            facts = parse_module_show(res.stdout, f"live (`module show {name}`)") if res.returncode == 0 else ()
        except SpecError:
            facts = ()
        if not facts or all(f.name == "*" and not f.sets for f in facts):
            raise SpecError(
                f"--module-show live: `module show {name}` gave no module ({first}): run the doctor "
                f"where the module exists (an Aurora login node), or pass saved output as --module-show FILE"
            )
        out += [replace(f, name=name) if f.name == "*" else f for f in facts]
    return tuple(out)


def facts_for(loaded: str, shown: tuple[ModuleFacts, ...]) -> ModuleFacts | None:
    """What loading `loaded` sets: --module-show output first, then the data files."""
    for m in shown:
        if m.name == "*" or m.matches(loaded):
            return m
    return next((m for m in known_modules() if m.matches(loaded)), None)


LOAD_VERBS = frozenset({"load", "add", "try-load", "try-add", "swap", "switch", "restore"})


def loaded_names(args: tuple[str, ...]) -> list[str]:
    """Modules `module ARGS` loads (swap A B loads B; ml X loads X)."""
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return []
    verb, rest = words[0], words[1:]
    if verb in ("swap", "switch"):
        return rest[-1:]
    if verb in LOAD_VERBS:
        return rest
    return (
        []
        if verb
        in (
            "use",
            "unuse",
            "list",
            "avail",
            "show",
            "display",
            "help",
            "spider",
            "whatis",
            "purge",
            "is-loaded",
            "unload",
            "rm",
            "del",
            "save",
            "reset",
            "savelist",
            "keyword",
        )
        else words
    )
