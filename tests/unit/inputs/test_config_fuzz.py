"""Property-based fuzz of the framework config readers (issue 38 item 6), bounded for the suite:
real configs (tests/fixtures/configs) with values swapped for hostile ones, written as TOML, JSON
or YAML (alias bombs included); each must read, or be refused with a SpecError (exit 2 in the
CLI), never another exception; and some cases of each are read whole, so the fuzz reaches past the first check. The cases and the invariant are benchmarks/fuzz_inputs.py's (its
10,000-case run is the long form); derandomized, so a run is repeatable.

The deadline is a bound on unbounded work, not a speed target: a case takes milliseconds
(benchmarks/fuzz_inputs.py prints the slowest), the alias bomb of the issue took 40-80 s."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import fuzz_inputs  # noqa: E402

CASES = 40


@pytest.mark.parametrize("edge", [e for e in fuzz_inputs.EDGES if e.startswith("config-")])
def test_a_mutated_config_reads_or_is_one_line(edge, tmp_path):
    fuzz_inputs.check_edge(edge, tmp_path, CASES, timedelta(seconds=10))
