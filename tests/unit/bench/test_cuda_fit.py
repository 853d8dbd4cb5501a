"""The CUDA presets held to the published single-node runs they were fitted on
(data/measurements/cuda-published.toml: torchtitan benchmarks/llama3_h100_202412_torchtitan.md and
PR #165; llm-foundry scripts/train/benchmarking/README.md), and plan's ranges built from that fit.

The held-out figure (docs/fits.md "CUDA compute fitted to published runs": leave-one-out median 9.6%) is
held to the project's goal, not to today's value (issue 29 item 3): at most 25% leave-one-out
(bench/fit/fit_terms.py PRIOR_WEIGHT states the goals), and below the one-fraction model it
replaced. The shipped presets must be what the fit gives, and the stored error summary plan's
ranges read (data/fits/cuda-published.toml) must be the one this fit produces, row by row."""

from __future__ import annotations

import math

import pytest
from _steps import step_of

from prism_strategy.bench.fit import cuda_fit as cf
from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.compute import part_flops_per_sample
from prism_strategy.estimate.range_parts import step_range
from prism_strategy.estimate.ranges import fit_errors, halfwidth
from prism_strategy.flags import scenario_from_flags
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model, load_platform

LOO_GOAL_PCT = 25.0
"""The project's goal for a leave-one-out median step-time error (fit_terms.PRIOR_WEIGHT)."""
ROUNDING_PCT = 0.05
"""data/fits stores each error with one decimal."""
RUN_TOLERANCE = math.log(1.015)
"""TT-20's 6,600-6,800 tokens/s: a published figure read to +/-1.5%."""
LOO_GAPS_PCT = {"MF-09": -54.5}
"""Records the fit misses past the goal when it does not see them (MF-09: the one long-sequence
row, the attention ratio's only evidence): today's held-out error."""
RECORD_IDS = sorted(r.id for r in load_published(cf.MEASUREMENTS) if cf.fit_reason(r) is None)


