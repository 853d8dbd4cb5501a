"""Launcher facts about how ranks find each other, and about files that hold nothing.

- rendezvous_unset: a launch runs `python SCRIPT.py` with no launcher that sets the rendezvous
  (torchrun / deepspeed / accelerate set RANK, WORLD_SIZE, MASTER_ADDR; mpiexec / srun set the
  PMI / SLURM variables init_distributed reads) and the job exports none of RANK / WORLD_SIZE /
  MASTER_ADDR: torch's env:// rendezvous (torch/distributed/rendezvous.py _env_rendezvous_handler)
  then has no world, and each process runs alone.
- empty_file: a launcher with no command, or a script with no statement (comments only).
The rules deciding what these mean are data/rules.toml's launcher-no-rendezvous and empty-file.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile

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
    detail = (
        f"`{e.name} {script}` is started directly and {', '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} never set"
    )
    return check_observed({"rendezvous_unset": True}, ctx, file=e.file, line=e.line, detail=detail)


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
    return check_observed(
        {"empty_file": True}, ctx, file=str(lf.path), line=1, detail=f"the launcher is {what}: it runs nothing"
    )


def check_empty_script(path: Path, ctx: Context) -> list[Finding]:
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return []
    if tree.body:
        return []
    return check_observed(
        {"empty_file": True}, ctx, file=str(path), line=1, detail="the script holds no statement: it trains nothing"
    )
