"""Typed rule facts: every rule in data/rules.toml fires from the facts it names, a `when` key
that is not a fact is refused, and each stage's facts come from one place (the engine adds its own)."""

from __future__ import annotations

import pytest

from prism_strategy.planning.planner import _situation
from prism_strategy.rules import FACT_NAMES, RuleFacts, check, load_rules, parse_rules
from prism_strategy.planning.scenario import build_scenario
from prism_strategy.specs import SpecError
from prism_strategy.strategies import get_strategy


def _facts_for(rule) -> RuleFacts:
    return RuleFacts(**{k: (v[0] if isinstance(v, list) else v) for k, v in rule.when.items()})


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r.id)
def test_every_rule_fires_from_its_facts_and_not_without_them(rule):
    assert rule.id in {v.rule.id for v in check(_facts_for(rule))}
    key = next(iter(rule.when))
    unknown = RuleFacts(**{k: v for k, v in _facts_for(rule).known().items() if k != key})
    assert rule.id not in {v.rule.id for v in check(unknown)}  # an unknown fact never matches


def test_when_keys_are_facts():
    assert all(set(r.when) <= FACT_NAMES for r in load_rules())
    bad = {"rule": [{"id": "x", "kind": "guardrail", "when": {"varlen_attention": True}, "reason": "r", "fix": "f",
                     "source": "s"}]}
    with pytest.raises(SpecError, match="`when` key 'varlen_attention' is not a rule fact"):
        parse_rules(bad)
    with pytest.raises(SpecError, match="'colour' is not a rule fact"):
        check({"colour": "red"})


def test_the_planner_takes_the_engines_facts():
    sc = build_scenario("qwen3-0.6b", platform="aurora", nodes=2)
    facts = {n: _situation(sc, get_strategy(n)) for n in ("ddp", "hsdp_full_shard", "zero1")}
    assert facts["ddp"].engine == "ddp" and facts["ddp"].reshard_or_sharded is False
    assert facts["hsdp_full_shard"].reshard_or_sharded and facts["zero1"].reshard_or_sharded
    assert facts["ddp"].device == "xpu" and facts["ddp"].multi_node is True
    assert facts["ddp"].root_only_wrap is None  # the planner does not know the model's modules
