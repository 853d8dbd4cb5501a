"""Issue #26 finding 13: a ZeRO bench killed while DeepSpeed built its CPU op left torch's build
lock behind, and every later ZeRO bench waited on it until its timeout ("ranks that never
reported"). Now a lock no process holds is named, with its path and the fix, before any rank
starts; a lock a live build holds is not; the extensions folder is this project's own."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.launch.ds_ops import extensions_dir, stale_locks
from prism_strategy.cli import app


def _lock(root: Path) -> Path:
    lock = root / "deepspeed_shm_comm" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    return lock


def test_a_lock_no_process_holds_is_stale_and_one_held_open_is_not(tmp_path):
    lock = _lock(tmp_path)
    assert stale_locks(tmp_path) == [lock]
    fd = os.open(lock, os.O_RDONLY)  # what torch's FileBaton does while it builds
    try:
        assert stale_locks(tmp_path) == []
    finally:
        os.close(fd)


def test_the_extensions_folder_is_the_projects_unless_set(tmp_path):
    assert extensions_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "prism-strategy" / "torch_extensions"
    assert extensions_dir({"TORCH_EXTENSIONS_DIR": "/x/ext"}) == Path("/x/ext")


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_zero_bench_with_a_stale_lock_names_it_instead_of_timing_out(tmp_path, monkeypatch):
    lock = _lock(tmp_path / "ext")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    res = CliRunner().invoke(
        app, ["bench", "--strategies", "zero2", "--nproc", "2", "--db", str(tmp_path / "r.db"), "--timeout-s", "5"]
    )
    assert res.exit_code == 2, res.output
    assert str(lock) in res.output and "no process holds it" in res.output and f"rm {lock}" in res.output
