"""The micro-batch search (traced/search.py) against known memory curves, no torch."""

from __future__ import annotations

import pytest

from prism_strategy.traced.search import find_max_micro_batch


def affine(base: float, per: float):
    calls: list[int] = []

    def probe(mb: int) -> float:
        calls.append(mb)
        return base + per * mb

    return probe, calls


@pytest.mark.parametrize("seed, per_sample", [(37, 10.0), (1, 10.0), (500, 12.0), (37, 0.0), (4096, 0.0)])
def test_affine_memory_is_found_exactly(seed, per_sample):
    probe, calls = affine(100.0, 10.0)  # fits up to micro-batch 37 under 475
    r = find_max_micro_batch(probe, 475.0, seed=seed, per_sample=per_sample)
    assert r.micro_batch == 37 and r.exact
    assert len(calls) == len(set(calls)) == r.probes <= 4


def test_a_good_seed_needs_two_probes():
    probe, calls = affine(100.0, 10.0)
    r = find_max_micro_batch(probe, 475.0, seed=37, per_sample=10.0)
    assert calls == [37, 38] and r.points == ((37, 470.0), (38, 480.0))


def test_peak_moving_to_another_phase_still_brackets():
    # flat (optimizer-step peak) until the activations overtake it at 20, then steep
    def probe(mb: int) -> float:
        return max(300.0, 100.0 + 10.0 * mb)

    r = find_max_micro_batch(probe, 440.0, seed=2, per_sample=1.0, max_probes=12)
    assert r.micro_batch == 34 and r.exact and r.probes <= 10  # a flat start costs a few doublings


def test_nothing_fits_and_cap_and_probe_budget():
    assert find_max_micro_batch(lambda mb: 1e9, 1.0, seed=8).micro_batch == 0
    r = find_max_micro_batch(lambda mb: float(mb), 1e9, seed=10, cap=64)
    assert r.micro_batch == 64 and r.exact
    r = find_max_micro_batch(lambda mb: float(mb * mb), 1e6, seed=1, max_probes=2)
    assert r.probes == 2 and not r.exact and r.micro_batch == 2
