"""A log that is not a regular file (a FIFO given as the log, or named rank0.jsonl in a run
folder) is refused by `results import`'s reader before anything opens it: opening a FIFO without a
writer blocks (issue 38). The log readers stream, so they are not size-capped here."""

from __future__ import annotations

import json
import os
from pathlib import Path

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


@pytest.mark.parametrize("samples", [float("nan"), float("inf"), 10**400])
def test_a_step_record_with_non_finite_samples_reads(tmp_path, samples):
    """Found by benchmarks/fuzz_inputs.py: `samples: NaN` in the first step record was int(nan).
    The rank file is the StepMonitor fixture (tests/fixtures/imports/monitor/good) with one value changed."""
    good = Path(__file__).resolve().parents[2] / "fixtures" / "imports" / "monitor" / "good" / "rank0.jsonl"
    lines = []
    for line in good.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") == "step" and rec.get("step") == 0:
            rec["samples"] = samples
        lines.append(json.dumps(rec))
    (tmp_path / "rank0.jsonl").write_text("\n".join(lines) + "\n")
    try:
        log = read_run(tmp_path)
    except SpecError as e:  # 10**400 is refused naming the field; NaN and inf carry no batch
        assert "samples" in str(e)
    else:
        assert "samples_per_rank_step" not in log.scenario
