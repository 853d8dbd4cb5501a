"""The ranking rule (recommend.RANKING_RULE), stated once and applied once by recommend.pick: no
dominated pick (dominated: another option no larger and more than CLEARLY_FASTER faster); options
the fastest outruns by at most TIE are tied; among the undominated tied
options the simplest engine, then the fastest unless another has a FRUGAL larger max micro-batch."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from prism_strategy.planning.recommend import CLEARLY_FASTER, FRUGAL, RANKING_RULE, TIE, dominates, in_band, pick

DOC = Path(__file__).resolve().parents[3] / "docs" / "plan_output.md"


def opt(name, sps, max_mb, gib):
    return SimpleNamespace(strategy=name, samples_per_s=sps, max_micro_batch=max_mb, memory_total=gib * 2**30)


@pytest.mark.parametrize(
    "other_max_mb, other_gib, wins",
    [
        (10, 56.0, False),  # same max micro-batch, 10% less memory: memory alone decides nothing
        (10, 62.5, False),  # same max micro-batch, same memory: slower, so dominated
        (11, 60.0, True),  # a 10% larger max micro-batch: room to grow the batch
        (11, 70.0, False),  # a larger max micro-batch, but slower with more memory: dominated
        (10.4, 40.0, False),  # a 4% larger max micro-batch: below FRUGAL
    ],
)
def test_band_winner_follows_the_stated_rule(other_max_mb, other_gib, wins):
    fastest = opt("fsdp_full_shard", 100.0, 10, 62.5)
    other = opt("fsdp_shard_grad_op", 95.0, other_max_mb, other_gib)
    assert pick([fastest, other]) is (other if wins else fastest)


def test_a_dominated_option_is_never_picked_even_of_a_simpler_engine():
    """Finding 1 in miniature: an FSDP2 option slower and larger than a DeepSpeed one loses to it,
    though the simpler engine would win a tie."""
    ds = opt("zero3", 100.0, 1, 60.0)
    fsdp = opt("hsdp_full_shard", 95.0, 2, 61.0)
    assert dominates(ds, fsdp) and pick([fsdp, ds]) is ds


def test_the_simpler_engine_wins_only_inside_the_band():
    fast = opt("zero3", 100.0, 1, 50.0)
    edge = opt("fsdp_full_shard", 100.0 / (1 + TIE), 1, 40.0)  # the fastest is exactly TIE faster
    beyond = opt("fsdp_full_shard", 100.0 / (1 + TIE) * 0.999, 1, 40.0)
    assert in_band(edge, fast) and pick([fast, edge]) is edge
    assert not in_band(beyond, fast) and pick([fast, beyond]) is fast


def test_equal_options_go_by_the_registry_order():
    a, b = opt("hsdp_full_shard", 50.0, 4, 30.0), opt("fsdp_full_shard", 50.0, 4, 30.0)
    assert not dominates(a, b) and not dominates(b, a)
    assert pick([a, b]) is b


def test_docs_quote_the_rule_the_code_applies():
    text = " ".join(DOC.read_text().split())
    assert FRUGAL == 0.05 and TIE == 0.10 and CLEARLY_FASTER == 0.05
    assert RANKING_RULE[1:] in text  # the docs capitalise its first word


def test_less_memory_alone_does_not_dominate():
    """Projector-only on Aurora: zero1 0.3% faster than DDP with 6% less memory, both far below
    the limit; DDP, the simpler engine, stays the pick."""
    ddp, zero1 = opt("ddp", 42.35, 23, 19.75), opt("zero1", 42.46, 30, 18.63)
    assert not dominates(zero1, ddp) and pick([zero1, ddp]) is ddp
