"""commbench.pbs / commbench.sbatch: the emitted job's allocation (nodes, ranks per node, env
profile, rank layout), running `prism-strategy commbench --launched` instead of the training
script, so a user measures the strategy's collectives at the target scale in minutes
(bench/collectives/commbench.py). The model comes from PRISM_COMMBENCH_MODEL at submit time (emit has no
model); the strategies from PRISM_COMMBENCH_STRATEGIES, default the emitted one. Rank 0 prints
the JSON report to the job's output and stores the curves in the results store
($PRISM_STRATEGY_DB, else the user's cache: a shared filesystem makes them `plan`'s).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from prism_strategy.emit.env import sh_quote
from prism_strategy.emit.files import FileText

if TYPE_CHECKING:
    from prism_strategy.emit.launch import LaunchJob

WALLTIME = "00:15:00"
"""A commbench replays a few steps' collectives: minutes, even at 100 nodes."""


def _run_line(job: "LaunchJob") -> str:
    req = job.req
    opts = [f"--grad-accum {req.grad_accum}", f"--micro-batch {req.micro_batch}"]
    if req.seq_len is not None:
        opts.append(f"--seq-len {req.seq_len}")
    if req.vision is not None:
        opts.append(f"--vision {sh_quote(req.vision)} --mode {sh_quote(req.mode)}")
    opts += [f"--precision {sh_quote(req.precision)}", f"--platform {sh_quote(req.platform)}"]
    if profile := req.env_profile or job.platform.env_profile:  # env.sh exported it: named for the record
        opts.append(f"--env-profile {sh_quote(profile)}")
    if req.bucket_mb is not None:
        opts.append(f"--bucket-mb {req.bucket_mb:g}")
    if req.reduce_dtype is not None:
        opts.append(f"--reduce-dtype {sh_quote(req.reduce_dtype)}")
    return (
        'exec python3 -m prism_strategy.cli commbench --launched --model "$PRISM_COMMBENCH_MODEL" '
        '--strategies "$PRISM_COMMBENCH_STRATEGIES" --nproc "$3" --ranks-per-node "$4" ' + " ".join(opts) + " --json"
    )


def _model_line(job: "LaunchJob") -> str:
    if job.req.model is not None:  # the plan's: a submit-time PRISM_COMMBENCH_MODEL still overrides it
        return (
            f'[ -n "${{PRISM_COMMBENCH_MODEL:-}}" ] || PRISM_COMMBENCH_MODEL={sh_quote(job.req.model)}\n'
            "export PRISM_COMMBENCH_MODEL"
        )
    return (
        'export PRISM_COMMBENCH_MODEL="${PRISM_COMMBENCH_MODEL:?set PRISM_COMMBENCH_MODEL to your model preset or '
        'config.json at submit time}"'
    )


def _scenario_lines(job: "LaunchJob", submit: str) -> list[str]:
    return [
        f"# What to replay: your model (a preset or config.json path); the strategies (default {job.strategy.name}).",
        f"# Submit: {submit}",
        _model_line(job),
        f'export PRISM_COMMBENCH_STRATEGIES="${{PRISM_COMMBENCH_STRATEGIES:-{job.strategy.name}}}"',
    ]


def _with_scenario(text: str, old_submit: str, lines: list[str]) -> str:
    out = "\n".join(
        "# commbench: times the collectives of one step at this scale, without the model's compute"
        if x.startswith(f"# Submit: {old_submit}")
        else x
        for x in text.split("\n")
    )
    head, _, rest = out.partition("set -euo pipefail\n")
    return head + "set -euo pipefail\n" + "\n".join(lines) + "\n" + rest


def _submit(job: "LaunchJob", pbs: bool) -> str:
    """The submit command: the plan's model is in the job already; without one it is named here."""
    name = "commbench.pbs" if pbs else "commbench.sbatch"
    if job.req.model is not None:
        return f"{'qsub' if pbs else 'sbatch'} {name}"
    model = "PRISM_COMMBENCH_MODEL=<your model preset or config.json>"
    return f"qsub -v {model} {name}" if pbs else f"sbatch --export=ALL,{model} {name}"


def commbench_files(job: "LaunchJob") -> list[FileText]:
    from prism_strategy.emit.launch import job_queue, render_pbs, render_slurm

    req = replace(job.req, walltime=WALLTIME, job_name=f"{job.req.job_name}-commbench")
    queue, _ = job_queue(job.platform, job.site, req)
    bench = replace(job, req=req, queue=queue)
    pbs = job.platform.launcher == "pbs"
    submit = _submit(bench, pbs)
    what = (
        f"times the {req.model} step's collectives at this scale"
        if req.model
        else "times the collectives at this scale"
    )
    if pbs:
        text = _with_scenario(render_pbs(bench, _run_line(bench)), "qsub launch.pbs", _scenario_lines(bench, submit))
        return [FileText(name="commbench.pbs", text=text, executable=True, description=f"PBS job: `{submit}` ({what})")]
    text = _with_scenario(render_slurm(bench, _run_line(bench)), "sbatch launch.slurm", _scenario_lines(bench, submit))
    return [
        FileText(name="commbench.sbatch", text=text, executable=True, description=f"Slurm job: `{submit}` ({what})")
    ]
