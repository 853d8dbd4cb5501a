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
