"""What is wrong with a results store, said in one line: a read-only filesystem (still read), a
full disk, a SQLite file of another program (refused before anything is written to it), a file
that is not SQLite.

A WAL store read from a read-only filesystem: SQLite's `mode=ro` still needs the -shm index
writable or creatable (sqlite.org/wal.html, "Read-Only Databases"); where it is not, the store is
opened `immutable=1` (sqlite.org/uri.html: no locks, no change detection), which is safe only
because nothing can write a read-only filesystem and when no committed write waits in the -wal
file (a non-empty one is named instead: its rows would be missed).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from prism_strategy.specs.errors import SpecError

OWN_TABLES = ("results",)
"""A store prism-strategy wrote has these (bench/results/curves.py adds its own beside them)."""


def on_readonly_filesystem(path: Path) -> bool:
    """Whether the folder of `path` is on a filesystem mounted read-only (statvfs ST_RDONLY)."""
    try:
        return bool(os.statvfs(path.absolute().parent).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def wal_pending(path: Path) -> int:
    """Bytes in the store's -wal file (0: none, or every write is in the main file)."""
    try:
        return Path(f"{path}-wal").stat().st_size
    except OSError:
        return 0


def immutable_ok(path: Path) -> bool:
    """A read-only open failed: may the store be read as immutable instead?"""
    return on_readonly_filesystem(path) and wal_pending(path) == 0


def describe(e: sqlite3.DatabaseError, path: Path) -> str:
    """One line naming the problem and the fix."""
    msg, ro = str(e).lower(), on_readonly_filesystem(path)
    if "readonly" in msg or "read-only" in msg or (ro and "unable to open" in msg):
        where = "is on a read-only filesystem" if ro else "is read-only to you"
        if pending := wal_pending(path):
            return (
                f"results store {path} {where} and {pending} bytes of its writes are still in {path}-wal "
                "(SQLite needs to write beside it to read them); copy the store with its -wal file to a "
                "writable folder and pass --db there"
            )
        return f"results store {path} {where}: it can be read, not written; pass --db with a writable path"
    if "disk is full" in msg or ("disk i/o" in msg and _full(path)):
        return f"results store {path}: the disk is full (nothing was written); free some space or pass --db elsewhere"
    if "unable to open" in msg:
        return f"cannot open results store {path} ({e}); pass --db with a path you can read and write"
    return f"results store {path} is not a usable SQLite database ({e}); pass --db elsewhere"


def _full(path: Path) -> bool:
    try:
        st = os.statvfs(path.absolute().parent)
    except OSError:
        return False
    return st.f_bavail == 0


def refuse_foreign(con: sqlite3.Connection, path: Path) -> None:
    """Before the first write into a file given as a store: one with tables but none of the
    store's is some other program's database; nothing is added to it."""
    tables = [
        r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    ]
    if tables and not any(t in tables for t in OWN_TABLES):
        shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
        raise SpecError(
            f"{path} is another program's SQLite database (tables {shown}; no results table): not a "
            "prism-strategy results store, left untouched; pass --db with a new file"
        )
