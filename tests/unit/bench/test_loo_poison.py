"""Leave-one-out proven (issue 29 item 4): a poisoned observation, a copy of a real record's with an
absurd measured value, added to each fit. Leave-one-out must not see it when it predicts it (its
held-out prediction is the same whatever its measured value), and must see it when it predicts the
others (their held-out predictions move with it), so it really refits once per record. A leave-one-
out that held nothing out fails the first; one that never refitted fails the second.

Small subsets of the records (and, for the Aurora fit, of its knobs) keep each refit to a fraction
of a second; the property does not depend on how many records there are.
"""

from __future__ import annotations

import dataclasses

import pytest
from _holdout import RECORDS

from prism_strategy.bench.fit import cuda_fit as cf
from prism_strategy.bench.fit import fit_terms as ft
from prism_strategy.bench.fit.comm_fit_nodes import COMM_PRIORS
from prism_strategy.specs import load_platform

ABSURD = (1e3, 1e-3)
"""The poison's measured value, as a multiple of the record it copies: 1000x slower, 1000x faster."""


def _held_out_predictions(loo_pct: dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    return {rid: (1 + e / 100) * measured[rid] for rid, e in loo_pct.items()}


def _poisoned(obs: list, template, scale: float) -> list:
    return [*obs, dataclasses.replace(template, id="POISON", measured=template.measured * scale)]


def _assert_poison_only_moves_the_others(runs: list[dict[str, float]]) -> None:
    (a, b) = runs
    assert a["POISON"] == pytest.approx(b["POISON"], rel=1e-9)  # not fitted on itself
    assert all(a[k] != pytest.approx(b[k], rel=1e-3) for k in a if k != "POISON")  # fitted on it


@pytest.mark.out_of_sample
def test_aurora_leave_one_out_does_not_see_the_record_it_predicts():
    knobs = ("kernel_launch_us", "achievable_fraction")
    base = ft.prior_platform(load_platform("aurora"))
    obs = [o for rid in ("A2", "C3", "E1") for o in ft.record_observations(RECORDS[rid]) if o.what == "step_s"]
    template = obs[0]
    runs = []
    for scale in ABSURD:
        poisoned = _poisoned(obs, template, scale)
        loo = ft.leave_one_out(base, poisoned, knobs)
        runs.append(_held_out_predictions(loo, {o.id: o.measured for o in poisoned}))
    assert set(runs[0]) == {"A2", "C3", "E1", "POISON"}
    _assert_poison_only_moves_the_others(runs)


@pytest.mark.out_of_sample
def test_cuda_leave_one_out_does_not_see_the_record_it_predicts():
    platforms = {n: load_platform(n) for n in cf.PLATFORMS}
    obs = [cf.record_observation(RECORDS[rid]) for rid in ("TT-01", "TT-20", "MF-08")]
    template = obs[1]  # TT-20: its platform's fraction is then fitted on TT-20 and the poison alone
    runs = []
    for scale in ABSURD:
        poisoned = _poisoned(obs, template, scale)
        loo = cf.leave_one_out(cf.PRIORS, poisoned, platforms)
        runs.append(_held_out_predictions(loo, {o.id: o.measured for o in poisoned}))
    assert set(runs[0]) == {"TT-01", "TT-20", "MF-08", "POISON"}
    a, b = runs
    assert a["POISON"] == pytest.approx(b["POISON"], rel=1e-9)
    assert a["TT-20"] != pytest.approx(b["TT-20"], rel=1e-3)  # the poison shares its platform's knob


@pytest.mark.out_of_sample
def test_refit_without_refits_and_leaves_the_record_out(refit_without):
    """The fixture's refit equals the fit on the other records' observations, started from the
    priors (bench/fit/fit_terms.fit), and differs from the fit on all of them by more than the
    shipped preset's rounding (the record was in it). The comm terms are the collective fit's: a
    training refit does not move them (issue 25)."""
    import _holdout as h

    refit = refit_without("A3-fsdp")
    assert refit.fits == ("aurora step time (bench/fit/fit_terms.py)",)
    prior, obs = ft.prior_platform(load_platform("aurora")), list(h._aurora_observations())
    assert {o.id for o in obs} == h.aurora_step_records() and "A3-fsdp" in h.aurora_step_records()
    full, rest = ft.fit(prior, obs), ft.fit(prior, [o for o in obs if o.id != "A3-fsdp"])
    mine = [ft.get_value(refit.platform("aurora"), k) for k in ft.KNOBS]
    assert mine == pytest.approx([ft.get_value(rest, k) for k in ft.KNOBS], rel=1e-9)
    assert mine != pytest.approx([ft.get_value(full, k) for k in ft.KNOBS], rel=0.01), "A3-fsdp moved no knob"
    shipped = load_platform("aurora")
    assert all(refit.platform("aurora").value(k) == shipped.value(k) for k in COMM_PRIORS)
    cuda = refit_without("MF-09")  # the attention ratio's one long-sequence row (README)
    platforms = {n: load_platform(n) for n in cf.PLATFORMS}
    full_cuda = cf.fit(cf.PRIORS, list(h._cuda_observations()), platforms)
    assert cf.shipped_knobs(dict(cuda.platforms)) != pytest.approx(full_cuda, rel=0.01)
    assert refit_without("A4").fits == ()  # memory only: in no step-time or allocator fit


def test_shipped_allocator_factors_are_the_full_fits_the_refits_drop_records_from():
    """The fixture's premise for the allocator: a fit that holds none of the removed records is the
    shipped value (each stored to two significant figures)."""
    import _holdout as h

    none: frozenset[str] = frozenset()
    churn = h.fixed_shape_factor(none)
    assert load_platform("h100-96gb-500w").allocator.allocator_cache_factor == pytest.approx(churn, abs=0.005)
    aurora = load_platform("aurora")
    c = churn  # the varying and pinned fits take the fixed-shape term unrounded (allocator_fit.py)
    assert aurora.allocator.allocator_varying_factor == pytest.approx(h.varying_shape_factor(none, c), abs=0.0005)
    assert aurora.allocator.allocator_pinned_factor == pytest.approx(h.pinned_factor(none, c), abs=0.005)
    assert h.section_d_length(none) == RECORDS["D1"].scenario.seq_len
