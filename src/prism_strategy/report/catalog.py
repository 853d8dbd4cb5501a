"""Tables for the preset lists: models, platforms, strategies."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from prism_strategy.engines import collective_kinds
from prism_strategy.report.console import Column, fitted_table, table_console
from prism_strategy.specs.presets import load_model, load_platform, model_names, platform_names
from prism_strategy.strategies import STRATEGIES


def models_rows() -> list[dict[str, Any]]:
    rows = []
    for n in model_names():
        m = load_model(n)
        rows.append(
            {
                "name": n,
                "kind": m.kind,
                "params": m.total_params,
                "layers": m.layers,
                "hidden": m.hidden,
                "heads": m.heads,
                "kv_heads": m.kv_heads,
                "ffn": m.ffn,
                "vocab": m.vocab,
                "max_positions": m.max_positions,
                "source": m.source,
            }
        )
    return rows


def platforms_rows() -> list[dict[str, Any]]:
    rows = []
    for n in platform_names():
        p = load_platform(n)
        rows.append(
            {
                "name": n,
                "device": p.device,
                "backend": p.backend,
                "library": p.collective_library,
                "devices_per_node": p.hardware.devices_per_node,
                "memory_gib": p.hardware.memory_gib,
                "peak_tflops_bf16": p.hardware.peak_tflops_bf16,
                "launcher": p.launcher,
                "env_profile": p.env_profile,
                "description": p.description,
            }
        )
    return rows


def strategies_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "engine": s.engine,
            "params": s.param_shard,
            "grads": s.grad_shard,
            "optimizer": s.optim_shard,
            "reshard_after_forward": s.reshard_after_forward,
            "collectives": collective_kinds(s),
            "torch_form": s.torch_form,
            "description": s.description,
        }
        for s in STRATEGIES
    ]


LONG_TEXT = {"source", "description", "collectives", "torch_form", "env_profile"}
"""Columns that move into numbered footnotes when the table is too wide for the terminal."""
OPTIONAL = {"kv_heads": 3, "max_positions": 2, "launcher": 1, "reshard_after_forward": 1, "ffn": 1}
"""Columns dropped (highest first) when footnotes alone do not make the table fit; --json keeps them."""


def print_rows(title: str, rows: list[dict[str, Any]], console: Console | None = None) -> None:
    c = console or table_console()
    columns = [
        Column(
            header=k,
            footnote=k in LONG_TEXT,
            drop=OPTIONAL.get(k, 0),
            justify="right" if isinstance(rows[0][k], (int, float)) and not isinstance(rows[0][k], bool) else "left",
        )
        for k in rows[0]
    ]
    body = [[_cell(k, v) for k, v in r.items()] for r in rows]
    c.print(fitted_table(title, columns, body, c.width))


def _cell(key: str, v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(map(str, v))
    if key == "params" and isinstance(v, int):
        return f"{v / 1e9:.3f}B" if v >= 10**8 else f"{v / 1e6:.2f}M"
    return str(v)


def show_catalog(kind: str, json_out: bool = False) -> None:
    """`models`, `platforms` or `strategies`: the rows as JSON or as a table."""
    from prism_strategy.report.console import print_json

    title, rows_fn = {
        "models": ("model presets", models_rows),
        "platforms": ("platform presets", platforms_rows),
        "strategies": ("strategies", strategies_rows),
    }[kind]
    rows = rows_fn()
    if json_out:
        print_json(rows)
    else:
        print_rows(title, rows)
