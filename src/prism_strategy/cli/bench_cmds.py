"""Runs on this machine and what is stored of them: bench, ceiling, compare, calibrate, tune,
report, census, commbench. bench/ runs and stores; report/ prints."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from prism_strategy.cli.app import cli_errors
from prism_strategy.cli.options import (
    BenchModel,
    BucketMb,
    CkptFreq,
    Db,
    EnvProfileOpt,
    GradAccum,
    JsonOut,
    Lora,
    Loss,
    Mode,
    Nproc,
    Optimizer,
    PerStrategyTimeoutS,
    Platform,
    Precision,
    RankMicroBatch,
    ReduceDtype,
    Rpn,
    SeqLen,
    Strategies,
    TimeoutS,
    Vision,
    positive_seconds,
)


@cli_errors
def bench(
    model: BenchModel = "tiny-llama",
    strategies: Strategies = "ddp,fsdp_full_shard",
    nproc: Nproc = 4,
    ranks_per_node: Rpn = None,
    micro_batch: RankMicroBatch = 2,
    seq_len: SeqLen = 128,
    steps: Annotated[int, typer.Option(help="Timed optimizer steps per run")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed steps first")] = 1,
    precision: Precision = "fp32",
    ckpt_freq: CkptFreq = "0",
    grad_accum: GradAccum = 1,
    optimizer: Optimizer = "adamw",
    loss: Loss = "upcast",
    mode: Mode = "e2e",
    vision: Vision = None,
    lora: Lora = None,
    platform: Platform = "cpu",
    env_profile: EnvProfileOpt = None,
    timeout_s: Annotated[
        float,
        typer.Option(
            help="Seconds per run before it is killed", envvar="PRISM_BENCH_TIMEOUT_S", callback=positive_seconds
        ),
    ] = 300,
    launched: Annotated[
        bool,
        typer.Option(
            "--launched",
            help="This process is one of --nproc ranks a scheduler started (mpiexec, srun, torchrun; emit's "
            "bench.pbs / bench.sbatch): the candidates run here, in order, rank 0 stores them",
        ),
    ] = False,
    budget_min: Annotated[
        Optional[float], typer.Option(help="--launched: minutes for the whole job; no candidate starts after")
    ] = None,
    memory_limit: Annotated[
        Optional[float],
        typer.Option(
            help="--launched on CPU: GiB of tracked memory per rank (above: out of memory)",
            envvar="PRISM_BENCH_MEMORY_LIMIT",
        ),
    ] = None,
    db: Db = None,
    json_out: JsonOut = False,
) -> None:
    """Launch real multi-process runs, one job per strategy; store every result. With --launched,
    every rank of a scheduler's job runs this command and the candidates are timed there."""
    from prism_strategy.bench.launch.requests import launched_request
    from prism_strategy.bench.results.store import Store
    from prism_strategy.cli.bench_inputs import bench_from_flags
    from prism_strategy.report.bench_output import bench_with_progress, show_bench, show_launched_bench

    run = launched_request(launched, platform=platform, budget_min=budget_min, memory_limit=memory_limit)
    base, names = bench_from_flags(
        strategies,
        platform,
        env_profile=env_profile,
        model=model,
        nproc=nproc,
        ranks_per_node=ranks_per_node,
        micro_batch=micro_batch,
        seq_len=seq_len,
        steps=steps,
        warmup=warmup,
        precision=precision,
        ckpt_freq=ckpt_freq,
        grad_accum=grad_accum,
        timeout_s=timeout_s,
        optimizer=optimizer,
        loss=loss,
        **({"mode": mode, "vision": vision} if vision or mode != "e2e" else {}),
        **({"lora": lora} if lora else {}),
    )  # before the progress bar: exit 2 is one line
    store = Store(db)
    if run is not None:
        from prism_strategy.bench.launch.launched import end_job, run_launched_bench
        from prism_strategy.specs.presets import load_platform

        report = run_launched_bench(base, names, load_platform(platform), store, run)
        if report is None:  # rank 0 reports; the other ranks end quietly
            return
        show_launched_bench(report, store, json_out)
        if any(r.status == "failed" for r in report.results):
            end_job()
        if report.skipped or any(r.status != "ok" for r in report.results):
            raise typer.Exit(1)
        return
    results = bench_with_progress(base, names, platform, store)
    show_bench(results, store, json_out)
    if any(r.status != "ok" for r in results):
        raise typer.Exit(1)


