"""A log that is not a regular file (a FIFO given as the log, or named rank0.jsonl in a run
folder) is refused by `results import`'s reader before anything opens it: opening a FIFO without a
writer blocks (issue 38). The log readers stream, so they are not size-capped here."""

from __future__ import annotations

import os

import pytest

from prism_strategy.readers import read_run
from prism_strategy.specs.errors import SpecError


def test_a_fifo_as_the_log_is_refused(tmp_path):
    fifo = tmp_path / "perf.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="a FIFO, not a regular file") as e:
        read_run(fifo)
    assert str(fifo) in str(e.value)


def test_a_fifo_among_the_rank_files_is_refused(tmp_path):
    (tmp_path / "rank1.jsonl").write_text('{"kind": "meta", "rank": 1}\n')
    os.mkfifo(tmp_path / "rank0.jsonl")
    with pytest.raises(SpecError, match="rank0.jsonl: cannot read it: a FIFO"):
        read_run(tmp_path)
