"""The measurement jobs emit writes beside the launcher: the emitted job's allocation (nodes, ranks
per node, env profile, rank layout) running one of our own measurements instead of the training
script, so a user measures at the target scale in minutes.

- commbench.pbs / commbench.sbatch: `prism-strategy commbench --launched` replays each strategy's
  collectives (bench/collectives/commbench.py);
- bench.pbs / bench.sbatch / bench_torchrun.sh: `prism-strategy bench --launched` times the plan's top
  candidates end to end, in the plan's order, under a time budget (bench/launch/launched.py).

The model comes from PRISM_<KIND>_MODEL (the plan's by default, set at submit time without one); the
strategies from PRISM_<KIND>_STRATEGIES, default the emitted one (commbench) or the plan's top
candidates (bench). Rank 0 prints the JSON report to the job's output and stores what was measured
in the results store ($PRISM_STRATEGY_DB, else the user's cache: a shared filesystem makes them `plan`'s).
The ranks run `$PRISM_PYTHON` (default `python3` of the rank's login shell, after the profile's
modules): set it at submit time to your virtual environment's interpreter, since a login shell
resets PATH.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from prism_strategy.emit.env import sh_quote
from prism_strategy.emit.files import FileText

if TYPE_CHECKING:
    from prism_strategy.emit.launch import LaunchJob

WALLTIME = "00:15:00"
"""A commbench replays a few steps' collectives: minutes, even at 100 nodes."""
BENCH_BUDGET_MIN = 20
"""bench's time budget: model builds, a warm-up and 3 timed steps per candidate; no candidate starts after it."""
BENCH_KNOBS = (
    "# At submit time, also: PRISM_BENCH_TIMEOUT_S (seconds a candidate may hang, default 300), "
    "PRISM_BENCH_MEMORY_LIMIT (CPU: GiB per rank)."
)
"""bench's options read from the environment (cli/bench_cmds.py envvar=...): the job's ranks inherit them."""
BENCH_WALLTIME = "00:30:00"
"""The budget, plus the ranks' start and the last candidate's own time."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MeasureKind:
    """One measurement job: what it runs and how it is named."""

    command: str
    """The prism-strategy command (commbench | bench)."""
    walltime: str
    strategies: str
    """The default of PRISM_<KIND>_STRATEGIES: comma-separated names."""
    what: str

    @property
    def var(self) -> str:
        return f"PRISM_{self.command.upper()}"


def _options(job: "LaunchJob", kind: MeasureKind) -> list[str]:
    req = job.req
    opts = [f"--grad-accum {req.grad_accum}", f"--micro-batch {req.micro_batch}"]
    if req.seq_len is not None:
        opts.append(f"--seq-len {req.seq_len}")
    if req.vision is not None:
        opts.append(f"--vision {sh_quote(req.vision)} --mode {sh_quote(req.mode)}")
    opts += [f"--precision {sh_quote(req.precision)}", f"--platform {sh_quote(req.platform)}"]
    if profile := req.env_profile or job.platform.env_profile:  # env.sh exported it: named for the record
        opts.append(f"--env-profile {sh_quote(profile)}")
    if kind.command == "bench":
        opts += [f"--ckpt-freq {sh_quote(str(req.ckpt_freq))}", f"--budget-min {BENCH_BUDGET_MIN}"]
        return opts
    if req.bucket_mb is not None:
        opts.append(f"--bucket-mb {req.bucket_mb:g}")
    if req.reduce_dtype is not None:
        opts.append(f"--reduce-dtype {sh_quote(req.reduce_dtype)}")
    return opts


def _run_line(job: "LaunchJob", kind: MeasureKind, world: str = '"$3"', rpn: str = '"$4"') -> str:
    return (
        f'exec "${{PRISM_PYTHON:-python3}}" -m prism_strategy.cli {kind.command} --launched --model "${kind.var}_MODEL" '
        f'--strategies "${kind.var}_STRATEGIES" --nproc {world} --ranks-per-node {rpn} '
        + " ".join(_options(job, kind))
        + " --json"
    )


def _model_line(job: "LaunchJob", kind: MeasureKind) -> str:
    if job.req.model is not None:  # the plan's: a submit-time variable still overrides it
        return (
            f'[ -n "${{{kind.var}_MODEL:-}}" ] || {kind.var}_MODEL={sh_quote(job.req.model)}\nexport {kind.var}_MODEL'
        )
    return (
        f'export {kind.var}_MODEL="${{{kind.var}_MODEL:?set {kind.var}_MODEL to your model preset or '
        'config.json at submit time}"'
    )


def _scenario_lines(job: "LaunchJob", kind: MeasureKind, submit: str) -> list[str]:
    default = kind.strategies  # registry names: nothing for the shell to expand
    knobs = [BENCH_KNOBS] if kind.command == "bench" else []
    return [
        f"# What to measure: your model (a preset or config.json path); the strategies (default {kind.strategies}).",
        *knobs,
        f"# Submit: {submit}",
        _model_line(job, kind),
        f'export {kind.var}_STRATEGIES="${{{kind.var}_STRATEGIES:-{default}}}"',
    ]


def _with_scenario(text: str, old_submit: str, kind: MeasureKind, lines: list[str]) -> str:
    out = "\n".join(
        f"# {kind.command}: {kind.what}" if x.startswith(f"# Submit: {old_submit}") else x for x in text.split("\n")
    )
    head, _, rest = out.partition("set -euo pipefail\n")
    return head + "set -euo pipefail\n" + "\n".join(lines) + "\n" + rest


def _submit(job: "LaunchJob", kind: MeasureKind, pbs: bool) -> str:
    """The submit command: the plan's model is in the job already; without one it is named here."""
    name = f"{kind.command}.pbs" if pbs else f"{kind.command}.sbatch"
    if job.req.model is not None:
        return f"{'qsub' if pbs else 'sbatch'} {name}"
    model = f"{kind.var}_MODEL=<your model preset or config.json>"
    return f"qsub -v {model} {name}" if pbs else f"sbatch --export=ALL,{model} {name}"


