"""Render an `analyze` verdict: a headline, the evidence, the events and a per-rank table (rich)."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console
from rich.table import Table

from prism_strategy.diagnose.analyze import Verdict

STYLE = {"healthy": "bold green", "input_skew": "bold yellow", "straggler": "bold red",
         "collapse": "bold red", "hang": "bold red"}
MAX_RANK_ROWS = 16


def verdict_json(v: Verdict) -> str:
    return json.dumps(v.to_dict(), indent=2, default=str)


def _s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x * 1000:.1f}" if x < 10 else f"{x:.1f}s"


def _brief(evidence: dict[str, Any]) -> str:
    keys = ("from_step", "to_step", "backward_factor", "forward_factor", "step_time_factor", "compute_ratio",
            "collective_wait_s", "phase", "ranks_reached", "ranks_not_reached", "spearman_compute_vs_tokens",
            "s_per_1k_tokens")
    return "; ".join(f"{k}={evidence[k]}" for k in keys if k in evidence)


def _events_table(v: Verdict) -> Table:
    t = Table(title="events", show_lines=False)
    for col in ("event", "step", "ranks", "source", "evidence"):
        t.add_column(col, overflow="fold")
    for e in v.events:
        t.add_row(e.kind, str(e.step), ",".join(map(str, e.ranks)), e.source, _brief(e.evidence))
    return t


def _rank_rows(v: Verdict) -> list[int]:
    ranks = sorted(v.ranks)
    if len(ranks) <= MAX_RANK_ROWS:
        return ranks
    flagged = {r for e in v.events for r in e.ranks}
    by_local = sorted(ranks, key=lambda r: v.ranks[r].forward if math.isfinite(v.ranks[r].forward) else 0)
    keep = flagged | set(by_local[:4]) | set(by_local[-4:])
    return sorted(keep)[:MAX_RANK_ROWS]


def _ranks_table(v: Verdict) -> Table:
    shown = _rank_rows(v)
    title = "per rank, medians in ms" + ("" if len(shown) == len(v.ranks) else f" ({len(shown)} of {len(v.ranks)})")
    t = Table(title=title)
    for col in ("rank", "steps", "step", "data", "forward", "backward", "optimizer", "tokens"):
        t.add_column(col, justify="right")
    flagged = {r for e in v.events for r in e.ranks if e.kind in ("straggler", "hang")}
    for r in shown:
        s = v.ranks[r]
        tok = "-" if not math.isfinite(s.tokens) else f"{s.tokens:.0f}"
        t.add_row(str(r), str(s.steps), _s(s.step_s), _s(s.data), _s(s.forward), _s(s.backward),
                  _s(s.optimizer), tok, style="red" if r in flagged else None)
    return t


def render_verdict(v: Verdict, console: Console | None = None) -> None:
    console = console or Console()
    console.print(f"[{STYLE[v.verdict]}]verdict: {v.verdict}[/]")
    console.print(v.message, markup=False)
    if v.events:
        console.print(_events_table(v))
    if v.ranks:
        console.print(_ranks_table(v))
    if v.sources:
        more = f" (+{len(v.sources) - 4} more)" if len(v.sources) > 4 else ""
        console.print(f"[dim]read: {', '.join(v.sources[:4])}{more}[/]")
