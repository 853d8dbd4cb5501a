"""`--ckpt-freq auto` (estimate/ckpt_search.py estimate_searched, one call per strategy from
planning/planner.py evaluate): the fastest candidate that fits; when none fits, or a rule blocks
the strategy whatever its checkpointing, the one needing the least memory."""

from prism_strategy.estimate.ckpt_search import ckpt_candidates, estimate_searched, recompute_rank, with_ckpt
from prism_strategy.estimate.option import estimate_option
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.strategies import get_strategy


def candidates(sc, s):
    return {k: estimate_option(with_ckpt(sc, k), s) for k in ckpt_candidates(sc.model.backbone.layers)}


def test_auto_keeps_the_fastest_candidate_that_fits_and_the_option_carries_it():
    sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=10, ckpt_freq="auto")
    s = get_strategy("fsdp_full_shard")
    tried = candidates(sc, s)
    fastest = max((k for k, e in tried.items() if e.oom is None), key=lambda k: tried[k].step.samples_per_s)
    e = estimate_searched(sc, s)
    assert e.oom is None and e.ckpt_freq == fastest
    assert e.step.samples_per_s == tried[fastest].step.samples_per_s
    o = evaluate(sc, s, search_ckpt=True)
    assert o.feasible and o.ckpt_freq == fastest and o.blocked_by == ()
    assert o.global_batch == o.micro_batch * o.grad_accum * sc.layout.world


def test_a_pinned_checkpointing_is_not_searched():
    sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=10, ckpt_freq=2)
    assert estimate_searched(sc, get_strategy("ddp")).ckpt_freq == 2


def test_when_nothing_fits_the_least_memory_candidate_is_kept():
    sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=1, ckpt_freq="auto", micro_batch=64, seq_len=8192)
    s = get_strategy("fsdp_full_shard")
    tried = candidates(sc, s)
    assert all(e.oom is not None for e in tried.values())
    e = estimate_searched(sc, s)
    assert e.oom is not None and e.ckpt_freq == 1  # checkpointing every block holds the fewest activations
    assert e.memory_total == min(x.memory_total for x in tried.values())


def test_a_blocked_strategy_shows_its_least_memory_candidate_not_its_fastest():
    # DeepSpeed + torch.compile is not viable (data/rules.toml deepspeed-compile)
    sc = scenario_from_flags("qwen3-0.6b", platform="aurora", nodes=2, ckpt_freq="auto", compile=True)
    s = get_strategy("zero3")
    tried = candidates(sc, s)
    fastest = max(tried, key=lambda k: tried[k].step.samples_per_s)
    least = min(tried, key=lambda k: tried[k].memory_total)
    assert all(e.oom is None for e in tried.values()) and fastest != least  # the case tells them apart
    o = evaluate(sc, s, search_ckpt=True)
    assert not o.feasible and o.why_not.startswith("not viable") and o.blocked_by
    assert o.ckpt_freq == least
    assert o.memory_total == min(e.memory_total for e in tried.values())


def test_ties_go_to_less_recompute():
    assert sorted(ckpt_candidates(32), key=recompute_rank) == [1, 2, 4, "sac", 0]
