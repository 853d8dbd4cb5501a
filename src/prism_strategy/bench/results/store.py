"""Results store: SQLite, one row per measured run.

Journal mode by filesystem: WAL on a local disk; on a network filesystem (NFS, Lustre, GPFS,
DAOS through dfuse, CIFS, BeeGFS, ...: the fstype of the longest /proc/mounts prefix of the
store's path) the rollback journal (journal_mode=DELETE). SQLite's WAL keeps its index in shared
memory (the -shm file, mmap'd), which works only when every process is on one host
(sqlite.org/wal.html: "WAL does not work over a network filesystem"); a bench in a PBS job on a
compute node and a `compare` on a login node would corrupt it. The rollback journal needs only
the filesystem's POSIX advisory locks (NFS lockd, Lustre with -o flock, GPFS), as SQLite
documents for network use. `Store.journal` says which mode and why.

Each write is one short IMMEDIATE transaction with a generous busy timeout (and retried whole when
SQLite reports the lock anyway), so several processes can write at once and nothing is lost; a
crash mid-write leaves the previous state. A read (`Store.read`: compare, results, report,
calibrate, plan --db) opens the file read-only (SQLite's `file:...?mode=ro` URI; `immutable=1` on a
read-only filesystem) and writes no schema into it: a missing or empty file, or one without the
table, holds no stored runs; a file that is not SQLite is bad input. A write refuses another
program's SQLite file before touching it, and a read-only filesystem or a full disk is named as
such (bench/results/store_faults.py).
Default location: $PRISM_STRATEGY_DB, else $XDG_CACHE_HOME/prism-strategy/results.db
(~/.cache/... when unset).

Every row says where it came from (`provenance`): ``bench`` (this tool ran it; all rows written
before schema 2), ``imported`` (a log of a run measured elsewhere; `source` is its path) or
``published`` (a shipped record; `source` names the data set and record). Peak allocated and peak
reserved device memory have their own columns where the run reported them. A store written by an
older version is migrated in place when opened (columns added, nothing rewritten): see `migrate`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import sqlite3
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.request import pathname2url

from prism_strategy.bench.results.store_faults import describe, immutable_ok, refuse_foreign
from prism_strategy.inputs.stored import row_key
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
SCHEMA_VERSION = 2
# Columns added by schema 2, in the order they are added to an older store.
V2_COLUMNS = (
    ("provenance", "TEXT NOT NULL DEFAULT 'bench'"),  # bench | imported | published
    ("source", "TEXT NOT NULL DEFAULT ''"),  # imported: log path; published: data set + record id
    ("peak_allocated_bytes", "REAL"),  # allocator peak of live tensors, where reported
    ("peak_reserved_bytes", "REAL"),  # allocator peak reserved (cached) memory, where reported
    ("dedup_key", "TEXT"),  # same key = same run: a re-import updates, never duplicates
)
STATUSES = ("ok", "oom", "failed", "timeout")
PROVENANCES = ("bench", "imported", "published")


MOUNTS = Path("/proc/mounts")
NETWORK_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "lustre",
    "gpfs",
    "fuse.dfuse",
    "dfuse",
    "daos",
    "cifs",
    "smb3",
    "smbfs",
    "beegfs",
    "fuse.beegfs",
    "ceph",
    "fuse.ceph",
    "ceph-fuse",
    "glusterfs",
    "fuse.glusterfs",
    "panfs",
    "wekafs",
    "fuse.sshfs",
    "afs",
    "9p",
    "orangefs",
    "pvfs2",
    "fuse.juicefs",
)
"""fstypes (the third field of /proc/mounts) that are shared between hosts."""


def _unescape(field_: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes (\\040 ...)."""
    import re

    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field_)


