"""Option types shared by several commands, declared once (name, type, help); a command's own
options stay beside it. Help texts here are what `-h` prints, so tests/cli/test_help_cli.py pins them."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

JsonOut = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON) instead of tables")]
Db = Annotated[Optional[str], typer.Option(help="Results store (SQLite); default in the user cache dir")]

# planning (plan, estimate)
PlatformPreset = Annotated[str, typer.Option(help="Platform preset or path to a platform .toml")]
Nodes = Annotated[int, typer.Option(help="Number of nodes")]
PlatformRpn = Annotated[Optional[int], typer.Option(help="Default: the platform's devices per node")]
Mode = Annotated[str, typer.Option(help="e2e | projector | encoder-projector")]
Precision = Annotated[str, typer.Option(help="bf16-mixed | bf16-pure | fp32")]
Vision = Annotated[Optional[str], typer.Option(help="Vision encoder preset or config path")]
BucketMb = Annotated[
    Optional[float],
    typer.Option(help="Gradient bucket MiB: DDP bucket_cap_mb, DeepSpeed reduce/allgather bucket (default: 25)"),
]
ReduceDtype = Annotated[
    Optional[str],
    typer.Option(help="fp32 | bf16: FSDP2 reduce_dtype, DeepSpeed communication_data_type (default: engine's)"),
]

# runs on this machine (bench, ceiling, tune, census, commbench)
BenchModel = Annotated[str, typer.Option(help="Model preset or config path (tiny-llama / small-llama fit a CPU)")]
Strategies = Annotated[str, typer.Option(help="Comma-separated strategies, or 'all'")]
Nproc = Annotated[int, typer.Option(help="Ranks to launch on this machine")]
Rpn = Annotated[Optional[int], typer.Option(help="Ranks per node: 2 of 4 makes a 2x2 mesh standing in for 2 nodes")]
Platform = Annotated[str, typer.Option(help="Platform the runs stand for (its model is compared)")]
SeqLen = Annotated[int, typer.Option(help="Text tokens per sample")]
RankMicroBatch = Annotated[int, typer.Option(help="Samples per rank")]
GradAccum = Annotated[int, typer.Option(help="Micro-batches per optimizer step")]
EnvProfileOpt = Annotated[
    Optional[str],
    typer.Option(
        "--env-profile",
        help="Env profile the ranks run under (a name from data/env_profiles or a profile .toml, as plan's): "
        "its variables are set in the ranks and recorded with the run",
    ),
]
BenchPrecision = Annotated[str, typer.Option(help="fp32 | bf16-mixed | bf16-pure (bf16 params, grads, AdamW state)")]
CkptFreq = Annotated[
    str, typer.Option(help="Activation checkpointing: k (every k-th block, 0 = none) or sac (selective, every block)")
]
Optimizer = Annotated[
    str, typer.Option(help="adamw (torch's default for the device) | adamw-foreach | adamw-fused | adamw-loop | sgd")
]
Loss = Annotated[str, typer.Option(help="Loss kernel: upcast (fp32 logits) | fused | chunked")]
TimeoutS = Annotated[float, typer.Option(help="Seconds per run before it is killed")]
PerStrategyTimeoutS = Annotated[float, typer.Option(help="Per strategy")]
CommBucketMb = Annotated[Optional[float], typer.Option(help="DDP bucket / DeepSpeed bucket size, MiB")]
CommReduceDtype = Annotated[Optional[str], typer.Option(help="fp32 | bf16: gradient reduction dtype")]
CompileLoss = Annotated[
    bool,
    typer.Option(
        "--compile-loss", help="With --compile: the loss compiled too (torchtitan's default), no fp32 logits held"
    ),
]
