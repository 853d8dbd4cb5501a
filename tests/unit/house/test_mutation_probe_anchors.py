"""benchmarks/mutation_probe.py's anchors still find the code they mutate (the full probe takes 13+
minutes; this is its --check-anchors, so a refactor that moves an anchor fails here, not there)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "mutation_probe.py"
_spec = importlib.util.spec_from_file_location("mutation_probe", _PATH)
mp = sys.modules.setdefault("mutation_probe", importlib.util.module_from_spec(_spec))  # dataclasses look it up
_spec.loader.exec_module(mp)


@pytest.mark.parametrize("m", mp.MUTATIONS, ids=lambda m: m.name)
def test_every_mutation_applies_to_the_tree(m):
    mp.check_anchors(m)


def test_an_anchor_that_moved_or_changes_nothing_is_named(tmp_path):
    (tmp_path / "a.toml").write_text("nic_bw_gbps = 25.0\nnic_bw_gbps = 12.5\ncomm_overlap = 0.0\n")
    twice = mp.Mutation("t", "t", (mp.Patch("a.toml", r"^nic_bw_gbps = ([0-9.]+)$", "x0.5"),), ())
    with pytest.raises(mp.AnchorError, match="matched 2 times"):
        mp.check_anchors(twice, tmp_path)
    same = mp.Mutation("t", "t", (mp.Patch("a.toml", r"^comm_overlap = 0\.0$", "comm_overlap = 0.0"),), ())
    with pytest.raises(mp.AnchorError, match="changes nothing"):
        mp.check_anchors(same, tmp_path)
    missing = mp.Mutation("t", "t", (), ("tests/unit/no_such_test.py",))
    with pytest.raises(mp.AnchorError, match="does not exist"):
        mp.check_anchors(missing, tmp_path)
