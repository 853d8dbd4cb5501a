"""Schema migration of the results store: a store written before provenance existed opens, keeps
every row and value, reads them as provenance 'bench', and takes new rows; re-opening is a no-op."""

import json
import multiprocessing as mp
import sqlite3

import pytest

from prism_strategy.bench.results.store import SCHEMA_VERSION, Result, Store

OLD_SCHEMA = """
CREATE TABLE results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    strategy TEXT NOT NULL, platform TEXT NOT NULL, config_key TEXT NOT NULL, config TEXT NOT NULL,
    measured TEXT NOT NULL, predicted TEXT NOT NULL, fingerprint TEXT NOT NULL, host TEXT NOT NULL);
CREATE INDEX results_config ON results (config_key);
CREATE INDEX results_platform ON results (platform, host);
"""


def old_store(path, n=5):
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    for i in range(n):
        cfg = json.dumps({"i": i}, sort_keys=True, separators=(",", ":"))
        con.execute(
            "INSERT INTO results (created_at, kind, status, strategy, platform, config_key, config, measured,"
            " predicted, fingerprint, host) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                f"2026-01-0{i + 1}",
                "bench",
                "ok",
                "ddp",
                "cpu",
                cfg,
                cfg,
                json.dumps({"step_time_s": 0.1 * (i + 1), "peak_memory_bytes": 1000 + i}),
                "{}",
                json.dumps({"host": "h"}),
                "h",
            ),
        )
    con.commit()
    con.close()


def test_old_store_opens_keeps_rows_and_takes_new_ones(tmp_path):
    db = tmp_path / "old.db"
    old_store(db)
    rows = Store(db).query()
    assert [r.config["i"] for r in rows] == list(range(5))
    assert [r.measured["step_time_s"] for r in rows] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    assert {r.provenance for r in rows} == {"bench"} and {r.source for r in rows} == {""}
    assert all(r.peak_allocated_bytes is None and r.peak_reserved_bytes is None for r in rows)
    rid = Store(db).add(
        Result(
            kind="bench",
            status="ok",
            strategy="ddp",
            platform="aurora",
            config={"new": 1},
            measured={"step_time_s": 2.0},
            provenance="imported",
            source="/x/train.log",
            peak_allocated_bytes=1e9,
            peak_reserved_bytes=2e9,
            dedup_key="imported:k",
        )
    )
    again = Store(db).query()
    assert len(again) == 6 and again[-1].id == rid and again[-1].peak_reserved_bytes == 2e9
    assert [r.measured for r in again[:5]] == [r.measured for r in rows]
    assert Store(db).query(provenance="imported")[0].source == "/x/train.log"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def _open(path):
    return len(Store(path).query())


def test_two_processes_migrating_at_once_both_succeed(tmp_path):
    db = tmp_path / "old.db"
    old_store(db, n=3)
    with mp.get_context("spawn").Pool(2) as pool:
        assert pool.map(_open, [db, db]) == [3, 3]


def test_dedup_key_updates_instead_of_duplicating_and_a_failed_batch_stores_nothing(tmp_path):
    s = Store(tmp_path / "r.db")
    r = Result(
        kind="bench",
        status="ok",
        strategy="ddp",
        platform="cpu",
        config={"a": 1},
        measured={"step_time_s": 1.0},
        provenance="published",
        source="set A1",
        dedup_key="published:set:A1",
    )
    assert s.add_many([r]) == [(1, "added")]
    assert s.add_many([r]) == [(1, "unchanged")]
    changed = Result(**{**{k: getattr(r, k) for k in r.__dataclass_fields__}, "measured": {"step_time_s": 1.1}})
    assert s.add_many([changed]) == [(1, "updated")]
    assert len(s.query()) == 1 and s.query()[0].measured["step_time_s"] == 1.1
    bad = Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={}, measured={}, provenance="rumour")
    with pytest.raises(Exception, match="provenance"):
        s.add_many(
            [Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"b": 2}, measured={}), bad]
        )
    assert len(s.query()) == 1