def _loo_case(rid: str):
    if rid not in LOO_GAPS_PCT:
        return rid
    reason = f"known gap: {LOO_GAPS_PCT[rid]:+.1f}% step time refitted without it, record {rid}"
    return pytest.param(rid, marks=pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture(scope="module")
def fit():
    records = load_published(cf.MEASUREMENTS)
    platforms = {n: load_platform(n) for n in cf.PLATFORMS}
    obs = [cf.record_observation(r) for r in records if cf.fit_reason(r) is None]
    return {
        "obs": obs,
        "platforms": platforms,
        "knobs": cf.fit(cf.PRIORS, obs, platforms),
        "loo": cf.leave_one_out(cf.PRIORS, obs, platforms),
    }


def test_every_row_of_the_shared_table_is_shipped_with_its_source():
    records = {r.id: r for r in load_published(cf.MEASUREMENTS)}
    assert set(records) == {
        "TT-01",
        "TT-02",
        "TT-03",
        "TT-18",
        "TT-20",
        "TT-21",
        "TT-22",
        "TT-23",
        "TT-24",
        "MF-06",
        "MF-08",
        "MF-09",
        "MF-13",
        "MF-15",
        "MF-17",
    }
    assert all(r.source and r.hardware and r.stack for r in records.values())
    # TT-01: 5,762 tok/s/GPU at local batch 2 x seq 8192 -> 16384 / 5762 s per step
    assert records["TT-01"].step_time_s() == pytest.approx(2 * 8192 / 5762)
    assert records["TT-20"].step_time_s() == pytest.approx(8 * 2048 / 6700)  # midpoint of 6,600-6,800
    assert records["MF-15"].platform == "dgx-a100-40" and records["MF-15"].measured.mfu == 0.509
    assert cf.fit_reason(records["TT-03"]) is not None  # Float8: not a precision the planner models


@pytest.mark.out_of_sample
def test_leave_one_out_median_meets_the_projects_goal(fit):
    assert len(fit["loo"]) == 14
    assert cf.median_abs(fit["loo"]) <= LOO_GOAL_PCT


@pytest.mark.out_of_sample
def test_fit_beats_the_one_fraction_model_it_replaced(fit):
    """The issue's figure for the 0.4-for-every-FLOP model: off by 16% median on these runs."""
    before = {n: cf.before_platform(p) for n, p in fit["platforms"].items()}
    prior = {o.id: 100 * (o.predict(before[o.platform]) / o.measured - 1) for o in fit["obs"]}
    assert cf.median_abs(prior) > 15
    assert cf.median_abs(fit["loo"]) < cf.median_abs(prior)


def test_shipped_presets_are_the_fit(fit):
    shipped = cf.shipped_knobs(fit["platforms"])
    for k, v in fit["knobs"].items():
        assert shipped[k] == pytest.approx(v, rel=0.01), k


def test_stored_held_out_rows_are_this_fits_leave_one_out(fit):
    """data/fits/cuda-published.toml's rows (what the ranges and their coverage are built from) are
    each record's error refitted without it."""
    from pathlib import Path

    import tomllib

    path = Path(__file__).resolve().parents[3] / "src" / "prism_strategy" / "data" / "fits" / "cuda-published.toml"
    stored = tomllib.loads(path.read_text())["loo_err_pct"]
    assert set(stored) == set(fit["loo"])
    for rid, e in fit["loo"].items():
        assert stored[rid] == pytest.approx(e, abs=ROUNDING_PCT), rid


@pytest.mark.out_of_sample
@pytest.mark.parametrize("rid", [_loo_case(r) for r in RECORD_IDS])
def test_record_held_out_meets_the_goal(fit, rid):
    """Each record's step time predicted by the fit without it, either side."""
    assert abs(fit["loo"][rid]) <= LOO_GOAL_PCT, fit["loo"][rid]


@pytest.mark.out_of_sample
@pytest.mark.parametrize("rid", sorted(LOO_GAPS_PCT))
def test_held_out_gap_stays_within_its_stated_size(fit, rid):
    today, stated = math.log1p(fit["loo"][rid] / 100), math.log1p(LOO_GAPS_PCT[rid] / 100)
    assert (today > 0) is (stated > 0) and abs(today) <= abs(stated) + RUN_TOLERANCE, fit["loo"][rid]


def test_stored_error_summary_is_this_fits(fit):
    stored = fit_errors()["dgx-h100"]
    assert stored.records == len(fit["loo"])
    assert stored.halfwidth == pytest.approx(halfwidth(list(fit["loo"].values())), abs=2e-3)
    assert stored.gpu_spread == pytest.approx(cf.gpu_spread(fit["knobs"]), abs=2e-3)


def test_sac_recomputes_every_second_matmul_of_each_block():
    """torchtitan's per-op policy (recompute when the block's mm count is even): k, o and w3 of a
    Llama block, hand-counted from the Llama 3.1 8B shape (hidden 4096, kv 1024, FFN 14336)."""
    from prism_strategy.estimate.compute import SAC_RECOMPUTED_GEMMS, block_gemms

    m = load_model("llama-3.1-8b")
    assert block_gemms(m)[SAC_RECOMPUTED_GEMMS] == ((4096, 1024), (4096, 4096), (4096, 14336))

    class Sac:  # a training spec that says "sac", as the planner's will
        def __init__(self, t):
            self._t = t
            self.ckpt_policy = "sac"

        def __getattr__(self, k):
            return getattr(self._t, k)

    sc = scenario_from_flags("llama-3.1-8b", platform="dgx-h100", seq_len=1024, micro_batch=1)
    (part,) = model_parts(sc.model, sc.training)
    f = part_flops_per_sample(part, Sac(sc.training))  # type: ignore[arg-type]
    assert f.recompute == pytest.approx(32 * 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336) * 1024)


