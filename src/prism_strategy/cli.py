"""Thin CLI: each command parses its options, calls one function of a stage module, prints.

Exit codes: 0 ok; 1 a finding or failure the user must act on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.values import int_list


def _one_line(text: str) -> str:
    return text.strip().replace("\r", "\\r").replace("\n", "\\n")


# click's exception classes as typer uses them (typer >= 0.2x vendors its own click)
_USAGE_ERROR, _CLICK_EXCEPTION = (next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)
                                  for name in ("UsageError", "ClickException"))


def _flags_as_flags(cmd) -> None:
    """Help shows a flag as a flag (`--json`, `--compile/--no-compile`), not as `--json <bool>`."""
    for p in cmd.params:
        if getattr(p, "is_flag", False):
            p.metavar = ""
    made = cmd.get_help_option  # click builds --help per context: blank its type column too

    def help_option(ctx, made=made):
        opt = made(ctx)
        if opt is not None:
            opt.metavar = ""
        return opt
    cmd.get_help_option = help_option
    for sub in getattr(cmd, "commands", {}).values():
        _flags_as_flags(sub)


class OneLineErrors(TyperGroup):
    """A usage error (unknown option, a value of the wrong type) is one line on stderr and exit
    code 2, like every other bad input, instead of click's usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        _flags_as_flags(self)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _USAGE_ERROR as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `prism-strategy`: the help
                typer.echo(e.format_message())
                sys.exit(e.exit_code)
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            typer.echo(f"error: {_one_line(e.format_message())}{hint}", err=True)
            sys.exit(2)
        except _CLICK_EXCEPTION as e:
            typer.echo(f"error: {_one_line(e.format_message())}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=OneLineErrors,
                  context_settings=HELP_OPTIONS,
                  help="Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job.")


def _print_version(value: bool) -> None:
    if value:
        from prism_strategy import __version__

        typer.echo(f"prism-strategy {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version and exit", is_eager=True,
                                                callback=_print_version)] = False) -> None:
    """Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job."""


