"""The late-rank term (estimate/scale_loss.py) against independent computations, and how plans at
scale carry it: in the step at the measured per-rank spread, else at the published average with the
rest of the way to the worst published cluster on the range's slow side;
and the Aurora 10-node range holding both readings of the cross-node cost."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
from _steps import step_of

from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.range_parts import step_range
from prism_strategy.estimate.ranges import COMM, LATE
from prism_strategy.estimate.scale_loss import default_jitter, expected_max_normal, late_rank_seconds, late_ranks
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.planning.rank_jitter import rank_jitter_from
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError
from prism_strategy.specs.presets import load_platform
from prism_strategy.strategies import get_strategy


def _pdf_integral(n: int) -> float:
    """E[max] = int x n phi(x) Phi(x)^(n-1) dx, midpoint rule on the density form (not the
    module's CDF form), with math.erf."""
    h, total = 1e-3, 0.0
    for i in range(int(20 / h)):
        x = -10 + (i + 0.5) * h
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        total += x * n * math.exp(-x * x / 2) / math.sqrt(2 * math.pi) * cdf ** (n - 1)
    return total * h


def test_expected_max_matches_closed_forms_and_tables():
    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-6)  # E max(X, Y) = 1 / sqrt(pi)
    assert expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-6)
    # Teichroew (1956) / Harter (1961) tables of normal order statistics
    for n, table in ((5, 1.16296), (10, 1.53875), (100, 2.50759)):
        assert expected_max_normal(n) == pytest.approx(table, abs=2e-5)


def test_expected_max_matches_the_density_integral_and_stays_under_sqrt_2_ln_n():
    for n in (8, 24, 512):
        assert expected_max_normal(n) == pytest.approx(_pdf_integral(n), abs=1e-4)
    for n in (2, 8, 64, 512, 4096, 10**6):
        assert expected_max_normal(n) < math.sqrt(2 * math.log(n))  # the classic bound


def test_expected_max_matches_a_monte_carlo_draw():
    draws = np.random.default_rng(7).standard_normal((4000, 512)).max(axis=1)
    sem = draws.std(ddof=1) / math.sqrt(len(draws))
    assert abs(expected_max_normal(512) - draws.mean()) < 4 * sem


def test_late_rank_seconds_by_hand():
    # 2 sync points, 10 ms spread each, 100 ranks over a fit at 10: 2 x 0.01 x (2.50759 - 1.53875)
    assert late_rank_seconds(100, 10, 2, 0.01) == pytest.approx(0.02 * (2.50759 - 1.53875), rel=1e-4)
    assert late_rank_seconds(8, 8, 50, 0.01) == 0.0  # what the fit measured holds its own e_M
    assert late_rank_seconds(4, 8, 50, 0.01) == 0.0


def test_proportional_spread_costs_the_same_for_any_number_of_sync_points():
    one, many = late_ranks(512, 8, 3.0, 1, 0.02), late_ranks(512, 8, 3.0, 96, 0.02)
    expected = 0.02 * 3.0 * (_pdf_integral(512) - _pdf_integral(8))
    assert one.seconds == pytest.approx(expected, rel=1e-3) and many.seconds == pytest.approx(one.seconds)
    unmeasured = late_ranks(512, 8, 3.0, 96, None)
    gap = 3.0 * (_pdf_integral(512) - _pdf_integral(8))
    assert unmeasured.seconds == pytest.approx(default_jitter().point * gap, rel=1e-3)  # the published average
    assert unmeasured.seconds + unmeasured.slow_seconds == pytest.approx(default_jitter().high * gap, rel=1e-3)


def test_default_spread_is_the_published_variation_over_twice_the_expected_max():
    # 22% across Summit's 27,648 GPUs, read as E[max - min] = 2 E[max] standard deviations
    assert default_jitter().high == pytest.approx(0.22 / (2 * _pdf_integral(27648)), rel=1e-3)
    assert default_jitter().point == pytest.approx(0.08 / (2 * _pdf_integral(27648)), rel=1e-3)  # the average
    assert default_jitter().low == 0.0


def test_late_ranks_dominating_names_its_measurement():
    h100 = load_platform("dgx-h100")
    r = step_range(step_of(1.0, 0.001, late_s=0.2, step_s=1.0), h100, Layout.for_platform(h100, 64), None)
    assert r.to_measure() == [LATE] and r.slow == pytest.approx(r.fast + r.terms[COMM] + math.log(1.2))
    at_home = step_range(step_of(1.0, 0.5), h100, Layout.for_platform(h100, 1), None)
    assert at_home.to_measure() == []  # at home: nothing beyond the fit


def _aurora_a3(nodes: int):
    """A3's published scenario (data/measurements/aurora-prism.toml) at another node count."""
    a3 = next(r for r in load_published("aurora-prism") if r.id == "A3-fsdp")
    return scenario_from_flags(
        **dict(a3.scenario_kwargs(), nodes=nodes, global_batch=a3.scenario.micro_batch * 12 * nodes)
    )


def test_aurora_at_16_nodes_the_range_holds_every_reading():
    """16 nodes: beyond the 10 the fit measured (PRISM's P10 rows): the host-staging readings and
    the sync wait's linear reading (estimate/backends/oneccl.py readings) all inside."""
    o = evaluate(_aurora_a3(16), get_strategy("fsdp_full_shard"))
    assert len(o.step_time_s_readings) == 3
    lo, hi = o.step_time_s_range
    for label, step in o.step_time_s_readings.items():
        assert lo <= step <= hi, label
        rate = o.micro_batch * o.grad_accum * 192 / step
        assert o.samples_per_s_range[0] <= rate <= o.samples_per_s_range[1], label


