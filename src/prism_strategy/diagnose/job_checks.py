"""Launcher facts about how the job's launch reaches its nodes and cores:

- launch_spans_job_nodes: a job of several nodes (#SBATCH --nodes, #PBS select) whose launch is
  a launch helper started by the batch script itself (no srun / mpiexec) that is not told
  --nnodes / --num_machines: the batch script runs on the first node (sbatch(1)), so the helper
  starts ranks there only.
- srun_gets_cpus_per_task: #SBATCH --cpus-per-task with an srun launch that passes neither -c /
  --cpus-per-task nor SRUN_CPUS_PER_TASK (Slurm >= 22.05 no longer hands it down).
- binds_cpus: an mpiexec launch passes --cpu-bind, asked where the platform is given
  (data/rules.toml decides: on XPU, Aurora).
The rules are data/rules.toml's launcher-one-node-of-many, srun-cpus-per-task-not-inherited and
launcher-no-cpu-bind-xpu.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prism_strategy.diagnose.findings import Context, Finding, check_observed
from prism_strategy.diagnose.launch_options import option_str
from prism_strategy.diagnose.shell_eval import MPI_LAUNCHERS

if TYPE_CHECKING:
    from prism_strategy.diagnose.launcher_checks import LauncherFile


def check_job_launch(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    if lf.launch is None:
        return []
    return _one_node_of_many(lf, ctx) + _srun_cpus(lf, ctx) + _cpu_bind(lf, ctx)


def _one_node_of_many(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    nodes = lf.directives.get("nodes")
    sp = lf.spawn()
    if not nodes or nodes < 2 or sp is None or lf.launch.name in MPI_LAUNCHERS:
        return []
    told = sp.nnodes is not None and sp.nnodes.strip("'\"") not in ("1", "1:1")
    detail = (
        f"`{sp.program}` is started by the batch script of a {nodes}-node job with no srun / mpiexec "
        f"and no --nnodes: it runs on the first node only"
    )
    return check_observed(
        {"launch_spans_job_nodes": told}, ctx, file=lf.launch.file, line=lf.launch.line, detail=detail
    )


def _srun_cpus(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    cpus = lf.directives.get("cpus_per_task")
    if lf.launch.name != "srun" or not cpus or cpus < 2:
        return []
    passed = option_str(lf.launch, ("-c", "--cpus-per-task")) is not None
    exported = any(e.kind == "export" and e.name == "SRUN_CPUS_PER_TASK" for e in lf.outer)
    detail = f"#SBATCH --cpus-per-task={cpus}, and `srun` passes no --cpus-per-task"
    return check_observed(
        {"srun_gets_cpus_per_task": passed or exported}, ctx, file=lf.launch.file, line=lf.launch.line, detail=detail
    )


def _cpu_bind(lf: "LauncherFile", ctx: Context) -> list[Finding]:
    """Only for a platform given (--platform, an emitted file's header): binding is site advice,
    not inferred from a CCL_ export."""
    if lf.launch.name not in ("mpiexec", "mpirun") or ctx.platform is None:
        return []
    bound = option_str(lf.launch, ("--cpu-bind", "-cpu-bind", "--cpu_bind", "--bind-to", "-bind-to")) is not None
    if bound:
        return []
    detail = f"`{lf.launch.name}` passes no --cpu-bind"
    return check_observed({"binds_cpus": False}, ctx, file=lf.launch.file, line=lf.launch.line, detail=detail)