def cli_errors(fn):
    """Bad input (SpecError) becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            typer.echo(f"error: {_one_line(str(e))}", err=True)
            raise typer.Exit(2) from None

    return wrapper


JsonOut = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON) instead of tables")]
BenchModel = Annotated[str, typer.Option(help="Model preset or config path (tiny-llama / small-llama fit a CPU)")]
Nproc = Annotated[int, typer.Option(help="Ranks to launch on this machine")]
Rpn = Annotated[Optional[int], typer.Option(help="Ranks per node: 2 of 4 makes a 2x2 mesh standing in for 2 nodes")]
Db = Annotated[Optional[str], typer.Option(help="Results store (SQLite); default in the user cache dir")]
Platform = Annotated[str, typer.Option(help="Platform the runs stand for (its model is compared)")]
SeqLen = Annotated[int, typer.Option(help="Text tokens per sample")]
CkptFreq = Annotated[str, typer.Option(help="Activation checkpointing: k (every k-th block, 0 = none) or sac "
                                             "(selective, every block)")]
Optimizer = Annotated[str, typer.Option(help="adamw (torch's default for the device) | adamw-foreach | "
                                             "adamw-fused | adamw-loop | sgd")]
Loss = Annotated[str, typer.Option(help="Loss kernel: upcast (fp32 logits) | fused | chunked")]
TimeoutS = Annotated[float, typer.Option(help="Seconds per run before it is killed")]


# --- plan / presets ---
def _print_json(data) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))


@app.command()
@cli_errors
def plan(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help="Preset name or path to a config.json")] = "qwen3-0.6b",
    mode: Annotated[str, typer.Option(help="e2e | projector | encoder-projector")] = "e2e",
    platform: Annotated[str, typer.Option(help="Platform preset or path to a platform .toml")] = "aurora",
    nodes: Annotated[int, typer.Option(help="Number of nodes")] = 1,
    seq_len: Annotated[int, typer.Option(help="Text tokens per sample, the longest (peak memory)")] = 1024,
    mean_seq_len: Annotated[Optional[int], typer.Option(help="Mean text tokens per sample, padded per batch "
                                                              "(step time); default --seq-len")] = None,
    micro_batch: Annotated[Optional[int], typer.Option(help="Samples per device; default: each strategy's max")] = None,
    global_batch: Annotated[Optional[int], typer.Option(help="Samples per optimizer step, exactly: "
                                                              "micro-batch x grad accumulation x world")] = None,
    grad_accum: Annotated[Optional[int], typer.Option(help="Micro-batches per optimizer step")] = None,
    ckpt_freq: Annotated[str, typer.Option(help="Activation checkpointing every k-th block, 0 = none; sac = "
                                                "torchtitan's selective per-op policy on every block; auto = fastest "
                                                "that fits, per option")] = "auto",
    loss: Annotated[str, typer.Option(help="Loss kernel: upcast (fp32 logits, HF) | fused (flash-attn CE) | "
                                           "chunked (Liger / chunked CE)")] = "upcast",
    precision: Annotated[str, typer.Option(help="bf16-mixed | bf16-pure | fp32")] = "bf16-mixed",
    optimizer: Annotated[str, typer.Option(help="adamw (torch's default: foreach on cuda/xpu, loop on cpu) | "
                                                "adamw-foreach | adamw-fused | adamw-loop | sgd")] = "adamw",
    vision: Annotated[Optional[str], typer.Option(
        help="Vision encoder: preset or path to a config.json (SigLIP, CLIP); adds it and a projector")] = None,
    image_tokens: Annotated[Optional[int], typer.Option(help="Image tokens per sample (default: patch count)")] = None,
    compile: Annotated[bool, typer.Option("--compile/--no-compile", help="torch.compile on (--no-compile: eager, "
                                                                      "whatever --script says)")] = False,
    ranks_per_node: Annotated[Optional[int], typer.Option(help="Default: the platform's devices per node")] = None,
    sweep_nodes: Annotated[Optional[str], typer.Option(help="Node counts for a scaling table, e.g. 1,2,4,8")] = None,
    calibration: Annotated[str, typer.Option(help="Calibration file, 'auto' (cached, when it matches) or 'none'")] = "auto",
    traced: Annotated[bool, typer.Option("--traced", help="Also trace the real training step on fake tensors (slow)")] = False,
    markdown: Annotated[Optional[str], typer.Option(help="Also write a Markdown report here (+ a scaling PNG beside it)")] = None,
    bucket_mb: Annotated[Optional[float], typer.Option(help="Gradient bucket MiB: DDP bucket_cap_mb, DeepSpeed "
                                                           "reduce/allgather bucket (default: 25)")] = None,
    reduce_dtype: Annotated[Optional[str], typer.Option(help="fp32 | bf16: FSDP2 reduce_dtype, DeepSpeed "
                                                          "communication_data_type (default: engine's)")] = None,
    script: Annotated[Optional[str], typer.Option(help="Your training script: its loss kernel, checkpointing, "
                                                       "optimizer, precision and compile become the inputs "
                                                       "(flags given here win)")] = None,
    db: Annotated[Optional[str], typer.Option(help="Results store whose measured collective curves (commbench, "
                                                   "imported nccl-tests / oneCCL logs) price matching collectives; "
                                                   "default: the user's store")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Which strategy fits, at what batch and checkpointing, how fast, and why."""
    from prism_strategy.bench.curves import curves_for
    from prism_strategy.planning.planner import plan as make_plan, plan_dict
    from prism_strategy.specs.presets import load_platform

    scripted = dict(loss=loss, ckpt_freq=ckpt_freq, optimizer=optimizer, precision=precision,
                    reduce_dtype=reduce_dtype, compile=compile)
    section = None
    if script is not None:
        from prism_strategy.diagnose.script_inputs import read_plan_inputs, script_error

        given = {k for k in scripted if ctx.get_parameter_source(k).name == "COMMANDLINE"}
        read, section = read_plan_inputs(script).plan_inputs(scripted, given)
        scripted |= read
    curves = curves_for(db, load_platform(platform).name)
    try:
        p = make_plan(model, mode=mode, platform=platform, nodes=nodes, seq_len=seq_len, mean_seq_len=mean_seq_len,
                      micro_batch=micro_batch, global_batch=global_batch, grad_accum=grad_accum, vision=vision,
                      image_tokens=image_tokens, ranks_per_node=ranks_per_node, calibration=calibration,
                      traced=traced, sweep_nodes=sweep_nodes, bucket_mb=bucket_mb, script=section,
                      comm_curves=curves, **scripted)
    except SpecError as e:
        raise (script_error(e, section) if section else e) from None
    if markdown is not None:
        from prism_strategy.report.markdown import write_markdown

        write_markdown(p, markdown)
    if json_out:
        _print_json(plan_dict(p))
    else:
        from prism_strategy.report.plan_table import print_plan

        print_plan(p)
    if p.recommended is None:  # a valid question, answered "nothing fits / nothing viable": a finding
        raise typer.Exit(1)


@app.command()
@cli_errors
def estimate(
    model: Annotated[str, typer.Option(help="Preset, config.json, or a pkg.mod:make_model factory")] = "tiny-llama",
    strategy: Annotated[str, typer.Option(help="Strategy to trace (see `prism-strategy strategies`)")] = "fsdp_full_shard",
    platform: Annotated[str, typer.Option(help="Platform preset or path to a platform .toml")] = "aurora",
    nodes: Annotated[int, typer.Option(help="Number of nodes")] = 1,
    ranks_per_node: Annotated[Optional[int], typer.Option(help="Default: the platform's devices per node")] = None,
    seq_len: Annotated[int, typer.Option(help="Text tokens per sample")] = 1024,
    micro_batch: Annotated[Optional[int], typer.Option(help="Samples per device; default: the largest that fits "
                                                            "(searched)")] = None,
    ckpt_freq: CkptFreq = "0",
    precision: Annotated[str, typer.Option(help="bf16-mixed | bf16-pure | fp32")] = "bf16-mixed",
    mode: Annotated[str, typer.Option(help="e2e | projector | encoder-projector")] = "e2e",
    vision: Annotated[Optional[str], typer.Option(help="Vision encoder preset or config path")] = None,
    optimizer: Optimizer = "adamw", loss: Loss = "upcast",
    json_out: JsonOut = False,
) -> None:
    """Memory of the real training step traced on fake tensors, beside the analytic estimate."""
    from prism_strategy.planning.planner import estimate_traced

    d = estimate_traced(model, strategy, platform=platform, nodes=nodes, ranks_per_node=ranks_per_node,
                        seq_len=seq_len, micro_batch=micro_batch, ckpt_freq=ckpt_freq, precision=precision,
                        mode=mode, vision=vision, optimizer=optimizer, loss=loss)
    if json_out:
        _print_json(d)
        return
    from prism_strategy.report.plan_table import estimate_lines

    typer.echo("\n".join(estimate_lines(d)))


