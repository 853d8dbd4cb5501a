"""Launcher facts about how ranks find each other, and about files that hold nothing.

- rendezvous_unset: a launch runs `python SCRIPT.py` with no launcher that sets the rendezvous
  (torchrun / deepspeed / accelerate set RANK, WORLD_SIZE, MASTER_ADDR; mpiexec / srun set the
  PMI / SLURM variables init_distributed reads) and the job exports none of RANK / WORLD_SIZE /
  MASTER_ADDR: torch's env:// rendezvous (torch/distributed/rendezvous.py _env_rendezvous_handler)
  then has no world, and each process runs alone.
  The same fact, seen from the script: `srun` / `mpiexec` start a .py whose only rendezvous is
  `init_process_group()` with the default env:// (no init_method, rank or world_size), that
  never calls init_distributed and never reads SLURM_PROCID / PMI_RANK / PALS_RANKID /
  OMPI_COMM_WORLD_RANK, while the launcher exports none of RANK / WORLD_SIZE / MASTER_ADDR:
  those launchers set only their own variables, so env:// finds no RANK and every rank stops.
- empty_file: a launcher with no command, or a script with no statement (comments only).
The rules deciding what these mean are data/rules.toml's launcher-no-rendezvous and empty-file.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.shell_eval import MPI_LAUNCHERS

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile
    from prism_strategy.inputs.script_file import ScriptFile

RENDEZVOUS = ("RANK", "WORLD_SIZE", "MASTER_ADDR")
SETS_RENDEZVOUS = frozenset({"torchrun", "deepspeed", "accelerate", "mpiexec", "mpirun", "srun", "aprun"})
_PYTHONS = frozenset({"python", "python3"})
_RUN_MODULES = ("torch.distributed.run", "torch.distributed.launch", "deepspeed", "accelerate")


def _launches_a_launcher(e) -> bool:
    if e.name in SETS_RENDEZVOUS:
        return True
    args = list(e.args)
    return e.name in _PYTHONS and "-m" in args and any(args[args.index("-m") + 1 :][:1] == [m] for m in _RUN_MODULES)


def _direct_script(e) -> str | None:
    """The .py a bare `python SCRIPT.py` launch runs (None for another command)."""
    if e.name not in _PYTHONS or "-m" in e.args:
        return None
    return next((a for a in e.args if a.endswith(".py")), None)


def check_rendezvous(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    launches = [e for e in lf.timeline if e.kind == "launch"]
    if not launches or any(_launches_a_launcher(e) for e in launches):
        return []
    direct = [(e, s) for e in launches if (s := _direct_script(e))]
    exported = {e.name for e in lf.timeline if e.kind == "export"}
    missing = [n for n in RENDEZVOUS if n not in exported]
    if not direct or not missing:
        return []
    e, script = direct[0]
    detail = f"`{e.name} {script}`" + (f" ({', '.join(missing)} never exported)" if len(missing) < 3 else "")
    return check_observed({"rendezvous_unset": True}, ctx, file=e.file, line=e.line, detail=detail)


_PMI_RANK_WORDS = frozenset({"slurm_procid", "pmi_rank", "pals_rankid", "ompi_comm_world_rank", "pmix_rank"})
_SETS = {
    "srun": "SLURM_PROCID / SLURM_NTASKS",
    "mpiexec": "PMI_RANK / PMI_SIZE (PALS_RANKID on Aurora)",
    "mpirun": "its own rank variables (PMI_RANK, OMPI_COMM_WORLD_RANK)",
    "aprun": "ALPS_APP_PE",
}
"""What each MPI launcher sets for its ranks instead of torch's RANK / WORLD_SIZE."""


def pmi_launches(timeline) -> list[tuple[str, str, str, int]]:
    """(script file name, launcher command, file, line) of each srun / mpiexec launch of a .py in a
    timeline that exports none of RANK / WORLD_SIZE / MASTER_ADDR (Context.pmi_launches)."""
    if {e.name for e in timeline if e.kind == "export"} & set(RENDEZVOUS):
        return []
    out = []
    for e in timeline:
        script = next((a for a in e.args if a.endswith(".py")), None) if e.kind == "launch" else None
        starts_a_launcher = "-m" in e.args or set(e.args) & (SETS_RENDEZVOUS - MPI_LAUNCHERS)  # srun torchrun ...
        if script and e.name in MPI_LAUNCHERS and not starts_a_launcher:
            out.append((script.rsplit("/", 1)[-1], e.name, e.file, e.line))
    return out


def _own_rendezvous(call) -> bool:
    """init_process_group given its rank, world, store or a non-env:// init_method: not env://'s problem."""
    method = call.kwarg("init_method")
    env = method is None or (isinstance(method, ast.Constant) and method.value == "env://")
    return not env or any(call.kwarg(k) is not None for k in ("rank", "world_size", "store"))


def check_env_rendezvous_under_pmi(s: "ScriptFile", ctx: Context) -> list[Finding]:
    """The script's env:// init_process_group under an srun / mpiexec launch that sets no RANK."""
    launches = [x for x in ctx.pmi_launches if x[0] == s.path.name]
    if not launches or s.find("init_distributed") or _PMI_RANK_WORDS & s.words:
        return []
    inits = s.find("init_process_group")
    if not inits or any(_own_rendezvous(c) for c in inits):
        return []
    _, cmd, file, line = launches[0]
    detail = (
        f"started by `{cmd}` ({file}:{line}), which sets {_SETS[cmd]}, this init_process_group() takes the "
        "default env:// and maps none of them"
    )
    return check_observed({"rendezvous_unset": True}, ctx, **s.where(inits[0], detail))


def check_empty_launcher(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    if lf.outer:
        return []
    try:
        text = lf.path.read_text(errors="replace")
    except OSError:
        return []
    if any(x.strip() and not x.lstrip().startswith("#") for x in text.splitlines()):
        return []
    what = "empty" if not text.strip() else "only comments"
    return check_observed({"empty_file": True}, ctx, file=str(lf.path), line=1, detail=f"the launcher is {what}")


def check_empty_script(path: Path, ctx: Context) -> list[Finding]:
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return []
    if tree.body:
        return []
    return check_observed(
        {"empty_file": True}, ctx, file=str(path), line=1, detail="the script is empty or only comments"
    )
