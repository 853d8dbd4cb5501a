"""Issue 26 finding 8: uncertainty does not disappear from narrower output. A narrow table keeps
the range and names the columns it dropped; the Markdown table has the terminal's columns; the
scaling plot shades the range; `report` draws the stored run's scenario; measured phases stack
to no more than the measured step. Finding 6: compare sets like against like."""

import json

import pytest
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.report import plots
from prism_strategy.report.plan_table import OPTION_COLUMNS

runner = CliRunner()
LLAMA = ["plan", "--model", "llama-3.1-8b", "--platform", "dgx-h100", "--nodes", "32", "--seq-len", "8192"]


@pytest.mark.parametrize("columns", [80, 90])
def test_a_narrow_table_keeps_the_range_and_names_what_it_dropped(columns):
    r = runner.invoke(app, LLAMA, env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(x.rstrip()) <= columns for x in lines)
    header = next(x for x in lines if x.startswith("strategy"))
    assert " range " in header and "samples/s" in header
    flat = " ".join(r.stdout.split())
    said = flat.split(f"not shown at {columns} columns: ")[1].split(" (a wider terminal")[0]
    missing = [c.header for c in OPTION_COLUMNS if c.header not in header]
    assert missing and said.split(", ") == sorted(
        missing, key=lambda h: -next(c.drop for c in OPTION_COLUMNS if c.header == h)
    )


def test_the_markdown_table_has_every_column_of_the_terminal(tmp_path):
    md = tmp_path / "plan.md"
    r = runner.invoke(app, [*LLAMA, "--markdown", str(md)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    head = next(x for x in md.read_text().splitlines() if x.startswith("| strategy |"))
    assert [h.strip() for h in head.strip("|").split("|")] == [c.header for c in OPTION_COLUMNS]
    row = next(x for x in md.read_text().splitlines() if x.startswith("| **"))
    assert "/+" in row  # the pick's range, as the terminal prints it (-a/+b%)


@pytest.fixture
def axes(monkeypatch):
    kept = []
    save = plots._save

    def keep(fig, path):
        ax = fig.axes[0]
        kept.append((path.name, ax.get_title(), len(ax.lines), len(ax.collections)))
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return kept


def test_the_scaling_plot_shades_each_curves_range(tmp_path, axes):
    r = runner.invoke(
        app,
        [*LLAMA[:6], "1", "--seq-len", "2048", "--sweep-nodes", "1,2,4", "--markdown", str(tmp_path / "p.md")],
    )
    assert r.exit_code == 0, r.output
    [(_, _, lines, bands)] = axes
    assert lines >= 1 and bands == lines


def test_report_draws_the_stored_runs_scenario_not_a_default(tmp_path, axes):
    """`report`'s scaling.png showed qwen3-0.6b on Aurora whatever the store held."""
    db = str(tmp_path / "r.db")
    assert runner.invoke(app, ["results", "import", "--published", "cuda-published", "--db", db]).exit_code == 0
    r = runner.invoke(app, ["report", "--db", db, "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    rows = json.loads(runner.invoke(app, ["compare", "--db", db, "--json"]).stdout)
    latest = max(
        (x for x in rows if x["kind"] == "bench" and x["measured"].get("samples_per_s")), key=lambda x: x["id"]
    )
    title = next(t for name, t, *_ in axes if name == "scaling.png")
    assert latest["platform"] in title and "aurora" not in title and "qwen3-0.6b" not in title
    assert title.startswith("predicted scaling (uncalibrated)")  # no calibration in this test's cache
    assert f"stored run #{latest['id']}" in r.stdout


def test_report_without_stored_runs_or_flags_is_bad_input(tmp_path):
    from prism_strategy.bench.results.store import Store

    db = tmp_path / "r.db"
    Store(db)._run(lambda con: None)
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 2 and "--model and --platform" in r.output and not (tmp_path / "rep").exists()


def test_measured_phases_stack_to_no_more_than_the_measured_step():
    overlapping = {"forward": 0.4, "backward": 0.9, "optimizer": 0.2, "step_time": 1.2}  # timers overlap
    scale = plots.phase_scale(overlapping)
    stacked = sum(plots._phase(overlapping, k, scale) for k, _ in plots.MEASURED)
    assert scale < 1 and stacked == pytest.approx(1.2)
    apart = {"forward": 0.3, "backward": 0.6, "optimizer": 0.1, "step_time": 1.2}
    assert plots.phase_scale(apart) == 1.0
    assert sum(plots._phase(apart, k) for k, _ in plots.MEASURED) == pytest.approx(1.2)


def test_compare_sets_allocated_beside_allocated_and_reserved_beside_reserved(tmp_path):
    """Finding 6: the predicted allocated + reserve stood under 'reserved GiB'. C6-b2 reported both
    counters: each is set beside the plan's figure of that counter."""
    from prism_strategy.bench.importers.published_records import import_published
    from prism_strategy.bench.results.compare import compare
    from prism_strategy.bench.results.store import Store
    from prism_strategy.inputs.stored import scenario_from_row
    from prism_strategy.planning.planner import evaluate
    from prism_strategy.specs.presets import load_platform
    from prism_strategy.strategies import get_strategy

    store = Store(tmp_path / "r.db")
    import_published("aurora-prism", store)
    c6 = next(r for r in compare(store.query()) if r["record"] == "C6-b2")
    o = evaluate(scenario_from_row(c6["config"], load_platform(c6["platform"])), get_strategy(c6["strategy"]))
    assert c6["predicted"]["alloc_gib"] == pytest.approx(o.memory_runtime["memory_allocated_gib"], abs=1e-3)
    assert c6["predicted"]["reserved_gib"] == pytest.approx(o.memory_runtime["memory_reserved_gib"], abs=1e-3)
    assert c6["predicted"]["reserved_gib"] > c6["predicted"]["alloc_gib"]