def _catalog(title: str, rows_fn, json_out: bool) -> None:
    rows = rows_fn()
    if json_out:
        _print_json(rows)
        return
    from prism_strategy.report.catalog import print_rows

    print_rows(title, rows)


@app.command()
@cli_errors
def models(json_out: JsonOut = False) -> None:
    """List the model presets (exact architectures)."""
    from prism_strategy.report.catalog import models_rows

    _catalog("model presets", models_rows, json_out)


@app.command()
@cli_errors
def platforms(json_out: JsonOut = False) -> None:
    """List the platform presets."""
    from prism_strategy.report.catalog import platforms_rows

    _catalog("platform presets", platforms_rows, json_out)


@app.command()
@cli_errors
def strategies(json_out: JsonOut = False) -> None:
    """List the strategies and what each shards over which group."""
    from prism_strategy.report.catalog import strategies_rows

    _catalog("strategies", strategies_rows, json_out)


# --- bench / ceiling / results / compare / calibrate / tune / report ---
def _bench_base(model, nproc, ranks_per_node, micro_batch, seq_len, steps, warmup, precision, ckpt_freq, grad_accum,
                timeout_s, **run_options):
    from prism_strategy.bench.run import base_config

    return base_config(model=model, nproc=nproc, ranks_per_node=ranks_per_node, micro_batch=micro_batch,
                       seq_len=seq_len, steps=steps, warmup=warmup, precision=precision, ckpt_freq=ckpt_freq,
                       grad_accum=grad_accum, timeout_s=timeout_s, **run_options)




def _existing_store(db: str | None):
    """The store a read-only command reads: an explicit --db that does not exist is bad input."""
    from pathlib import Path

    from prism_strategy.bench.store import Store

    if db is not None:
        try:
            missing = not Path(db).is_file()
        except (OSError, ValueError):
            missing = True
        if missing:
            raise SpecError(f"--db {db[:200]}: no results store there; check the path, or store runs first with "
                            "`prism-strategy bench` or `results import`")
    return Store(db)


@app.command()
@cli_errors
def bench(
    model: BenchModel = "tiny-llama",
    strategies: Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")] = "ddp,fsdp_full_shard",
    nproc: Nproc = 4, ranks_per_node: Rpn = None, micro_batch: Annotated[int, typer.Option(help="Samples per rank")] = 2,
    seq_len: SeqLen = 128, steps: Annotated[int, typer.Option(help="Timed optimizer steps per run")] = 3,
    warmup: Annotated[int, typer.Option(help="Untimed steps first")] = 1,
    precision: Annotated[str, typer.Option(help="fp32 | bf16-mixed")] = "fp32",
    ckpt_freq: CkptFreq = "0", grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step")] = 1,
    optimizer: Optimizer = "adamw", loss: Loss = "upcast",
    platform: Platform = "cpu", timeout_s: Annotated[float, typer.Option(help="Seconds per run before it is killed")] = 300,
    db: Db = None, json_out: JsonOut = False,
) -> None:
    """Launch real multi-process runs, one job per strategy; store every result."""
    from prism_strategy.bench.run import run_bench
    from prism_strategy.bench.store import Store, export
    from prism_strategy.report.bench_tables import failures, print_table, progress, results_table, store_line
    from prism_strategy.strategies import parse_strategies

    from prism_strategy.bench.run import check_memory
    from prism_strategy.specs.presets import load_platform

    names = [s.name for s in parse_strategies(strategies)]
    base = _bench_base(model, nproc, ranks_per_node, micro_batch, seq_len, steps, warmup, precision, ckpt_freq,
                       grad_accum, timeout_s, optimizer=optimizer, loss=loss)
    check_memory(base, names, load_platform(platform))  # before the progress bar: exit 2 is one line
    store = Store(db)
    bar, task = progress(len(names), "bench")
    with bar:
        results = run_bench(base, names, platform, store, on_result=lambda i, n, r: bar.update(task, completed=i))
    if json_out:
        typer.echo(export(results, "json"))
    else:
        print_table(results_table(results, "bench (measured)"))
        typer.echo(store_line(store))
    for line in failures(results):
        typer.echo(f"failed: {line}", err=True)
    if failures(results):
        raise typer.Exit(1)


