"""`prism-strategy results import` and `compare` through typer's CliRunner: exit codes, one-line
errors that name the file and line, nothing stored on bad input, idempotent imports, and compare
rows for imported and published results (provenance, allocated and reserved) within 100 columns."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.inputs.stored import row_values

F = Path(__file__).resolve().parents[1] / "fixtures" / "imports"
A1 = [
    "--model",
    "qwen3-0.6b",
    "--vision",
    "siglip2-base-patch16-224",
    "--platform",
    "aurora",
    "--seq-len",
    "512",
    "--ckpt-freq",
    "1",
    "--precision",
    "bf16-pure",
]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    """Output with the 100-column wrapping undone."""
    return " ".join(text.split())


def test_import_prism_log_then_again_adds_nothing(tmp_path):
    db = tmp_path / "r.db"
    first = invoke("results", "import", F / "prism" / "train.log", *A1, "--db", db)
    assert first.exit_code == 0, first.output
    out = flat(first.output)
    assert "[added]" in out and "kept 17 of 20 windows" in out and "dropped 2 warm-up" in out
    assert "1 outlier(s)" in out and "step 130 at" in out
    assert "mode (train.log:5)" in out and "peak reserved 39.16 GiB" in out
    assert all(len(line) <= 100 for line in first.output.splitlines())
    second = invoke("results", "import", F / "prism" / "train.log", *A1, "--db", db, "--json")
    assert second.exit_code == 0 and json.loads(second.output)["action"] == "unchanged"
    [r] = Store(db).query()
    assert r.provenance == "imported" and r.source.endswith("train.log")
    fixed = invoke("results", "import", F / "prism" / "train.log", *A1, "--nodes", "2", "--db", db, "--json")
    assert json.loads(fixed.output)["action"] == "updated"  # the same log with corrected flags
    [r] = Store(db).query()
    assert (row_values(r.config)["nproc"], row_values(r.config)["ranks_per_node"]) == (12, 6)


@pytest.mark.parametrize(
    "path, where",
    [
        ("prism/malformed.log", "malformed.log:47"),
        ("prism/partial.log", "partial.log:64"),
        ("torchtitan/partial.log", "partial.log:12"),
        ("prism_perf_malformed", "perf.jsonl:6"),
    ],
)
def test_bad_log_exits_2_on_one_line_and_stores_nothing(tmp_path, path, where):
    db = tmp_path / "r.db"
    res = invoke("results", "import", F / path, *A1, "--mode", "e2e", "--strategy", "ddp", "--db", db)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and where in lines[0] and "Traceback" not in res.output
    assert Store(db).query() == []


def test_missing_scenario_field_and_bad_arguments_exit_2(tmp_path):
    db = tmp_path / "r.db"
    res = invoke("results", "import", F / "torchtitan" / "train.log", "--platform", "aurora", "--db", db)
    assert res.exit_code == 2 and "pass --model, --ckpt-freq, --precision" in flat(res.output)  # before reading
    given = ("--platform", "aurora", "--model", "qwen3-0.6b", "--ckpt-freq", "0", "--precision", "bf16-mixed")
    res = invoke("results", "import", F / "torchtitan" / "train.log", *given, "--db", db)
    assert res.exit_code == 2 and "pass --strategy" in flat(res.output)  # what the log might have said; mode: e2e
    res = invoke("results", "import", F / "prism" / "train.log", *A1, "--strategy", "dpp", "--db", db)
    assert res.exit_code == 2 and "dpp" in res.output
    res = invoke("results", "import", "--db", db)
    assert res.exit_code == 2 and "--published" in res.output
    res = invoke("results", "import", "--published", "nowhere", "--db", db)
    assert res.exit_code == 2 and "aurora-prism" in res.output
    assert Store(db).query() == []


def test_published_import_is_idempotent_and_compare_shows_every_source(tmp_path):
    db = tmp_path / "r.db"
    assert invoke("results", "import", F / "prism" / "train.log", *A1, "--db", db).exit_code == 0
    first = invoke("results", "import", "--published", "aurora-prism", "--db", db)
    assert first.exit_code == 0, first.output
    n = len(Store(db).query(provenance="published"))
    assert n > 10 and f"{n} added" in flat(first.output)
    again = invoke("results", "import", "--published", "aurora-prism", "--db", db)
    assert again.exit_code == 0 and f"{n} unchanged" in flat(again.output) and len(Store(db).query()) == n + 1

    res = invoke("compare", "--db", db, "--calibration", "none")
    assert res.exit_code == 0, res.output
    assert all(len(line.rstrip()) <= 100 for line in res.output.splitlines())
    assert "pub A1" in res.output and "import" in res.output
    imported = [line for line in res.output.splitlines() if line.split()[:2] == ["1", "import"]]
    assert any("alloc GiB" in line for line in imported) and any("reserved GiB" in line for line in imported)

    rows = json.loads(invoke("compare", "--db", db, "--calibration", "none", "--json").output)
    by = {(r["provenance"], r["record"]): r for r in rows}
    a1 = by[("published", "A1")]
    assert a1["measured"]["step_time_s"] == pytest.approx(2.5) and a1["sources"]["measured"].startswith("published")
    imp = by[("imported", None)]
    assert set(imp["measured"]) >= {"alloc_gib", "reserved_gib"} and "memory_gib" not in imp["measured"]
    assert imp["predicted"]["reserved_gib"] > imp["predicted"]["alloc_gib"]  # like against like (issue 26, 6)
    assert not any(r["status"] != "ok" for r in rows)  # out-of-memory records are stored, not compared
    listing = invoke("results", "--db", db)
    assert listing.exit_code == 0 and all(len(line.rstrip()) <= 100 for line in listing.output.splitlines())


def test_results_listing_and_export_still_work(tmp_path):
    db = tmp_path / "r.db"
    assert (
        invoke(
            "results",
            "import",
            F / "monitor" / "good",
            "--model",
            "tiny-llama",
            "--mode",
            "e2e",
            "--strategy",
            "ddp",
            "--platform",
            "cpu",
            "--ckpt-freq",
            "0",
            "--precision",
            "fp32",
            "--db",
            db,
        ).exit_code
        == 0
    )
    res = invoke("results", "--db", db, "--export", "json")
    assert res.exit_code == 0
    [row] = json.loads(res.output)
    assert row["provenance"] == "imported" and row["config"]["nproc"] == 2
    assert "provenance" in invoke("results", "--db", db, "--export", "csv").output.splitlines()[0]
