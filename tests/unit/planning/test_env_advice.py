"""Issue 25 item 4: environment advice, priced. Each entry's figures agree with a whole plan made
under that profile's platform (estimate/comm_oneccl.with_ccl_env), and an entry appears only when
the profile moves the pick's step by more than CHANGE or changes the pick."""

import pytest

from prism_strategy import plan
from prism_strategy.estimate.comm_oneccl import with_ccl_env
from prism_strategy.planning.env_advice import CHANGE, backend_profiles, validation
from prism_strategy.specs.presets import load_platform

AURORA = dict(model="qwen3-0.6b", platform="aurora", seq_len=512)


@pytest.fixture(scope="module", params=[10, 16])
def advised(request):
    return request.param, plan(**AURORA, nodes=request.param)


def test_each_entry_matches_a_plan_made_under_that_profile(advised):
    nodes, p = advised
    assert p.env_advice, "PRISM's ring profile and oneCCL's default topo differ on Aurora"
    for a in p.env_advice:
        profile = next(
            x for x in backend_profiles(load_platform("aurora").collective_library, "aurora") if x.name == a["profile"]
        )
        there = plan(**(AURORA | {"platform": with_ccl_env(load_platform("aurora"), profile.variables)}), nodes=nodes)
        assert there.recommended == a["recommended_under_profile"]
        assert there.option(a["strategy"]).step_time_s == pytest.approx(a["step_time_s"][a["profile"]], rel=1e-6)
        assert p.option(a["strategy"]).step_time_s == pytest.approx(a["step_time_s"][a["base_profile"]], rel=1e-9)


def test_an_entry_is_worth_naming_and_says_what_differs(advised):
    _, p = advised
    for a in p.env_advice:
        assert abs(a["change"]) > CHANGE or a["recommended_under_profile"] != a["strategy"]
        assert a["variables_differ"] and all(k.startswith("CCL_") for k in a["variables_differ"])
        assert a["validation"] == validation(a["profile"]) and a["base_validation"].startswith("validated")
    line = next(r for r in p.reasons if r.startswith("environment: "))
    assert p.env_advice[0]["profile"] in line and "CCL_ALLREDUCE ring -> unset (topo)" in line


def test_backends_whose_variables_the_model_does_not_read_get_no_advice():
    p = plan(model="qwen3-0.6b", platform="dgx-h100", nodes=2, seq_len=512)
    assert p.env_advice == [] and not any(r.startswith("environment: ") for r in p.reasons)
    assert backend_profiles("nccl", "dgx-h100") == []


def test_an_unset_variable_is_its_default():
    """CCL_WORKER_COUNT=1 and an unset CCL_WORKER_COUNT are the same environment to oneCCL."""
    from prism_strategy.planning.env_advice import _differ

    assert _differ({"CCL_WORKER_COUNT": "1"}, {}) == {}
    assert _differ({"CCL_ALLREDUCE": "ring"}, {}) == {"CCL_ALLREDUCE": ["ring", None]}


def test_the_base_is_what_the_plan_priced_not_the_profile_name():
    """A platform whose own CCL keys say topo (a platform file's override) is priced under topo:
    ALCF's topo profile is not advice then, PRISM's ring profile is compared instead."""

    topo = load_platform("aurora").with_values(allreduce_algorithm="topology")
    p = plan(**(AURORA | {"platform": topo}), nodes=10)
    for a in p.env_advice:  # priced under topo: the all-reduce differs only from a profile naming ring
        assert a["base_profile"] == "platform aurora's own CCL settings"
        assert a["variables_differ"].get("CCL_ALLREDUCE", ["topo", "ring"]) == ["topo", "ring"]
    ring = plan(**AURORA, nodes=10).env_advice  # the shipped preset prices PRISM's ring
    assert any(a["variables_differ"].get("CCL_ALLREDUCE") == ["ring", None] for a in ring)


def test_a_plan_under_a_named_profile_is_compared_from_that_profile():
    """Walk-through finding: `plan --env-profile aurora-alcf-minimal` named its base "platform
    aurora's own CCL settings", though the variables it priced are that profile's."""
    p = plan(**AURORA, nodes=10, env_profile="aurora-alcf-minimal")
    assert p.env_advice, "PRISM's ring profile differs from ALCF's minimal one at 10 nodes"
    assert {a["base_profile"] for a in p.env_advice} == {"aurora-alcf-minimal"}
    assert "aurora-alcf-minimal" not in {a["profile"] for a in p.env_advice}


def test_another_pick_is_quoted_in_samples_per_s_with_its_global_batch(advised):
    """A pick under another profile may run another global batch: its step time is not comparable
    with the asked pick's, so the line gives samples/s and the batch."""
    _, p = advised
    for a in p.env_advice:
        line = next(r for r in p.reasons if r.startswith(f"environment: under env profile {a['profile']} "))
        assert f"{a['samples_per_s'][a['profile']]:.1f} samples/s" in line
        if a["recommended_under_profile"] != a["strategy"]:
            assert f"global batch {a['recommended_global_batch']}" in line
            assert f"{a['recommended_step_time_s']:.3f} s" not in line


def test_the_one_entry_prices_the_scenarios_own_env_profile():
    """estimate_option (through planner.evaluate) prices a Scenario under its environment policy,
    as plan() does: a caller holding a Scenario built with env_profile gets that profile's route."""
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.strategies import get_strategy

    run = AURORA | {"nodes": 10, "ckpt_freq": 0}  # plan() searches checkpointing only when "auto"
    steps = {}
    for profile in ("aurora-prism-2026.11", "aurora-alcf-minimal"):
        sc = scenario_from_flags(**run, env_profile=profile)
        steps[profile] = evaluate(sc, get_strategy("ddp")).step_time_s
        planned = plan(**run, env_profile=profile, calibration="none").option("ddp").step_time_s
        assert steps[profile] == pytest.approx(planned, rel=1e-9)
    assert steps["aurora-prism-2026.11"] != pytest.approx(steps["aurora-alcf-minimal"], rel=0.05)