@app.command()
@cli_errors
def ceiling(
    strategy: Annotated[str, typer.Option(help="Strategy to search")] = "ddp", model: BenchModel = "tiny-llama",
    nproc: Nproc = 4, ranks_per_node: Rpn = None, seq_len: SeqLen = 128,
    precision: Annotated[str, typer.Option(help="fp32 | bf16-mixed")] = "fp32", ckpt_freq: CkptFreq = "0",
    memory_limit: Annotated[Optional[float], typer.Option(help="CPU: GiB of tracked tensor memory per rank")] = None,
    max_micro_batch: Annotated[int, typer.Option(help="Search cap: no larger micro-batch is tried")] = 1024,
    platform: Platform = "cpu", timeout_s: TimeoutS = 300, db: Db = None, json_out: JsonOut = False,
) -> None:
    """Largest micro-batch that runs, by bisection seeded with the planner's prediction."""
    from prism_strategy.bench.run import run_ceiling
    from prism_strategy.bench.store import Store
    from prism_strategy.specs.cluster import GiB
    from prism_strategy.strategies import get_strategy

    get_strategy(strategy)
    if memory_limit is not None and memory_limit <= 0:
        raise SpecError(f"--memory-limit must be > 0 GiB, got {memory_limit}")
    base = _bench_base(model, nproc, ranks_per_node, 1, seq_len, 1, 1, precision, ckpt_freq, 1, timeout_s)
    c, r = run_ceiling(base, strategy, platform, Store(db), max_micro_batch=max_micro_batch,
                       memory_limit_bytes=memory_limit * GiB if memory_limit else None)
    data = {"strategy": strategy, "ceiling": c.ceiling, "predicted": r.predicted["max_micro_batch"], "runs": c.runs,
            "trials": c.trials, "id": r.id}
    if json_out:
        _print_json(data)
    else:
        from prism_strategy.report.bench_tables import ceiling_lines

        typer.echo("\n".join(ceiling_lines(data, max_micro_batch)))
    if c.ceiling == 0:  # a valid question with a negative answer: even micro-batch 1 does not run
        raise typer.Exit(1)


results_app = typer.Typer(add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                          context_settings=HELP_OPTIONS,
                          help="List stored results; export them; import runs measured elsewhere.")
app.add_typer(results_app, name="results")


@results_app.callback(invoke_without_command=True)
@cli_errors
def results(
    ctx: typer.Context, db: Db = None,
    platform: Annotated[Optional[str], typer.Option(help="Only results of this platform")] = None,
    export_format: Annotated[Optional[str], typer.Option("--export", help="csv | json")] = None,
    out: Annotated[Optional[str], typer.Option(help="Write the export here instead of stdout")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output: the store (path, journal mode and why) "
                                                          "and its results")] = False,
    curves: Annotated[bool, typer.Option("--curves", help="List the measured collective curves instead "
                                                          "(commbench runs, imported nccl-tests / oneCCL logs)")] = False,
) -> None:
    """List stored results; export them as CSV or JSON. `results import` adds runs measured elsewhere."""
    from pathlib import Path

    from prism_strategy.bench.store import Store, export
    from prism_strategy.report.bench_tables import WIDTH, print_table, results_table, store_line

    if ctx.invoked_subcommand is not None:
        return
    if curves:
        from prism_strategy.bench.curves import stored_curves
        from prism_strategy.report.commbench_table import curves_table

        print_table(curves_table(stored_curves(_existing_store(db), platform)), WIDTH)
        return
    store = _existing_store(db)
    rows = store.query(platform=platform)
    if json_out:
        import json

        typer.echo(json.dumps({"store": {"path": str(store.path)} | store.journal.as_dict(),
                               "results": json.loads(export(rows, "json"))}, indent=2))
        return
    if export_format is None:
        print_table(results_table(rows), WIDTH)
        typer.echo(store_line(store))
        return
    text = export(rows, export_format)
    if out is None:
        typer.echo(text, nl=False)
        return
    tmp = Path(out + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)


Opt = typer.Option


