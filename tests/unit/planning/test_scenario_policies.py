"""specs/policies.py and scenario.py: the run described once, as typed frozen policies; the
stored row (inputs/stored.py) of an old flat config (tests/unit/inputs/test_stored_rows.py: the new rows)."""

from __future__ import annotations

import dataclasses

import pytest

from prism_strategy.flags import plan, scenario_from_flags
from prism_strategy.inputs.stored import scenario_from_row, scenario_record
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import BatchPolicy, EnvironmentPolicy, MemoryPolicy


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: BatchPolicy(seq_len=0), ["--seq-len", ">= 1", "0"]),
        (lambda: BatchPolicy(micro_batch=-3), ["--micro-batch", "-3"]),
        (lambda: BatchPolicy(global_batch=2**30), ["--global-batch", "1073741824"]),
        (lambda: BatchPolicy(image_tokens=-1), ["--image-tokens", "-1"]),
        (lambda: MemoryPolicy(checkpointing="often"), ["--ckpt-freq", "'often'"]),
        (lambda: MemoryPolicy(compile_loss=True), ["--compile-loss needs --compile"]),
        (lambda: MemoryPolicy(optimizer="adam"), ["'adam'", "adamw-fused"]),
        (lambda: MemoryPolicy(bucket_mb=0), ["bucket size", "0"]),
    ],
)
def test_a_bad_policy_value_is_one_error_naming_it(make, words):
    with pytest.raises(SpecError) as e:
        make()
    assert all(w in str(e.value) for w in words), str(e.value)


def test_policies_are_frozen():
    b = BatchPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.seq_len = 4  # type: ignore[misc]
    with pytest.raises(ValueError, match="name, value"):
        EnvironmentPolicy(variables=(("CCL_WORKER_COUNT",),))  # type: ignore[arg-type]


def test_scenario_shows_the_policies_it_was_built_from():
    sc = scenario_from_flags("qwen3-0.6b", seq_len=2048, mean_seq_len=1000, ckpt_freq="sac", optimizer="adamw-fused")
    assert sc.batch == BatchPolicy(seq_len=2048, mean_seq_len=1000)
    assert sc.memory == MemoryPolicy(checkpointing="sac", optimizer="adamw-fused", varying_lengths=True)
    assert sc.precision == "bf16-mixed" and sc.environment.profile == sc.platform.env_profile


def test_plan_takes_a_scenario_and_answers_as_for_its_keywords():
    kw = dict(platform="dgx-h100", seq_len=512, global_batch=64, ckpt_freq=0)
    by_keywords = plan("qwen3-0.6b", **kw)
    by_scenario = plan(scenario_from_flags("qwen3-0.6b", **kw))
    assert [(o.strategy, o.step_time_s) for o in by_scenario.options] == [
        (o.strategy, o.step_time_s) for o in by_keywords.options
    ]
    with pytest.raises(TypeError, match="'seq_len'"):
        plan(scenario_from_flags("qwen3-0.6b"), seq_len=512)  # the scenario carries the run


def test_scenario_from_flags_names_an_unknown_keyword():
    with pytest.raises(TypeError, match="scenario_from_flags.*'sequence'"):
        scenario_from_flags("qwen3-0.6b", sequence=5)


FLAT = dict(
    model="tiny-llama",
    strategy="fsdp_full_shard",
    nproc=4,
    ranks_per_node=2,
    micro_batch=2,
    seq_len=128,
    grad_accum=2,
    ckpt_freq=1,
    precision="fp32",
    bucket_mb=50,
    loss="chunked",
)


def test_a_version_0_row_reads_as_the_scenario_it_ran():
    sc = scenario_from_row(FLAT)
    assert (sc.layout.nodes, sc.layout.ranks_per_node) == (2, 2)
    assert sc.batch == BatchPolicy(seq_len=128, micro_batch=2, global_batch=2 * 4 * 2, grad_accum=2)
    assert sc.memory == MemoryPolicy(checkpointing=1, loss="chunked", bucket_mb=50, varying_lengths=False)
    assert sc.precision == "fp32" and scenario_record(FLAT)["schema"] == 1
