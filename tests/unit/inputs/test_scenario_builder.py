"""The one Scenario builder (inputs/scenario.py): it takes the policies whole, applies the env
profile and what was measured to the platform once, and the planner takes the result whole
(issue 37 item 1)."""

from __future__ import annotations

import pytest

from prism_strategy.estimate.environment import platform_under
from prism_strategy.estimate.option import estimate_option
from prism_strategy.flags import plan, scenario_from_flags
from prism_strategy.inputs.scenario import build_scenario, scenario_of
from prism_strategy.planning import planner
from prism_strategy.specs.policies import BatchPolicy, MeasuredPolicy, MemoryPolicy, PlanOptions
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy

OTHER = "aurora-alcf-minimal"
"""A documented profile other than aurora's own (aurora-prism-2026.11)."""


def test_the_builder_takes_the_policies_whole_as_the_flags_give_them():
    batch = BatchPolicy(seq_len=512, micro_batch=2)
    memory = MemoryPolicy(checkpointing=1, loss="fused", varying_lengths=False)  # as the Scenario resolves it
    sc = build_scenario("qwen3-0.6b", "aurora", nodes=2, batch=batch, memory=memory)
    assert (sc.batch, sc.memory) == (batch, memory)
    assert sc == scenario_from_flags("qwen3-0.6b", nodes=2, seq_len=512, micro_batch=2, ckpt_freq=1, loss="fused")


def test_the_env_profile_is_applied_once_where_the_scenario_is_built():
    sc = build_scenario("qwen3-0.6b", "aurora", nodes=4, env_profile=OTHER)
    assert sc.platform.env_profile == OTHER and "env_profile" in sc.platform.sources
    assert platform_under(sc.platform, sc.environment) == sc.platform  # a second application changes nothing
    # rebuilt from its own parts (a stored row's path), the platform stays as it was priced
    again = scenario_of(sc.model, sc.platform, sc.layout, batch=sc.batch, precision=sc.precision, memory=sc.memory,
                        environment=sc.environment)  # fmt: skip
    assert again.platform == sc.platform
    plain = build_scenario("qwen3-0.6b", "aurora", nodes=4)
    assert plain.platform == load_platform("aurora")  # the platform's own profile: the platform as it is


def test_what_was_measured_reaches_the_platform_through_the_builder():
    sc = build_scenario("qwen3-0.6b", "aurora", measured=MeasuredPolicy(rank_jitter=0.05))
    assert sc.platform.value("rank_jitter") == 0.05
    assert build_scenario("qwen3-0.6b", "aurora").platform == load_platform("aurora")  # calibration "none"


def test_the_planner_prices_the_scenario_as_built():
    sc = build_scenario("qwen3-0.6b", "aurora", nodes=4, env_profile=OTHER, batch=BatchPolicy(seq_len=512))
    p = planner.plan(sc, PlanOptions())
    assert p.scenario.platform == sc.platform  # nothing re-applied in planning/
    fsdp = get_strategy("fsdp_full_shard")
    assert p.option("fsdp_full_shard").estimate == estimate_option(sc, fsdp)  # the Option holds it whole


def test_the_convenience_names_a_flag_it_does_not_take():
    with pytest.raises(TypeError, match="plan\\(\\) got an unexpected keyword argument 'sequence_length'"):
        plan("qwen3-0.6b", sequence_length=512)
