"""Shell launcher words the doctor reads: events (export, unset, module, launch), the options a
launch command passes (--env, --cpu-bind, -d, -ppn), variables resolved from the job script,
and the node / ranks-per-node counts of #PBS / #SBATCH lines."""

from __future__ import annotations

import re
from dataclasses import dataclass

ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_MODULE_NON_LOADS = frozenset(
    {"use", "unuse", "list", "avail", "show", "display", "help", "spider", "whatis", "is-loaded", "-t", "--terse"}
)


RUN_TIME = re.compile(
    r"^(PALS_|PMI_|PMIX_|OMPI_|SLURM_|PBS_|MPI_LOCALRANKID|RANK$|LOCAL_RANK$|WORLD_SIZE$|"
    r"LOCAL_WORLD_SIZE$|HOSTNAME$|MASTER_ADDR$)"
)
"""Variables the launcher or scheduler sets when the job runs: a test on them is true for some
ranks or jobs, not a choice left to whoever submits."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Cond:
    """One `if`/`case`/`&&` branch an event sits on, left open by the script."""

    text: str
    """The test as written, e.g. [ -z "$NO_PIL4DFS" ] (negated: the else side)."""
    file: str
    line: int
    names: tuple[str, ...]
    """Variables the test reads that the script does not fix."""
    default: bool | None
    """Whether this side runs when those variables are unset (None: the test is unknowable);
    True for a test on what the launcher sets per rank at run time (some ranks run it)."""

    @property
    def at_run_time(self) -> bool:
        return bool(self.names) and all(RUN_TIME.match(n) for n in self.names)

    def describe(self) -> str:
        at = f"{self.text} ({self.file}:{self.line})"
        names = ", ".join(self.names)
        if not self.names:
            return f"on the branch where {at} holds, which the doctor cannot decide"
        if self.at_run_time:
            return f"on the ranks or jobs where {at} holds ({names}: set at run time by the launcher or scheduler)"
        when = "unless the job is submitted with" if self.default else "only if the job is submitted with"
        return f"on the branch where {at} holds: the script leaves {names} open, so it runs {when} {names} set"


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    kind: str
    """export | unset | module | launch"""
    name: str = ""
    value: str = ""
    args: tuple[str, ...] = ()
    file: str
    line: int
    branch: tuple[Cond, ...] = ()
    """The open branches it runs on (() = it always runs, or on a branch the script fixes)."""

    @property
    def runs_by_default(self) -> bool:
        return all(c.default or c.at_run_time for c in self.branch)


def is_module_load(e: Event) -> bool:
    """`module load X`, `module swap A B`, `ml X`: anything that can (re)set a module's variables."""
    return e.kind == "module" and bool(e.args) and e.args[0] not in _MODULE_NON_LOADS


def launch_env_options(launch: Event) -> dict[str, tuple[str, str, int]]:
    """Variables a launch command sets for its ranks: --env NAME=V, -x NAME=V, -genv NAME V, and
    `env NAME=V program` as the rank command."""
    out, args = {}, launch.args
    in_env = False
    for k, a in enumerate(args):
        m = ASSIGN.match(a)
        if m and k and (args[k - 1] in ("--env", "-env", "-x", "--export") or in_env):
            out[m.group(1)] = (m.group(2), launch.file, launch.line)
        if a in ("-genv", "-env") and k + 2 < len(args) and not ASSIGN.match(args[k + 1]):
            out[args[k + 1]] = (args[k + 2], launch.file, launch.line)
        in_env = a.rsplit("/", 1)[-1] == "env" or (in_env and bool(m))
    return out


def option_str(launch: Event, names: tuple[str, ...]) -> str | None:
    args = list(launch.args)
    for k, a in enumerate(args):
        for n in names:
            if a.startswith(n + "="):
                return a[len(n) + 1 :]
            if a == n and k + 1 < len(args):
                return args[k + 1]
    return None


def resolve(raw: str, outer: list[Event], before: int) -> str:
    """$NAME / ${NAME}: the last value assigned in the job script before the launch."""
    m = re.fullmatch(r"\$\{?([A-Za-z_]\w*)\}?", raw)
    if not m:
        return raw
    values = [e.value for e in outer if e.kind == "export" and e.name == m.group(1) and e.line <= before]
    return values[-1] if values else raw


def option_int(launch: Event, names: tuple[str, ...], outer: list[Event]) -> int | None:
    args = list(launch.args)
    for k, a in enumerate(args):
        for n in names:
            raw = a[len(n) + 1 :] if a.startswith(n + "=") else (args[k + 1] if a == n and k + 1 < len(args) else None)
            if raw is not None:
                return _resolve_int(raw, outer, launch.line)
    return None


def _resolve_int(raw: str, outer: list[Event], before: int) -> int | None:
    m = re.fullmatch(r"\$\{?([A-Za-z_]\w*)\}?", raw)
    if m:
        values = [e.value for e in outer if e.kind == "export" and e.name == m.group(1) and e.line <= before]
        raw = values[-1] if values else ""
    return int(raw) if raw.isdigit() else None


def directives(text: str) -> dict[str, int]:
    """Counts the #PBS / #SBATCH lines ask for: nodes, ranks_per_node (tasks per node), tasks,
    devices_per_task / devices_per_node (the GPUs Slurm allocates), cpus_per_task."""
    out = {}
    for pat, key in (
        (r"^#PBS\s+-l\s+.*\bselect=(\d+)", "nodes"),
        (r"^#SBATCH\s+(?:--nodes[= ]|-N\s*)(\d+)\s*(?:#.*)?$", "nodes"),
        (r"^#SBATCH\s+--ntasks-per-node[= ](\d+)", "ranks_per_node"),
        (r"^#SBATCH\s+(?:--ntasks[= ]|-n\s*)(\d+)\b", "tasks"),
        (r"^#SBATCH\s+--gpus-per-task[= ](?:\w+:)?(\d+)\b", "devices_per_task"),
        (r"^#SBATCH\s+--gpus-per-node[= ](?:\w+:)?(\d+)\b", "devices_per_node"),
        (r"^#SBATCH\s+--gres[= ](?:gpu|xpu)(?::\w+)?:(\d+)\b", "devices_per_node"),
        (r"^#SBATCH\s+(?:--cpus-per-task[= ]|-c\s*)(\d+)\b", "cpus_per_task"),
    ):
        m = re.search(pat, text, re.M)
        if m:
            out[key] = int(m.group(1))
    return out
