"""Results store: SQLite in WAL mode, one row per measured run.

Each write is one short IMMEDIATE transaction with a generous busy timeout, so several
processes can write at once and nothing is lost; a crash mid-write leaves the previous state.
Default location: $PRISM_STRATEGY_DB, else $XDG_CACHE_HOME/prism-strategy/results.db
(~/.cache/... when unset).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from prism_strategy.specs.errors import SpecError

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    kind TEXT NOT NULL,             -- bench | ceiling-trial
    status TEXT NOT NULL,           -- ok | oom | failed | timeout
    strategy TEXT NOT NULL,
    platform TEXT NOT NULL,
    config_key TEXT NOT NULL,       -- canonical JSON of `config`, for matching
    config TEXT NOT NULL,
    measured TEXT NOT NULL,
    predicted TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    host TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_config ON results (config_key);
CREATE INDEX IF NOT EXISTS results_platform ON results (platform, host);
"""
STATUSES = ("ok", "oom", "failed", "timeout")


def default_db_path() -> Path:
    if os.environ.get("PRISM_STRATEGY_DB"):
        return Path(os.environ["PRISM_STRATEGY_DB"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "prism-strategy" / "results.db"


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    kind: str
    status: str
    strategy: str
    platform: str
    config: dict[str, Any]
    measured: dict[str, Any]
    predicted: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    id: int | None = None

    @property
    def config_key(self) -> str:
        return canonical(self.config)


def canonical(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


class Store:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else default_db_path()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise SpecError(f"cannot open results store {self.path}: {e}; pass --db with a writable path") from None
        try:
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA busy_timeout=60000")
            con.executescript(SCHEMA)
            yield con
        except sqlite3.DatabaseError as e:
            raise SpecError(f"results store {self.path} is not a usable SQLite database ({e}); pass --db elsewhere") from None
        finally:
            con.close()

    def add(self, r: Result) -> int:
        if r.status not in STATUSES:
            raise SpecError(f"result status must be one of {', '.join(STATUSES)}, got {r.status!r}")
        row = (r.created_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"), r.kind, r.status, r.strategy, r.platform,
               r.config_key, canonical(r.config), json.dumps(r.measured), json.dumps(r.predicted),
               json.dumps(r.fingerprint), str(r.fingerprint.get("host", "")))
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            cur = con.execute(
                "INSERT INTO results (created_at, kind, status, strategy, platform, config_key, config, measured,"
                " predicted, fingerprint, host) VALUES (?,?,?,?,?,?,?,?,?,?,?)", row)
            con.execute("COMMIT")
            return int(cur.lastrowid)

    def query(self, *, platform: str | None = None, kind: str | None = None, status: str | None = None) -> list[Result]:
        where, args = [], []
        for col, v in (("platform", platform), ("kind", kind), ("status", status)):
            if v is not None:
                where.append(f"{col} = ?")
                args.append(v)
        sql = "SELECT id, created_at, kind, status, strategy, platform, config, measured, predicted, fingerprint FROM results"
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        try:
            if not self.path.exists():
                return []
        except OSError as e:  # e.g. a file name too long
            raise SpecError(f"cannot open results store {str(self.path)[:80]}: {e.strerror}; pass --db with a "
                            "usable path") from None
        with self._connect() as con:
            rows = con.execute(sql, args).fetchall()
        return [Result(id=i, created_at=c, kind=k, status=s, strategy=st, platform=pl, config=json.loads(cfg),
                       measured=json.loads(m), predicted=json.loads(p), fingerprint=json.loads(f))
                for i, c, k, s, st, pl, cfg, m, p, f in rows]


def export(results: list[Result], fmt: str) -> str:
    dicts = [{"id": r.id, "created_at": r.created_at, "kind": r.kind, "status": r.status, "strategy": r.strategy,
              "platform": r.platform, "config": r.config, "measured": r.measured, "predicted": r.predicted,
              "fingerprint": r.fingerprint} for r in results]
    if fmt == "json":
        return json.dumps(dicts, indent=2) + "\n"
    if fmt != "csv":
        raise SpecError(f"unknown export format {fmt!r}; choose csv or json")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "created_at", "kind", "status", "strategy", "platform", "config", "measured", "predicted", "host"])
    for d in dicts:
        w.writerow([d["id"], d["created_at"], d["kind"], d["status"], d["strategy"], d["platform"],
                    canonical(d["config"]), canonical(d["measured"]), canonical(d["predicted"]),
                    d["fingerprint"].get("host", "")])
    return buf.getvalue()
