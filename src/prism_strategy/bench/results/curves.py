"""Measured collective points in the results store (table `collective_points`), and the curves
the planner prices with (specs/measured.MeasuredCurve).

One row per (run, op, group shape, size): seconds per call, with the run's fingerprint. A run is
one commbench launch (run_key "commbench:<id>") or one imported log ("imported:<content hash>"):
writing a run replaces its rows in one IMMEDIATE transaction, so a re-import updates instead of
duplicating and a failed write leaves the store as it was.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prism_strategy.bench.results.store import Store
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.measured import MeasuredCurve

SCHEMA = """
CREATE TABLE IF NOT EXISTS collective_points (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at TEXT NOT NULL,
    run_key TEXT NOT NULL,          -- commbench:<uuid> | imported:<sha256 of the log>
    format TEXT NOT NULL,           -- commbench | nccl-tests | oneccl-benchmark
    source TEXT NOT NULL,           -- the strategy and group kind, or the log's path
    platform TEXT NOT NULL,
    nodes INTEGER NOT NULL,         -- of the launch
    ranks_per_node INTEGER NOT NULL,
    backend TEXT NOT NULL,
    op TEXT NOT NULL,
    group_ranks INTEGER NOT NULL,
    group_nodes INTEGER NOT NULL,
    concurrent INTEGER NOT NULL,    -- groups of this shape running at once per node
    dtype TEXT NOT NULL,
    bytes REAL NOT NULL,            -- payload per call (census convention)
    seconds REAL NOT NULL,          -- per call: median of repetitions (commbench) or the log's time
    spread REAL,                    -- (max - min) / median over repetitions, where known
    repetitions INTEGER,
    fingerprint TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS collective_points_platform ON collective_points (platform, op);
"""
_COLUMNS = (
    "created_at",
    "run_key",
    "format",
    "source",
    "platform",
    "nodes",
    "ranks_per_node",
    "backend",
    "op",
    "group_ranks",
    "group_nodes",
    "concurrent",
    "dtype",
    "bytes",
    "seconds",
    "spread",
    "repetitions",
    "fingerprint",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Point:
    op: str
    group_ranks: int
    group_nodes: int
    dtype: str
    bytes: float
    seconds: float
    concurrent: int = 1
    spread: float | None = None
    repetitions: int | None = None
    source: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One measurement run: where, with what, and its points."""

    run_key: str
    format: str
    platform: str
    nodes: int
    ranks_per_node: int
    backend: str
    points: tuple[Point, ...]
    fingerprint: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def write_run(store: Store, run: Run) -> tuple[int, str]:
    """Store a run's points, replacing an earlier write of the same run; (rows, added | replaced)."""
    if not run.points:
        raise SpecError(f"{run.source or run.run_key}: no measured points to store")
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    rows = [
        (
            now,
            run.run_key,
            run.format,
            p.source or run.source,
            run.platform,
            run.nodes,
            run.ranks_per_node,
            run.backend,
            p.op,
            p.group_ranks,
            p.group_nodes,
            p.concurrent,
            p.dtype,
            p.bytes,
            p.seconds,
            p.spread,
            p.repetitions,
            json.dumps(run.fingerprint, sort_keys=True),
        )
        for p in run.points
    ]

    def write(con: sqlite3.Connection) -> tuple[int, str]:
        con.executescript(SCHEMA)
        con.execute("BEGIN IMMEDIATE")
        try:
            gone = con.execute("DELETE FROM collective_points WHERE run_key = ?", (run.run_key,)).rowcount
            con.executemany(
                f"INSERT INTO collective_points ({', '.join(_COLUMNS)}) VALUES ({','.join('?' * len(_COLUMNS))})", rows
            )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:  # SQLite already rolled back on some errors (a full disk)
                con.execute("ROLLBACK")
            raise
        return len(rows), "replaced" if gone else "added"

    return store.run(write)


def _rows(store: Store, platform: str) -> list[tuple[Any, ...]]:
    def read(con: sqlite3.Connection) -> list[tuple[Any, ...]]:
        return con.execute(
            "SELECT run_key, format, source, op, group_ranks, group_nodes, concurrent, bytes, seconds,"
            " created_at FROM collective_points WHERE platform = ? ORDER BY id",
            (platform,),
        ).fetchall()

    return store.read(read, [], table="collective_points")


HOST_BUFFERS = " (host buffers)"
"""The label of a curve measured on host memory (readers: CollectiveLog.buffers): listed with the
others, never attached to a plan, whose collectives move device buffers."""


def load_curves(store: Store, platform: str, *, with_host: bool = False) -> tuple[MeasuredCurve, ...]:
    """Every stored curve for `platform`: one per (run, op, group shape); repeated sizes averaged.
    Host-buffer curves (HOST_BUFFERS) only `with_host` (listings): a plan's and a fit's
    collectives move device buffers."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run_key, fmt, source, op, gr, gn, conc, nbytes, secs, created in _rows(store, platform):
        g = groups.setdefault(
            (run_key, op, gr, gn, conc), {"fmt": fmt, "source": source, "date": created[:10], "sizes": {}}
        )
        g["sizes"].setdefault(float(nbytes), []).append(float(secs))
    return tuple(
        MeasuredCurve(
            op=op,
            ranks=gr,
            nodes=gn,
            concurrent=conc,
            label=g["fmt"],
            date=g["date"],
            source=g["source"],
            points=tuple((b, sum(ts) / len(ts)) for b, ts in sorted(g["sizes"].items())),
        )
        for (_, op, gr, gn, conc), g in groups.items()
        if with_host or not g["fmt"].endswith(HOST_BUFFERS)
    )


def stored_curves(store: Store, platform: str | None = None) -> list[tuple[str, MeasuredCurve]]:
    """(platform, curve) for every stored curve, or one platform's."""
    if platform is not None:
        return [(platform, c) for c in load_curves(store, platform, with_host=True)]

    def names(con: sqlite3.Connection) -> list[str]:
        return [r[0] for r in con.execute("SELECT DISTINCT platform FROM collective_points ORDER BY platform")]

    return [
        (p, c) for p in store.read(names, [], table="collective_points") for c in load_curves(store, p, with_host=True)
    ]


def curves_for(db: str | Path | None, platform: str) -> tuple[MeasuredCurve, ...]:
    """The curves `plan --db` attaches (the default store when db is None; none when it is absent):
    device-buffer curves only (load_curves)."""
    return load_curves(Store(db), platform)


def _log_nodes(path: Path, fmt: str, nodes: int | None, hosts: tuple[str, ...]) -> int:
    """The nodes the benchmark spanned: its distinct hosts when the log names them (a --nodes that
    differs is refused, naming them), else --nodes, which is then required."""
    if hosts:
        if nodes is not None and nodes != len(hosts):
            named = ", ".join(hosts[:4]) + (f", ... {len(hosts) - 4} more" if len(hosts) > 4 else "")
            raise SpecError(f"{path}: the log ran on {len(hosts)} hosts ({named}), not --nodes {nodes}; drop --nodes")
        return len(hosts)
    if nodes is None:
        raise SpecError(
            f"--nodes is required for a {fmt} log that names no hosts: how many nodes the benchmark spanned"
        )
    return nodes


def import_collective_log(
    path: str | Path,
    fmt: str,
    *,
    platform: str,
    nodes: int | None,
    ranks_per_node: int | None,
    store: Store,
    collective: str | None = None,
) -> dict[str, Any]:
    """Read an nccl-tests / oneCCL benchmark log, check it against the flags, store it as one run
    (replacing an earlier import of the same log). Nothing is written unless all of it reads."""
    import hashlib

    from prism_strategy.readers import COLLECTIVE_FORMATS
    from prism_strategy.specs.presets import load_platform

    reader = COLLECTIVE_FORMATS.get(fmt)
    if reader is None:
        raise SpecError(f"--format {fmt!r}: collective logs are one of {', '.join(COLLECTIVE_FORMATS)}")
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: no such file")
    if nodes is not None and nodes < 1:
        raise SpecError(f"--nodes must be >= 1 (how many nodes the benchmark spanned), got {nodes}")
    plat = load_platform(platform)
    if not reader.looks_like(path):
        raise SpecError(f"{path}: not {fmt} output (see `prism-strategy results import --help`)")
    if collective is not None and fmt != "nccl-tests":
        raise SpecError(f"--collective is for nccl-tests logs; a {fmt} log names its collective")
    log = reader.read(path, op=collective) if collective is not None else reader.read(path)
    nodes = _log_nodes(path, fmt, nodes, tuple(log.hosts))
    rpn = ranks_per_node or (log.ranks // nodes if log.ranks else plat.hardware.devices_per_node)
    if log.ranks is not None and rpn * nodes != log.ranks:
        given = f"--ranks-per-node {rpn}" if ranks_per_node else f"its {nodes} node(s) in equal parts"
        raise SpecError(f"{path}: the log ran {log.ranks} ranks, not --nodes {nodes} x {given}")
    if rpn * nodes < 2:
        raise SpecError(f"{path}: one rank moves nothing; a collective curve needs at least 2 ranks")
    points = tuple(
        Point(
            op=log.op,
            group_ranks=rpn * nodes,
            group_nodes=nodes,
            dtype=log.dtype or "unknown",
            bytes=s.bytes,
            seconds=s.seconds,
            source=s.where,
        )
        for s in log.samples
    )
    key = "imported:" + hashlib.sha256(path.read_bytes()).hexdigest()[:32]
    label = fmt + HOST_BUFFERS if log.buffers == "host" else fmt
    fp = {
        "platform": plat.name,
        "nodes": nodes,
        "ranks_per_node": rpn,
        "backend": plat.backend,
        "format": label,
        "hosts": list(log.hosts),
    }
    n, action = write_run(
        store,
        Run(
            run_key=key,
            format=label,
            platform=plat.name,
            nodes=nodes,
            ranks_per_node=rpn,
            backend=plat.backend,
            points=points,
            fingerprint=fp,
            source=str(path.resolve()),
        ),
    )
    return {
        "format": label,
        "op": log.op,
        "dtype": log.dtype,
        "platform": plat.name,
        "nodes": nodes,
        "ranks_per_node": rpn,
        "points": n,
        "action": action,
        "run_key": key,
        "bytes_min": points[0].bytes,
        "bytes_max": points[-1].bytes,
        "seconds_at_max": points[-1].seconds,
    }


def curves_for_platform(db: str | Path | None, platform: str) -> tuple[MeasuredCurve, ...]:
    """curves_for a platform as `plan --platform` names it (a preset or a .toml path)."""
    from prism_strategy.specs.presets import load_platform

    return curves_for(db, load_platform(platform).name)
