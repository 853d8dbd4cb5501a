"""analyze, emit, doctor: diagnose/ reads logs, launchers and scripts; emit/ writes launchers; report/ prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prism_strategy.cli.app import cli_errors
from prism_strategy.cli.options import BucketMb, ReduceDtype
from prism_strategy.specs.errors import SpecError


@cli_errors
def analyze(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Run directory or log files: our rank*.jsonl, PRISM perf.jsonl or [TIMING] logs", show_default=False
        ),
    ],
    json_out: Annotated[
        bool, typer.Option("--json", help="Machine output: verdict, events, ranks, evidence, forensics")
    ] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG timeline to this file")] = None,
    log_format: Annotated[
        Optional[str],
        typer.Option(
            "--format",
            help="Read only this format (default: every "
            "file a reader recognises): stepmonitor, prism-perf.jsonl, "
            "prism-log, torchtitan-log, hf-trainer-log, hang-report",
        ),
    ] = None,
    runs: Annotated[
        bool,
        typer.Option(
            "--runs",
            help="The paths are separate runs of one scaling study: flag bimodal step times and a "
            "backward that grew mid-run, and name the runs to rerun (exit 1 if any)",
        ),
    ] = False,
) -> None:
    """Tell collapse, straggler, hang and input skew apart from step logs, and what grew in a
    collapse (docs/collapse.md); exit 1 unless healthy."""
    from prism_strategy.diagnose.analyze import analyze as analyze_logs
    from prism_strategy.readers import named, on_progress
    from prism_strategy.report.console import read_progress
    from prism_strategy.report.verdict import show_runs, show_verdict

    if runs:
        from prism_strategy.diagnose.runs import check_runs

        checks = check_runs(paths)
        show_runs(checks, json_out=json_out)
        raise typer.Exit(1 if any(c.rerun for c in checks) else 0)

    if log_format is not None:
        named(log_format)  # flags before the logs: a long read does not precede a flag error
    if plot is not None and not Path(plot).absolute().parent.is_dir():
        raise SpecError(
            f"--plot {plot}: its folder does not exist; create it or give --plot a file in an existing folder"
        )
    on_progress(read_progress())
    verdict = analyze_logs(paths, fmt=log_format)
    show_verdict(verdict, json_out=json_out, plot=plot)
    raise typer.Exit(0 if verdict.healthy else 1)


@cli_errors
def emit(
    out: Annotated[str, typer.Option(help="Folder to write; created whole or not at all")],
    strategy: Annotated[
        Optional[str],
        typer.Option(help="Strategy name (see `prism-strategy strategies`); with --from-plan: default the plan's pick"),
    ] = None,
    platform: Annotated[Optional[str], typer.Option(help="Platform preset or path to a platform .toml")] = None,
    from_plan: Annotated[
        Optional[str],
        typer.Option(
            help="A `plan --json` file: its nodes, ranks per node, platform, "
            "precision, micro-batch, accumulation and checkpointing"
        ),
    ] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Number of nodes [default: 1]")] = None,
    ranks_per_node: Annotated[
        Optional[int], typer.Option(help="Ranks per node [default: the platform's devices per node]")
    ] = None,
    env_profile: Annotated[
        Optional[str], typer.Option(help="Env profile name or .toml; default: the platform's")
    ] = None,
    precision: Annotated[
        Optional[str], typer.Option(help="bf16-mixed | bf16-pure | fp32 [default: bf16-mixed]")
    ] = None,
    ckpt_freq: Annotated[
        Optional[str],
        typer.Option(
            help="Activation checkpointing every k-th block; 0 = none; sac = selective on every block [default: 0]"
        ),
    ] = None,
    loss: Annotated[
        Optional[str], typer.Option(help="Loss kernel wrap() installs: upcast | fused | chunked [default: upcast]")
    ] = None,
    micro_batch: Annotated[Optional[int], typer.Option(help="Samples per device (ds_config) [default: 1]")] = None,
    grad_accum: Annotated[
        Optional[int], typer.Option(help="Gradient accumulation steps (ds_config) [default: 1]")
    ] = None,
    static_graph: Annotated[
        Optional[bool], typer.Option("--static-graph/--no-static-graph", help="DDP static_graph (ddp only)")
    ] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile (refused where not viable)")] = False,
    bucket_mb: BucketMb = None,
    reduce_dtype: ReduceDtype = None,
    account: Annotated[Optional[str], typer.Option(help="Scheduler project / account")] = None,
    queue: Annotated[
        Optional[str],
        typer.Option(
            help="PBS: a queue of the platform (default: picked from --nodes "
            "and --walltime; checked against its limits); Slurm: partition"
        ),
    ] = None,
    walltime: Annotated[str, typer.Option(help="HH:MM:SS (checked against the queue's limit)")] = "01:00:00",
    filesystems: Annotated[
        Optional[str],
        typer.Option(
            help="PBS -l filesystems= (default: the platform's, e.g. flare:home on Aurora, home:eagle on Polaris)"
        ),
    ] = None,
    job_name: Annotated[str, typer.Option(help="Job name")] = "prism",
    script: Annotated[
        str, typer.Option(help="Training script each rank runs (--format torchtitan: torchtitan's entry point)")
    ] = "train.py",
    script_args: Annotated[Optional[list[str]], typer.Argument(help="Script arguments, after --")] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Write into an --out with files: replaces only what emit wrote there (.prism-emit.json)"
        ),
    ] = False,
    framework: Annotated[
        Optional[str],
        typer.Option(
            "--format",
            help="Also write the pick in your framework: torchtitan | deepspeed | accelerate "
            "(with --from-plan; a plan from `plan --from` keeps your config's other fields)",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable summary")] = False,
) -> None:
    """Write env.sh, the launcher (PBS or Slurm), torchrun.sh, strategy.toml and ds_config.json."""
    from prism_strategy.emit.frameworks import entry_script, framework_file, write_with
    from prism_strategy.emit.from_plan import emit_request
    from prism_strategy.report.findings import show_emit

    extra = None if framework is None else framework_file(from_plan, framework, strategy)
    script, args = entry_script(extra, framework, out, script, tuple(script_args or ()))
    req, _ = emit_request(
        from_plan=from_plan,
        strategy=extra.strategy if extra else strategy,
        platform=platform,
        nodes=nodes,
        ranks_per_node=ranks_per_node,
        precision=precision,
        ckpt_freq=ckpt_freq,
        loss=loss,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        env_profile=env_profile,
        static_graph=static_graph,
        compile=compile,
        bucket_mb=bucket_mb,
        reduce_dtype=reduce_dtype,
        account=account,
        queue=queue,
        walltime=walltime,
        filesystems=filesystems,
        job_name=job_name,
        script=script,
        script_args=args,
    )
    show_emit(*write_with(req, out, extra, force=force), json_out=json_out)


@cli_errors
def doctor(
    launcher: Annotated[
        Optional[list[str]],
        typer.Option(help="Launcher to check (PBS/Slurm/shell, strategy.toml, ds_config.json); repeatable"),
    ] = None,
    script: Annotated[
        Optional[list[str]], typer.Option(help="Training script to check (static, not run); repeatable")
    ] = None,
    config: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Framework config to check (torchtitan TOML, DeepSpeed JSON, Accelerate YAML, "
            "HF TrainingArguments JSON); repeatable"
        ),
    ] = None,
    model: Annotated[
        Optional[str], typer.Option(help="With --config: the model it trains, where the config names none")
    ] = None,
    platform: Annotated[Optional[str], typer.Option(help="Platform the job runs on")] = None,
    strategy: Annotated[Optional[str], typer.Option(help="Strategy the job uses")] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes the job spans")] = None,
    env_profile: Annotated[Optional[str], typer.Option(help="Profile to compare the live environment with")] = None,
    live: Annotated[
        Optional[bool],
        typer.Option("--live/--no-live", help="Check this machine (default: only when no file is given)"),
    ] = None,
    clean: Annotated[
        bool, typer.Option("--clean", help="End this user's leftover device-holding processes, by PID")
    ] = False,
    settle_s: Annotated[float, typer.Option(help="Seconds to wait after --clean (XCCL state settles)")] = 10.0,
    device_glob: Annotated[
        Optional[list[str]],
        typer.Option(help="Device files a leftover process may hold; repeatable (default /dev/dri/*, /dev/nvidia*)"),
    ] = None,
    module_show: Annotated[
        Optional[list[str]],
        typer.Option(
            help="`module show <module>` output (Lmod or Tcl), or "
            "'live' to run it here: what each module load sets, "
            "exactly; repeatable"
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output: findings, environment, summary")] = False,
) -> None:
    """Find launch mistakes in the live environment, launchers and scripts; exit 1 on an error."""
    from prism_strategy.diagnose.doctor import diagnose, doctor_request
    from prism_strategy.report.findings import show_doctor

    report = diagnose(
        doctor_request(
            launchers=launcher or (),
            scripts=script or (),
            configs=config or (),
            model=model,
            platform=platform,
            strategy=strategy,
            nodes=nodes,
            env_profile=env_profile,
            live=live,
            clean=clean,
            settle_s=settle_s,
            device_globs=device_glob or (),
            module_show=module_show or (),
        )
    )
    show_doctor(report, json_out=json_out)
    raise typer.Exit(report.exit_code)
