"""The slowest rank under variable lengths (estimate/length_spread.py), against formulas written
here: the max of n iid draws of a two-point distribution, a rank's padded length as the max of its
micro-batch (F^b), the max-entropy shape keeping the mean it was given, and a launch-bound step
absorbing a longer batch (PRISM's eager E2E: kernel launches, not FLOPs, set its compute:
shared/data/aurora_measurements.md A1/A2, ~7,400 launches, GPU busy 31-61%)."""

from __future__ import annotations

import math

import pytest

from prism_strategy.estimate.length_spread import (
    expected_max,
    length_stragglers,
    max_entropy_lengths,
    moments,
    normalised,
    padded,
)
from prism_strategy.estimate.scale_loss import expected_max_normal

TWO = ((100.0, 0.5), (300.0, 0.5))


@pytest.mark.parametrize("n", [1, 2, 8, 120])
def test_expected_max_of_a_two_point_distribution(n):
    """max of n draws is 300 unless all n are 100: 100 x 0.5^n + 300 x (1 - 0.5^n)."""
    assert expected_max(TWO, n) == pytest.approx(100 * 0.5**n + 300 * (1 - 0.5**n))


def test_a_ranks_padded_length_is_the_longest_of_its_micro_batch_unless_bucketed():
    """P(padded <= 100) = 0.5^b without bucketing; with bucketing one draw (0.5)."""
    assert dict(padded(TWO, 4, bucketing=False))[100.0] == pytest.approx(0.5**4)
    assert padded(TWO, 4, bucketing=True) == TWO


def test_a_histogram_is_normalised_and_merged():
    assert normalised(((5, 2.0), (1, 1.0), (5, 1.0))) == ((1.0, 0.25), (5.0, 0.75))


@pytest.mark.parametrize("mean", [40, 150, 400])
def test_max_entropy_lengths_keep_the_mean_and_stay_in_range(mean):
    d = max_entropy_lengths(mean, 512)
    assert moments(d)[0] == pytest.approx(mean, rel=0.01)
    assert sum(p for _, p in d) == pytest.approx(1) and all(1 <= v <= 512 for v, _ in d)


def _kw(**kw):
    base = dict(
        image_tokens=0,
        micro_batch=1,
        bucketing=True,
        ranks=120,
        measured_ranks=24,
        flops_s=1.0,
        launch_s=0.0,
        per_micro_batch=True,
        grad_accum=1,
        source="test",
    )
    return base | kw


def test_a_flops_bound_step_waits_for_the_slowest_of_n_over_what_m_already_waited():
    s = length_stragglers(TWO, **_kw())
    mean = 200.0
    want = expected_max(TWO, 120) / mean - expected_max(TWO, 24) / mean
    assert s.seconds == pytest.approx(want) and s.ratio == pytest.approx(expected_max(TWO, 120) / mean)
    assert length_stragglers(TWO, **_kw(ranks=24)).seconds == 0  # at the fit's own ranks: in the fit


def test_a_launch_bound_step_absorbs_the_longer_batch():
    """Launches 2 s, FLOPs 1 s at the mean: the slowest rank (1.5x) stays under its launches."""
    assert length_stragglers(TWO, **_kw(launch_s=2.0)).seconds == 0


def test_syncing_once_per_step_waits_for_the_max_of_sums():
    """DDP under no_sync over k micro-batches: the sum's spread sd sqrt(k) around k x mean."""
    k = 4
    s = length_stragglers(TWO, **_kw(per_micro_batch=False, grad_accum=k))
    mean, sd = 200.0, 100.0
    want = sd * math.sqrt(k) * (expected_max_normal(120) - expected_max_normal(24)) / (k * mean)
    assert s.seconds == pytest.approx(want)
