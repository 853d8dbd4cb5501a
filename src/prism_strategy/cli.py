"""Thin CLI: each command parses its options, calls one function of a stage module, prints.

Exit codes: 0 ok; 1 a finding or failure the user must act on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Optional

import typer

from prism_strategy.specs.errors import SpecError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Pick, configure, launch, measure and debug the data-parallel strategy of a PyTorch job.")


def cli_errors(fn):
    """Bad input (SpecError) becomes one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpecError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return wrapper


# --- plan / presets ---
def _print_json(data) -> None:
    import json

    typer.echo(json.dumps(data, indent=2, default=str))


def _int_list(text: str | None, name: str) -> list[int] | None:
    if text is None:
        return None
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecError(f"{name} takes a comma-separated list of integers, e.g. 1,2,4; got {text!r}") from None
    if not values or min(values) < 1:
        raise SpecError(f"{name} needs node counts >= 1, got {text!r}")
    return values


@app.command()
@cli_errors
def plan(
    model: Annotated[str, typer.Option(help="Preset name or path to a config.json")] = "qwen3-0.6b",
    mode: Annotated[str, typer.Option(help="e2e | projector | encoder-projector")] = "e2e",
    platform: Annotated[str, typer.Option(help="Platform preset or path to a platform .toml")] = "aurora",
    nodes: Annotated[int, typer.Option(help="Number of nodes")] = 1,
    seq_len: Annotated[int, typer.Option(help="Text tokens per sample")] = 1024,
    micro_batch: Annotated[Optional[int], typer.Option(help="Samples per device; default: each strategy's max")] = None,
    global_batch: Annotated[Optional[int], typer.Option(help="Samples per optimizer step")] = None,
    ckpt_freq: Annotated[int, typer.Option(help="Activation checkpointing every k-th block; 0 = none")] = 0,
    precision: Annotated[str, typer.Option(help="bf16-mixed | bf16-pure | fp32")] = "bf16-mixed",
    optimizer: Annotated[str, typer.Option(help="adamw | sgd")] = "adamw",
    vision: Annotated[Optional[str], typer.Option(help="Vision encoder preset (adds it and a projector)")] = None,
    image_tokens: Annotated[Optional[int], typer.Option(help="Image tokens per sample (default: patch count)")] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile on")] = False,
    ranks_per_node: Annotated[Optional[int], typer.Option(help="Default: the platform's devices per node")] = None,
    sweep_nodes: Annotated[Optional[str], typer.Option(help="Node counts for a scaling table, e.g. 1,2,4,8")] = None,
    traced: Annotated[bool, typer.Option("--traced", help="Also trace the real model (not available yet)")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False,
) -> None:
    """Which strategy fits, at what micro-batch, how fast, and why."""
    from prism_strategy.planner import plan as make_plan, plan_dict

    if traced:
        raise SpecError("--traced is not available in this version; drop it to get the analytic plan")
    p = make_plan(model, mode=mode, platform=platform, nodes=nodes, seq_len=seq_len, micro_batch=micro_batch,
                  global_batch=global_batch, ckpt_freq=ckpt_freq, precision=precision, optimizer=optimizer,
                  vision=vision, image_tokens=image_tokens, compile=compile, ranks_per_node=ranks_per_node,
                  sweep_nodes=_int_list(sweep_nodes, "--sweep-nodes"))
    if json_out:
        _print_json(plan_dict(p))
        return
    from prism_strategy.report.plan_table import print_plan

    print_plan(p)


def _catalog(title: str, rows_fn, json_out: bool) -> None:
    rows = rows_fn()
    if json_out:
        _print_json(rows)
        return
    from prism_strategy.report.catalog import print_rows

    print_rows(title, rows)


@app.command()
@cli_errors
def models(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the model presets (exact architectures)."""
    from prism_strategy.report.catalog import models_rows

    _catalog("model presets", models_rows, json_out)


@app.command()
@cli_errors
def platforms(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the platform presets."""
    from prism_strategy.report.catalog import platforms_rows

    _catalog("platform presets", platforms_rows, json_out)


@app.command()
@cli_errors
def strategies(json_out: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List the strategies and what each shards over which group."""
    from prism_strategy.report.catalog import strategies_rows

    _catalog("strategies", strategies_rows, json_out)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
