"""The fits judged on records they did not see (issue 29 items 1, 3, 5): leave-one-out through the
`refit_without` fixture, the held-out rows the fits store (data/fits/*.toml, what plan's ranges
read), and the held-out E2.

Bounds come from the project's goals, not from today's figures: bench/fit/fit_terms.py
PRIOR_WEIGHT states them (<= 15% median step-time error fitted, <= 25% leave-one-out), and the
ranges are 80% ranges (estimate/ranges.py QUANTILE), so of n held-out records the count inside is
binomial(n, 0.8): a coverage more than two standard deviations under 0.8 n says the ranges are too
narrow, whatever the count today.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import tomllib
from _holdout import known_gap

from prism_strategy.bench.fit import cuda_fit as cf
from prism_strategy.bench.fit import fit_terms as ft
from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.ranges import QUANTILE
from prism_strategy.specs import load_platform

FITTED_GOAL_PCT = 15.0
LOO_GOAL_PCT = 25.0
"""bench/fit/fit_terms.py PRIOR_WEIGHT: 'the project's goals (<= 15% fitted, <= 25% leave-one-out)'."""
FITS = Path(__file__).resolve().parents[3] / "src" / "prism_strategy" / "data" / "fits"
AURORA = {r.id: r for r in load_published("aurora-prism")}
ROUNDING_PCT = 0.05
"""data/fits stores each error with one decimal."""
RUN_TOLERANCE = math.log(1.03)
"""One run per figure, about +/-3% where a setting was reported as a range (test_planner_decisions)."""
LOO_GAPS_PCT = {"A2": 64.5, "E1": -30.5}
"""Records the Aurora fit misses past the goal when it does not see them: today's held-out error.
They move with the Aurora fit: restate them after a refit."""
FITTED = sorted(r.id for r in AURORA.values() if ft.fit_reason(r) is None)
HELD_OUT_CLAIMS = [rid for rid in FITTED if rid not in ft.PRIOR_RECORDS]
"""The fitted records whose leave-one-out error is a held-out claim: not those whose own
measurements set a prior (fit_terms.PRIOR_RECORDS: A1, B1), which a refit without them still
starts from (#29 item 2; benchmarks/aurora_fit.py reports them apart, data/fits leaves them out)."""


def _stored(name: str) -> dict:
    return tomllib.loads((FITS / f"{name}.toml").read_text())


def _step_error(refit, rid: str) -> float:
    """The record's step-time error, percent, on the presets refitted without it."""
    p = refit(rid).platform("aurora")
    (obs,) = [o for o in ft.record_observations(AURORA[rid]) if o.what == "step_s"]
    return 100 * (obs.predict(p) / obs.measured - 1)


@pytest.fixture(scope="module")
def aurora_loo(refit_without) -> dict[str, float]:
    out = {rid: _step_error(refit_without, rid) for rid in HELD_OUT_CLAIMS}
    assert all(refit_without(rid).fits for rid in HELD_OUT_CLAIMS)  # each was taken out of a fit
    return out


def test_the_held_out_claims_are_the_fitted_records_that_set_no_prior():
    assert set(ft.PRIOR_RECORDS) <= set(FITTED) and len(HELD_OUT_CLAIMS) == len(FITTED) - len(ft.PRIOR_RECORDS)


def _binomial_floor(n: int) -> float:
    return QUANTILE * n - 2 * math.sqrt(n * QUANTILE * (1 - QUANTILE))


@pytest.mark.out_of_sample
def test_aurora_leave_one_out_median_meets_the_projects_goal(aurora_loo):
    assert ft.median_abs(aurora_loo) <= LOO_GOAL_PCT, aurora_loo


def test_aurora_fitted_median_meets_the_projects_goal_in_sample():
    shipped = load_platform("aurora")
    obs = [o for r in AURORA.values() if ft.fit_reason(r) is None for o in ft.record_observations(r)]
    assert ft.median_abs(ft.errors(shipped, obs)) <= FITTED_GOAL_PCT


def _loo_case(rid: str):
    if rid not in LOO_GAPS_PCT:
        return rid
    reason = known_gap(f"{LOO_GAPS_PCT[rid]:+.1f}% step time refitted without it", rid)
    return pytest.param(rid, marks=pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))


@pytest.mark.out_of_sample
@pytest.mark.parametrize("rid", [_loo_case(r) for r in HELD_OUT_CLAIMS])
def test_aurora_record_held_out_meets_the_goal(aurora_loo, rid):
    """Each held-out claim's step time predicted by the fit without it, either side."""
    assert abs(aurora_loo[rid]) <= LOO_GOAL_PCT, aurora_loo[rid]


@pytest.mark.out_of_sample
@pytest.mark.parametrize("rid", sorted(LOO_GAPS_PCT))
def test_aurora_held_out_gap_stays_within_its_stated_size(aurora_loo, rid):
    today, stated = math.log1p(aurora_loo[rid] / 100), math.log1p(LOO_GAPS_PCT[rid] / 100)
    assert (today > 0) is (stated > 0) and abs(today) <= abs(stated) + RUN_TOLERANCE, aurora_loo[rid]


def test_aurora_stored_held_out_rows_are_the_refits(aurora_loo):
    """The rows plan's ranges are built from (data/fits/aurora-prism.toml) are each held-out
    claim's error refitted without it, so the stored coverage is a held-out figure; the records
    that set a prior are not among them."""
    stored = _stored("aurora-prism")["loo_err_pct"]
    assert set(stored) == set(aurora_loo)
    for rid, e in aurora_loo.items():
        assert stored[rid] == pytest.approx(e, abs=ROUNDING_PCT), rid


@pytest.mark.out_of_sample
@pytest.mark.parametrize("name", ["aurora-prism", "cuda-published"])
def test_stored_leave_one_out_coverage_is_an_80_percent_range(name):
    """loo_coverage: each held-out row against the range the other rows' errors make
    (cuda_fit.range_coverage); recomputed from the stored rows and held to the binomial floor."""
    d = _stored(name)
    inside, n = cf.range_coverage(d["loo_err_pct"])
    assert [inside, n] == d["loo_coverage"] and n == d["records"]
    assert inside >= _binomial_floor(n), (inside, n)


@pytest.mark.out_of_sample
def test_e2_at_64_nodes_lies_inside_its_stated_range():
    """E2 (AuroraGPT-2B, 64 nodes, FSDP2; PRISM notes on Sunspot) is in no fit; the plan's range for
    its scenario on the shipped preset must hold its measured step (both sides: a range that only
    held it on one side would fail with the step on the other)."""
    e2 = AURORA["E2"]
    assert ft.fit_reason(e2) is not None
    lo, hi = cf.record_range(e2)
    assert lo <= e2.step_time_s() <= hi, (lo, e2.step_time_s(), hi)


@pytest.mark.out_of_sample
def test_e2_error_is_within_the_fits_held_out_spread():
    """E2's error is that of a held-out record: within the Aurora fit's leave-one-out 80% half-width
    (data/fits/aurora-prism.toml halfwidth), either side."""
    e2 = AURORA["E2"]
    (obs,) = [o for o in ft.record_observations(e2) if o.what == "step_s"]
    err = abs(math.log(obs.predict(load_platform("aurora")) / obs.measured))
    assert err <= _stored("aurora-prism")["halfwidth"], err