def test_ranges_widen_with_distance_from_what_was_measured():
    h100, h200, cpu = (load_platform(n) for n in ("dgx-h100", "dgx-h200", "cpu"))
    fitted = fit_errors()["dgx-h100"]

    def band(platform, nodes):  # compute 1 s, communication 0.5 s
        return step_range(step_of(1.0, 0.5), platform, Layout.for_platform(platform, nodes), None)

    at_home = band(h100, 1)
    assert at_home.fast == at_home.slow == pytest.approx(fitted.halfwidth)  # one node: what the fit measured
    far = band(h100, 64)
    # 64 nodes beyond the 1 measured: comm share 1/3 x ln(1 + log2 64), on the slow side only
    assert far.slow == pytest.approx(fitted.halfwidth + math.log(7) / 3)
    assert far.fast == pytest.approx(fitted.halfwidth)
    assert "commbench at 64 nodes" in far.basis
    assert band(h200, 1).fast > at_home.fast  # another GPU than the fit's
    assert band(cpu, 1).fast > at_home.fast  # uncalibrated


def test_neutral_shape_terms_give_back_the_flops_model():
    """With no shape penalty (gemm_half_dim 0), attention at the matmul rate and no eager-kernel
    term, the per-operation model is FLOPs / (peak x fraction): estimate/compute.py's formula."""

    from prism_strategy.estimate.compute import phase_times
    from prism_strategy.specs.cluster import ComputeTerms

    flat = load_platform("dgx-h100").with_values(compute_terms=None)
    neutral = flat.with_values(
        compute_terms=ComputeTerms(gemm_half_dim=0.0, attention_ratio=1.0, elementwise_bytes=0.0)
    )
    for model, ckpt in (("llama-3.1-8b", 0), ("mpt-7b", 1)):
        sc = scenario_from_flags(model, platform=flat, seq_len=2048, micro_batch=2, ckpt_freq=ckpt)
        parts = model_parts(sc.model, sc.training)
        a, b = phase_times(parts, sc.training, flat, 2), phase_times(parts, sc.training, neutral, 2)
        assert b.forward_flops == pytest.approx(a.forward_flops) and b.backward_flops == pytest.approx(a.backward_flops)


def test_eager_kernels_cost_their_bytes_at_hbm_bandwidth():
    """One eager kernel per non-matmul op (block_kernels minus matmuls and the attention kernel),
    each moving elementwise_bytes x hidden x 2 bytes (bf16) per token, at hbm_bw_gbps."""

    from prism_strategy.estimate.compute import block_kernels
    from prism_strategy.estimate.compute_shape import shaped_seconds
    from prism_strategy.specs.cluster import ComputeTerms

    base = load_platform("dgx-h100")
    off = base.with_values(compute_terms=ComputeTerms(elementwise_bytes=0.0))
    on = base.with_values(compute_terms=ComputeTerms(elementwise_bytes=1.0))
    sc = scenario_from_flags("llama-2-7b", platform=base, seq_len=2048, micro_batch=4)
    parts = model_parts(sc.model, sc.training)
    blk = block_kernels(sc.model.backbone)
    per_kernel = 4096 * 2 * 4 * 2048 / (base.hardware.hbm_bw_gbps * 1e9)  # hidden x bf16 x tokens / bandwidth
    fwd = shaped_seconds(parts, sc.training, on, 4)[0] - shaped_seconds(parts, sc.training, off, 4)[0]
    assert fwd == pytest.approx(32 * (blk.kernels - blk.gemms - 1) * per_kernel)


def test_range_coverage_widens_only_the_slow_side():
    # err = predicted / measured - 1. With 2 others, the 80% nearest-rank half-width is the larger
    # of their |ln(1 + err)|: d's is max(ln 1.1, |ln 0.7|) = 0.357, and |ln 0.5| = 0.693 is outside
    slow = {"a": 10.0, "b": -30.0, "d": -50.0}  # d predicted too fast (measured slower)
    assert cf.range_coverage(slow) == (2, 3)
    assert cf.range_coverage(slow, {"d": 0.4}) == (3, 3)  # 0.357 + 0.4 >= 0.693: the slow side reaches it
    fast = {"a": 10.0, "b": -30.0, "d": 100.0}  # d predicted too slow: scale terms cannot explain it
    assert cf.range_coverage(fast, {"d": 0.4}) == (2, 3)