def mount_of(path: Path, mounts: Path = MOUNTS) -> tuple[str, str] | None:
    """(mount point, fstype) of the longest mount-point prefix of `path` (its nearest existing
    parent, resolved); None when the mounts file cannot be read."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    target = path.absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    target = target.resolve()
    best: tuple[str, str] | None = None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = Path(_unescape(parts[1]))
        if (target == point or point in target.parents) and (best is None or len(str(point)) > len(best[0])):
            best = (str(point), parts[2])
    return best


@dataclass(frozen=True, kw_only=True, slots=True)
class Journal:
    mode: str
    """"wal" (local disk) or "delete" (rollback journal: network filesystem)."""
    fstype: str
    mount: str

    @property
    def why(self) -> str:
        if self.mode == "wal":
            return f"WAL: {self.fstype or 'unknown'} at {self.mount or '?'} is a local filesystem"
        return (
            f"rollback journal (DELETE), not WAL: {self.fstype} at {self.mount} is a network filesystem, where "
            "WAL's shared-memory index breaks across hosts"
        )

    def as_dict(self) -> dict[str, str]:
        return {"journal_mode": self.mode, "filesystem": self.fstype, "mount": self.mount, "why": self.why}


def journal_for(path: Path, mounts: Path = MOUNTS) -> Journal:
    found = mount_of(path, mounts)
    point, fstype = found or ("", "")
    network = fstype in NETWORK_FILESYSTEMS or fstype.startswith(("nfs", "fuse.dfuse"))
    return Journal(mode="delete" if network else "wal", fstype=fstype, mount=point)


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
    provenance: str = "bench"
    source: str = ""
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    dedup_key: str | None = None

    @property
    def config_key(self) -> str:
        """What the run is, for matching: the canonical row (inputs/stored.py row_key), equal for
        a row stored before the scenario was serialised and a new one of the same run."""
        return row_key(self.config)


def canonical(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"))


def migrate(con: sqlite3.Connection) -> None:
    """Bring an older store to `SCHEMA_VERSION` in one IMMEDIATE transaction.

    Only ``ALTER TABLE ... ADD COLUMN`` (existing rows keep every value; the new columns take their
    defaults, so old rows read as provenance ``bench``). The column check is repeated inside the
    write lock, so two processes opening the same old store do not both add a column.
    """
    if con.execute("PRAGMA user_version").fetchone()[0] >= SCHEMA_VERSION:
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        have = {row[1] for row in con.execute("PRAGMA table_info(results)")}
        for name, decl in V2_COLUMNS:
            if name not in have:
                con.execute(f"ALTER TABLE results ADD COLUMN {name} {decl}")
        con.execute("CREATE UNIQUE INDEX IF NOT EXISTS results_dedup ON results (dedup_key)")
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:  # SQLite already rolled back on some errors (a full disk)
            con.execute("ROLLBACK")
        raise


_COLUMNS = (
    "created_at",
    "kind",
    "status",
    "strategy",
    "platform",
    "config_key",
    "config",
    "measured",
    "predicted",
    "fingerprint",
    "host",
    "provenance",
    "source",
    "peak_allocated_bytes",
    "peak_reserved_bytes",
    "dedup_key",
)


def _row(r: Result) -> tuple[Any, ...]:
    if r.status not in STATUSES:
        raise SpecError(f"result status must be one of {', '.join(STATUSES)}, got {r.status!r}")
    if r.provenance not in PROVENANCES:
        raise SpecError(f"result provenance must be one of {', '.join(PROVENANCES)}, got {r.provenance!r}")
    return (
        r.created_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        r.kind,
        r.status,
        r.strategy,
        r.platform,
        r.config_key,
        canonical(r.config),
        json.dumps(r.measured),
        json.dumps(r.predicted),
        json.dumps(r.fingerprint),
        str(r.fingerprint.get("host", "")),
        r.provenance,
        r.source,
        r.peak_allocated_bytes,
        r.peak_reserved_bytes,
        r.dedup_key,
    )


def _put(con: sqlite3.Connection, r: Result) -> tuple[int, str]:
    """Insert, or for a known dedup_key update in place; returns (id, added | updated | unchanged)."""
    row = _row(r)
    if r.dedup_key is not None:
        old = con.execute(
            "SELECT id, config, measured, status, source FROM results WHERE dedup_key = ?", (r.dedup_key,)
        ).fetchone()
        if old is not None:
            if (row_key(json.loads(old[1])), old[2], old[3], old[4]) == (row[5], row[7], row[2], row[12]):
                return int(old[0]), "unchanged"
            sets = ", ".join(f"{c} = ?" for c in _COLUMNS)
            con.execute(f"UPDATE results SET {sets} WHERE id = ?", (*row, old[0]))
            return int(old[0]), "updated"
    cur = con.execute(f"INSERT INTO results ({', '.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})", row)
    return int(cur.lastrowid), "added"


# SQLite answers "database is locked" without waiting out the busy timeout in a few cases (a
# connection switching a new file to WAL while another opens it, WAL recovery on first open), and
# a loaded host can starve a writer past any timeout. Such an operation is retried whole: every
# write is one transaction, so a retried one was rolled back and is applied exactly once.
LOCK_PATIENCE_S = 120.0
BUSY_TIMEOUT_S = 60.0  # SQLite's own wait for a lock, per statement


_OLDER = object()
"""Store.read's mark for a store of an older schema (read after `migrate`)."""


