"""Issue #26 finding 11: an nccl-tests log whose file name and content name no collective is
imported with `--collective` (a log that names another is refused), and plain `results` lists
the stored collective points beside the runs."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app

LOG = Path(__file__).parents[1] / "fixtures" / "imports" / "all_reduce_perf_2x8_h100.out"


def _cli(*args):
    return CliRunner().invoke(app, list(args))


def _unnamed(tmp_path) -> Path:
    f = tmp_path / "h100-run-3.txt"  # neither the name nor (older nccl-tests) the log says which collective
    f.write_text("".join(x for x in LOG.read_text().splitlines(True) if "Collective test" not in x))
    return f


def test_unnamed_nccl_tests_log_needs_and_takes_collective(tmp_path):
    db, f = str(tmp_path / "r.db"), _unnamed(tmp_path)
    args = ("results", "import", str(f), "--format", "nccl-tests", "--platform", "dgx-h100", "--nodes", "2")
    res = _cli(*args, "--db", db)
    assert res.exit_code == 2 and "--collective" in res.output and len(res.output.strip().splitlines()) == 1
    res = _cli(*args, "--collective", "all_reduce", "--db", db, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["points"] == 16


def test_collective_that_contradicts_the_log_is_refused(tmp_path):
    args = ("results", "import", str(LOG), "--platform", "dgx-h100", "--nodes", "2", "--collective", "all_gather")
    res = _cli(*args, "--db", str(tmp_path / "r.db"))
    assert res.exit_code == 2 and "not --collective all_gather" in res.output


def test_plain_results_lists_stored_collective_points(tmp_path):
    db = str(tmp_path / "r.db")
    res = _cli("results", "import", str(LOG), "--platform", "dgx-h100", "--nodes", "2", "--db", db)
    assert res.exit_code == 0, res.output
    out = CliRunner().invoke(app, ["results", "--db", db], env={"COLUMNS": "100"}).output
    assert any(x.split()[:5] == ["dgx-h100", "nccl-tests", "all_reduce", "2x8", "1"] for x in out.splitlines()), out
    listed = json.loads(_cli("results", "--db", db, "--json").stdout)
    assert listed["curves"] and listed["curves"][0]["op"] == "all_reduce"