@results_app.command("import")
@cli_errors
def results_import(
    path: Annotated[Optional[str], typer.Argument(help="PRISM log or perf.jsonl (or its folder), a StepMonitor "
                                                       "folder, or a torchtitan log", show_default=False)] = None,
    published: Annotated[Optional[str], Opt(help="Store a shipped published set instead, e.g. aurora-prism")] = None,
    model: Annotated[Optional[str], Opt(help="Model preset (required: logs do not name ours)")] = None,
    vision: Annotated[Optional[str], Opt(help="Vision encoder preset, if the run had one")] = None,
    mode: Annotated[Optional[str], Opt(help="e2e | projector | encoder-projector (PRISM logs say)")] = None,
    strategy: Annotated[Optional[str], Opt(help="Strategy name (PRISM logs say, except FSDP sharding in perf.jsonl)")] = None,
    platform: Annotated[Optional[str], Opt(help="Platform preset the run ran on (required)")] = None,
    nodes: Annotated[Optional[int], Opt(help="Nodes (default: the log's world size / the platform's devices)")] = None,
    micro_batch: Annotated[Optional[int], Opt(help="Samples per rank per micro-step")] = None,
    grad_accum: Annotated[Optional[int], Opt(help="Micro-steps per optimizer step (default: the log's, else 1)")] = None,
    seq_len: Annotated[Optional[int], Opt(help="Text tokens per sample (max length)")] = None,
    ckpt_freq: Annotated[Optional[int], Opt(help="Activation checkpointing every k-th block; 0 = none")] = None,
    precision: Annotated[Optional[str], Opt(help="bf16-mixed | bf16-pure | fp32")] = None,
    timing: Annotated[str, Opt(help="PRISM [TIMING] lines: running (means since the last reset, PRISM's "
                                    "trainer), interval (means since the previous line) or auto")] = "auto",
    log_format: Annotated[Optional[str], Opt("--format", help="nccl-tests | oneccl-benchmark: PATH is a "
                                             "collective benchmark's output (needs --platform, --nodes)")] = None,
    ranks_per_node: Annotated[Optional[int], Opt(help="Collective logs: ranks per node (default: the log's "
                                                     "ranks / --nodes)")] = None,
    db: Db = None, json_out: Annotated[bool, Opt("--json", help="Machine output: the stored result")] = False,
) -> None:
    """Store a run measured elsewhere (flags win over what the log says), or a published set.

    With --format nccl-tests or oneccl-benchmark, PATH is a collective benchmark's output: its
    times per size are stored as a measured curve, and `plan` prices that collective with it.

    Steady state: the first 10% of logged windows (at least 1) are warm-up; then windows beyond
    median +/- 3 x max(1.4826 MAD, 2% of median) are outliers. Both are dropped and counted.
    A bad or partial log exits 2 naming the file and line, and stores nothing.
    """
    from prism_strategy.bench.store import Store

    if (path is None) == (published is None):
        raise SpecError("give either a PATH to a log or --published NAME (e.g. aurora-prism), not both")
    if log_format is not None:
        from prism_strategy.bench.curves import import_collective_log

        if path is None or platform is None:
            raise SpecError(f"--format {log_format} imports a log: give its PATH and --platform")
        done = import_collective_log(path, log_format, platform=platform, nodes=nodes, ranks_per_node=ranks_per_node,
                                     store=Store(db))
        if json_out:
            _print_json(done)
        else:
            typer.echo(f"{done['action']} {done['points']} {done['format']} {done['op']} points "
                       f"({done['bytes_min']:.0f}..{done['bytes_max']:.0f} B) for {done['platform']} "
                       f"{done['nodes']}x{done['ranks_per_node']} ranks; plan prices {done['op']} with them")
        return
    if published is not None:
        from prism_strategy.bench.importers.published_records import import_published
        from prism_strategy.report.bench_tables import published_lines

        done = import_published(published, Store(db))
        if json_out:
            _print_json([{"id": r.id, "record": r.measured["published"]["id"], "action": a} for r, a in done])
        else:
            typer.echo("\n".join(published_lines(published, done)))
        return
    from prism_strategy.bench.importers import import_run
    from prism_strategy.report.bench_tables import import_lines

    flags = dict(model=model, vision=vision, mode=mode, strategy=strategy, platform=platform, nodes=nodes,
                 micro_batch=micro_batch, grad_accum=grad_accum, seq_len=seq_len, ckpt_freq=ckpt_freq,
                 precision=precision, timing=timing)
    imp = import_run(path, flags, Store(db))
    if json_out:
        _print_json({"id": imp.result.id, "action": imp.action, "format": imp.format, "config": imp.result.config,
                     "measured": imp.result.measured, "predicted": imp.result.predicted, "origin": imp.origin,
                     "peak_allocated_bytes": imp.result.peak_allocated_bytes,
                     "peak_reserved_bytes": imp.result.peak_reserved_bytes, "notes": imp.notes})
    else:
        typer.echo("\n".join(import_lines(imp)))


@app.command()
@cli_errors
def compare(db: Db = None, calibration: Annotated[str, typer.Option(help="File, 'auto' or 'none'")] = "auto",
            json_out: JsonOut = False) -> None:
    """Prediction beside measurement for every stored configuration, with error %."""
    from prism_strategy.bench.compare import compare as make_rows
    from prism_strategy.bench.store import Store
    from prism_strategy.planning.planner import calibrated_platform
    from prism_strategy.report.bench_tables import WIDTH, compare_table, print_table
    from prism_strategy.specs.presets import load_platform

    rows = make_rows(_existing_store(db).query(), platform_for=lambda name: calibrated_platform(load_platform(name), calibration))
    if json_out:
        _print_json(rows)
    else:
        print_table(compare_table(rows), WIDTH)


@app.command()
@cli_errors
def calibrate(platform: Annotated[str, typer.Option(help="Platform preset to fit (as plan's --platform)")] = "aurora",
              db: Db = None,
              out: Annotated[Optional[str], typer.Option(help="Default: the user cache, used by plan automatically")] = None,
              json_out: JsonOut = False) -> None:
    """Fit the platform's terms to its published records and stored results; write a calibration file."""
    from prism_strategy.bench.calibrate import run_calibrate

    report = run_calibrate(platform, db, out)
    if json_out:
        _print_json(report)
    else:
        from prism_strategy.report.bench_tables import calibrate_lines

        typer.echo("\n".join(calibrate_lines(report)))
    if not report["written"]:
        raise typer.Exit(1)


