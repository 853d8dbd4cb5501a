"""Issue #26 finding 5: `calibrate` on a few CPU runs fitted intra, inter and per-operation latency
to one value the runs could not tell apart, and reported only an in-sample error. Now a term no
run depends on, or one the runs cannot tell from another, is held at the preset and named; a fit
with fewer rows than free terms is refused (exit 1, nothing written); a written fit reports the
leave-one-out error beside the in-sample one; and a plan using the file names it, its terms and
its date (provenance.calibration)."""

from __future__ import annotations

import json

import pytest
from _bench_rows import cpu_runs
from typer.testing import CliRunner

from prism_strategy.cli import app

runner = CliRunner()


def _store(tmp_path, shapes) -> str:
    db = str(tmp_path / "r.db")
    cpu_runs(db, shapes)
    return db


def _calibrate(db, out):
    return runner.invoke(
        app, ["calibrate", "--platform", "cpu", "--fit", "steps", "--db", db, "--out", str(out), "--json"]
    )


def test_three_cpu_runs_are_refused_naming_what_they_cannot_decide(tmp_path):
    db, out = _store(tmp_path, [("ddp", 2, 1), ("ddp", 4, 2), ("ddp", 4, 4)]), tmp_path / "cal.toml"
    res = _calibrate(db, out)
    assert res.exit_code == 1 and not out.exists()
    report = json.loads(res.stdout)
    assert "3 runs cannot decide" in report["refused"] and len(report["free_terms"]) > 3
    held = {h["term"]: h["why"] for h in report["held_terms"]}
    assert held["inter_bw"] == "no run's step time depends on it"  # one node: nothing crosses a NIC


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cal")
    shapes = [("ddp", 2, 1), ("ddp", 4, 2), ("ddp", 4, 8), ("fsdp_full_shard", 4, 2), ("fsdp_full_shard", 2, 8)]
    db, out = _store(tmp, shapes), tmp / "cal.toml"
    res = _calibrate(db, out)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), out


def test_a_written_fit_reports_leave_one_out_beside_in_sample(written):
    report, _ = written
    loo = report["leave_one_out"]
    assert len(loo["per_run"]) == report["runs"] and loo["step_time_median"] >= 0
    assert "inter_bw" in {h["term"] for h in report["held_terms"]}
    assert "inter_bw" not in report["free_terms"]


def test_a_plan_with_the_calibration_names_file_terms_and_date(written):
    report, out = written
    res = runner.invoke(
        app, ["plan", "--model", "tiny-llama", "--platform", "cpu", "--calibration", str(out), "--json"]
    )
    assert res.exit_code == 0, res.output
    provenance = json.loads(res.stdout)["options"][0]["provenance"]
    note = provenance["calibration"]
    assert "uncalibrated" not in provenance["range"]
    assert str(out) in note and "2026-12-01" in note
    assert all(t in note for t in report["free_terms"]) and "inter_bw" not in note
