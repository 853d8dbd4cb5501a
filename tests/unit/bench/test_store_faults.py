"""Issue 38 item 5: the results store says what is wrong. A store on a read-only filesystem is
read (SQLite mode=ro, immutable=1 where the WAL index cannot be opened) and a write says
"read-only filesystem"; a full disk is named as such; another program's SQLite file given as the
store is refused before anything is written to it.

The filesystems are real: a read-only bind mount and a 256 KiB tmpfs, made in a private user and
mount namespace (`unshare -rm`, no root needed); those tests skip where the kernel refuses one."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import prism_strategy
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.specs import SpecError

SRC = str(Path(prism_strategy.__file__).parents[1])
PROBE = """
import sys
from prism_strategy.bench.results.store import Result, Store
from prism_strategy.specs import SpecError
store = Store(sys.argv[1])
try:
    print("rows", len(store.query()))
except SpecError as e:
    sys.exit(print("refused", e))
try:
    store.add_many([Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"n": i},
                           measured={"pad": "x" * 20000}) for i in range(int(sys.argv[2]))])
    print("wrote")
except SpecError as e:
    print("refused", e)
print("rows", len(store.query()))
"""


def _row(i: int) -> Result:
    return Result(kind="bench", status="ok", strategy="ddp", platform="cpu", config={"i": i}, measured={"t": 1.0})


def _namespace(shell: str, tmp_path: Path) -> list[str]:
    """Run `shell` as root of a private mount namespace; its stdout lines."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged mount namespace here (unshare -rm)")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "PY": sys.executable, "PROBE": str(tmp_path / "probe.py")}
    res = subprocess.run(["unshare", "-rm", "sh", "-ec", shell], env=env, capture_output=True, text=True, timeout=120)
    if "mount:" in res.stderr:
        pytest.skip(f"the kernel refused the test mount: {res.stderr.strip()[:200]}")
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    return res.stdout.splitlines()


def _read_only(folder: Path) -> str:
    return f'mount --bind "{folder}" "{folder}" && mount -o remount,ro,bind "{folder}"\n'


@pytest.mark.parametrize("leftovers", [True, False], ids=["with-shm-and-wal", "main-file-only"])
def test_a_wal_store_on_a_read_only_filesystem_is_read_and_a_write_says_why(tmp_path, leftovers):
    folder = tmp_path / "ro"
    folder.mkdir()
    Store(folder / "results.db").add_many([_row(i) for i in range(3)])
    for suffix in ("-wal", "-shm"):
        side = folder / f"results.db{suffix}"
        if not leftovers and side.exists():
            assert suffix == "-shm" or side.stat().st_size == 0
            side.unlink()
    out = _namespace(_read_only(folder) + f'"$PY" "$PROBE" "{folder / "results.db"}" 1\n', tmp_path)
    assert out[0] == "rows 3" and out[-1] == "rows 3", out
    assert out[1].startswith("refused") and "read-only filesystem" in out[1] and "--db" in out[1], out


def test_writes_still_in_the_wal_on_a_read_only_filesystem_are_named_not_missed(tmp_path):
    live, folder = tmp_path / "live", tmp_path / "ro"
    live.mkdir()
    folder.mkdir()
    store = Store(live / "results.db")
    store.add(_row(0))
    con = sqlite3.connect(live / "results.db")  # holds the WAL open: the next rows stay in -wal
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("SELECT count(*) FROM results").fetchall()  # a reader attached: closing the others keeps -wal
    store.add_many([_row(i) for i in range(1, 4)])
    for name in ("results.db", "results.db-wal"):
        shutil.copy(live / name, folder / name)
    con.close()
    assert (folder / "results.db-wal").stat().st_size > 0
    out = _namespace(_read_only(folder) + f'"$PY" "$PROBE" "{folder / "results.db"}" 1\n', tmp_path)
    assert len(out) == 1 and out[0].startswith("refused"), out  # never the main file's 1 row as if it were all
    assert "read-only filesystem" in out[0] and "results.db-wal" in out[0] and "--db" in out[0], out


def test_a_full_disk_is_named_and_keeps_the_rows_before(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    db = folder / "results.db"
    shell = (
        f'mount -t tmpfs -o size=256k none "{folder}"\n'
        f'"$PY" "$PROBE" "{db}" 1\n'
        f'dd if=/dev/zero of="{folder}/filler" bs=4k 2>/dev/null || true\n'
        f'"$PY" "$PROBE" "{db}" 20\n'
    )
    out = _namespace(shell, tmp_path)
    assert out[:3] == ["rows 0", "wrote", "rows 1"], out
    assert out[3] == "rows 1" and out[-1] == "rows 1", out
    assert out[4].startswith("refused") and "the disk is full" in out[4] and "nothing was written" in out[4], out


def test_another_programs_sqlite_file_is_refused_before_anything_is_written(tmp_path):
    foreign = tmp_path / "app.sqlite"
    con = sqlite3.connect(foreign)
    con.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'a');")
    con.close()
    before = hashlib.sha256(foreign.read_bytes()).hexdigest()
    store = Store(foreign)
    with pytest.raises(SpecError, match="another program's SQLite database") as err:
        store.add(_row(0))
    assert "users" in str(err.value) and "\n" not in str(err.value)
    assert store.query() == []  # read: it holds no stored runs
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.sqlite"]  # no -wal, -shm or -journal
    assert sqlite3.connect(foreign).execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_an_empty_sqlite_file_and_a_prism_store_are_written(tmp_path):
    empty = tmp_path / "new.db"
    sqlite3.connect(empty).close()
    Store(empty).add(_row(0))
    Store(empty).add(_row(1))
    assert len(Store(empty).query()) == 2
