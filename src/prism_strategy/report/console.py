"""Tables that fit the width they are printed at.

Width: a real terminal's own width (rich reads COLUMNS when it is set); a pipe or log gets COLUMNS
when set, else PIPE_WIDTH, clamped to MIN_WIDTH..PIPE_WIDTH so that logs stay stable. A table
wider than that first moves its long text columns into numbered footnotes under the table, then
drops its optional columns (their values stay in --json), lowest priority first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

MIN_WIDTH = 80
PIPE_WIDTH = 100
"""A pipe or log gets at most a 100-column terminal's width: the project's reading width."""


def output_width(pipe_width: int = PIPE_WIDTH) -> int:
    c = Console()
    if c.is_terminal:
        return c.width
    cols = os.environ.get("COLUMNS", "")
    return max(MIN_WIDTH, min(int(cols), pipe_width)) if cols.isdigit() else pipe_width


def table_console(pipe_width: int = PIPE_WIDTH) -> Console:
    return Console(width=output_width(pipe_width))


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    header: str
    justify: str = "left"
    drop: int = 0
    """0: always shown; n > 0: dropped when the table is too wide, highest n first."""
    footnote: bool = False
    """Long text: moved into the row's footnote when the table is too wide."""
    max_width: int | None = None


def _table(title: str | None, cols: list[Column], rows: list[list[str]], caption: str | None) -> Table:
    t = Table(
        title=Text(title) if title else None,
        caption=Text(caption, style="dim") if caption else None,
        box=box.SIMPLE_HEAD,
        padding=0,
        show_edge=False,
        title_justify="left",
        caption_justify="left",
    )
    for c in cols:
        t.add_column(c.header, justify=c.justify, overflow="fold", max_width=c.max_width)  # type: ignore[arg-type]
    for r in rows:
        t.add_row(*(Text(c) for c in r))  # plain text: a "[...]" in a note is not markup
    return t


def natural_width(t: Table) -> int:
    return Console(width=10_000).measure(t).maximum


def fitted_table(
    title: str | None,
    columns: list[Column],
    rows: list[list[str]],
    width: int,
    caption: str | None = None,
    ref_header: str = "see",
) -> RenderableType:
    """The table at `width`: long text columns become footnotes ("[n] header: value") referenced
    from a `ref_header` column, then optional columns are dropped, until it fits."""
    keep = list(range(len(columns)))
    moved: list[int] = []

    def build() -> tuple[Table, list[str]]:
        cols = [columns[i] for i in keep]
        body = [[r[i] for i in keep] for r in rows]
        notes: list[str] = []
        if moved:
            cols = cols + [Column(header=columns[moved[0]].header if len(moved) == 1 else ref_header)]
            for r, line in zip(rows, body):
                parts = [(columns[i].header, r[i].rstrip(".")) for i in moved if r[i]]
                text = "; ".join(f"{h}: {v}" if len(moved) > 1 else v for h, v in parts)
                if text and text not in notes:
                    notes.append(text)
                line.append(f"[{notes.index(text) + 1}]" if text else "")
        return _table(title, cols, body, caption), notes

    t, notes = build()
    dropped: list[str] = []
    while natural_width(t) > width:
        movable = [i for i in keep if columns[i].footnote]
        droppable = [i for i in keep if columns[i].drop > 0]
        if movable:
            i = max(movable, key=lambda i: max((len(r[i]) for r in rows), default=0))
            moved.append(i)
        elif droppable:
            i = max(droppable, key=lambda i: columns[i].drop)
            dropped.append(columns[i].header)
        else:
            break
        keep.remove(i)
        t, notes = build()
    said = [Text(f"not shown at {width} columns: {', '.join(dropped)} (a wider terminal or --json has them)")]
    parts = [t, *(said if dropped else []), *([footnotes(notes)] if notes else [])]
    return Group(*parts) if len(parts) > 1 else t


def footnotes(notes: list[str]) -> Table:
    """Numbered footnotes "[n] text", wrapped lines indented under the text."""
    g = Table.grid(padding=(0, 1))
    g.add_column(justify="right", no_wrap=True)
    g.add_column(overflow="fold")
    for n, text in enumerate(notes, 1):
        g.add_row(Text(f"[{n}]"), Text(text))
    return g


def print_json(data: Any) -> None:
    """JSON for machines: indented, anything not JSON (paths, enums) as its str()."""
    import json

    print(json.dumps(data, indent=2, default=str))


PROGRESS_BYTES = 100 << 20
"""A log larger than this reports its reading on stderr even when stderr is not a terminal."""


def read_progress() -> Callable[[Path, int, int], None]:
    """A readers.on_progress callback: on a terminal, one line updated in place; elsewhere, for
    files above PROGRESS_BYTES, a line per tenth read. Only stderr, so --json stays clean."""
    shown: dict[Path, int] = {}

    def report(path: Path, done: int, size: int) -> None:
        tty = sys.stderr.isatty()
        if not tty and size <= PROGRESS_BYTES:
            return
        tenth = min(10, done * 10 // max(size, 1))
        if not tty and shown.get(path, -1) >= tenth:
            return
        shown[path] = tenth
        text = f"reading {path}: {min(100, done * 100 // max(size, 1))}% of {size / 1e6:,.0f} MB"
        end = "\n" if not tty or done >= size else ""
        sys.stderr.write(("\r" if tty else "") + text + end)
        sys.stderr.flush()

    return report