@cli_errors
def ceiling(
    strategy: Annotated[str, typer.Option(help="Strategy to search")] = "ddp",
    model: BenchModel = "tiny-llama",
    nproc: Nproc = 4,
    ranks_per_node: Rpn = None,
    seq_len: SeqLen = 128,
    precision: Precision = "fp32",
    ckpt_freq: CkptFreq = "0",
    memory_limit: Annotated[Optional[float], typer.Option(help="CPU: GiB of tracked tensor memory per rank")] = None,
    max_micro_batch: Annotated[int, typer.Option(help="Search cap: no larger micro-batch is tried", min=1)] = 1024,
    platform: Platform = "cpu",
    timeout_s: TimeoutS = 300,
    db: Db = None,
    json_out: JsonOut = False,
) -> None:
    """Largest micro-batch that runs, by bisection seeded with the planner's prediction."""
    from prism_strategy.cli.bench_inputs import ceiling_from_flags
    from prism_strategy.report.bench_output import show_ceiling

    data = ceiling_from_flags(
        strategy,
        memory_limit=memory_limit,
        max_micro_batch=max_micro_batch,
        platform=platform,
        db=db,
        model=model,
        nproc=nproc,
        ranks_per_node=ranks_per_node,
        seq_len=seq_len,
        precision=precision,
        ckpt_freq=ckpt_freq,
        timeout_s=timeout_s,
    )
    show_ceiling(data, max_micro_batch, json_out)
    if data["ceiling"] == 0:  # a valid question with a negative answer: even micro-batch 1 does not run
        raise typer.Exit(1)


@cli_errors
def compare(
    db: Db = None,
    calibration: Annotated[str, typer.Option(help="File, 'auto' or 'none'")] = "auto",
    json_out: JsonOut = False,
) -> None:
    """Prediction beside measurement for every stored configuration, with error %."""
    from prism_strategy.bench.launch.requests import compare_rows
    from prism_strategy.report.bench_output import show_compare

    skipped: list[str] = []
    rows = compare_rows(db, calibration, skipped)
    show_compare(rows, json_out)
    for line in skipped:
        typer.echo(f"warning: skipped {line}", err=True)
    if not rows:  # a valid question with nothing to answer it: a finding
        raise typer.Exit(1)


@cli_errors
def calibrate(
    platform: Annotated[str, typer.Option(help="Platform preset to fit (as plan's --platform)")] = "aurora",
    db: Db = None,
    out: Annotated[Optional[str], typer.Option(help="Default: the user cache, used by plan automatically")] = None,
    fit: Annotated[
        str,
        typer.Option(
            help="all | steps (step time, memory) | comm (latency and bandwidth from the store's collective curves)"
        ),
    ] = "all",
    json_out: JsonOut = False,
) -> None:
    """Fit the platform's terms to its published records and stored results; write a calibration file."""
    from prism_strategy.bench.fit.calibrate import run_calibrate
    from prism_strategy.report.bench_output import show_calibrate

    report = run_calibrate(platform, db, out, fit)
    show_calibrate(report, json_out)
    if db is not None and not Path(db).is_file() and not json_out:  # a typo'd --db must not pass unseen
        typer.echo(f"note: --db {db} does not exist: no stored runs were fitted, only the published records")
    if not report["written"]:
        raise typer.Exit(1)


@cli_errors
def tune(
    model: BenchModel = "tiny-llama",
    strategies: Strategies = "ddp,fsdp_full_shard,zero2",
    micro_batches: Annotated[str, typer.Option(help="e.g. 1,2,4")] = "1,2,4",
    ckpt_freqs: Annotated[str, typer.Option(help="e.g. 0,1")] = "0",
    nproc: Nproc = 4,
    ranks_per_node: Rpn = None,
    seq_len: SeqLen = 128,
    precision: Precision = "fp32",
    platform: Platform = "cpu",
    timeout_s: TimeoutS = 300,
    db: Db = None,
    calibration: Annotated[str, typer.Option(help="Rank with: file, 'auto' or 'none'")] = "auto",
    launched: Annotated[
        bool,
        typer.Option(
            "--launched",
            help="This process is one of --nproc ranks a scheduler started: the candidates are timed here",
        ),
    ] = False,
    budget_min: Annotated[
        Optional[float], typer.Option(help="--launched: minutes for the whole search; no candidate starts after")
    ] = None,
    json_out: JsonOut = False,
) -> None:
    """Measure the most promising configurations first; stop when none left can win."""
    from prism_strategy.bench.launch.launched import end_job
    from prism_strategy.bench.launch.requests import launched_request
    from prism_strategy.cli.bench_inputs import tune_from_flags
    from prism_strategy.report.bench_output import show_tune

    run = launched_request(launched, platform=platform, budget_min=budget_min, memory_limit=None)
    data = tune_from_flags(
        strategies,
        micro_batches,
        ckpt_freqs,
        platform=platform,
        db=db,
        calibration=calibration,
        launched=run,
        model=model,
        nproc=nproc,
        ranks_per_node=ranks_per_node,
        seq_len=seq_len,
        precision=precision,
        timeout_s=timeout_s,
    )
    if data is None:  # a rank other than 0 of a launched tune: rank 0 reports
        return
    show_tune(data, json_out)
    if data.get("failed"):
        end_job()


