"""The commbench table: per strategy and kind of collective, seconds per call measured on the
real backend beside the link model's prediction. Fits 100 columns."""

from __future__ import annotations

from rich import box
from rich.table import Table

from prism_strategy.bench.collectives.commbench import CommbenchReport
from prism_strategy.inputs.stored import shown_values
from prism_strategy.report.census_table import bytes_text
from prism_strategy.report.console import table_console
from prism_strategy.specs.measured import MeasuredCurve

_GROUP = {"world": "world", "node": "node", "across_nodes": "across"}


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    ms = v * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.2f}" if ms >= 1 else f"{ms:.3f}"


def commbench_table(r: CommbenchReport) -> Table:
    c = shown_values(r.config)
    t = Table(
        title=f"commbench: one step's collectives replayed, {r.nodes}x{r.ranks_per_node} ranks, {r.backend}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption=(
            f"{c.get('model')}, mb {c.get('micro_batch')}, seq {c.get('seq_len')}, {c.get('precision')}; "
            f"ms per call: measured = slowest rank's median of repetitions (spread = (max - min) / "
            f"median); predicted = estimate/comm.py on platform {r.platform}"
        ),
    )
    for col, just in (
        ("strategy", "left"),
        ("collective@group", "left"),
        ("N", "right"),
        ("B/call", "right"),
        ("calls", "right"),
        ("ms meas", "right"),
        ("spread", "right"),
        ("ms pred", "right"),
    ):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for s in r.strategies:
        for i, k in enumerate(s.collectives):
            t.add_row(
                s.strategy if i == 0 else "",
                f"{k.op}@{_GROUP[k.group]}",
                str(k.ranks),
                bytes_text(k.bytes_per_call),
                str(k.calls),
                _ms(k.seconds_per_call_measured),
                "-" if k.spread is None else f"{100 * k.spread:.0f}%",
                _ms(k.seconds_per_call_predicted),
            )
        t.add_row(
            "",
            "[bold]step total[/]" if s.measured else "[bold]FAILED[/]",
            "",
            "",
            "",
            _ms(s.comm_s_measured),
            "",
            _ms(s.comm_s_predicted),
            end_section=True,
        )
    return t


def print_commbench(r: CommbenchReport) -> None:
    console = table_console(100)
    console.print(commbench_table(r))
    for s in r.strategies:
        if s.error:
            console.print(f"{s.strategy}: {s.error[:300]}", markup=False, highlight=False)
    if r.environment_note:
        console.print(r.environment_note, markup=False, highlight=False)
    if r.stored:
        console.print(
            f"stored {r.stored} measured points as run {r.run_key} (plan --db prices with them)",
            markup=False,
            highlight=False,
        )


def curves_table(rows: list[tuple[str, MeasuredCurve]]) -> Table:
    """`results --curves`: every stored collective curve (commbench runs, imported logs)."""
    t = Table(
        title="measured collective curves (plan prices matching collectives with them)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="shape: nodes x ranks per node of one group; conc: such groups at once per node",
    )
    for col, just in (
        ("platform", "left"),
        ("from", "left"),
        ("op", "left"),
        ("shape", "right"),
        ("conc", "right"),
        ("sizes", "right"),
        ("bytes", "right"),
        ("date", "left"),
    ):
        t.add_column(col, justify=just, no_wrap=True, min_width=10 if col == "date" else None)  # type: ignore[arg-type]
    for platform, c in rows:
        t.add_row(
            platform,
            c.label,
            c.op,
            c.shape,
            str(c.concurrent),
            str(len(c.points)),
            f"{bytes_text(c.points[0][0])}..{bytes_text(c.points[-1][0])}",
            c.date,
        )
    return t


def show_commbench(r: CommbenchReport, json_out: bool = False) -> None:
    """What `commbench` prints: the report as JSON, or the tables."""
    from prism_strategy.report.console import print_json

    if json_out:
        print_json(r.as_dict())
    else:
        print_commbench(r)
