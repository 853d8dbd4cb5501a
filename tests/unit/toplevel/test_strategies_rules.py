"""The strategy catalogue and the rules data."""

import pytest

from prism_strategy.rules import check, load_rules
from prism_strategy.specs import Layout, SpecError
from prism_strategy.strategies import STRATEGY_NAMES, MeshAxis, get_strategy, parse_strategies


def test_catalogue_names_pinned():
    assert STRATEGY_NAMES == (
        "ddp",
        "fsdp_full_shard",
        "fsdp_shard_grad_op",
        "hsdp_full_shard",
        "hsdp_shard_grad_op",
        "zero1",
        "zero2",
        "zero3",
    )


def test_unknown_strategy_lists_choices():
    with pytest.raises(SpecError, match="fsdp_full_shard"):
        get_strategy("fsdp")


def test_sharding_degrees_and_mesh():
    lay = Layout(nodes=2, ranks_per_node=2)
    assert get_strategy("ddp").degree(get_strategy("ddp").param_shard, lay) == 1
    fs = get_strategy("fsdp_full_shard")
    assert fs.degree(fs.param_shard, lay) == 4 and fs.mesh_axes(lay) == ((MeshAxis.SHARD, 4),)
    h = get_strategy("hsdp_shard_grad_op")
    assert h.degree(h.param_shard, lay) == 2 and not h.reshard_after_forward
    assert h.mesh_axes(lay) == ((MeshAxis.REPLICATE, 2), (MeshAxis.SHARD, 2))
    assert [s.name for s in parse_strategies("ddp, zero2")] == ["ddp", "zero2"]
    assert len(parse_strategies("all")) == 8


def test_every_rule_has_reason_fix_source():
    rules = load_rules()
    assert len({r.id for r in rules}) == len(rules)
    for r in rules:
        assert r.reason and r.fix and r.source and r.when


def test_rules_fire_only_on_their_situation():
    fired = lambda **s: {v.rule.id for v in check(s)}  # noqa: E731
    assert "xpu-multinode-compile" in fired(device="xpu", compile=True, multi_node=True, engine="fsdp2")
    assert "xpu-multinode-compile" not in fired(device="xpu", compile=True, multi_node=False, engine="fsdp2")
    assert "xpu-multinode-compile" not in fired(device="cuda", compile=True, multi_node=True, engine="fsdp2")
    assert "deepspeed-compile" in fired(engine="deepspeed", compile=True)
    assert fired(engine="ddp") == set()
    both = fired(engine="ddp", find_unused_parameters=True, static_graph=True)
    assert "find-unused-vs-static-graph" in both
