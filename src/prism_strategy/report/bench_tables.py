"""Tables for measured results: bench runs, compare rows, ceiling and tune summaries."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from prism_strategy.bench.store import Result
from prism_strategy.report.console import table_console


def _f(v: Any, fmt: str = "{:.3f}") -> str:
    return "-" if v is None else fmt.format(v)


def results_table(results: list[Result], title: str = "measured results") -> Table:
    t = Table(title=title, caption="measured; prediction at measurement time in --json")
    for col in ("id", "strategy", "status", "nproc", "mb", "seq", "step s", "samples/s", "fwd/bwd/opt s", "peak MiB"):
        t.add_column(col, no_wrap=True)
    for r in results:
        m, c = r.measured, r.config
        phases = "/".join(_f(m.get(k), "{:.3f}") for k in ("forward_s", "backward_s", "optimizer_s"))
        t.add_row(str(r.id), r.strategy, r.status, str(c.get("nproc", "")), str(c.get("micro_batch", "")),
                  str(c.get("seq_len", "")), _f(m.get("step_time_s")), _f(m.get("samples_per_s"), "{:.1f}"), phases,
                  _f(m["peak_memory_bytes"] / 2**20 if m.get("peak_memory_bytes") else None, "{:.1f}"))
    return t


def compare_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="predicted vs measured", caption="error % = (predicted - measured) / measured")
    for col in ("id", "strategy", "mb", "seq", "quantity", "predicted", "measured", "error %"):
        t.add_column(col)
    for r in rows:
        for q, pv in r["predicted"].items():
            t.add_row(str(r["id"]), r["strategy"], str(r["config"].get("micro_batch")), str(r["config"].get("seq_len")),
                      q, _f(pv, "{:.4g}"), _f(r["measured"][q], "{:.4g}"), _f(r["error_pct"][q], "{:+.1f}"))
    return t


def failures(results: list[Result]) -> list[str]:
    return [f"{r.strategy}: {r.status}: {r.measured.get('error', '')}" for r in results if r.status != "ok"]


def progress(total: int, label: str):
    """A rich progress bar; returns (progress, task_id)."""
    p = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                 TimeElapsedColumn(), console=Console(stderr=True))
    return p, p.add_task(label, total=total or None)


def print_table(t: Table) -> None:
    table_console(140).print(t)
