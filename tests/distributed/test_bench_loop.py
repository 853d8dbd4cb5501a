"""Measure and close the loop for real: CPU, gloo, 4 ranks (2x2 for HSDP), tiny Llama.

bench -> store -> compare -> calibrate -> held-out memory; tune over the measured grid; ceiling vs
exhaustive scan; a rank that crashes or hangs; no orphan processes. Runs share one store to pay
process starts once. Tiny Llama keeps each step short, so the 18-run launch costs mostly its
process start and each run's model build. Timing accuracy targets live in
benchmarks/calibration_holdout.py.
"""

import sqlite3
import subprocess

import pytest

from prism_strategy.bench.fit.calibrate import calibrate, errors_pct
from prism_strategy.bench.launch.run import run_bench, run_ceiling, run_many, scan_ceiling_runs
from prism_strategy.bench.results.compare import compare
from prism_strategy.bench.results.predict import predict
from prism_strategy.bench.results.store import Store
from prism_strategy.cli.bench_inputs import base_config
from prism_strategy.inputs.stored import row_values
from prism_strategy.specs.presets import load_platform

pytestmark = pytest.mark.distributed
STRATEGIES = ["ddp", "fsdp_full_shard", "fsdp_shard_grad_op", "hsdp_full_shard", "hsdp_shard_grad_op", "zero2"]


def base(**kw):
    args = dict(
        model="tiny-llama",
        nproc=4,
        ranks_per_node=2,
        micro_batch=2,
        seq_len=128,
        steps=3,
        warmup=1,
        precision="fp32",
        ckpt_freq=0,
        grad_accum=1,
        timeout_s=240,
    )
    return base_config(**(args | kw))


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return Store(tmp_path_factory.mktemp("db") / "results.db")


@pytest.fixture(scope="module")
def measured(store):
    """Calibration set: every strategy at (mb 2, seq 128) and (mb 4, seq 256); held out: (mb 3, seq 192)."""
    settings = ((2, 128), (4, 256), (3, 192))
    runs = run_many(
        [base(micro_batch=mb, seq_len=seq) | {"strategy": s} for s in STRATEGIES for mb, seq in settings],
        load_platform("cpu"),
        store,
    )
    per = len(settings)
    train = [r for i, r in enumerate(runs) if i % per < 2]
    held = [r for i, r in enumerate(runs) if i % per == 2]
    return train, held


def test_bench_every_strategy_completes_and_is_stored(store, measured):
    train, held = measured
    for r in train + held:
        assert r.status == "ok", (r.strategy, r.measured.get("error"), r.measured.get("log_tail"))
        assert r.measured["step_time_s"] > 0 and r.measured["peak_memory_bytes"] > 0
        assert r.fingerprint["backend"] == "gloo" and r.fingerprint["torch"]
    stored = store.query()
    assert {r.strategy for r in stored} >= set(STRATEGIES)
    rows = compare(stored)
    assert {r["strategy"] for r in rows} == set(STRATEGIES)


def test_sharding_shows_in_measured_memory(measured):
    train, _ = measured
    at = {r.strategy: r.measured["peak_memory_bytes"] for r in train if row_values(r.config)["micro_batch"] == 2}
    assert at["fsdp_full_shard"] < at["ddp"]


def test_calibration_fits_and_predicts_held_out_memory(measured):
    """Step-time accuracy on held-out configs is a timing target: benchmarks/calibration_holdout.py
    measures and reports it. Here: the fit improves on its own runs, and memory (deterministic
    tracked tensor bytes) is predicted within 15% on configs it never saw."""
    train, held = measured
    fitted, report = calibrate(load_platform("cpu"), train)
    assert report["after"]["step_time_median"] < report["before"]["step_time_median"], report
    err = errors_pct(fitted, held)
    assert err["memory_median"] <= 15, (report, err)


CEILING_BASE = dict(seq_len=256, nproc=2)
"""DDP replicates: a rank's memory, so its ceiling, does not depend on the rank count; two ranks
start in half the time of four on this 2-core machine, and the search launches about four times."""
CEILING_LIMIT = 20 * 2**20  # 20 MiB of tracked tensor memory per rank


