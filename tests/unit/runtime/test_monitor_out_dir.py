"""StepMonitor refuses a folder it cannot write at construction (issue 38: it failed at the first
step, mid-training), still without creating anything there (its constructor has no side effects)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from prism_strategy.runtime.monitor import StepMonitor
from prism_strategy.specs.errors import SpecError

CTX = SimpleNamespace(rank=0, world_size=1)


def test_a_path_under_a_file_is_refused_at_construction(tmp_path):
    blocker = tmp_path / "logs"
    blocker.write_text("not a folder")
    with pytest.raises(SpecError, match="is a file, not a folder") as e:
        StepMonitor(blocker / "run1", ctx=CTX, hang_timeout_s=None)
    assert "StepMonitor out_dir" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through folder permissions")
def test_a_read_only_folder_is_refused_at_construction(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(SpecError, match="not writable"):
        StepMonitor(ro / "run1", ctx=CTX, hang_timeout_s=None)


def test_a_folder_to_be_made_is_accepted_and_not_made(tmp_path):
    mon = StepMonitor(tmp_path / "a" / "b", ctx=CTX, hang_timeout_s=None)
    assert not (tmp_path / "a").exists()
    mon.start()
    mon.close()
    assert (tmp_path / "a" / "b" / "rank0.jsonl").exists()
