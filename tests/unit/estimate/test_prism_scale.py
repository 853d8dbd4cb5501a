"""PRISM's own 10-node rows on Aurora held to the plan: shared/data/aurora_prism_scale.md section 1
([PQ]: AI-ModCon/PRISM scaling-study/results/qwen3_e2e_perf_investigation.md @c0d26e9e), shipped as
records P10-ddp / P10-fsdp / P10-hsdp in data/measurements/aurora-prism.toml: Qwen3-0.6B +
SigLIP2-base E2E, 10 nodes x 12 ranks, micro-batch 4, PRISM's CCL profile (CCL_OP_SYNC=1).

Bounds are issue 34's: the rows inside their 80% ranges, the ranges at most 2.5x wide, the order
HSDP full_shard > FSDP full_shard > DDP as measured, the fit on 1-2 nodes predicting the 10-node rows
within 25% median before they are fitted. The sync wait's shape is checked against its formula
written here (estimate/scale_loss.py sync_wait's docstring: per dependent ring step, the last of n
nodes, D (1 - (1 - q)^n))."""

from __future__ import annotations

import math
import statistics

import pytest

from prism_strategy.bench.fit import fit_terms as ft
from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.backends.oneccl import linear_sync_wait
from prism_strategy.estimate.scale_loss import ring_steps, step_wait_us, sync_wait
from prism_strategy.flags import plan, scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy

MEASURED = {"P10-ddp": 144.0, "P10-fsdp": 192.0, "P10-hsdp": 247.0}
"""samples/s at 10 x 12, micro-batch 4 ([PQ], aurora_prism_scale.md section 1)."""
MAX_WIDTH = 2.5
"""Issue 34: an 80% range at 10 nodes at most 2.5x wide (high / low)."""
SCALE_GOAL_PCT = 25.0
"""Issue 34: the 1-2 node fit's median error on the 10-node rows."""
RECORDS = {r.id: r for r in load_published("aurora-prism")}


def test_the_records_carry_the_shared_files_numbers():
    for rid, sps in MEASURED.items():
        r = RECORDS[rid]
        assert r.measured.samples_per_s == sps and r.scenario.nodes == 10 and r.scenario.micro_batch == 4
        assert r.step_time_s() == pytest.approx(480 / sps)


def _option(rid: str):
    r = RECORDS[rid]
    return evaluate(scenario_from_flags(**r.scenario_kwargs()), get_strategy(r.planner_strategy))


@pytest.mark.parametrize("rid", sorted(MEASURED))
def test_each_10_node_row_lies_inside_its_80_percent_range_at_most_2_5x_wide(rid):
    lo, hi = _option(rid).samples_per_s_range
    assert lo <= MEASURED[rid] <= hi and hi / lo <= MAX_WIDTH, (lo, hi)


def test_the_plan_ranks_hsdp_over_fsdp_over_ddp_at_10_nodes_and_says_why():
    """P10: HSDP 247 > FSDP 192 > DDP 144 samples/s. The reasons name the calls that cross nodes and
    what each costs: FSDP's all-gathers and reduce-scatters all cross (PRISM: ~100 inter-node
    all-gathers per micro-batch), HSDP only its replicate all-reduces."""
    kw = RECORDS["P10-fsdp"].scenario_kwargs()
    p = plan(**kw)
    by = {o.strategy: o for o in p.options}
    assert by["hsdp_full_shard"].samples_per_s > by["fsdp_full_shard"].samples_per_s > by["ddp"].samples_per_s
    waits = {s: by[s].provenance["sync_wait"] for s in ("ddp", "fsdp_full_shard", "hsdp_full_shard")}
    calls = {s: int(w.split(" cross-node blocking calls")[0].rsplit(" ", 1)[-1]) for s, w in waits.items()}
    assert calls["fsdp_full_shard"] > 2 * calls["hsdp_full_shard"]
    for s in waits:
        assert any(n.startswith("sync wait:") and "+" in n for n in by[s].notes), s
        assert any("bound: communication" in n for n in by[s].notes), s  # host blocking: all exposed


def _scale_held_out(priors=None) -> dict[str, float]:
    prior = ft.prior_platform(load_platform("aurora"))
    _, errs = ft.scale_holdout(prior, list(RECORDS.values()), priors=priors)
    assert set(errs) == set(MEASURED)
    return errs


def test_the_1_2_node_fit_predicts_the_10_node_rows_before_they_are_fitted():
    """The sync wait's prior is PRISM's P10-probe (a 1-element all-reduce during E2E training at 10
    nodes, 22-30 ms): a per-call figure at 10 nodes, not a step time; the step rows it is judged on
    are in no fit here."""
    errs = _scale_held_out()
    assert statistics.median(abs(e) for e in errs.values()) <= SCALE_GOAL_PCT


@pytest.mark.xfail(
    strict=True,
    reason="known gap: without any 10-node figure (the sync wait from the collective rows' latency growth, "
    "[CS] 3c), the 1-2 node step records cannot see the wait: P10 missed by 24-64%, median 53%; decided "
    "by PRISM's P10-probe (the per-call wait during E2E training at 10 nodes)",
)
def test_the_1_2_node_step_rows_alone_predict_the_10_node_rows():
    errs = _scale_held_out(ft.SCALE_PRIORS)
    assert statistics.median(abs(e) for e in errs.values()) <= SCALE_GOAL_PCT


def test_a_ring_step_waits_for_the_last_of_its_nodes():
    """Linear regime (q n << 1): each of a ring call's (n - 1) steps waits n x slope, so 2 nodes pay
    1 x 2 and 10 nodes 9 x 10 (45x); saturated, each step waits D."""
    slope, cap = 10.0, 1e9
    one = [(1, 2, ring_steps("all_gather", 2))]
    ten = [(1, 10, ring_steps("all_gather", 10))]
    assert sync_wait(ten, slope, cap).seconds / sync_wait(one, slope, cap).seconds == pytest.approx(45, rel=1e-3)
    assert step_wait_us(10_000, slope, 500.0) == pytest.approx(500.0)
    q = slope / 500.0
    assert step_wait_us(10, slope, 500.0) == pytest.approx(500.0 * (1 - (1 - q) ** 10))
    assert sync_wait([(40, 1, 0)], slope, cap).seconds == 0  # inside one node: nothing crosses
    assert sync_wait(ten, slope, cap, host_share=0.0).seconds == 0  # the GPU queue absorbs the delay


def test_log_step_algorithms_take_log2_steps():
    assert ring_steps("all_reduce", 10) == 18 and ring_steps("reduce_scatter", 10) == 9
    assert ring_steps("all_reduce", 10, "rabenseifner scale-out") == 2 * math.ceil(math.log2(10))
    assert ring_steps("all_gather", 1) == 0


def test_the_linear_reading_meets_the_shipped_wait_at_the_fits_nodes_and_grows_past_it():
    p = load_platform("aurora")
    lin = linear_sync_wait(p)
    cal, lcal = p.calibration, lin.calibration
    assert step_wait_us(10, lcal.sync_wait_us_per_node, 0.0) == pytest.approx(
        step_wait_us(10, cal.sync_wait_us_per_node, cal.sync_wait_max_us)
    )
    assert step_wait_us(64, lcal.sync_wait_us_per_node, 0.0) > step_wait_us(
        64, cal.sync_wait_us_per_node, cal.sync_wait_max_us
    )