def test_a_measured_spread_prices_the_late_ranks_into_the_step():
    sc = scenario_from_flags(
        "llama-3.1-8b", platform="h100-96gb-500w", nodes=64, seq_len=8192, micro_batch=2, ckpt_freq=1
    )
    base = evaluate(sc, get_strategy("fsdp_full_shard"))
    jit = evaluate(sc.with_platform(sc.platform.with_values(rank_jitter=0.02)), get_strategy("fsdp_full_shard"))
    gap = base.compute_s * (_pdf_integral(512) - _pdf_integral(8))
    assert jit.step_time_s - base.step_time_s == pytest.approx((0.02 - default_jitter().point) * gap, rel=1e-3)
    assert jit.late_ranks.seconds == pytest.approx(0.02 * gap, rel=1e-3) and LATE not in jit.range.terms
    # unmeasured: the published average in the point, the rest of the way to the top on the slow side
    assert base.late_ranks.seconds == pytest.approx(default_jitter().point * gap, rel=1e-3)
    assert base.range.terms[LATE] == pytest.approx(
        math.log1p((default_jitter().high - default_jitter().point) * gap / base.step_time_s), rel=1e-3
    )
    assert "late ranks" in base.provenance["late_ranks"] and "Sinha" in base.provenance["late_ranks"]


def test_one_node_pays_no_late_ranks_and_more_nodes_pay_more():
    """At the node count the fit measured the records already hold e_M (no term); beyond it the
    point's late-rank seconds grow with E[max of N] at fixed work per GPU."""
    fsdp = get_strategy("fsdp_full_shard")
    late = {
        n: evaluate(
            scenario_from_flags("llama-3.1-8b", platform="dgx-h100", nodes=n, seq_len=8192, micro_batch=2), fsdp
        )
        for n in (1, 16, 64)
    }
    assert late[1].late_ranks.seconds == 0.0
    gap16, gap64 = (_pdf_integral(8 * n) - _pdf_integral(8) for n in (16, 64))
    assert late[64].late_ranks.seconds / late[16].late_ranks.seconds == pytest.approx(
        (late[64].compute_s * gap64) / (late[16].compute_s * gap16), rel=1e-3
    )


def _rank_file(folder, rank: int, locals_s: list[float]) -> None:
    lines = [{"kind": "meta", "rank": rank, "world_size": 3, "device": "cuda:0"}]
    for i, t in enumerate(locals_s):
        lines.append(
            {
                "kind": "step",
                "step": i,
                "step_s": t + 0.5,
                "phases": {"data": 0.01, "forward": t - 0.02, "backward": 0.5, "optimizer": 0.01},
            }
        )
    (folder / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_rank_jitter_read_from_stepmonitor_logs(tmp_path):
    steps = [[1.0, 1.0, 1.0], [1.0, 1.1, 0.9], [1.0, 1.02, 0.98], [1.0, 1.04, 0.96], [1.0, 1.06, 0.94]]
    for rank in range(3):
        _rank_file(tmp_path, rank, [s[rank] for s in steps])
    per_step = [statistics.stdev(s) / statistics.mean(s) for s in steps[2:]]  # the first 2 are warm-up
    assert rank_jitter_from(str(tmp_path)) == pytest.approx(statistics.median(per_step))
    assert rank_jitter_from("0.015") == 0.015
    (tmp_path / "rank1.jsonl").unlink(), (tmp_path / "rank2.jsonl").unlink()
    with pytest.raises(SpecError, match="2 or more ranks"):
        rank_jitter_from(str(tmp_path))
    with pytest.raises(SpecError, match="must be in"):
        rank_jitter_from("1.5")


def test_plan_cli_takes_the_spread_from_a_stepmonitor_folder_and_refuses_bad_input(tmp_path):
    from typer.testing import CliRunner

    from prism_strategy.cli import app

    for rank, t in enumerate((1.0, 1.1, 0.9)):
        _rank_file(tmp_path, rank, [t] * 4)
    args = [
        "plan",
        "--model",
        "qwen3-0.6b",
        "--platform",
        "aurora",
        "--nodes",
        "16",
        "--seq-len",
        "512",
        "--micro-batch",
        "4",
    ]
    r = CliRunner().invoke(app, [*args, "--rank-jitter", str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    cv = statistics.stdev((1.0, 1.1, 0.9))
    o = next(x for x in json.loads(r.stdout)["options"] if x["strategy"] == "fsdp_full_shard")
    assert o["late_rank_s"] == pytest.approx(cv * o["compute_s"] * (_pdf_integral(192) - _pdf_integral(120)), rel=1e-3)
    bad = CliRunner().invoke(app, [*args, "--rank-jitter", "lots"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1 and "--rank-jitter" in bad.output


def test_readings_replace_the_scale_terms_when_wider_never_add_to_them():
    from prism_strategy.estimate.ranges import READINGS

    h100 = load_platform("dgx-h100")  # its fit measured 1 node: at 2, comm share 4/9 x ln(1 + log2 (2 / 1))
    r = step_range(step_of(0.5, 0.4), h100, Layout.for_platform(h100, 2), None)
    assert r.terms[COMM] == pytest.approx(4 / 9 * math.log1p(1.0))
    assert r.slow - r.fast == pytest.approx(sum(r.terms.values()))  # + the leave-one-scale-out term
    wide = r.with_readings(1.0, {"per operation": 1.0, "per peer node": 3.0})
    assert wide.slow - wide.fast == pytest.approx(math.log(3.0)) and wide.fast == r.fast
    assert wide.to_measure()[0] == READINGS
    assert r.with_readings(1.0, {"per peer node": 1.1}) is r  # inside already: unchanged


def test_a_platform_rank_jitter_outside_0_1_is_refused():
    with pytest.raises(SpecError, match="rank_jitter must be in"):
        load_platform("dgx-h100").with_values(rank_jitter=1.5)
