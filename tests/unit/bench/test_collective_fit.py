"""The oneCCL model fitted to the published Aurora collective rows (data/measurements/
aurora-collectives.toml): the rows load as data (bad files exit with one line), the shipped comm
terms are that fit's, the fit carries across node counts it did not see (the issue's goal: median
leave-one-node-count-out error <= 25%), and a held-out node count is really held out."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from prism_strategy.bench.fit.calibrate import bounds_for, run_calibrate
from prism_strategy.bench.fit.comm_fit import fit, predict, value
from prism_strategy.bench.fit.comm_fit_nodes import COMM_PRIORS, fold_errors, prior_platform
from prism_strategy.bench.fit.comm_rows import load_rows, row_points
from prism_strategy.specs import load_platform
from prism_strategy.specs.errors import SpecError

GOAL_LOO_PCT = 25.0
"""Issue 25's target for the median leave-one-node-count-out |error| (not today's figure)."""


@pytest.fixture(scope="module")
def setup():
    base = load_platform("aurora")
    _, rows = load_rows()
    fitted = [r for r in rows if not r.check]
    return base, prior_platform(base), row_points(fitted), lambda n: bounds_for(base, n)


def test_every_row_has_its_source_and_a_known_layout():
    head, rows = load_rows()
    fitted, checks = [r for r in rows if not r.check], [r for r in rows if r.check]
    assert len(fitted) == 29 and head["platform"] == "aurora"
    assert all(r.source in head["sources"] and r.stack in head["stacks"] for r in rows)
    assert {r.nodes for r in fitted} == {1, 2, 4, 8, 16, 8192}
    # issue 34's rows (shared/data/aurora_prism_scale.md 3a-3d), held out as checks
    assert {r.source for r in checks} == {"CD", "CS", "CW", "CL"} and len(checks) == 32
    assert {r.nodes for r in checks if r.source == "CD"} == {1, 2, 4, 8, 16, 32, 64, 128, 256, 512}


@pytest.mark.xfail(
    strict=True,
    reason="known gap: the per-step scale-out latency the fitted rows set (XL-5's ring at 8,192 nodes, SM-1) "
    "over-prices oneCCL's small all-reduces at 2-64 nodes 2-7x ([CS] 3c: 16 B 478 us at 2 nodes, 1,242 at 64); "
    "fitting them too moves inter_latency_us from 64 to 9 us and leaves XL-5 82% short: decided by a "
    "per-algorithm latency form fitted to [CS], [CD] and XL-5 together (benchmarks/aurora_collectives_fit.py)",
)
def test_the_shipped_fit_prices_small_all_reduces_across_2_to_64_nodes():
    _, rows = load_rows()
    cs = [r for r in rows if r.source == "CS"]
    errs = [p / (r.ms / 1e3) - 1 for r, p in zip(cs, predict(load_platform("aurora"), row_points(cs)))]
    assert statistics.median(abs(e) for e in errs) <= GOAL_LOO_PCT / 100


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ('id = "x"\nop = "all_reduce"\nbytes = 1e6\nnodes = 2\nranks_per_node = 12\nsource = "S"', "lacks ms"),
        ('id = "x"\nop = "allreduce"\nbytes = 1e6\nnodes = 2\nranks_per_node = 1\nms = 1.0\nsource = "S"', "op"),
        ('id = "x"\nop = "all_reduce"\nbytes = -1\nnodes = 2\nranks_per_node = 1\nms = 1.0\nsource = "S"', "bytes"),
        (
            'id = "x"\nop = "all_reduce"\nbytes = 1e6\nnodes = 2\nranks_per_node = 1\nms = 1.0\n'
            'ms_range = [2.0, 3.0]\nsource = "S"',
            "ms_range",
        ),
    ],
)
def test_a_malformed_row_raises_one_line(tmp_path, row, words):
    f = tmp_path / "bad.toml"
    f.write_text(f'name = "bad"\nplatform = "aurora"\n[[row]]\n{row}\n')
    with pytest.raises(SpecError, match=words) as e:
        load_rows(str(f))
    assert "\n" not in str(e.value)


def test_shipped_comm_terms_are_the_collective_fit(setup):
    base, start, pts, bounds = setup
    fitted, decided, _ = fit(start, pts, bounds)
    for k in decided:
        assert value(base, k) == pytest.approx(value(fitted, k), rel=0.01), k
    assert set(decided) <= set(COMM_PRIORS)


def test_the_fit_carries_to_node_counts_it_did_not_see(setup):
    _, start, pts, bounds = setup
    per_row, folds = fold_errors(start, pts, bounds)
    assert len(per_row) == len(pts)
    assert statistics.median(abs(e) for e in per_row.values()) <= GOAL_LOO_PCT
    to_16 = next(f for f in folds if f["fold"].startswith("fit 1-8"))
    assert max(abs(e) for e in to_16["errors_pct"]) <= GOAL_LOO_PCT


def test_a_left_out_node_count_is_not_seen(setup):
    """Poison the 16-node rows (x10 their time): the fit that leaves 16 nodes out predicts them the
    same; the fit that sees them does not."""
    _, start, pts, bounds = setup
    poisoned = [dataclasses.replace(x, seconds=x.seconds * 10) if x.nodes == 16 else x for x in pts]
    at16 = [x for x in pts if x.nodes == 16]
    clean = fit(start, [x for x in pts if x.nodes != 16], bounds)[0]
    held = fit(start, [x for x in poisoned if x.nodes != 16], bounds)[0]
    seen = fit(start, poisoned, bounds)[0]
    assert list(predict(held, at16)) == pytest.approx(list(predict(clean, at16)))
    assert predict(seen, at16)[0] > 1.2 * predict(clean, at16)[0]


def test_calibrate_fit_comm_fits_the_shipped_rows(tmp_path):
    r = run_calibrate("aurora", str(tmp_path / "store.db"), str(tmp_path / "aurora.toml"), fit="comm")
    assert r["comm"]["published_rows"] == 29 and r["runs"] == 29
    decided = {t["name"] for t in r["comm"]["terms"] if t["decided_by"]}
    assert {"inter_latency_us", "scaleout_rank_bw_gbps", "intra_bw_gbps"} <= decided
    assert r["written"] or "worse than the aurora preset" in r["refused"]  # the preset is this fit
