"""Thin CLI: each command parses its options, calls one function of the room that does the work,
and picks the exit code. app.py: the typer app and its one-line errors; options.py: the option
types several commands share; *_cmds.py: the commands, by room.

Exit codes: 0 ok; 1 a finding or failure the user must act on; 2 bad input (one line, no traceback).
"""

from __future__ import annotations

from prism_strategy.cli import bench_cmds, diagnose_cmds, plan_cmds
from prism_strategy.cli.app import app
from prism_strategy.cli.results_cmds import results_app

# in the order `prism-strategy --help` lists them
for _command in (
    plan_cmds.plan,
    plan_cmds.estimate,
    plan_cmds.models,
    plan_cmds.platforms,
    plan_cmds.strategies,
    bench_cmds.bench,
    bench_cmds.ceiling,
    bench_cmds.compare,
    bench_cmds.calibrate,
    bench_cmds.tune,
    bench_cmds.report,
    diagnose_cmds.analyze,
    diagnose_cmds.emit,
    diagnose_cmds.doctor,
    bench_cmds.census,
    bench_cmds.commbench,
):
    app.command()(_command)
app.add_typer(results_app, name="results")

__all__ = ["app", "main"]


def main() -> None:
    app()
