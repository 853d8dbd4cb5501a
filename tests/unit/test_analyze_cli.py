"""`prism-strategy analyze`: output, --json contract, --plot PNG, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from prism_strategy.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
runner = CliRunner()


def test_healthy_exits_0():
    res = runner.invoke(app, ["analyze", str(FIXTURES / "prism_healthy")])
    assert res.exit_code == 0, res.output
    assert "verdict: healthy" in res.output


def test_collapse_json_contract_and_exit_1():
    res = runner.invoke(app, ["analyze", str(FIXTURES / "prism_collapse"), "--json"])
    assert res.exit_code == 1, res.output
    data = json.loads(res.output)
    assert set(data) >= {"verdict", "events", "ranks", "evidence"}
    assert data["verdict"] == "collapse"
    assert data["events"][0]["event"] == "collapse" and data["events"][0]["ranks"] == [0, 1, 2, 3]
    assert data["evidence"]["from_step"] in (20, 21) and data["evidence"]["backward_factor"] > 5


def test_straggler_names_the_rank():
    res = runner.invoke(app, ["analyze", str(FIXTURES / "prism_straggler" / "perf.jsonl")])
    assert res.exit_code == 1
    assert "verdict: straggler" in res.output and "rank(s) 2" in res.output


def test_plot_writes_png(tmp_path):
    png = tmp_path / "timeline.png"
    res = runner.invoke(app, ["analyze", str(FIXTURES / "prism_collapse"), "--plot", str(png)])
    assert res.exit_code == 1, res.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_several_paths_are_read_together():
    res = runner.invoke(app, ["analyze", str(FIXTURES / "prism_healthy"), str(FIXTURES / "prism_collapse"), "--json"])
    assert len(json.loads(res.output)["sources"]) == 2


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (["analyze", str(tmp_path / "missing")], ["analyze", str(tmp_path)],
                 ["analyze", str(FIXTURES / "prism_collapse"), "--plot", str(tmp_path / "no" / "x.png")]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.strip().startswith("error:") and len(res.output.strip().splitlines()) == 1
        assert "Traceback" not in res.output
    (tmp_path / "rank0.jsonl").write_text('{"kind": "step"\n')
    res = runner.invoke(app, ["analyze", str(tmp_path)])
    assert res.exit_code == 2 and "rank0.jsonl:1" in res.output


def test_output_is_readable_in_100_columns():
    for name in ("prism_collapse", "prism_straggler", "prism_healthy"):
        res = runner.invoke(app, ["analyze", str(FIXTURES / name)])
        lines = res.output.splitlines()
        assert max(map(len, lines)) <= 100, name
        assert not any(ch in res.output for ch in ("{", "}", "': ")), name  # sentences, not dicts


def test_collapse_shows_before_and_after_and_one_unit_per_table():
    out = runner.invoke(app, ["analyze", str(FIXTURES / "prism_collapse")]).output
    assert "backward 1.00 s -> 12.0 s" in out and "forward 310 ms -> 309 ms" in out
    table = out[out.index("per rank: medians"):]
    assert "in s" in table.splitlines()[0] and "12.1" in table and "12.1s" not in out


def test_step_counts_agree_between_headline_and_table():
    out = runner.invoke(app, ["analyze", str(FIXTURES / "prism_healthy")]).output
    assert "in 27 steps (steps 3-29; the first 3 are warm-up)" in out.replace("\n  ", " ")
    assert "medians over steps 3-29, in ms" in out
    rows = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert rows and all(ln.split("│")[2].strip() == "27" for ln in rows)


def test_straggler_evidence_names_the_cause():
    out = runner.invoke(app, ["analyze", str(FIXTURES / "prism_straggler")]).output
    assert "cause: compute, by wall time" in out and "no CPU time was recorded" in out
    assert "rank 2 waits 552 ms in backward, the others 791 ms" in out
