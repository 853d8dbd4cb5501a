"""Plan's ranges: every option and sweep row carries [low, high] around its prediction, as wide
as the stored fit errors (data/fits/*.toml) say at home and wider away from what was measured;
the reasons say when the pick's lead lies inside its range and what to measure."""

from __future__ import annotations

import math

import pytest
from rich.console import Console

from prism_strategy.estimate.ranges import fit_errors, uncalibrated_halfwidth
from prism_strategy.flags import plan
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
        if "eager host ops" in o.provenance["range"]:  # the per-op host cost's bounds (estimate/host_range.py)
            assert _slow(o) > _halfwidth(o)
        else:
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
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.strategies import get_strategy

    a3 = next(r for r in load_published("aurora-prism") if r.id == "A3-fsdp")
    kw = dict(a3.scenario_kwargs(), nodes=nodes, micro_batch=8, global_batch=8 * 12 * nodes)
    return evaluate(scenario_from_flags(**kw), get_strategy(strategy))


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


def test_compose_takes_the_quantiles_of_independent_part_errors():
    from prism_strategy.estimate.range_parts import StepPart, compose

    # one part: nearest rank of 5 errors, 10% -> the smallest true step, 90% -> the largest
    errs = tuple(math.log(x) for x in (0.8, 0.9, 1.0, 1.1, 1.25))  # ln(predicted / measured)
    fast, slow = compose([StepPart(label="a", seconds=1.0, errors_ln=errs)])
    assert fast == pytest.approx(math.log(1 / (1 / 1.25))) and slow == pytest.approx(math.log(1 / 0.8))
    # a part with no errors only dilutes: half the step known exactly halves the spread of the seconds
    fast2, slow2 = compose(
        [StepPart(label="a", seconds=1.0, errors_ln=errs), StepPart(label="b", seconds=1.0, errors_ln=())]
    )
    assert math.exp(slow2) == pytest.approx((1 + 1 / 0.8) / 2) and math.exp(-fast2) == pytest.approx((1 + 0.8) / 2)
    # two independent parts, each +-20%: the 80% range of the sum is narrower than both at their extremes
    pm = (math.log(1 / 1.2), math.log(1 / 0.8), 0.0, 0.0, 0.0)
    f3, s3 = compose([StepPart(label="a", seconds=1.0, errors_ln=pm), StepPart(label="b", seconds=1.0, errors_ln=pm)])
    assert s3 < math.log(1.2) and f3 < math.log(1 / 0.8)


def test_the_host_ring_share_of_ddps_all_reduce_is_the_training_fits_topo_is_the_collective_fits():
    """PRISM's CCL_ALLREDUCE=ring runs DDP's all-reduce as a flat host ring whose rate is the node's
    12-rank host ring (host_ring_node_gbps, which only training record A1 decides: no collective row
    has 12 ranks per node on that path); FSDP's all-gathers and reduce-scatters run topo, priced by
    the terms the collective rows fit."""
    ddp, fsdp = _qwen_vlm_at(10, "ddp"), _qwen_vlm_at(10, "fsdp_full_shard")
    assert fit_errors()["aurora"].comm_knobs == ("host_ring_node_gbps",)
    for o in (ddp, fsdp):
        assert "composed from the step's parts" in o.provenance["range"]
        assert "leave-one-node-count-out" in o.provenance["range"]
    ddp_parts, fsdp_parts = _parts(10, "ddp"), _parts(10, "fsdp_full_shard")
    ring = next(c for c in ddp.comm.collectives if c.op == "all_reduce")
    assert "host ring" in ring.algorithm
    # the training part holds the compute and most of the ring; the collective fit the rest
    assert ddp_parts[0].seconds > ddp.compute_s + 0.5 * ring.seconds_per_step
    topo = sum(c.seconds_per_step for c in fsdp.comm.collectives)
    assert sum(p.seconds for p in fsdp_parts[1:]) == pytest.approx(topo, rel=1e-6)
    for parts, o in ((ddp_parts, ddp), (fsdp_parts, fsdp)):
        assert sum(p.seconds for p in parts) == pytest.approx(o.step_time_s, rel=1e-6)


def _parts(nodes: int, strategy: str):
    """The option's step parts as plan composes its range (estimate/range_parts.parts_of_step)."""
    from prism_strategy.bench.fit.published import load_published
    from prism_strategy.estimate.option import BatchAt, estimate_step, reprice_collectives, timed_view
    from prism_strategy.estimate.range_parts import parts_of_step
    from prism_strategy.flags import scenario_from_flags
    from prism_strategy.specs.parts import model_parts
    from prism_strategy.strategies import get_strategy

    a3 = next(r for r in load_published("aurora-prism") if r.id == "A3-fsdp")
    sc = scenario_from_flags(**dict(a3.scenario_kwargs(), nodes=nodes, micro_batch=8, global_batch=8 * 12 * nodes))
    timed, parts = timed_view(sc, model_parts(sc.model, sc.training))
    s, at = get_strategy(strategy), BatchAt(micro_batch=8)
    step = estimate_step(timed, s, at, parts=parts)
    return parts_of_step(step, sc.platform, sc.layout, reprice_collectives(timed, s, at, parts))