@app.command()
@cli_errors
def tune(
    model: BenchModel = "tiny-llama",
    strategies: Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")] = "ddp,fsdp_full_shard,zero2",
    micro_batches: Annotated[str, typer.Option(help="e.g. 1,2,4")] = "1,2,4",
    ckpt_freqs: Annotated[str, typer.Option(help="e.g. 0,1")] = "0", nproc: Nproc = 4, ranks_per_node: Rpn = None,
    seq_len: SeqLen = 128, precision: Annotated[str, typer.Option(help="fp32 | bf16-mixed")] = "fp32",
    platform: Platform = "cpu", timeout_s: TimeoutS = 300, db: Db = None,
    calibration: Annotated[str, typer.Option(help="Rank with: file, 'auto' or 'none'")] = "auto",
    json_out: JsonOut = False,
) -> None:
    """Measure the most promising configurations first; stop when none left can win."""
    from prism_strategy.bench.run import run_tune
    from prism_strategy.bench.store import Store
    from prism_strategy.strategies import parse_strategies

    names = [s.name for s in parse_strategies(strategies)]
    mbs = int_list(micro_batches, "--micro-batches")
    ks = int_list(ckpt_freqs, "--ckpt-freqs", minimum=0) if ckpt_freqs.strip() else [0]
    base = _bench_base(model, nproc, ranks_per_node, 1, seq_len, 3, 1, precision, 0, 1, timeout_s)
    res = run_tune(base, names, mbs or [1], ks, platform, Store(db), calibration=calibration)
    data = res.as_dict()
    if json_out:
        _print_json(data)
    else:
        from prism_strategy.report.bench_tables import tune_lines

        typer.echo("\n".join(tune_lines(data)))


@app.command()
@cli_errors
def report(out: Annotated[str, typer.Option(help="Folder for the PNGs")] = "prism-report", db: Db = None,
           model: Annotated[str, typer.Option(help="Model for the predicted scaling curve")] = "qwen3-0.6b",
           platform: Annotated[str, typer.Option(help="Platform for the predicted scaling curve")] = "aurora") -> None:
    """PNG plots: throughput predicted vs measured, scaling curve, step-time breakdown."""
    from prism_strategy.bench.compare import compare as make_rows
    from prism_strategy.planning.planner import plan as make_plan
    from prism_strategy.report.plots import check_out_dir, write_report

    outdir = check_out_dir(out)
    store = _existing_store(db)
    rows = make_rows(store.query())
    scaling = make_plan(model, platform=platform, nodes=1, sweep_nodes=[1, 2, 4, 8, 16, 32])
    written, notes = write_report(rows, scaling, outdir, str(store.path))
    for p in written:
        typer.echo(str(p))
    for n in notes:
        typer.echo(f"note: {n}")


# --- analyze ---
@app.command()
@cli_errors
def analyze(
    paths: Annotated[list[str], typer.Argument(help="Run directory or log files: our rank*.jsonl, "
                                                    "PRISM perf.jsonl or [TIMING] logs", show_default=False)],
    json_out: Annotated[bool, typer.Option("--json", help="Machine output: verdict, events, ranks, evidence")] = False,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG timeline to this file")] = None,
) -> None:
    """Tell collapse, straggler, hang and input skew apart from step logs; exit 1 unless healthy."""
    from prism_strategy.diagnose.analyze import analyze as analyze_logs
    from prism_strategy.report.verdict import render_verdict, verdict_json

    verdict = analyze_logs(paths)
    if plot:
        from prism_strategy.report.timeline import plot_timeline

        plot_timeline(verdict, plot)
    if json_out:
        typer.echo(verdict_json(verdict))
    else:
        render_verdict(verdict)
    raise typer.Exit(0 if verdict.healthy else 1)


