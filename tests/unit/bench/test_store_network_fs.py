"""The results store picks its journal from the filesystem it is on (a synthetic mounts file
stands in for /proc/mounts): WAL on a local disk, the rollback journal on a network filesystem,
and several writer processes lose nothing in that mode."""

import multiprocessing as mp
import sqlite3

import pytest

from prism_strategy.bench.results.store import Result, Store, journal_for, mount_of


def _mounts(tmp_path, fstype: str, point) -> object:
    f = tmp_path / "mounts"
    f.write_text(
        "sysfs /sys sysfs rw 0 0\n/dev/sda1 / ext4 rw 0 0\n"
        f"server:/export {str(point).replace(' ', chr(92) + '040')} {fstype} rw,relatime 0 0\n"
    )
    return f


@pytest.mark.parametrize(
    "fstype, mode",
    [
        ("nfs4", "delete"),
        ("lustre", "delete"),
        ("gpfs", "delete"),
        ("fuse.dfuse", "delete"),
        ("cifs", "delete"),
        ("beegfs", "delete"),
        ("ext4", "wal"),
        ("xfs", "wal"),
        ("tmpfs", "wal"),
    ],
)
def test_journal_mode_follows_the_longest_mount_prefix(tmp_path, fstype, mode):
    home = tmp_path / "my home"  # a space: /proc/mounts writes it \\040
    home.mkdir()
    mounts = _mounts(tmp_path, fstype, home)
    assert mount_of(home / "cache" / "results.db", mounts) == (str(home.resolve()), fstype)
    j = journal_for(home / "cache" / "results.db", mounts)
    assert j.mode == mode and (fstype in j.why)
    assert journal_for(tmp_path / "elsewhere.db", mounts).mode == "wal"  # outside the mount: the root's ext4


def test_a_store_on_a_network_filesystem_runs_the_rollback_journal(tmp_path):
    mounts = _mounts(tmp_path, "lustre", tmp_path)
    db = tmp_path / "r.db"
    Store(db, mounts=mounts).add(
        Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"i": 0}, measured={})
    )
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not (tmp_path / "r.db-wal").exists() and not (tmp_path / "r.db-shm").exists()
    assert len(Store(db).query()) == 1  # a read opens it read-only (mode=ro): the journal stays
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    Store(db).add(Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"i": 1}, measured={}))
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # written as local: WAL


def _writer(args):
    path, mounts, worker, n = args
    s = Store(path, mounts=mounts)
    for i in range(n):
        s.add(
            Result(
                kind="bench",
                status="ok",
                strategy="ddp",
                platform="cpu",
                config={"w": worker, "i": i},
                measured={"step_time_s": 1.0},
                fingerprint={"host": "h"},
            )
        )


def test_concurrent_writers_lose_nothing_in_delete_mode(tmp_path):
    mounts = _mounts(tmp_path, "nfs4", tmp_path)
    db = tmp_path / "r.db"
    with mp.get_context("spawn").Pool(3) as pool:
        pool.map(_writer, [(db, mounts, w, 20) for w in range(3)])
    rows = Store(db, mounts=mounts).query()
    assert {(r.config["w"], r.config["i"]) for r in rows} == {(w, i) for w in range(3) for i in range(20)}
    assert len(rows) == 60
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "delete"
