"""Property-based fuzz of the log readers (issue 38 item 6), bounded for the suite: the log
fixtures (StepMonitor rank files, PRISM perf.jsonl and [TIMING] logs, torchtitan logs, nccl-tests
and oneCCL outputs) with lines garbled (numbers swapped for nan/inf/10**400, lines cut, doubled,
replaced); `analyze` / `results import` (or the collective reader) must read them or refuse with a
SpecError, never another exception; and some cases of each are read whole, so the fuzz reaches past the first check. Cases and invariant: benchmarks/fuzz_inputs.py; derandomized.
The deadline bounds unbounded work (milliseconds a case), not speed."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import fuzz_inputs  # noqa: E402


@pytest.mark.parametrize("edge", [e for e in fuzz_inputs.EDGES if e.startswith("log-")])
def test_a_garbled_log_reads_or_is_one_line(edge, tmp_path):
    fuzz_inputs.check_edge(edge, tmp_path, 30, timedelta(seconds=10))
