"""Tables for the preset lists: models, platforms, strategies."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from prism_strategy.specs.presets import load_model, load_platform, model_names, platform_names
from prism_strategy.engines import collective_kinds
from prism_strategy.strategies import STRATEGIES


def models_rows() -> list[dict[str, Any]]:
    rows = []
    for n in model_names():
        m = load_model(n)
        rows.append({"name": n, "kind": m.kind, "params": m.total_params, "layers": m.layers, "hidden": m.hidden,
                     "heads": m.heads, "kv_heads": m.kv_heads, "ffn": m.ffn, "vocab": m.vocab,
                     "max_positions": m.max_positions, "source": m.source})
    return rows


def platforms_rows() -> list[dict[str, Any]]:
    rows = []
    for n in platform_names():
        p = load_platform(n)
        rows.append({"name": n, "device": p.device, "backend": p.backend, "devices_per_node": p.devices_per_node,
                     "memory_gib": p.memory_gib, "peak_tflops_bf16": p.peak_tflops_bf16, "launcher": p.launcher,
                     "env_profile": p.env_profile, "description": p.description})
    return rows


def strategies_rows() -> list[dict[str, Any]]:
    return [{"name": s.name, "engine": s.engine, "params": s.param_shard, "grads": s.grad_shard,
             "optimizer": s.optim_shard, "reshard_after_forward": s.reshard_after_forward,
             "collectives": collective_kinds(s), "torch_form": s.torch_form,
             "description": s.description} for s in STRATEGIES]


def print_rows(title: str, rows: list[dict[str, Any]], console: Console | None = None) -> None:
    t = Table(title=title)
    for col in rows[0]:
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(*(_cell(v) for v in r.values()))
    (console or Console(width=200)).print(t)


def _cell(v: Any) -> str:
    if isinstance(v, list):
        return ", ".join(map(str, v))
    if isinstance(v, int) and not isinstance(v, bool) and v > 10**6:
        return f"{v / 1e9:.3f}B"
    return str(v)