# --- emit / doctor ---
@app.command()
@cli_errors
def emit(
    out: Annotated[str, typer.Option(help="Folder to write; created whole or not at all")],
    strategy: Annotated[Optional[str], typer.Option(help="Strategy name (see `prism-strategy strategies`); "
                                                         "with --from-plan: default the plan's pick")] = None,
    platform: Annotated[Optional[str], typer.Option(help="Platform preset or path to a platform .toml")] = None,
    from_plan: Annotated[Optional[str], typer.Option(help="A `plan --json` file: its nodes, ranks per node, platform, "
                                                          "precision, micro-batch, accumulation and checkpointing")] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Number of nodes [default: 1]")] = None,
    ranks_per_node: Annotated[Optional[int], typer.Option(help="Ranks per node [default: the platform's devices "
                                                               "per node]")] = None,
    env_profile: Annotated[Optional[str], typer.Option(help="Env profile name or .toml; default: the platform's")] = None,
    precision: Annotated[Optional[str], typer.Option(help="bf16-mixed | bf16-pure | fp32 [default: bf16-mixed]")] = None,
    ckpt_freq: Annotated[Optional[str], typer.Option(help="Activation checkpointing every k-th block; 0 = none; "
                                                          "sac = selective on every block [default: 0]")] = None,
    loss: Annotated[Optional[str], typer.Option(help="Loss kernel wrap() installs: upcast | fused | chunked "
                                                     "[default: upcast]")] = None,
    micro_batch: Annotated[Optional[int], typer.Option(help="Samples per device (ds_config) [default: 1]")] = None,
    grad_accum: Annotated[Optional[int], typer.Option(help="Gradient accumulation steps (ds_config) [default: 1]")] = None,
    static_graph: Annotated[Optional[bool], typer.Option("--static-graph/--no-static-graph",
                                                         help="DDP static_graph (ddp only)")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile (refused where not viable)")] = False,
    bucket_mb: Annotated[Optional[float], typer.Option(help="Gradient bucket MiB: DDP bucket_cap_mb, DeepSpeed "
                                                           "reduce/allgather bucket (default: 25)")] = None,
    reduce_dtype: Annotated[Optional[str], typer.Option(help="fp32 | bf16: FSDP2 reduce_dtype, DeepSpeed "
                                                          "communication_data_type (default: engine's)")] = None,
    account: Annotated[Optional[str], typer.Option(help="Scheduler project / account")] = None,
    queue: Annotated[Optional[str], typer.Option(help="PBS: a queue of the platform (default: picked from --nodes "
                                                      "and --walltime; checked against its limits); Slurm: partition")] = None,
    walltime: Annotated[str, typer.Option(help="HH:MM:SS (checked against the queue's limit)")] = "01:00:00",
    filesystems: Annotated[Optional[str], typer.Option(help="PBS -l filesystems= (default: the platform's, "
                                                            "e.g. flare:home on Aurora, home:eagle on Polaris)")] = None,
    job_name: Annotated[str, typer.Option(help="Job name")] = "prism",
    script: Annotated[str, typer.Option(help="Training script each rank runs")] = "train.py",
    script_args: Annotated[Optional[list[str]], typer.Argument(help="Script arguments, after --")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an --out folder that has files")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable summary")] = False,
) -> None:
    """Write env.sh, the launcher (PBS or Slurm), torchrun.sh, strategy.toml and ds_config.json."""
    from pathlib import Path

    from prism_strategy.emit.files import write_files_atomically
    from prism_strategy.emit.from_plan import emit_request
    from prism_strategy.emit.launch import emit_files
    from prism_strategy.report.findings import emit_json, render_emit

    req, _ = emit_request(
        from_plan=from_plan, strategy=strategy, platform=platform, nodes=nodes, ranks_per_node=ranks_per_node,
        precision=precision, ckpt_freq=ckpt_freq, loss=loss,
        micro_batch=micro_batch, grad_accum=grad_accum, env_profile=env_profile, static_graph=static_graph,
        compile=compile, bucket_mb=bucket_mb, reduce_dtype=reduce_dtype, account=account, queue=queue, walltime=walltime, filesystems=filesystems, job_name=job_name,
        script=script, script_args=tuple(script_args or ()))
    emitted = emit_files(req, Path(out))
    written = write_files_atomically(Path(out), emitted.files, force=force)
    if json_out:
        typer.echo(emit_json(emitted, written))
    else:
        render_emit(emitted, written)


