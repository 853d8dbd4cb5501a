"""`results import --format nccl-tests|oneccl-benchmark` and `plan --db`, end to end in-process:
an nccl-tests log for 2 nodes x 8 H100 changes the plan's all-reduce time to what the log
measured at that size (log-log between its two neighbouring rows, computed here from the log's
text), and bad input (a truncated log, a shape the log did not run, a platform without latency
data) exits 2 with one line and stores nothing. The fixtures are constructed
(tests/fixtures/imports/make_collective_fixtures.py), not real runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.results.curves import load_curves
from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.specs.presets import DATA

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "imports"
NCCL, ONECCL = FIX / "all_reduce_perf_2x8_h100.out", FIX / "oneccl_allreduce_2x12_aurora.log"
PLAN = [
    "plan",
    "--model",
    "qwen3-0.6b",
    "--platform",
    "dgx-h100",
    "--nodes",
    "2",
    "--seq-len",
    "1024",
    "--micro-batch",
    "1",
    "--ckpt-freq",
    "0",
    "--json",
]


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _log_rows(path: Path) -> list[tuple[float, float]]:
    """(size B, in-place time s) of every result row, read with str.split."""
    rows = [x.split() for x in path.read_text().splitlines() if x[:1] == " " and x.split()[0].isdigit()]
    return [(float(r[0]), float(r[9]) * 1e-6) for r in rows]


def _ddp_all_reduce(data):
    ddp = next(o for o in data["options"] if o["strategy"] == "ddp")
    c = next(c for c in ddp["collectives"] if c["op"] == "all_reduce")
    return ddp, c, c["seconds_per_step"] / c["calls_per_step"]


def test_imported_nccl_tests_log_prices_the_plans_all_reduce(tmp_path):
    db = str(tmp_path / "r.db")
    res = _cli(
        "results",
        "import",
        str(NCCL),
        "--format",
        "nccl-tests",
        "--platform",
        "dgx-h100",
        "--nodes",
        "2",
        "--db",
        db,
        "--json",
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["points"] == 16 and json.loads(res.stdout)["ranks_per_node"] == 8
    listed = _cli("results", "--curves", "--db", db).stdout.splitlines()
    assert any(x.split()[:5] == ["dgx-h100", "nccl-tests", "all_reduce", "2x8", "1"] for x in listed), listed
    before = json.loads(_cli(*PLAN, "--db", str(tmp_path / "empty.db")).stdout)
    after = json.loads(_cli(*PLAN, "--db", db).stdout)
    _, c, per_call = _ddp_all_reduce(after)
    (b0, t0), (b1, t1) = next(
        (a, b) for a, b in zip(_log_rows(NCCL), _log_rows(NCCL)[1:]) if a[0] <= c["bytes_per_call"] <= b[0]
    )
    w = math.log(c["bytes_per_call"] / b0) / math.log(b1 / b0)
    assert per_call == pytest.approx(t0 * (t1 / t0) ** w, rel=1e-9)
    assert per_call != pytest.approx(_ddp_all_reduce(before)[2], rel=0.01)
    ddp = _ddp_all_reduce(after)[0]
    assert ddp["provenance"]["communication"].startswith(
        "all_reduce(world) measured: nccl-tests all_reduce, 2x8 ranks, "
    )
    # a collective of another shape (FSDP's all-gather) keeps the model's price
    fsdp = [next(o for o in d["options"] if o["strategy"] == "fsdp_full_shard") for d in (before, after)]
    assert fsdp[0]["collectives"] == fsdp[1]["collectives"]


def test_oneccl_benchmark_import_and_reimport_replaces(tmp_path):
    db = str(tmp_path / "r.db")
    args = (
        "results",
        "import",
        str(ONECCL),
        "--format",
        "oneccl-benchmark",
        "--platform",
        "aurora",
        "--nodes",
        "2",
        "--db",
        db,
        "--json",
    )
    first, again = json.loads(_cli(*args).stdout), json.loads(_cli(*args).stdout)
    assert (first["action"], again["action"], first["ranks_per_node"]) == ("added", "replaced", 12)
    (curve,) = load_curves(Store(db), "aurora")
    assert (curve.op, curve.ranks, curve.nodes, len(curve.points)) == ("all_reduce", 24, 2, 9)


def _bad(res, tmp_path, text):
    assert res.exit_code == 2, res.output
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("error: ") and text in res.stderr
    assert load_curves(Store(tmp_path / "r.db"), "dgx-h100") == ()


def test_truncated_log_stores_nothing(tmp_path):
    cut = tmp_path / "all_reduce_perf.out"
    cut.write_text(NCCL.read_text()[:3000])
    res = _cli(
        "results",
        "import",
        str(cut),
        "--format",
        "nccl-tests",
        "--platform",
        "dgx-h100",
        "--nodes",
        "2",
        "--db",
        str(tmp_path / "r.db"),
    )
    _bad(res, tmp_path, f"{cut}:34:")


def test_a_shape_the_log_did_not_run_is_bad_input(tmp_path):
    res = _cli(
        "results",
        "import",
        str(NCCL),
        "--format",
        "nccl-tests",
        "--platform",
        "dgx-h100",
        "--nodes",
        "2",
        "--ranks-per-node",
        "4",
        "--db",
        str(tmp_path / "r.db"),
    )
    _bad(res, tmp_path, "the log ran 16 ranks, not --nodes 2 x --ranks-per-node 4")
    res = _cli(
        "results",
        "import",
        str(NCCL),
        "--format",
        "nccl-tests",
        "--platform",
        "dgx-h100",
        "--nodes",
        "4",
        "--db",
        str(tmp_path / "r.db"),
    )
    _bad(res, tmp_path, "ran on 2 hosts (h100-a017, h100-a018), not --nodes 4")


def test_a_platform_without_a_fact_its_comm_model_reads_is_bad_input(tmp_path):
    """NCCL's model reads nvlink_links (inter_latency_us it does not: issue #26 finding 4)."""
    text = (DATA / "platforms" / "dgx-h100.toml").read_text()
    no_latency = tmp_path / "no-nvlink.toml"
    no_latency.write_text("\n".join(x for x in text.splitlines() if not x.startswith("nvlink_links")))
    res = _cli(
        "results",
        "import",
        str(NCCL),
        "--format",
        "nccl-tests",
        "--platform",
        str(no_latency),
        "--nodes",
        "2",
        "--db",
        str(tmp_path / "r.db"),
    )
    _bad(res, tmp_path, "nvlink_links")
    res = _cli("plan", "--platform", str(no_latency), "--model", "tiny-llama")
    assert res.exit_code == 2 and "nvlink_links" in res.stderr and res.stderr.count("\n") == 1
