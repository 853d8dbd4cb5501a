"""Property-based fuzz of platform files and HF config.json models (issue 38 item 6), bounded for
the suite: the shipped platform presets and the real configs of tests/fixtures/hf with values
swapped for hostile ones; each must load (and a platform build a scenario), or be refused with a
SpecError, never another exception; and some cases of each are read whole, so the fuzz reaches past the first check. Cases and invariant: benchmarks/fuzz_inputs.py (10,000 cases
there); derandomized. The deadline bounds unbounded work (milliseconds a case), not speed."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import fuzz_inputs  # noqa: E402


@pytest.mark.parametrize("edge", ["platform", "model"])
def test_a_mutated_platform_or_model_loads_or_is_one_line(edge, tmp_path):
    fuzz_inputs.check_edge(edge, tmp_path, 50, timedelta(seconds=10))
