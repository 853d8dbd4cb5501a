"""Measured pricing (estimate/comm_measured.py) against formulas written out here: log-log
interpolation between two measured sizes, and the ring form (hops x per-hop latency + bus factor
x bytes / bus bandwidth) for another rank count."""

from __future__ import annotations

import math

import pytest

from prism_strategy.estimate.comm_measured import describe, measured_seconds
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.measured import MeasuredCurve

ALPHA, BUS = 3e-6, 150e9  # per-hop latency (s) and bus bandwidth (B/s) of a synthetic ring


def ring(op: str, n: int, size: float) -> float:
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    factor = (2 if op == "all_reduce" else 1) * (n - 1) / n
    return steps * ALPHA + factor * size / BUS


def curve(op="all_reduce", ranks=16, nodes=2, concurrent=1, sizes=(2**10, 2**16, 2**22, 2**28)):
    return MeasuredCurve(
        op=op,
        ranks=ranks,
        nodes=nodes,
        concurrent=concurrent,
        label="nccl-tests",
        date="2026-12-01",
        points=tuple((s, ring(op, ranks, s)) for s in sizes),
    )


def test_between_two_sizes_is_log_log_interpolation():
    c = curve()
    (b0, t0), (b1, t1) = c.points[1], c.points[2]
    size = 3.0e6
    w = math.log(size / b0) / math.log(b1 / b0)
    m = measured_seconds((c,), "all_reduce", size, 16, 2, 1)
    assert m.how == "interpolated" and m.seconds == pytest.approx(t0 * (t1 / t0) ** w, rel=1e-12)
    assert measured_seconds((c,), "all_reduce", 2**16, 16, 2, 1).seconds == t0  # a measured size, as measured


def test_other_rank_counts_follow_the_ring_form():
    c = curve()
    for n in (24, 32, 80):
        for size in (2**8, 2**16, 2**22, 2**30):  # measured sizes, and below and beyond them
            m = measured_seconds((c,), "all_reduce", size, n, n // 8, 1)
            assert m.how == "carried" and m.seconds == pytest.approx(ring("all_reduce", n, size), rel=1e-6)
    ag = curve(op="all_gather")
    assert measured_seconds((ag,), "all_gather", 2**22, 80, 10, 1).seconds == pytest.approx(
        ring("all_gather", 80, 2**22), rel=1e-6
    )


def test_only_the_same_op_and_group_shape_match():
    c = curve()
    assert measured_seconds((c,), "all_gather", 2**20, 16, 2, 1) is None
    assert measured_seconds((c,), "all_reduce", 2**20, 8, 1, 1) is None  # inside one node vs spanning
    assert measured_seconds((c,), "all_reduce", 2**20, 2, 2, 8) is None  # HSDP replicate: 1 per node, 8 at once
    assert measured_seconds((c,), "all_reduce", 2**20, 12, 2, 1) is None  # 6 per node, measured 8 per node


def test_a_single_size_prices_only_that_size():
    one = MeasuredCurve(
        op="reduce_scatter", ranks=4, nodes=2, label="commbench", date="2026-12-01", points=((1000.0, 2e-3),)
    )
    assert measured_seconds((one,), "reduce_scatter", 1020.0, 4, 2, 1).seconds == 2e-3
    assert measured_seconds((one,), "reduce_scatter", 5000.0, 4, 2, 1) is None
    assert measured_seconds((one,), "reduce_scatter", 1000.0, 8, 4, 1) is None  # no latency/bandwidth split


def test_provenance_names_the_curve_and_what_was_done():
    c = curve()
    assert (
        describe(measured_seconds((c,), "all_reduce", 3e6, 16, 2, 1), 16, 2)
        == "measured: nccl-tests all_reduce, 2x8 ranks, 2026-12-01; other sizes interpolated"
    )
    assert "carried to 8x8 ranks" in describe(measured_seconds((c,), "all_reduce", 3e6, 64, 8, 1), 64, 8)


def test_a_curve_must_be_a_real_measurement():
    with pytest.raises(SpecError, match="ascend"):
        MeasuredCurve(op="all_reduce", ranks=4, nodes=2, label="x", date="d", points=((2.0, 1.0), (1.0, 1.0)))
    with pytest.raises(SpecError, match="group shape"):
        MeasuredCurve(op="all_reduce", ranks=1, nodes=1, label="x", date="d", points=((1.0, 1.0),))