def _is_contention(e: sqlite3.OperationalError) -> bool:
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


class Store:
    def __init__(self, path: str | Path | None = None, *, mounts: Path = MOUNTS):
        self.path = Path(path) if path else default_db_path()
        self.mounts = mounts

    @cached_property
    def journal(self) -> Journal:
        """The journal mode this store runs in, from the filesystem it is on."""
        try:
            return journal_for(self.path, self.mounts)
        except OSError:
            return Journal(mode="wal", fstype="", mount="")

    @contextmanager
    def _connect(self, readonly: bool = False) -> Iterator[sqlite3.Connection]:
        if readonly:  # SQLite's mode=ro: nothing of this connection can write the file
            con = self._open_readonly()
            try:
                yield con
            finally:
                con.close()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.DatabaseError as e:
            raise SpecError(describe(e, self.path)) from None
        except (OSError, sqlite3.Error) as e:
            raise SpecError(f"cannot open results store {self.path}: {e}; pass --db with a writable path") from None
        try:
            refuse_foreign(con, self.path)  # before the journal pragma: switching to WAL writes the header
            want = self.journal.mode
            if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != want:
                con.execute(f"PRAGMA journal_mode={want.upper()}")
            con.executescript(SCHEMA)
            migrate(con)
            yield con
        finally:
            con.close()

    def _open_readonly(self) -> sqlite3.Connection:
        """mode=ro; on a read-only filesystem where that cannot open the WAL index, immutable=1
        (bench/results/store_faults.py says when that is safe)."""
        uri = f"file:{pathname2url(str(self.path.absolute()))}?mode=ro"
        con = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return con
        except sqlite3.OperationalError as e:
            con.close()
            if _is_contention(e) or not immutable_ok(self.path):
                raise
        return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)

    def _run(self, op: Callable[[sqlite3.Connection], Any], readonly: bool = False) -> Any:
        """`op` on a fresh connection; retried whole while another process holds the lock."""
        deadline, pause = time.monotonic() + LOCK_PATIENCE_S, 0.05
        while True:
            try:
                with self._connect(readonly) as con:
                    return op(con)
            except sqlite3.DatabaseError as e:
                if isinstance(e, sqlite3.OperationalError) and _is_contention(e) and time.monotonic() < deadline:
                    time.sleep(pause * (0.5 + random.random()))
                    pause = min(pause * 2, 2.0)
                    continue
                raise SpecError(describe(e, self.path)) from None

    def exists(self) -> bool:
        """Whether the store's file is there (a read of a store never written finds nothing); a
        path the OS refuses (e.g. a file name too long) is bad input."""
        try:
            return self.path.exists()
        except OSError as e:
            raise SpecError(
                f"cannot open results store {str(self.path)[:80]}: {e.strerror}; pass --db with a usable path"
            ) from None

    def read(self, op: Callable[[sqlite3.Connection], Any], default: Any, table: str = "results") -> Any:
        """`op(connection)` on a read-only connection: a read command never writes into the file.
        `default` (no stored runs) when there is no file, an empty one, or no `table` in it; a file
        that is not SQLite is bad input (one line). A store of an older schema is migrated first
        (the one write a read makes, as `migrate` documents)."""
        try:
            if not self.exists() or self.path.stat().st_size == 0:
                return default
        except OSError:
            return default

        def guarded(con: sqlite3.Connection) -> Any:
            found = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
            if found is None:
                return default
            if table == "results" and con.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
                return _OLDER
            return op(con)

        out = self._run(guarded, readonly=True)
        return self._run(op) if out is _OLDER else out

    def run(self, op: Callable[[sqlite3.Connection], Any]) -> Any:
        """`op(connection)` on this store, retried whole under lock contention: for the tables
        other modules own (bench/results/curves.py: measured collective curves)."""
        return self._run(op)

    def add(self, r: Result) -> int:
        return self.add_many([r])[0][0]

    def add_many(self, results: list[Result]) -> list[tuple[int, str]]:
        """All or nothing: one IMMEDIATE transaction; (id, added | updated | unchanged) per result."""
        for r in results:  # validate every row before the transaction starts
            _row(r)

        def write(con: sqlite3.Connection) -> list[tuple[int, str]]:
            con.execute("BEGIN IMMEDIATE")
            try:
                out = [_put(con, r) for r in results]
                con.execute("COMMIT")
            except BaseException:
                if con.in_transaction:  # SQLite already rolled back on some errors (a full disk)
                    con.execute("ROLLBACK")
                raise
            return out

        return self._run(write)

    def query(
        self,
        *,
        platform: str | None = None,
        kind: str | None = None,
        status: str | None = None,
        provenance: str | None = None,
    ) -> list[Result]:
        where, args = [], []
        for col, v in (("platform", platform), ("kind", kind), ("status", status), ("provenance", provenance)):
            if v is not None:
                where.append(f"{col} = ?")
                args.append(v)
        sql = (
            "SELECT id, created_at, kind, status, strategy, platform, config, measured, predicted, fingerprint,"
            " provenance, source, peak_allocated_bytes, peak_reserved_bytes, dedup_key FROM results"
        )
        sql += (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        rows = self.read(lambda con: con.execute(sql, args).fetchall(), [])
        return [
            Result(
                id=i,
                created_at=c,
                kind=k,
                status=s,
                strategy=st,
                platform=pl,
                config=json.loads(cfg),
                measured=json.loads(m),
                predicted=json.loads(p),
                fingerprint=json.loads(f),
                provenance=pv,
                source=src,
                peak_allocated_bytes=pa,
                peak_reserved_bytes=pr,
                dedup_key=dk,
            )
            for i, c, k, s, st, pl, cfg, m, p, f, pv, src, pa, pr, dk in rows
        ]


def export(results: list[Result], fmt: str) -> str:
    dicts = [
        {
            "id": r.id,
            "created_at": r.created_at,
            "kind": r.kind,
            "status": r.status,
            "strategy": r.strategy,
            "platform": r.platform,
            "provenance": r.provenance,
            "source": r.source,
            "config": r.config,
            "measured": r.measured,
            "predicted": r.predicted,
            "peak_allocated_bytes": r.peak_allocated_bytes,
            "peak_reserved_bytes": r.peak_reserved_bytes,
            "fingerprint": r.fingerprint,
        }
        for r in results
    ]
    if fmt == "json":
        return json.dumps(dicts, indent=2) + "\n"
    if fmt != "csv":
        raise SpecError(f"unknown export format {fmt!r}; choose csv or json")
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(
        [
            "id",
            "created_at",
            "kind",
            "status",
            "strategy",
            "platform",
            "provenance",
            "source",
            "config",
            "measured",
            "predicted",
            "peak_allocated_bytes",
            "peak_reserved_bytes",
            "host",
        ]
    )
    for d in dicts:
        w.writerow(
            [
                d["id"],
                d["created_at"],
                d["kind"],
                d["status"],
                d["strategy"],
                d["platform"],
                d["provenance"],
                d["source"],
                canonical(d["config"]),
                canonical(d["measured"]),
                canonical(d["predicted"]),
                d["peak_allocated_bytes"],
                d["peak_reserved_bytes"],
                d["fingerprint"].get("host", ""),
            ]
        )
    return buf.getvalue()
