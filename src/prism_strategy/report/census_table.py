"""The census table: per strategy and (op, group size, dtype), calls and payload bytes,
predicted by the engine model vs recorded from the real engine. Fits 100 columns."""

from __future__ import annotations

from rich import box
from rich.table import Table

from prism_strategy.bench.collectives.census import TOLERANCE_PCT, CensusReport, StrategyCensus
from prism_strategy.inputs.stored import shown_values
from prism_strategy.report.console import table_console


def bytes_text(v: float | None) -> str:
    if v is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(v) >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} B"


def _pct(predicted: float, recorded: float | None) -> str:
    if recorded is None:
        return "-"
    if recorded == 0:
        return "not rec" if predicted else "0.0"
    return f"{100 * (predicted - recorded) / recorded:+.1f}"


def _calls(predicted: int, recorded: int | None) -> str:
    return f"{predicted}/{'-' if recorded is None else recorded}"


def _add_strategy(t: Table, s: StrategyCensus) -> None:
    for i, r in enumerate(s.rows):
        t.add_row(
            s.strategy if i == 0 else "",
            r.op,
            str(r.group_size),
            r.dtype,
            _calls(r.calls_predicted, r.calls_recorded),
            bytes_text(r.bytes_predicted),
            bytes_text(r.bytes_recorded),
            _pct(r.bytes_predicted, r.bytes_recorded),
        )
    err = s.bytes_error_pct
    verdict = "ok" if s.ok else ("FAILED RUN" if err is None else "OFF")
    t.add_row(
        "" if s.rows else s.strategy,
        f"[bold]{verdict}[/]",
        "",
        "",
        "",
        bytes_text(sum(r.bytes_predicted for r in s.rows)),
        bytes_text(sum(r.bytes_recorded or 0 for r in s.rows)) if s.recorded else "-",
        "-" if err is None else f"|{err:.1f}|",
        end_section=True,
    )


def census_table(report: CensusReport, predicted_by: str) -> Table:
    c, vision = shown_values(report.config), report.config.get("vision_spec")
    shape = f"{c.get('model')}" + (f" + {vision['name']} ({c.get('mode')})" if vision else "")
    if lora := c.get("lora"):
        shape += f", LoRA r={lora.get('r')} on {lora.get('target_modules') or 'peft default'}"
    t = Table(
        title=f"census: collectives of one optimizer step, world {report.world}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption=(
            f"{shape}, mb {c.get('micro_batch')}, seq {c.get('seq_len')}, grad accum "
            f"{c.get('grad_accum')}, {c.get('precision')}, {c.get('ranks_per_node')} ranks per node\n"
            f"calls predicted/recorded; predicted: {predicted_by}; recorded: torch.profiler c10d ops, "
            f"rank 0\nerr % per row (pred - rec) / rec; strategy line: sum |pred - rec| / recorded, "
            f"ok within {TOLERANCE_PCT:g}%"
        ),
    )
    for col, just in (
        ("strategy", "left"),
        ("op", "left"),
        ("group", "right"),
        ("dtype", "left"),
        ("calls", "right"),
        ("predicted", "right"),
        ("recorded", "right"),
        ("err %", "right"),
    ):
        t.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for s in report.strategies:
        _add_strategy(t, s)
    return t


def census_notes(report: CensusReport) -> list[str]:
    """One line per strategy with control messages, a failed run or ranks that disagreed."""
    out = []
    for s in report.strategies:
        if s.control:
            what = ", ".join(f"{c['op']} {c['dtype']} x{c['calls']}" for c in s.control)
            out.append(f"{s.strategy}: control messages, not compared: {what}")
        if s.error:
            out.append(f"{s.strategy}: {s.error[:300]}")
    return out


def print_census(report: CensusReport) -> None:
    console = table_console(100)
    console.print(census_table(report, report.predicted_by))
    for line in census_notes(report):
        console.print(line, markup=False, highlight=False)


def show_census(report: CensusReport, json_out: bool = False) -> None:
    """What `census` prints: the report as JSON, or the tables."""
    from prism_strategy.report.console import print_json

    if json_out:
        print_json(report.as_dict())
    else:
        print_census(report)
