"""Consoles wide enough for the tables: a pipe or a log file reports 80 columns, which folds a
12-column table into one character per line. A real terminal keeps its own width."""

from __future__ import annotations

from rich.console import Console


def table_console(min_width: int = 160) -> Console:
    c = Console()
    return c if c.is_terminal else Console(width=max(c.width, min_width))
