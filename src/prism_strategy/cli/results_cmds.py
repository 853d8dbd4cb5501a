"""`results` and `results import`: the store read and fed. bench/ reads logs and stores; report/ prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prism_strategy.cli.app import HELP_OPTIONS, cli_errors
from prism_strategy.cli.options import Db
from prism_strategy.specs.errors import SpecError

results_app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    help="List stored results; export them; import runs measured elsewhere.",
)
Opt = typer.Option


@results_app.callback(invoke_without_command=True)
@cli_errors
def results(
    ctx: typer.Context,
    db: Db = None,
    platform: Annotated[Optional[str], typer.Option(help="Only results of this platform")] = None,
    export_format: Annotated[Optional[str], typer.Option("--export", help="csv | json")] = None,
    out: Annotated[Optional[str], typer.Option(help="Write the export here instead of stdout")] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="Machine output: the store (path, journal mode and why) and its results")
    ] = False,
    curves: Annotated[
        bool,
        typer.Option(
            "--curves",
            help="List the measured collective curves instead (commbench runs, imported nccl-tests / oneCCL logs)",
        ),
    ] = False,
) -> None:
    """List stored results; export them as CSV or JSON. `results import` adds runs measured elsewhere."""
    from prism_strategy.bench.launch.requests import existing_store
    from prism_strategy.report.bench_output import show_curves, show_results

    if ctx.invoked_subcommand is not None:
        return
    if curves:
        show_curves(existing_store(db), platform)
    else:
        show_results(existing_store(db), platform, export_format, out, json_out)


@results_app.command("import")
@cli_errors
def results_import(
    path: Annotated[
        Optional[str],
        typer.Argument(
            help="PRISM log or perf.jsonl (or its folder), a StepMonitor "
            "folder, a torchtitan log, or an nccl-tests / oneCCL "
            "benchmark's output",
            show_default=False,
        ),
    ] = None,
    published: Annotated[Optional[str], Opt(help="Store a shipped published set instead, e.g. aurora-prism")] = None,
    model: Annotated[Optional[str], Opt(help="Model preset (required: logs do not name ours)")] = None,
    vision: Annotated[Optional[str], Opt(help="Vision encoder preset, if the run had one")] = None,
    mode: Annotated[Optional[str], Opt(help="e2e | projector | encoder-projector (PRISM logs say)")] = None,
    strategy: Annotated[
        Optional[str], Opt(help="Strategy name (PRISM logs say, except FSDP sharding in perf.jsonl)")
    ] = None,
    platform: Annotated[Optional[str], Opt(help="Platform preset the run ran on (required)")] = None,
    nodes: Annotated[
        Optional[int],
        Opt(help="Nodes (default: the log's world size / the platform's devices; a collective log's hosts)"),
    ] = None,
    micro_batch: Annotated[Optional[int], Opt(help="Samples per rank per micro-step")] = None,
    grad_accum: Annotated[
        Optional[int], Opt(help="Micro-steps per optimizer step (default: the log's, else 1)")
    ] = None,
    seq_len: Annotated[Optional[int], Opt(help="Text tokens per sample (max length)")] = None,
    ckpt_freq: Annotated[
        Optional[str], Opt(help="Activation checkpointing: k (every k-th block, 0 = none) or sac (selective)")
    ] = None,
    precision: Annotated[Optional[str], Opt(help="bf16-mixed | bf16-pure | fp32")] = None,
    timing: Annotated[
        str,
        Opt(
            help="PRISM [TIMING] lines: running (means since the last reset, PRISM's "
            "trainer), interval (means since the previous line) or auto"
        ),
    ] = "auto",
    log_format: Annotated[
        Optional[str],
        Opt(
            "--format",
            help="Read PATH as this format (default: detected): "
            "stepmonitor, prism-perf.jsonl, prism-log, torchtitan-log, hf-trainer-log; or "
            "nccl-tests | oneccl-benchmark, a collective benchmark's output "
            "(needs --platform; --nodes when the log names no hosts)",
        ),
    ] = None,
    ranks_per_node: Annotated[
        Optional[int], Opt(help="Collective logs: ranks per node (default: the log's ranks / --nodes)")
    ] = None,
    collective: Annotated[
        Optional[str],
        Opt(help="nccl-tests logs: the collective measured (all_reduce | all_gather | reduce_scatter | broadcast)"),
    ] = None,
    db: Db = None,
    json_out: Annotated[bool, Opt("--json", help="Machine output: the stored result")] = False,
) -> None:
    """Store a run measured elsewhere (flags win over what the log says), or a published set.

    The format is detected from the content unless --format names it. A collective benchmark's
    output (nccl-tests, oneccl-benchmark) is stored as a measured curve per size, and `plan`
    prices that collective with it.

    Steady state: the first 10% of logged windows (at least 1) are warm-up; then windows beyond
    median +/- 3 x max(1.4826 MAD, 2% of median) are outliers. Both are dropped and counted.
    A bad or partial log exits 2 naming the file and line, and stores nothing.
    """
    from prism_strategy.bench.results.store import Store
    from prism_strategy.report import bench_output as show

    if (path is None) == (published is None):
        from prism_strategy.bench.fit.published import published_names

        raise SpecError(
            f"give either the log {path} or --published {published}, not both"
            if path is not None
            else f"give the log to import (its path) or --published one of {', '.join(published_names())}"
        )
    from prism_strategy.readers import COLLECTIVE_FORMATS, collective_format

    if log_format is None and path is not None:
        log_format = collective_format(Path(path))
    if collective is not None and log_format not in COLLECTIVE_FORMATS:
        raise SpecError("--collective names what a collective benchmark's log measured (nccl-tests); not for runs")
    if log_format in COLLECTIVE_FORMATS:
        from prism_strategy.bench.results.curves import import_collective_log

        if path is None or platform is None:
            missing = " and ".join(w for w, v in (("the log's path", path), ("--platform", platform)) if v is None)
            raise SpecError(f"--format {log_format} imports a log measured on a platform: give {missing}")
        show.show_collective_import(
            import_collective_log(
                path,
                log_format,
                platform=platform,
                nodes=nodes,
                ranks_per_node=ranks_per_node,
                store=Store(db),
                collective=collective,
            ),
            json_out,
        )
    elif published is not None:
        from prism_strategy.bench.importers.published_records import import_published

        show.show_published_import(published, import_published(published, Store(db)), json_out)
    else:
        from prism_strategy.bench.importers import import_run
        from prism_strategy.readers import on_progress
        from prism_strategy.report.console import read_progress

        on_progress(read_progress())

        flags = dict(
            model=model,
            vision=vision,
            mode=mode,
            strategy=strategy,
            platform=platform,
            nodes=nodes,
            micro_batch=micro_batch,
            grad_accum=grad_accum,
            seq_len=seq_len,
            ckpt_freq=ckpt_freq,
            precision=precision,
            timing=timing,
            format=log_format,
        )
        show.show_run_import(import_run(path, flags, Store(db)), json_out)