def test_the_training_part_takes_the_stored_part_errors_and_the_collectives_their_rows():
    """Each part carries the held-out errors of the fit that decided it: the training part the
    stored leave-one-out errors laid on it (data/fits/aurora-prism.toml part_err_pct), FSDP's
    bandwidth-bound topo collectives at 10 nodes the collective rows at 12 per node, 5-20 nodes."""
    from prism_strategy.estimate.ranges import collective_fits

    training, *colls = _parts(10, "fsdp_full_shard")
    from prism_strategy.bench.fit import fit_terms as ft
    from prism_strategy.bench.fit.published import load_published

    held = [r for r in load_published("aurora-prism") if ft.fit_reason(r) is None and r.id not in ft.PRIOR_RECORDS]
    assert training.errors_ln == fit_errors()["aurora"].part_errors_ln and len(training.errors_ln) == len(held)
    assert [p.label for p in colls] == ["collectives (bandwidth rows at 12 per node, 5-20 nodes)"]
    rows = [
        r.loo_err_pct
        for r in collective_fits()["aurora"].rows
        if r.per_node == 12 and 5 <= r.nodes <= 20 and r.regime == "bandwidth"
    ]
    assert sorted(colls[0].errors_ln) == pytest.approx(sorted(math.log1p(e / 100) for e in rows))


TARGET_WIDTH = 2.5
"""Issue 34: the 80% range high / low at 10 nodes on the shared scenarios at most 2.5x (issue 25's
2x was met by narrowing the ranges without moving the point: they excluded PRISM's 10-node rows,
shared/data/aurora_prism_scale.md P10; the rows' own ranges: tests/unit/estimate/test_prism_scale.py)."""


@pytest.mark.parametrize("strategy", ["ddp", "fsdp_full_shard", "hsdp_full_shard"])
def test_aurora_ranges_at_10_nodes_meet_the_width_target(strategy):
    """Composed from the step's parts: the training part with the training fit's held-out errors
    (now 1-10 nodes), the topo collectives with the collective fit's leave-one-node-count-out
    errors at 10 nodes; its coverage on the held-out records is benchmarks/aurora_fit.py's."""
    o = _qwen_vlm_at(10, strategy)
    lo, hi = o.samples_per_s_range
    assert lo < o.samples_per_s < hi and hi / lo <= TARGET_WIDTH


def test_aurora_ranges_widen_beyond_the_fits_nodes_by_its_scale_error():
    """16 nodes, beyond the 10 the fit saw: the slow side adds the leave-one-scale-out term
    (estimate/ranges.scale_widening: the 1-2 node fit's error on the 10-node rows, per doubling)."""
    from prism_strategy.estimate.ranges import SCALE

    at10, at16 = _qwen_vlm_at(10, "fsdp_full_shard"), _qwen_vlm_at(16, "fsdp_full_shard")
    assert SCALE not in at10.range.terms and at16.range.terms[SCALE] > 0
    lo, hi = at16.samples_per_s_range
    assert hi / lo > _ratio(at10.samples_per_s_range)


def _ratio(r: list[float]) -> float:
    return r[1] / r[0]


@pytest.mark.out_of_sample
def test_aurora_part_errors_are_the_refits_and_their_ranges_cover_80_percent(refit_without):
    """The training part's errors plan reads (data/fits/aurora-prism.toml part_err_pct) are each
    held-out record's refit without it, laid on that part; each record's range composed from its
    parts at that refit, its training part judged by the other records' errors, holds its measured
    step as an 80% range must: at least 0.8 n - 2 sd of the binomial (whatever the count today)."""
    import tomllib

    from prism_strategy.bench.fit import fit_terms as ft
    from prism_strategy.bench.fit.fit_terms_parts import part_coverage, part_errors_pct
    from prism_strategy.bench.fit.published import load_published
    from prism_strategy.estimate.ranges import QUANTILE
    from prism_strategy.specs.presets import DATA

    records = {r.id: r for r in load_published("aurora-prism")}
    held = [rid for rid, r in records.items() if ft.fit_reason(r) is None and rid not in ft.PRIOR_RECORDS]
    fits = {rid: refit_without(rid).platform("aurora") for rid in held}
    errs = part_errors_pct(records, fits, ft.COMM_KNOBS)
    stored = tomllib.loads((DATA / "fits" / "aurora-prism.toml").read_text())["part_err_pct"]
    assert set(stored) == set(errs) == set(held)
    for rid, e in errs.items():
        assert stored[rid] == pytest.approx(e, abs=0.05), rid
    cov = part_coverage(records, fits, errs, ft.COMM_KNOBS)
    n = len(cov)
    assert sum(x["inside"] for x in cov) >= QUANTILE * n - 2 * math.sqrt(n * QUANTILE * (1 - QUANTILE))


def test_the_fits_band_is_the_one_part_case_of_the_composer():
    """Where no collective fit covers the platform (the CUDA fit), the step is one part with the
    training fit's leave-one-out half-width on both sides, and composing it gives that back exactly."""
    from _steps import step_of

    from prism_strategy.estimate.range_parts import compose, parts_of_step
    from prism_strategy.specs.cluster import Layout
    from prism_strategy.specs.presets import load_platform

    h100 = load_platform("dgx-h100")
    parts = parts_of_step(step_of(1.0, 0.5, step_s=1.5), h100, Layout.for_platform(h100, 1), None)
    assert [p.seconds for p in parts] == [1.5]
    assert compose(parts) == (fit_errors()["dgx-h100"].halfwidth,) * 2
