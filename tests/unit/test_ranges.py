"""Plan's ranges: every option and sweep row carries [low, high] around its prediction, as wide
as the stored fit errors (data/fits/*.toml) say at home and wider away from what was measured;
the reasons say when the pick's lead lies inside its range and what to measure."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from prism_strategy.estimate.ranges import fit_errors, uncalibrated_halfwidth
from prism_strategy.planning.planner import plan
from prism_strategy.report.plan_json import plan_dict
from prism_strategy.report.plan_table import print_plan


def _halfwidth(o) -> float:
    """The fast side (throughput above the prediction): the fit's own leave-one-out error."""
    return math.log(o.samples_per_s_range[1] / o.samples_per_s)


def _slow(o) -> float:
    """The slow side (throughput below the prediction): the fit's error plus what scale adds."""
    return math.log(o.samples_per_s / o.samples_per_s_range[0])


def test_each_option_and_sweep_row_brackets_its_prediction():
    p = plan("llama-3.1-8b", platform="dgx-h100", nodes=2, seq_len=4096, sweep_nodes=[1, 8])
    d = plan_dict(p)
    for o in d["options"] + [r for r in d["sweep"] if r["feasible"]]:
        lo, hi = o["samples_per_s_range"]
        assert lo < o["samples_per_s"] < hi
        s_lo, s_hi = o["step_time_s_range"]
        assert s_lo * hi == pytest.approx(o["step_time_s"] * o["samples_per_s"])  # one range, two units
        assert s_hi * lo == pytest.approx(o["step_time_s"] * o["samples_per_s"])
    assert all("range" in o["provenance"] for o in d["options"])


def test_at_the_measured_scale_the_range_is_the_fits_own():
    p = plan("llama-2-7b", platform="dgx-h100", nodes=1, seq_len=2048)
    for o in p.options:
        assert _halfwidth(o) == pytest.approx(fit_errors()["dgx-h100"].halfwidth)
        assert _slow(o) == pytest.approx(_halfwidth(o))  # nothing beyond what was measured: symmetric


def test_beyond_the_measured_nodes_the_range_widens_with_the_comm_share():
    one = plan("llama-3.1-8b", platform="dgx-h100", nodes=1, seq_len=8192, global_batch=512)
    far = plan("llama-3.1-8b", platform="dgx-h100", nodes=64, seq_len=8192, global_batch=512)
    for a, b in zip(one.options, far.options):
        if b.comm_s > 0:
            assert _slow(b) > _slow(a)  # scale only slows a step: the low side widens
            assert _halfwidth(b) == pytest.approx(_halfwidth(a))  # the high side stays the fit's
    # the reason names what to measure when the rival sits inside the pick's range
    line = next((r for r in far.reasons if "inside" in r), None)
    assert line is not None and "commbench" in line and "--nproc 512" in line


def test_strategies_that_differ_across_nodes_are_not_sent_to_a_one_node_bench():
    # make run's scenario: fsdp and hsdp shard_grad_op are one strategy on one node (the same
    # 1-D shard group), so only a run at the plan's layout can rank them
    p = plan("qwen3-0.6b", platform="aurora", nodes=2, seq_len=512, micro_batch=8)
    line = next((r for r in p.reasons if "inside" in r), None)
    assert line is not None and "commbench" in line and "--nproc 24 --ranks-per-node 12" in line
    assert "one node" not in line


def test_an_uncalibrated_preset_takes_the_pre_fit_error_of_its_device():
    (o, *_) = plan("qwen3-0.6b", platform="polaris", nodes=1, seq_len=512).options
    assert _halfwidth(o) == pytest.approx(uncalibrated_halfwidth("cuda"))
    assert uncalibrated_halfwidth("cpu") >= uncalibrated_halfwidth("cuda")  # no cpu fit: the widest


def test_table_shows_the_range_within_100_columns():
    c = Console(width=100, record=True)
    print_plan(plan("llama-3.1-8b", platform="dgx-h100", nodes=64, seq_len=8192), c)
    lines = c.export_text().splitlines()
    header = next(line for line in lines if line.startswith("strategy"))
    assert "range" in header.split() and all(len(line) <= 100 for line in lines)


# --- Aurora beyond the training fit's nodes: the collective fit's errors widen the range ----------
def _qwen_vlm_at(nodes: int, strategy: str):
    from prism_strategy.bench.fit.published import load_published
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.planning.scenario import build_scenario
    from prism_strategy.strategies import get_strategy

    a3 = next(r for r in load_published("aurora-prism") if r.id == "A3-fsdp")
    kw = dict(a3.scenario_kwargs(), nodes=nodes, micro_batch=8, global_batch=8 * 12 * nodes)
    return evaluate(build_scenario(**kw), get_strategy(strategy))


def test_collective_halfwidth_takes_the_rows_covering_the_layout():
    from prism_strategy.estimate.ranges import CollectiveFit, CollectiveRowError, collective_halfwidth

    near = [
        CollectiveRowError(op="all_reduce", regime="bandwidth", nodes=n, per_node=12, loo_err_pct=5.0)
        for n in (8, 16, 16)
    ]
    far = [CollectiveRowError(op="all_reduce", regime="bandwidth", nodes=8192, per_node=12, loo_err_pct=-90.0)] * 3
    other = [CollectiveRowError(op="all_reduce", regime="bandwidth", nodes=8, per_node=1, loo_err_pct=40.0)] * 3
    fit = CollectiveFit(measurements="x", max_nodes=8192, rows=tuple(near + far + other))
    w, which = collective_halfwidth(fit, "all_gather", 8e6, 10, 12)
    assert w == pytest.approx(math.log(1.05)) and "5-20 nodes" in which
    w_far, which_far = collective_halfwidth(fit, "all_gather", 8e6, 4096, 12)
    assert w_far == pytest.approx(abs(math.log(0.1))) and "2048-8192" in which_far
    assert collective_halfwidth(fit, "all_gather", 100.0, 10, 12)[1] == "all rows"  # no latency rows


def test_aurora_at_10_nodes_widens_by_the_collective_fit_not_a_blanket_factor():
    o = _qwen_vlm_at(10, "fsdp_full_shard")
    assert "leave-one-node-count-out" in o.provenance["range"]
    blanket = math.log1p(math.log2(10 / 2)) * o.comm_s / (o.comm_s + o.compute_s)
    assert 0 < o.range.terms["communication beyond the measured nodes"] < blanket


TARGET_WIDTH = 2.0
"""Issue 25: the 80% range high / low at 10 nodes on the shared scenarios."""
KNOWN_WIDTH = 2.23
"""Today's widest (DDP): the training fit's leave-one-out half-width (x1.44 each way, records E1
and A2) is most of it; the collective fit adds x1.02-1.07."""


@pytest.mark.xfail(strict=True, reason="known gap: x2.23 wide at 10 nodes (target 2x), records E1, A2")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp_full_shard", "hsdp_full_shard"])
def test_aurora_ranges_at_10_nodes_meet_the_2x_target(strategy):
    lo, hi = _qwen_vlm_at(10, strategy).samples_per_s_range
    assert hi / lo <= TARGET_WIDTH


@pytest.mark.parametrize("strategy", ["ddp", "fsdp_full_shard", "hsdp_full_shard"])
def test_aurora_range_width_at_10_nodes_stays_within_its_known_size(strategy):
    lo, hi = _qwen_vlm_at(10, strategy).samples_per_s_range
    assert TARGET_WIDTH < hi / lo <= KNOWN_WIDTH * 1.02
