"""plan, estimate and the catalogs (models, platforms, strategies): planning/ answers, report/ prints."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from prism_strategy.cli.app import cli_errors
from prism_strategy.cli.options import (
    BucketMb,
    CkptFreq,
    Compile,
    CompileLoss,
    JsonOut,
    Lora,
    Loss,
    Mode,
    Nodes,
    Optimizer,
    PlatformPreset,
    PlatformRpn,
    Precision,
    ReduceDtype,
    SeqLen,
    Vision,
    field_option,
)


@cli_errors
def plan(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help="Preset name or path to a config.json")] = "qwen3-0.6b",
    mode: Mode = "e2e",
    platform: PlatformPreset = "aurora",
    nodes: Nodes = 1,
    seq_len: SeqLen = 1024,
    mean_seq_len: Annotated[Optional[int], field_option("mean_seq_len")] = None,
    micro_batch: Annotated[Optional[int], field_option("micro_batch")] = None,
    global_batch: Annotated[Optional[int], field_option("global_batch")] = None,
    grad_accum: Annotated[Optional[int], field_option("grad_accum")] = None,
    ckpt_freq: CkptFreq = "auto",
    loss: Loss = "upcast",
    precision: Precision = "bf16-mixed",
    optimizer: Optimizer = "adamw",
    vision: Annotated[
        Optional[str],
        typer.Option(help="Vision encoder: preset or path to a config.json (SigLIP, CLIP); adds it and a projector"),
    ] = None,
    image_tokens: Annotated[Optional[int], field_option("image_tokens")] = None,
    compile: Compile = False,
    compile_loss: CompileLoss = False,
    ranks_per_node: PlatformRpn = None,
    sweep_nodes: Annotated[Optional[str], field_option("sweep_nodes")] = None,
    calibration: Annotated[str, field_option("calibration")] = "auto",
    traced: Annotated[bool, field_option("traced", "--traced")] = False,
    markdown: Annotated[
        Optional[str], typer.Option(help="Also write a Markdown report here (+ a scaling PNG beside it)")
    ] = None,
    bucket_mb: BucketMb = None,
    reduce_dtype: ReduceDtype = None,
    script: Annotated[
        Optional[str],
        typer.Option(
            help="Your training script: its loss kernel, checkpointing, "
            "optimizer, precision and compile become the inputs "
            "(flags given here win)"
        ),
    ] = None,
    db: Annotated[
        Optional[str],
        typer.Option(
            help="Results store whose measured collective curves (commbench, "
            "imported nccl-tests / oneCCL logs) price matching collectives; "
            "default: the user's store"
        ),
    ] = None,
    rank_jitter: Annotated[
        Optional[str],
        typer.Option(
            help="Measured per-rank spread of the work between "
            "synchronisations (std / mean, e.g. 0.02) or a "
            "StepMonitor folder to read it from: prices the "
            "late-rank cost at scale into the step"
        ),
    ] = None,
    length_histogram: Annotated[
        Optional[str],
        typer.Option(
            help="File of the samples' text lengths, one 'tokens count' pair per line: prices the slowest "
            "rank's padded batch at scale (and step time at the mean padded length)"
        ),
    ] = None,
    length_bucketing: Annotated[
        bool, field_option("length_bucketing", "--length-bucketing/--no-length-bucketing")
    ] = True,
    varying_lengths: Annotated[
        Optional[bool], field_option("varying_lengths", "--varying-lengths/--fixed-lengths")
    ] = None,
    expandable_segments: Annotated[
        Optional[bool], field_option("expandable_segments", "--expandable-segments/--no-expandable-segments")
    ] = None,
    from_config: Annotated[
        Optional[str],
        typer.Option(
            "--from",
            help="Your framework config (torchtitan TOML, DeepSpeed JSON, Accelerate YAML, "
            "HF TrainingArguments JSON): its fields become the inputs (docs/framework_configs.md)",
        ),
    ] = None,
    override: Annotated[
        bool, typer.Option("--override", help="With --from: a flag that contradicts the config wins")
    ] = False,
    env_profile: Annotated[
        Optional[str],
        typer.Option(
            help="Env profile the ranks run under (a name from data/env_profiles or a profile .toml): its "
            "CCL variables price the collectives; default: the platform's own"
        ),
    ] = None,
    lora: Lora = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Which strategy fits, at what batch and checkpointing, how fast, and why."""
    from prism_strategy.bench.results.curves import curves_for_platform
    from prism_strategy.flags import config_of, plan_from_command_line
    from prism_strategy.inputs.length_histogram import read_length_histogram
    from prism_strategy.planning.rank_jitter import rank_jitter_from
    from prism_strategy.report.plan_table import show_plan

    config = config_of(from_config, override)  # read first: a bad config is said before anything else
    given = {k for k in ctx.params if ctx.get_parameter_source(k).name == "COMMANDLINE"}
    not_flags = ("markdown", "script", "db", "from_config", "override", "json_out")
    values = {k: v for k, v in ctx.params.items() if k not in not_flags} | dict(
        length_histogram=None if length_histogram is None else read_length_histogram(length_histogram),
        comm_curves=curves_for_platform(db, platform),
        rank_jitter=None if rank_jitter is None else rank_jitter_from(rank_jitter),
    )
    p = plan_from_command_line(values, given, script=script, config=config, override=override)
    show_plan(p, markdown=markdown, json_out=json_out, measured=_measured(p, db, platform))
    if p.recommended is None:  # a valid question, answered "nothing fits / nothing viable": a finding
        raise typer.Exit(1)