def _kinds(job: "LaunchJob") -> list[MeasureKind]:
    commbench = MeasureKind(
        command="commbench",
        walltime=WALLTIME,
        strategies=job.strategy.name,
        what="times the collectives of one step at this scale, without the model's compute",
    )
    candidates = job.req.bench_candidates or (job.strategy.name,)
    bench = MeasureKind(
        command="bench",
        walltime=BENCH_WALLTIME,
        strategies=",".join(candidates),
        what=f"times the plan's candidates end to end at this scale, in order, within {BENCH_BUDGET_MIN} min",
    )
    return [commbench, bench]


def commbench_files(job: "LaunchJob") -> list[FileText]:
    """commbench and bench jobs for the platform's scheduler (PBS or Slurm)."""
    return [_scheduler_file(job, kind) for kind in _kinds(job)]


def _scheduler_file(job: "LaunchJob", kind: MeasureKind) -> FileText:
    from prism_strategy.emit.launch import job_queue, render_pbs, render_slurm

    req = replace(job.req, walltime=kind.walltime, job_name=f"{job.req.job_name}-{kind.command}")
    queue, _ = job_queue(job.platform, job.site, req)
    measure = replace(job, req=req, queue=queue)
    pbs = job.platform.launcher == "pbs"
    submit = _submit(measure, kind, pbs)
    what = f"{kind.command} for {req.model}" if req.model else kind.command
    if pbs:
        text = render_pbs(measure, _run_line(measure, kind))
        text = _with_scenario(text, "qsub launch.pbs", kind, _scenario_lines(measure, kind, submit))
        return FileText(
            name=f"{kind.command}.pbs", text=text, executable=True, description=f"PBS job: `{submit}` ({what})"
        )
    text = render_slurm(measure, _run_line(measure, kind))
    text = _with_scenario(text, "sbatch launch.slurm", kind, _scenario_lines(measure, kind, submit))
    return FileText(
        name=f"{kind.command}.sbatch", text=text, executable=True, description=f"Slurm job: `{submit}` ({what})"
    )


def bench_torchrun_file(job: "LaunchJob") -> FileText:
    """bench_torchrun.sh: the launched bench under torchrun on one node (a platform with no
    scheduler), or on each node of a multi-node torchrun (NNODES, NODE_RANK, MASTER_ADDR given)."""
    from prism_strategy.emit.env import profile_lines
    from prism_strategy.emit.launch import MODULE_INIT

    kind = _kinds(job)[1]
    rpn = job.layout.ranks_per_node
    line = _run_line(job, kind, world='"$((NNODES * RPN))"', rpn='"$RPN"')
    # after `--`: torchrun's parser would take --nproc for an ambiguous abbreviation of its own options
    module = line.removeprefix('exec "${PRISM_PYTHON:-python3}" -m prism_strategy.cli ')
    lines = [
        "#!/bin/bash",
        job.header,
        f"# {kind.command}: {kind.what}",
        "# Run: bash bench_torchrun.sh   (multi-node: NNODES=2 NODE_RANK=0|1 MASTER_ADDR=host0 on each node)",
        "set -eo pipefail",
        *(MODULE_INIT if job.profile.modules or job.profile.module_use else []),
        *profile_lines(job.profile, job.platform.name, launcher="torchrun"),  # as torchrun.sh runs under it
        *_scenario_lines(job, kind, "bash bench_torchrun.sh")[2:],
        f"RPN={rpn}",
        'NNODES="${NNODES:-1}"',
        'NODE_RANK="${NODE_RANK:-0}"',
        'MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"',
        'MASTER_PORT="${MASTER_PORT:-29500}"',
        'exec "${PRISM_PYTHON:-python3}" -m torch.distributed.run --nnodes "$NNODES" --node-rank "$NODE_RANK" --nproc-per-node "$RPN" \\',
        '    --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" -m prism_strategy.cli -- ' + module,
    ]
    return FileText(
        name="bench_torchrun.sh",
        text="\n".join(lines) + "\n",
        executable=True,
        description=f"torchrun: `bash bench_torchrun.sh` ({kind.command} of the plan's candidates)",
    )
