"""Render a Plan for people: one row per strategy, the recommendation, its reasons, the sweep."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from prism_strategy.planner import Plan
from prism_strategy.report.console import table_console
from prism_strategy.specs.cluster import GiB


def _fmt_items(o) -> str:
    return "; ".join(f"{label} {b / GiB:.1f}" for label, b in o.memory.largest_items(2))


def options_table(p: Plan) -> Table:
    sc = p.scenario
    title = (f"{sc.model.name} ({sc.model.mode}) on {sc.layout.nodes} x {sc.platform.name} "
             f"({sc.layout.world} ranks), seq {sc.training.seq_len}, {sc.training.precision}, "
             f"ckpt every {sc.training.ckpt_freq or '-'}")
    t = Table(title=title, caption="all numbers predicted by the analytic model (see provenance in --json)")
    for col, width in (("strategy", None), ("fits", None), ("GiB/dev", None), ("largest items (GiB)", 36),
                       ("max mb", None), ("mb", None), ("step s", None), ("samples/s", None), ("comm", None),
                       ("bound", None), ("eff", None), ("notes", 48)):
        t.add_column(col, overflow="fold", max_width=width)
    if any(o.traced for o in p.options):
        t.add_column("traced GiB / max mb")
    for o in p.options:
        mark = "*" if o.strategy == p.recommended else ""
        traced = [] if not o.traced else [f"{o.traced['traced_memory_gib']['total']:.1f} / {o.traced['traced_max_micro_batch']}"]
        t.add_row(mark + o.strategy, "yes" if o.feasible else "no", f"{o.memory.total / GiB:.1f}", _fmt_items(o),
                  str(o.max_micro_batch), str(o.micro_batch), f"{o.step_time_s:.3f}", f"{o.samples_per_s:.1f}",
                  f"{o.comm_fraction:.0%}", o.bound,
                  "-" if o.scaling_efficiency is None else f"{o.scaling_efficiency:.2f}",
                  o.why_not if not o.feasible else (o.notes[0] if o.notes else ""), *traced)
    return t


def sweep_table(p: Plan) -> Table:
    t = Table(title="scaling (predicted): leading strategies over node counts")
    for col in ("nodes", "strategy", "fits", "mb", "step s", "samples/s", "efficiency vs 1 node", "bound"):
        t.add_column(col)
    for r in p.sweep:
        t.add_row(str(r["nodes"]), r["strategy"], "yes" if r["feasible"] else "no", str(r["micro_batch"]),
                  f"{r['step_time_s']:.3f}", f"{r['samples_per_s']:.1f}",
                  f"{r['scaling_efficiency']:.2f}" if r["scaling_efficiency"] is not None else "-", r["bound"])
    return t


def print_plan(p: Plan, console: Console | None = None) -> None:
    c = console or table_console()
    c.print(options_table(p))
    c.print(f"[bold]recommended:[/bold] {p.recommended or 'none'}")
    for r in p.reasons:
        c.print(f"  - {r}")
    for w in p.warnings:
        c.print(f"[yellow]warning:[/yellow] {w}")
    if p.sweep:
        c.print(sweep_table(p))


def estimate_lines(d: dict) -> list[str]:
    """`prism-strategy estimate`: analytic and traced memory of one option, key by key."""
    traced, analytic = d["traced_memory_gib"], d.get("memory_gib") or {}
    lines = [f"{d['strategy']} at micro-batch {d['micro_batch']} ({d['traced_method']}, {d['traced_seconds']} s):"]
    for k, t in traced.items():
        a = analytic.get(k)
        lines.append(f"  {k:12s} analytic {'-' if a is None else f'{a:9.3f}'} GiB   traced {t:9.3f} GiB")
    lines.append(f"  peak at:     analytic {d.get('memory_peak_at', '-')}, traced {d['traced_phase']}")
    lines.append(f"  max micro-batch: analytic {d.get('max_micro_batch', '-')}, traced {d['traced_max_micro_batch']}")
    return lines
