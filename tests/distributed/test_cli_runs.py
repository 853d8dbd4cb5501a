"""bench, ceiling, tune and report through the CLI, for real: tiny Llama on 2 gloo ranks, one
results store that every command writes to and `report` then draws (4 launches in all).

What is checked is the CLI's contract on real runs: --json parses and carries the measurement and
its prediction, a failed run or an answer of 'nothing fits' exits 1, bad input exits 2 before any
launch, and the PNGs drawn from the store have content (not a blank canvas).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from matplotlib import image
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app

pytestmark = pytest.mark.distributed
TINY = ["--model", "tiny-llama", "--nproc", "2", "--seq-len", "32"]
runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cli_runs") / "results.db")


@pytest.fixture(scope="module")
def bench(db):
    return cli("bench", *TINY, "--strategies", "ddp", "--micro-batch", "2", "--steps", "2", "--db", db, "--json")


@pytest.fixture(scope="module")
def tune(db, bench):
    return cli(
        "tune",
        *TINY,
        "--strategies",
        "fsdp_full_shard",
        "--micro-batches",
        "2",
        "--db",
        db,
        "--calibration",
        "none",
        "--json",
    )


@pytest.fixture(scope="module")
def ceiling(db, bench):
    """A per-rank limit of 0.0001 GiB (~107 KB) of tracked tensors: tiny Llama's fp32 weights alone
    are ~0.5 MB, so even micro-batch 1 runs out of memory."""
    return cli(
        "ceiling",
        *TINY,
        "--strategy",
        "ddp",
        "--memory-limit",
        "0.0001",
        "--max-micro-batch",
        "4",
        "--db",
        db,
        "--json",
    )


def test_bench_json_carries_the_measurement_and_its_prediction(bench, db):
    assert bench.exit_code == 0, bench.output
    [r] = json.loads(bench.stdout)
    assert (r["kind"], r["status"], r["strategy"], r["platform"]) == ("bench", "ok", "ddp", "cpu")
    m = r["measured"]
    assert m["backend"] == "gloo" and len(m["peak_memory_per_rank"]) == 2
    # samples/s is the global batch over the measured step: 2 ranks x micro-batch 2
    assert m["samples_per_s"] == pytest.approx(2 * 2 / m["step_time_s"], rel=1e-6)
    assert r["predicted"]["step_time_s"] > 0 and r["fingerprint"]["torch"]
    assert [s.id for s in Store(db).query() if s.kind == "bench"][:1] == [r["id"]]


def test_bench_run_that_fails_exits_1_and_is_stored(db, bench):
    res = cli("bench", *TINY, "--strategies", "ddp", "--timeout-s", "0.5", "--db", db, "--json")
    assert res.exit_code == 1, res.output
    [r] = json.loads(res.stdout)
    assert r["status"] != "ok" and "failed:" in res.stderr
    assert any(s.id == r["id"] and s.status == r["status"] for s in Store(db).query())


def test_ceiling_with_a_memory_limit_that_nothing_fits_exits_1(ceiling):
    assert ceiling.exit_code == 1, ceiling.output
    data = json.loads(ceiling.stdout)
    assert data["ceiling"] == 0 and data["predicted"] == 0
    assert data["trials"] == [[1, "oom"]]  # the limit reached the workers: micro-batch 1 ran out, once


def test_ceiling_refuses_a_limit_of_zero_before_any_launch(db):
    before = len(Store(db).query())
    res = cli("ceiling", *TINY, "--memory-limit", "0", "--db", db)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "--memory-limit" in res.output
    assert len(Store(db).query()) == before


def test_tune_runs_its_grid_and_stores_what_it_measured(tune, db):
    assert tune.exit_code == 0, tune.output
    data = json.loads(tune.stdout)
    assert data["best"]["strategy"] == "fsdp_full_shard" and data["best"]["micro_batch"] == 2
    stored = [r for r in Store(db).query() if r.strategy == "fsdp_full_shard" and r.kind == "bench"]
    assert len(stored) == 1 and stored[0].status == "ok"
    assert data["runs"] == data["grid_size"] == 1
    assert data["best"]["samples_per_s"] == pytest.approx(stored[0].measured["samples_per_s"])


def drawn(pixels: np.ndarray) -> float:
    """Fraction of pixels that are not (near-)white background."""
    return 1.0 - float(np.all(pixels[..., :3] > 0.98, axis=-1).mean())


def empty_axes(height: int, width: int, path) -> np.ndarray:
    """The same canvas with only a titled, labelled set of axes: what a plot with no data draws."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width / 100, height / 100), dpi=100)
    ax.set_title("an empty plot")
    ax.set_ylabel("samples/s")
    fig.savefig(path)
    plt.close(fig)
    return image.imread(path)


def test_report_draws_the_real_store(tmp_path, db, bench, tune, ceiling):
    out = tmp_path / "report"
    res = cli("report", "--db", db, "--out", str(out))
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["breakdown.png", "scaling.png", "throughput.png"]
    for png in out.iterdir():
        pixels = image.imread(png)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 200, png.name
        baseline = empty_axes(pixels.shape[0], pixels.shape[1], tmp_path / f"empty-{png.name}")
        # data drawn: more than twice the ink of bare axes, and more varied pixels than a blank canvas
        assert drawn(pixels) > 2 * drawn(baseline), png.name
        assert float(np.var(pixels[..., :3])) > float(np.var(baseline[..., :3])), png.name
