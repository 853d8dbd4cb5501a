"""The tie-break in docs/model.md is the rule recommend.py applies: among the simplest engine's
options in the band, the fastest, unless another leaves FRUGAL (5%) more room: a max micro-batch
5% larger or, at the same max micro-batch, 5% less memory per device."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from prism_strategy.planning.recommend import FRUGAL, pick_in_band

README = Path(__file__).resolve().parents[2] / "docs" / "model.md"
"""How the numbers are made, moved from the README into docs/ (the README is a landing page)."""


def opt(name, sps, max_mb, gib):
    return SimpleNamespace(
        strategy=name, samples_per_s=sps, max_micro_batch=max_mb, memory=SimpleNamespace(total=gib * 2**30)
    )


@pytest.mark.parametrize(
    "other_max_mb, other_gib, wins",
    [
        (10, 60.0, False),  # same max micro-batch, 4% less memory: not enough room
        (10, 56.0, True),  # same max micro-batch, 10% less memory: the more frugal wins
        (10, 62.5, False),  # same max micro-batch, more memory
        (11, 70.0, True),  # a 10% larger max micro-batch wins even with more GiB
        (10.4, 40.0, False),  # a 4% larger max micro-batch: below the 5%
    ],
)
def test_band_winner_follows_the_stated_rule(other_max_mb, other_gib, wins):
    fastest = opt("fsdp_full_shard", 100.0, 10, 62.5)
    other = opt("fsdp_shard_grad_op", 95.0, other_max_mb, other_gib)
    assert pick_in_band([fastest, other]) is (other if wins else fastest)


def test_the_docs_state_the_same_rule():
    text = " ".join(README.read_text().split())
    assert FRUGAL == 0.05
    assert (
        "unless another leaves 5% more room: a max micro-batch 5% larger or, at the same max micro-batch, 5% "
        "less memory per device"
    ) in text
