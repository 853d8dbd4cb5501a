"""Option types shared by several commands, declared once (name, type, help); a command's own
options stay beside it. Help texts here are what `-h` prints, so tests/cli/test_help_cli.py pins them.

A flag that fills exactly one field of a run policy (specs/policies.py, or TrainingSpec.precision)
takes its help from that field's docstring (field_option): one text for `-h` and the code, so the
two cannot drift. A field without a docstring fails at import, never as an empty help."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from prism_strategy.specs.policies import BatchPolicy, MeasuredPolicy, MemoryPolicy, PlanOptions, field_help
from prism_strategy.specs.training import TrainingSpec

FIELD_OF: dict[str, tuple[type, str]] = {
    **{n: (BatchPolicy, n) for n in ("seq_len", "mean_seq_len", "micro_batch", "global_batch", "grad_accum")},
    **{n: (BatchPolicy, n) for n in ("image_tokens", "length_bucketing")},
    "ckpt_freq": (MemoryPolicy, "checkpointing"),
    **{n: (MemoryPolicy, n) for n in ("loss", "optimizer", "compile", "compile_loss", "bucket_mb")},
    **{n: (MemoryPolicy, n) for n in ("expandable_segments", "varying_lengths")},
    "calibration": (MeasuredPolicy, "calibration"),
    **{n: (PlanOptions, n) for n in ("sweep_nodes", "traced", "reduce_dtype")},
    "precision": (TrainingSpec, "precision"),
}
"""The flags (by parameter name) that fill one field each, and that field: (class, field name)."""


def field_option(flag: str, *param_decls: str, **kw: Any) -> Any:
    """typer.Option for `flag` (FIELD_OF), its help the docstring of the field it fills."""
    return typer.Option(*param_decls, help=field_help(*FIELD_OF[flag]), **kw)


JsonOut = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON) instead of tables")]
Db = Annotated[Optional[str], typer.Option(help="Results store (SQLite); default in the user cache dir")]

# planning (plan, estimate)
PlatformPreset = Annotated[str, typer.Option(help="Platform preset or path to a platform .toml")]
Nodes = Annotated[int, typer.Option(help="Number of nodes")]
PlatformRpn = Annotated[Optional[int], typer.Option(help="Default: the platform's devices per node")]
Mode = Annotated[str, typer.Option(help="e2e | projector | encoder-projector")]
Vision = Annotated[Optional[str], typer.Option(help="Vision encoder preset or config path")]
Lora = Annotated[
    Optional[str],
    typer.Option(help="A peft adapter_config.json: LoRA adapters (rank, target modules) train, the base is frozen"),
]

# the run's policy fields, as plan and the runs on this machine take them
SeqLen = Annotated[int, field_option("seq_len")]
GradAccum = Annotated[int, field_option("grad_accum")]
Precision = Annotated[str, field_option("precision")]
CkptFreq = Annotated[str, field_option("ckpt_freq")]
Optimizer = Annotated[str, field_option("optimizer")]
Loss = Annotated[str, field_option("loss")]
Compile = Annotated[bool, field_option("compile", "--compile/--no-compile")]
CompileLoss = Annotated[bool, field_option("compile_loss", "--compile-loss")]
BucketMb = Annotated[Optional[float], field_option("bucket_mb")]
ReduceDtype = Annotated[Optional[str], field_option("reduce_dtype")]

# runs on this machine (bench, ceiling, tune, census, commbench)
BenchModel = Annotated[str, typer.Option(help="Model preset or config path (tiny-llama / small-llama fit a CPU)")]
Strategies = Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")]
Nproc = Annotated[int, typer.Option(help="Ranks to launch on this machine")]
Rpn = Annotated[Optional[int], typer.Option(help="Ranks per node: 2 of 4 makes a 2x2 mesh standing in for 2 nodes")]
Platform = Annotated[str, typer.Option(help="Platform the runs stand for (its model is compared)")]
RankMicroBatch = Annotated[int, typer.Option(help="Samples per rank")]
EnvProfileOpt = Annotated[
    Optional[str],
    typer.Option(
        "--env-profile",
        help="Env profile the ranks run under (a name from data/env_profiles or a profile .toml, as plan's): "
        "its variables are set in the ranks and recorded with the run",
    ),
]


def positive_seconds(v: float) -> float:
    """A timeout's check: zero, negative or NaN would launch ranks that are killed at once."""
    if not v > 0:
        raise typer.BadParameter(f"must be > 0 seconds, got {v:g}")
    return v


TimeoutS = Annotated[float, typer.Option(help="Seconds per run before it is killed", callback=positive_seconds)]
PerStrategyTimeoutS = Annotated[float, typer.Option(help="Per strategy", callback=positive_seconds)]