@pytest.fixture(scope="module")
def ceiling(store):
    """The search: one launch per trial (about 4 here)."""
    return run_ceiling(base(**CEILING_BASE), "ddp", "cpu", store, memory_limit_bytes=CEILING_LIMIT, max_micro_batch=64)


@pytest.fixture(scope="module")
def scan(store, ceiling):
    """The exhaustive reference up to one past the ceiling found, in one launch (its own fixture:
    a test's setup then holds one of the two, not both)."""
    c, _ = ceiling
    cfg = base(**CEILING_BASE)
    return scan_ceiling_runs(cfg, "ddp", "cpu", store, memory_limit_bytes=CEILING_LIMIT, upto=c.ceiling + 1)


def test_ceiling_search_stores_the_ceiling_it_found(ceiling):
    c, summary = ceiling
    assert c.ceiling >= 2
    assert summary.measured["ceiling"] == c.ceiling


def test_ceiling_matches_exhaustive_scan_with_fewer_runs(ceiling, scan):
    c, _ = ceiling
    statuses = [r.status for r in scan]
    assert statuses == ["ok"] * c.ceiling + ["oom"], statuses
    assert c.runs < len(scan)


FAULT_TIMEOUT_S = 20
"""The hang waits this out: the ranks start and reach step 2 in well under it on a loaded 2-core host."""


def _orphans(tag: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", tag], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


@pytest.mark.parametrize("fault, status", [("crash", "failed"), ("hang", "timeout")])
def test_crash_or_hang_is_reported_and_nothing_is_left(store, fault, status):
    cfg = base(timeout_s=FAULT_TIMEOUT_S, nproc=2) | {"tag": f"prism-fault-{fault}"}  # one node of 2 ranks
    [r] = run_bench(cfg, ["ddp"], "cpu", store, extra_args=["--fault", fault, "--fault-rank", "1", "--fault-step", "2"])
    assert r.status == status, r.measured
    if fault == "crash":
        assert "1" in r.measured["error"]
    assert r.measured["seconds"] < FAULT_TIMEOUT_S + 15
    assert _orphans(f"prism-fault-{fault}") == []
    with sqlite3.connect(store.path) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert any(x.id == r.id for x in store.query())


RUN_TO_RUN_NOISE = 0.05
"""Measured throughputs within 5% are the same configuration as far as one short run on this
2-core machine can tell."""


def test_tune_reaches_the_grid_best_with_a_third_of_the_runs_and_one_check(measured):
    """The grid is every measured configuration (6 strategies x 3 micro-batch/seq settings); tune
    ranks it with the uncalibrated planner and 'measures' by reading those real measurements.
    With 3 settings per strategy, one run per strategy is already a third of the grid; tune spends
    one more on the leader's runner-up. That check is what finds the best where the model ranks two
    settings far apart that measure within a few percent of each other (the fixed per-step cost on
    CPU: seen with small Llama, ddp at mb 2 / seq 128 against mb 3 / seq 192, where CI once stopped
    at the wrong one)."""
    from prism_strategy.bench.fit.tune import Candidate, tune

    train, held = measured
    runs = {(r.strategy, row_values(r.config)["micro_batch"]): r for r in train + held}
    plat = load_platform("cpu")
    grid = [
        Candidate(
            strategy=s, micro_batch=mb, ckpt_freq=0, predicted_samples_per_s=predict(r.config, plat)["samples_per_s"]
        )
        for (s, mb), r in runs.items()
    ]
    truth = {c: runs[(c.strategy, c.micro_batch)].measured["samples_per_s"] for c in grid}
    res = tune(grid, lambda c: truth[c])
    best = max(truth, key=truth.get)
    # the same configuration as far as the two runs can tell: within the larger of their own step
    # spreads ((max - min) / median of the timed steps), and never tighter than RUN_TO_RUN_NOISE
    spread = (runs[(c.strategy, c.micro_batch)].measured.get("step_time_spread") or 0.0 for c in (best, res.best))
    noise = max(RUN_TO_RUN_NOISE, *spread)
    assert truth[res.best] >= (1 - noise) * truth[best], (res.stop_reason, noise, truth)
    assert res.runs <= len(grid) // 3 + 1, res.runs