@cli_errors
def report(
    out: Annotated[str, typer.Option(help="Folder for the PNGs")] = "prism-report",
    db: Db = None,
    model: Annotated[
        Optional[str], typer.Option(help="Model for the predicted scaling curve; default: the latest stored run's")
    ] = None,
    platform: Annotated[
        Optional[str], typer.Option(help="Platform for the predicted scaling curve; default: the latest stored run's")
    ] = None,
    calibration: Annotated[str, typer.Option(help="File, 'auto' or 'none' (as compare's)")] = "auto",
) -> None:
    """PNG plots: throughput predicted vs measured, scaling curve, step-time breakdown."""
    from prism_strategy.report.bench_output import write_store_report

    write_store_report(out, db, model, platform, calibration)


@cli_errors
def census(
    model: BenchModel = "tiny-llama",
    strategies: Strategies = "all",
    nproc: Nproc = 4,
    ranks_per_node: Rpn = None,
    micro_batch: RankMicroBatch = 2,
    seq_len: SeqLen = 32,
    grad_accum: GradAccum = 1,
    precision: Precision = "bf16-mixed",
    mode: Mode = "e2e",
    vision: Vision = None,
    lora: Lora = None,
    bucket_mb: BucketMb = None,
    reduce_dtype: ReduceDtype = None,
    timeout_s: PerStrategyTimeoutS = 300,
    json_out: JsonOut = False,
) -> None:
    """Run each strategy for real and compare the collectives of one step with the engine model."""
    from prism_strategy.bench.collectives.census import run_census
    from prism_strategy.bench.launch.requests import strategy_names
    from prism_strategy.cli.bench_inputs import census_base
    from prism_strategy.report.census_table import show_census

    names = strategy_names(strategies)
    report = run_census(
        census_base(
            model=model,
            nproc=nproc,
            ranks_per_node=ranks_per_node,
            micro_batch=micro_batch,
            seq_len=seq_len,
            grad_accum=grad_accum,
            precision=precision,
            mode=mode,
            vision=vision,
            lora=lora,
            bucket_mb=bucket_mb,
            reduce_dtype=reduce_dtype,
            timeout_s=timeout_s,
        ),
        names,
    )
    show_census(report, json_out)
    if not report.ok:
        raise typer.Exit(1)


@cli_errors
def commbench(
    model: BenchModel = "tiny-llama",
    strategies: Strategies = "ddp,fsdp_full_shard",
    nproc: Nproc = 4,
    ranks_per_node: Rpn = None,
    micro_batch: Annotated[int, typer.Option(help="Samples per rank (sizes the activations' collectives)")] = 2,
    seq_len: SeqLen = 32,
    grad_accum: GradAccum = 1,
    precision: Precision = "bf16-mixed",
    mode: Annotated[
        str, typer.Option(help="e2e | projector | encoder-projector: only what trains is reduced (as plan's)")
    ] = "e2e",
    vision: Vision = None,
    lora: Lora = None,
    bucket_mb: BucketMb = None,
    reduce_dtype: ReduceDtype = None,
    platform: Platform = "cpu",
    env_profile: EnvProfileOpt = None,
    timeout_s: PerStrategyTimeoutS = 300,
    launched: Annotated[
        bool,
        typer.Option(
            "--launched",
            help="This process is one of --nproc ranks a scheduler started (emit's commbench.pbs / .sbatch)",
        ),
    ] = False,
    db: Db = None,
    json_out: JsonOut = False,
) -> None:
    """Replay each strategy's collectives of one step (no model compute) on the real backend;
    time each kind, store it, and show it beside the link model's prediction."""
    from prism_strategy.bench.collectives.commbench import run_commbench, run_launched
    from prism_strategy.bench.launch.requests import strategy_names
    from prism_strategy.bench.results.store import Store
    from prism_strategy.cli.bench_inputs import commbench_base
    from prism_strategy.report.commbench_table import show_commbench
    from prism_strategy.specs.presets import load_platform

    names = strategy_names(strategies)
    base = commbench_base(
        model=model,
        nproc=nproc,
        ranks_per_node=ranks_per_node,
        micro_batch=micro_batch,
        seq_len=seq_len,
        grad_accum=grad_accum,
        precision=precision,
        mode=mode,
        vision=vision,
        **({"lora": lora} if lora else {}),
        bucket_mb=bucket_mb,
        reduce_dtype=reduce_dtype,
        timeout_s=timeout_s,
        env_profile=env_profile,
    )
    report = (run_launched if launched else run_commbench)(base, names, load_platform(platform), Store(db))
    if report is None:  # a rank other than 0 of a launched run: rank 0 reports
        return
    show_commbench(report, json_out)
    if not report.ok:
        raise typer.Exit(1)