@cli_errors
def estimate(
    model: Annotated[str, typer.Option(help="Preset, config.json, or a pkg.mod:make_model factory")] = "tiny-llama",
    strategy: Annotated[
        str, typer.Option(help="Strategy to trace (see `prism-strategy strategies`)")
    ] = "fsdp_full_shard",
    platform: PlatformPreset = "aurora",
    nodes: Nodes = 1,
    ranks_per_node: PlatformRpn = None,
    seq_len: SeqLen = 1024,
    micro_batch: Annotated[Optional[int], field_option("micro_batch")] = None,
    ckpt_freq: CkptFreq = "0",
    precision: Precision = "bf16-mixed",
    mode: Mode = "e2e",
    vision: Vision = None,
    optimizer: Optimizer = "adamw",
    loss: Loss = "upcast",
    compile: Compile = False,
    compile_loss: CompileLoss = False,
    json_out: JsonOut = False,
) -> None:
    """Memory of the real training step traced on fake tensors, beside the analytic estimate."""
    from prism_strategy.flags import estimate as estimate_traced
    from prism_strategy.report.plan_table import show_estimate

    traced = show_estimate(
        estimate_traced(
            model,
            strategy,
            platform=platform,
            nodes=nodes,
            ranks_per_node=ranks_per_node,
            seq_len=seq_len,
            micro_batch=micro_batch,
            ckpt_freq=ckpt_freq,
            precision=precision,
            mode=mode,
            vision=vision,
            optimizer=optimizer,
            loss=loss,
            compile=compile,
            compile_loss=compile_loss,
        ),
        json_out=json_out,
    )
    if not traced:  # model states alone cannot fit: a finding
        raise typer.Exit(1)


@cli_errors
def models(json_out: JsonOut = False) -> None:
    """List the model presets (exact architectures)."""
    from prism_strategy.report.catalog import show_catalog

    show_catalog("models", json_out)


@cli_errors
def platforms(json_out: JsonOut = False) -> None:
    """List the platform presets."""
    from prism_strategy.report.catalog import show_catalog

    show_catalog("platforms", json_out)


@cli_errors
def strategies(json_out: JsonOut = False) -> None:
    """List the strategies and what each shards over which group."""
    from prism_strategy.report.catalog import show_catalog

    show_catalog("strategies", json_out)


def _measured(p, db: str | None, platform: str):
    """`--db`'s runs at the plan's layout (None without --db: the default store prices collectives only)."""
    if db is None:
        return None
    from prism_strategy.bench.launch.requests import platform_ref
    from prism_strategy.bench.results.measured import measured_at_layout
    from prism_strategy.bench.results.store import Store

    return measured_at_layout(p, Store(db), {platform, platform_ref(platform), p.scenario.platform.name})
