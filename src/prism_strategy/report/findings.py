"""Human output for `doctor` (findings and the live environment) and `emit` (what was written)."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from prism_strategy.diagnose.doctor import DoctorReport
from prism_strategy.emit.launch import Emitted
from prism_strategy.report.console import table_console

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def doctor_json(report: DoctorReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str)


def render_doctor(report: DoctorReport, console: Console | None = None) -> None:
    console = console or table_console()
    if report.environment:
        _render_environment(report.environment, console)
    if not report.findings:
        console.print("[green]doctor: no findings[/green]")
        return
    for f in report.findings:
        head = Text(f"{f.severity.upper():<8}", style=_STYLE[f.severity])
        head.append(f"{f.rule}  ", style="bold")
        head.append(f"{f.file}:{f.line}" if f.line else f.file)
        console.print(head)
        for text, style in ((f.message, ""), (f"fix: {f.fix}", "green"), (f"source: {f.source}", "dim")):
            wrapped = textwrap.fill(text, console.width, initial_indent="  ", subsequent_indent="  ")
            console.print(Text(wrapped, style=style), soft_wrap=True)
    counts = report.counts()
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))


def _render_environment(env: dict[str, Any], console: Console) -> None:
    table = Table(title="environment", show_header=False)
    table.add_column("what")
    table.add_column("value", overflow="fold")
    for key in (
        "torch",
        "backends",
        "device",
        "device_count",
        "xpu_runtime",
        "nccl",
        "oneccl_root",
        "modules",
        "stale_processes",
    ):
        if key in env and env[key] not in (None, [], ""):
            value = env[key]
            table.add_row(key, Text(", ".join(map(str, value)) if isinstance(value, list) else str(value)))
    profile = env.get("profile") or {}
    if profile.get("name"):
        table.add_row(
            "profile",
            Text(
                f"{profile['name']}: {len(profile['set'])} set, {len(profile['missing'])} missing, "
                f"{len(profile['differs'])} different"
            ),
        )
    for name, value in (env.get("variables") or {}).items():
        table.add_row(Text(name), Text(value))
    console.print(table)


def render_emit(emitted: Emitted, out: Path, console: Console | None = None) -> None:
    """A README-like summary of the files written and how to run them."""
    console = console or Console(width=table_console().width, highlight=False)
    p, lay = emitted.platform, emitted.layout
    console.print(
        f"[bold]{emitted.strategy.name}[/bold] on {escape(p.name)}: {lay.nodes} node(s) x {lay.ranks_per_node} "
        f"ranks ({p.device}/{p.backend}), env profile {escape(emitted.profile.name)}"
    )
    console.print(f"wrote {escape(str(out))}/")
    for f in emitted.files:  # a long description wraps under itself, not at column 0
        line = textwrap.fill(f"  {f.name:<16} {f.description}", console.width, subsequent_indent=" " * 19)
        console.print(Text(line), soft_wrap=True)
    for note in emitted.notes:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    check = shlex.join(
        ["prism-strategy", "doctor", *(a for f in emitted.files for a in (_doctor_flag(f.name), str(out / f.name)))]
    )
    console.print(f"check them: {check}", markup=False, soft_wrap=True)  # one line: copied as it is


def _doctor_flag(name: str) -> str:
    """How doctor reads an emitted file: launchers, strategy.toml and ds_config.json as --launcher
    (diagnose/launcher_checks.read_launcher); a framework config (torchtitan TOML, Accelerate
    YAML) as --config (diagnose/framework_config_checks)."""
    from prism_strategy.emit.strategy_file import DS_CONFIG_FILE, STRATEGY_FILE

    config = name.endswith((".toml", ".yaml", ".yml", ".json")) and name not in (STRATEGY_FILE, DS_CONFIG_FILE)
    return "--config" if config else "--launcher"


def emit_json(emitted: Emitted, out: Path) -> str:
    return json.dumps(
        {
            "out": str(out),
            "strategy": emitted.strategy.name,
            "platform": emitted.platform.name,
            "nodes": emitted.layout.nodes,
            "ranks_per_node": emitted.layout.ranks_per_node,
            "env_profile": emitted.profile.name,
            "notes": emitted.notes,
            "files": [{"name": f.name, "description": f.description} for f in emitted.files],
        },
        indent=2,
    )


def show_emit(emitted: Emitted, out: Path, *, json_out: bool = False) -> None:
    """What `emit` prints: the JSON summary or the list of files."""
    if json_out:
        print(emit_json(emitted, out))
    else:
        render_emit(emitted, out)


def show_doctor(report: DoctorReport, *, json_out: bool = False) -> None:
    """What `doctor` prints: the JSON or the findings."""
    if json_out:
        print(doctor_json(report))
    else:
        render_doctor(report)
