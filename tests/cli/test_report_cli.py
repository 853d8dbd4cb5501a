"""`report`: a store with no measured runs says so and draws no empty axes; every plot names its
scenario; the breakdown shows the communication share. `tune` and `ceiling` print tables."""

import pytest
from typer.testing import CliRunner

from prism_strategy.bench.results.store import Store
from prism_strategy.cli import app
from prism_strategy.report import plots
from prism_strategy.report.bench_tables import ceiling_lines, tune_lines

runner = CliRunner()


@pytest.fixture
def figures(monkeypatch):
    """Every figure report draws, kept open to read its titles and labels (and still written)."""
    kept = []
    save = plots._save

    def keep(fig, path):
        kept.append(
            (
                path.name,
                fig.axes[0].get_title(),
                [t.get_text() for t in fig.axes[0].get_xticklabels()],
                fig.axes[0].get_legend_handles_labels()[1],
                [t.get_text() for t in fig.axes[0].texts],
            )
        )
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return kept


def test_report_on_a_store_without_measured_runs_says_so(tmp_path, figures):
    db = tmp_path / "r.db"
    Store(db)._run(lambda con: None)
    r = runner.invoke(
        app,
        ["report", "--db", str(db), "--out", str(tmp_path / "rep"), "--model", "qwen3-0.6b", "--platform", "aurora"],
    )
    assert r.exit_code == 0, r.output
    assert "no measured runs in" in r.stdout and sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["scaling.png"]
    [(name, title, *_)] = figures
    assert "qwen3-0.6b" in title and "aurora" in title and "12 ranks" in title


def test_every_plot_names_its_scenario_and_the_breakdown_its_communication(tmp_path, figures):
    db = tmp_path / "r.db"
    assert runner.invoke(app, ["results", "import", "--published", "aurora-prism", "--db", str(db)]).exit_code == 0
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "rep")])
    assert r.exit_code == 0, r.output
    got = {name: rest for name, *rest in figures}
    assert set(got) == {"scaling.png", "throughput.png", "breakdown.png"}
    for name in ("throughput.png", "breakdown.png"):
        title, ticks, legend, texts = got[name]
        assert "aurora" in title and "qwen3-0.6b" in title
        assert all(" ranks x mb " in t and "seq " in t for t in ticks)  # each bar: ranks and micro-batch
    _, _, legend, texts = got["breakdown.png"]
    assert "predicted: communication (exposed)" in legend and any(
        t.startswith("comm ") and t.endswith("%") for t in texts
    )


def test_tune_and_ceiling_print_tables_not_reprs():
    data = {
        "best": {"strategy": "ddp", "micro_batch": 4, "ckpt_freq": 0, "samples_per_s": 12.5},
        "runs": 2,
        "grid_size": 6,
        "stop_reason": "no remaining candidate can beat 12.50 samples/s",
        "measured": [
            {
                "strategy": "ddp",
                "micro_batch": 4,
                "ckpt_freq": 0,
                "predicted_samples_per_s": 11.0,
                "samples_per_s": 12.5,
            },
            {
                "strategy": "zero2",
                "micro_batch": 4,
                "ckpt_freq": 0,
                "predicted_samples_per_s": 10.0,
                "samples_per_s": 9.0,
            },
        ],
    }
    text = "\n".join(tune_lines(data))
    assert "{" not in text and "'" not in text and "* ddp" in text and "best (measured): ddp at micro-batch 4" in text
    capped = "\n".join(
        ceiling_lines(
            {"strategy": "ddp", "ceiling": 1024, "predicted": 2823, "runs": 1, "trials": [(1024, "ok")]}, 1024
        )
    )
    assert "runs at every size tried up to 1024, the search cap" in capped and "[(" not in capped
    found = "\n".join(
        ceiling_lines(
            {
                "strategy": "ddp",
                "ceiling": 37,
                "predicted": 40,
                "runs": 3,
                "trials": [(40, "oom"), (20, "ok"), (37, "ok")],
            },
            1024,
        )
    )
    assert "largest micro-batch that runs = 37" in found and "40 oom" in found
    assert all(len(line) <= 100 for line in "\n".join((text, capped, found)).splitlines())