def _refuse_plan_file(path: str) -> None:
    """`doctor --launcher plan.json`: a plan is not a launcher; say what to do with it."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text()) if path.endswith(".json") and Path(path).is_file() else None
    except (OSError, UnicodeDecodeError, ValueError):
        return
    if isinstance(data, dict) and "inputs" in data and "options" in data:
        raise SpecError(f"--launcher {path} is a `plan --json` file, not a launcher; write the launchers with "
                        f"`prism-strategy emit --from-plan {path} --out DIR` and check those")


@app.command()
@cli_errors
def doctor(
    launcher: Annotated[Optional[list[str]], typer.Option(help="Launcher to check (PBS/Slurm/shell, strategy.toml, "
                                                               "ds_config.json); repeatable")] = None,
    script: Annotated[Optional[list[str]], typer.Option(help="Training script to check (static, not run); repeatable")] = None,
    platform: Annotated[Optional[str], typer.Option(help="Platform the job runs on")] = None,
    strategy: Annotated[Optional[str], typer.Option(help="Strategy the job uses")] = None,
    nodes: Annotated[Optional[int], typer.Option(help="Nodes the job spans")] = None,
    env_profile: Annotated[Optional[str], typer.Option(help="Profile to compare the live environment with")] = None,
    live: Annotated[Optional[bool], typer.Option("--live/--no-live", help="Check this machine (default: only when "
                                                                         "no file is given)")] = None,
    clean: Annotated[bool, typer.Option("--clean", help="End this user's leftover device-holding processes, by PID")] = False,
    settle_s: Annotated[float, typer.Option(help="Seconds to wait after --clean (XCCL state settles)")] = 10.0,
    device_glob: Annotated[Optional[list[str]], typer.Option(help="Device files a leftover process may hold; "
                                                                  "repeatable (default /dev/dri/*, /dev/nvidia*)")] = None,
    module_show: Annotated[Optional[list[str]], typer.Option(help="`module show <module>` output (Lmod or Tcl), or "
                                                                  "'live' to run it here: what each module load sets, "
                                                                  "exactly; repeatable")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Machine output: findings, environment, summary")] = False,
) -> None:
    """Find launch mistakes in the live environment, launchers and scripts; exit 1 on an error."""
    from pathlib import Path

    from prism_strategy.diagnose.doctor import DoctorRequest, diagnose
    from prism_strategy.report.findings import doctor_json, render_doctor

    if settle_s < 0:
        raise SpecError(f"--settle-s must be >= 0, got {settle_s}")
    for p in launcher or ():
        _refuse_plan_file(p)
    report = diagnose(DoctorRequest(
        launchers=tuple(Path(p) for p in launcher or ()), scripts=tuple(Path(p) for p in script or ()),
        platform=platform, strategy=strategy, nodes=nodes, env_profile=env_profile,
        live=True if clean else live, clean=clean, settle_s=settle_s, device_globs=tuple(device_glob or ()),
        module_show=tuple(Path(p) for p in module_show or ())))
    if json_out:
        typer.echo(doctor_json(report))
    else:
        render_doctor(report)
    raise typer.Exit(report.exit_code)


@app.command()
@cli_errors
def census(
    model: BenchModel = "tiny-llama",
    strategies: Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")] = "all",
    nproc: Nproc = 4, ranks_per_node: Rpn = None, micro_batch: Annotated[int, typer.Option(help="Samples per rank")] = 2,
    seq_len: SeqLen = 32, grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step")] = 1,
    precision: Annotated[str, typer.Option(help="fp32 | bf16-mixed")] = "bf16-mixed",
    mode: Annotated[str, typer.Option(help="e2e | projector | encoder-projector")] = "e2e",
    vision: Annotated[Optional[str], typer.Option(help="Vision encoder preset or config path")] = None,
    bucket_mb: Annotated[Optional[float], typer.Option(help="DDP bucket / DeepSpeed bucket size, MiB")] = None,
    reduce_dtype: Annotated[Optional[str], typer.Option(help="fp32 | bf16: gradient reduction dtype")] = None,
    timeout_s: Annotated[float, typer.Option(help="Per strategy")] = 300,
    json_out: JsonOut = False,
) -> None:
    """Run each strategy for real and compare the collectives of one step with the engine model."""
    from prism_strategy.bench.census import census_base, run_census
    from prism_strategy.report.census_table import print_census
    from prism_strategy.strategies import parse_strategies

    names = [s.name for s in parse_strategies(strategies)]
    base = census_base(model=model, nproc=nproc, ranks_per_node=ranks_per_node, micro_batch=micro_batch,
                       seq_len=seq_len, grad_accum=grad_accum, precision=precision, mode=mode, vision=vision,
                       bucket_mb=bucket_mb, reduce_dtype=reduce_dtype, timeout_s=timeout_s)
    report = run_census(base, names)
    if json_out:
        _print_json(report.as_dict())
    else:
        print_census(report)
    if not report.ok:
        raise typer.Exit(1)


@app.command()
@cli_errors
def commbench(
    model: BenchModel = "tiny-llama",
    strategies: Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")] = "ddp,fsdp_full_shard",
    nproc: Nproc = 4, ranks_per_node: Rpn = None,
    micro_batch: Annotated[int, typer.Option(help="Samples per rank (sizes the activations' collectives)")] = 2,
    seq_len: SeqLen = 32, grad_accum: Annotated[int, typer.Option(help="Micro-batches per optimizer step")] = 1,
    precision: Annotated[str, typer.Option(help="fp32 | bf16-mixed | bf16-pure")] = "bf16-mixed",
    bucket_mb: Annotated[Optional[float], typer.Option(help="DDP bucket / DeepSpeed bucket size, MiB")] = None,
    reduce_dtype: Annotated[Optional[str], typer.Option(help="fp32 | bf16: gradient reduction dtype")] = None,
    platform: Platform = "cpu", timeout_s: Annotated[float, typer.Option(help="Per strategy")] = 300,
    launched: Annotated[bool, typer.Option("--launched", help="This process is one of --nproc ranks a scheduler "
                                                              "started (emit's commbench.pbs / .sbatch)")] = False,
    db: Db = None, json_out: JsonOut = False,
) -> None:
    """Replay each strategy's collectives of one step (no model compute) on the real backend;
    time each kind, store it, and show it beside the link model's prediction."""
    from prism_strategy.bench.commbench import commbench_base, run_commbench, run_launched
    from prism_strategy.bench.store import Store
    from prism_strategy.report.commbench_table import print_commbench
    from prism_strategy.specs.presets import load_platform
    from prism_strategy.strategies import parse_strategies

    names = [s.name for s in parse_strategies(strategies)]
    base = commbench_base(model=model, nproc=nproc, ranks_per_node=ranks_per_node, micro_batch=micro_batch,
                          seq_len=seq_len, grad_accum=grad_accum, precision=precision, bucket_mb=bucket_mb,
                          reduce_dtype=reduce_dtype, timeout_s=timeout_s)
    report = (run_launched if launched else run_commbench)(base, names, load_platform(platform), Store(db))
    if report is None:  # a rank other than 0 of a launched run: rank 0 reports
        return
    if json_out:
        _print_json(report.as_dict())
    else:
        print_commbench(report)
    if not report.ok:
        raise typer.Exit(1)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
