"""Batch resolution and the checkpointing candidates (estimate/ckpt_search.py), and plan()'s Python signature."""

import inspect

import pytest

from prism_strategy.estimate.batch import resolve_batch
from prism_strategy.estimate.ckpt_search import ckpt_candidates
from prism_strategy.flags import plan, scenario_from_flags
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.policies import batch_problem, nearest_multiples
from prism_strategy.specs.training import TrainingSpec


def ceiling(plain: int, accumulating: int):
    return lambda acc: accumulating if acc else plain


@pytest.mark.parametrize(
    "g, world, plain, accumulating, expected",
    [
        (96, 24, 8, 8, (4, 1)),  # 4 per rank, fits whole
        (96, 24, 3, 3, (2, 2)),  # 3 fits but does not divide 4: 2 x 2
        (96, 24, 4, 1, (4, 1)),  # accumulating costs memory; no accumulation needed
        (96, 24, 3, 1, (1, 4)),  # 2 x 2 would need accumulation room for 2: only 1 x 4
        (72, 12, 5, 4, (3, 2)),  # 6 per rank: 3 x 2
        (12, 12, 0, 0, (1, 1)),  # nothing fits: the smallest, reported as infeasible by the caller
    ],
)
def test_global_batch_is_exact_with_the_largest_dividing_micro_batch(g, world, plain, accumulating, expected):
    b = resolve_batch(TrainingSpec(global_batch=g), world, ceiling(plain, accumulating))
    assert (b.micro_batch, b.grad_accum) == expected
    assert b.micro_batch * b.grad_accum * world == g


def test_without_global_batch_accumulation_multiplies_the_max():
    b = resolve_batch(TrainingSpec(grad_accum=3), 8, ceiling(10, 7))
    assert (b.micro_batch, b.grad_accum, b.max_micro_batch) == (7, 3, 7)
    b = resolve_batch(TrainingSpec(micro_batch=2), 8, ceiling(10, 7))
    assert (b.micro_batch, b.grad_accum) == (2, 1)


def test_pinned_micro_batch_or_accumulation_with_global_batch():
    assert (resolve_batch(TrainingSpec(global_batch=96, micro_batch=2), 24, ceiling(1, 1)).grad_accum) == 2
    b = resolve_batch(TrainingSpec(global_batch=96, grad_accum=4), 24, ceiling(9, 9))
    assert (b.micro_batch, b.grad_accum) == (1, 4)


@pytest.mark.parametrize(
    "kw, world, fragment",
    [
        (dict(global_batch=100), 24, "nearest valid: 96 or 120"),
        (dict(global_batch=10), 24, "nearest valid: 24"),
        (dict(global_batch=96, micro_batch=3), 24, "use one of 1, 2, 4"),
        (dict(global_batch=96, grad_accum=3), 24, "--grad-accum 3 does not divide"),
        (dict(global_batch=96, micro_batch=2, grad_accum=1), 24, "not --global-batch 96"),
    ],
)
def test_batch_problems_name_the_valid_values(kw, world, fragment):
    assert fragment in batch_problem(TrainingSpec(**kw), world)


def test_valid_batches_have_no_problem():
    assert batch_problem(TrainingSpec(global_batch=96, micro_batch=2, grad_accum=2), 24) is None
    assert batch_problem(TrainingSpec(), 24) is None
    assert nearest_multiples(100, 24) == [96, 120]


def test_ckpt_candidates_none_sac_every_block_every_second_and_small_divisors():
    assert ckpt_candidates(32) == [0, "sac", 1, 2, 4]
    assert ckpt_candidates(27) == [0, "sac", 1, 2, 3]
    assert ckpt_candidates(1) == [0, "sac", 1]


def test_mean_seq_len_must_not_exceed_seq_len():
    with pytest.raises(SpecError, match="--mean-seq-len"):
        TrainingSpec(seq_len=512, mean_seq_len=1024)


def test_plan_takes_every_cli_option_by_name():
    from prism_strategy.cli import app
    from prism_strategy.flags import flag_groups

    cmd = next(c for c in app.registered_commands if c.callback.__name__ == "plan")
    # ctx: typer's context (which flags the command line gave: plan --script lets those win)
    cli_names = set(inspect.signature(cmd.callback).parameters) - {"json_out", "markdown", "ctx"}
    # plan(model, **flags): the flags are the builder's arguments, the policies' fields and PlanOptions'
    params = {"model", *(name for names in flag_groups().values() for name in names)}
    # --db names the results store, which planning never opens (bench sits above it): the CLI reads
    # the measured curves from it and passes them as plan(comm_curves=...)
    assert "db" in cli_names and "comm_curves" in params and "comm_curves:" in plan.__doc__
    cli_names -= {"db"}
    # --script names a file inputs/ reads (above planning); plan(script=...) takes what was read
    assert "script" in params and "script:" in plan.__doc__
    # --from / --override name a framework config inputs/frameworks reads into these same keywords
    cli_names -= {"from_config", "override"}
    assert cli_names <= params
    for name in cli_names - {"model"}:
        assert f"{name}:" in plan.__doc__, name
    with pytest.raises(TypeError, match="unexpected keyword argument 'seq_length'"):
        plan("qwen3-0.6b", seq_length=512)


def test_plan_accepts_grad_accum_and_a_sweep_string():
    p = plan("qwen3-0.6b", platform="dgx-h100", seq_len=512, grad_accum=4, sweep_nodes="1,2")
    for o in p.options:
        assert o.grad_accum == 4 and o.global_batch == o.micro_batch * 4 * 8
    assert {r["nodes"] for r in p.sweep} == {1, 2}


@pytest.mark.parametrize("kw", [{"nodes": 2**31}, {"micro_batch": 10**20}, {"grad_accum": 2**30}])
def test_absurd_counts_fail_at_once_naming_the_limit(kw):
    with pytest.raises(SpecError, match="no real job is larger"):
        scenario_from_flags("tiny-llama", **kw)
