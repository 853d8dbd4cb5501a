"""`analyze --runs`: runs of one study with bimodal step times or a backward that grew mid-run are
flagged and named for a rerun; steady runs are not."""

from __future__ import annotations

import json
import random

import numpy as np
from typer.testing import CliRunner

from prism_strategy.cli import app
from prism_strategy.diagnose.runs import bimodal

CLI = CliRunner()


def write_run(folder, phases_of, steps=40, ranks=2):
    folder.mkdir()
    rng = random.Random(str(folder.name))
    for r in range(ranks):
        lines = [json.dumps({"kind": "meta", "rank": r, "world_size": ranks, "t0": 0.0})]
        for s in range(steps):
            ph = {k: v * rng.uniform(0.97, 1.03) for k, v in phases_of(s).items()}
            lines.append(json.dumps({"kind": "step", "step": s, "rank": r, "step_s": sum(ph.values()), "phases": ph}))
        lines.append(json.dumps({"kind": "close", "rank": r, "steps": steps}))
        (folder / f"rank{r}.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder)


def steady(s):
    return {"data": 0.01, "forward": 0.1, "backward": 0.3, "optimizer": 0.05}


def two_modes(s):  # every third step waits 1 s for its data (a slow filesystem now and then)
    return {**steady(s), "data": 1.0 if s % 3 == 0 else 0.01}


def grows(s):  # the backward doubles from step 20 (below the collapse detector's 3x)
    return {**steady(s), "backward": 0.6 if s >= 20 else 0.3}


def test_bimodal_needs_two_clean_modes():
    rng = np.random.default_rng(0)
    one = rng.normal(1.0, 0.05, 60)
    assert bimodal(one) is None
    two = np.concatenate([rng.normal(1.0, 0.05, 40), rng.normal(3.0, 0.1, 20)])
    b = bimodal(two)
    assert b is not None and abs(b["fast_s"] - 1.0) < 0.05 and abs(b["slow_s"] - 3.0) < 0.1
    assert abs(b["slow_share"] - 1 / 3) < 0.02
    assert bimodal(np.concatenate([one, [5.0]])) is None  # one outlier is not a mode


def test_runs_flags_bimodal_and_grown_runs_and_names_them(tmp_path):
    paths = [write_run(tmp_path / n, f) for n, f in (("a", steady), ("b", two_modes), ("c", grows))]
    out = CLI.invoke(app, ["analyze", "--runs", *paths, "--json"])
    assert out.exit_code == 1, out.output
    rep = json.loads(out.output)
    assert rep["rerun"] == paths[1:]
    by = {r["path"]: r for r in rep["runs"]}
    assert by[paths[0]]["flags"] == {} and set(by[paths[1]]["flags"]) == {"bimodal"}
    assert 1.9 <= by[paths[2]]["flags"]["backward_grew"]["factor"] <= 2.1
    text = CLI.invoke(app, ["analyze", "--runs", *paths]).output
    assert "rerun before comparing:" in text and all(len(line) <= 100 for line in text.splitlines())


def test_steady_runs_pass_and_one_run_is_bad_input(tmp_path):
    paths = [write_run(tmp_path / n, steady) for n in ("a", "b")]
    out = CLI.invoke(app, ["analyze", "--runs", *paths])
    assert out.exit_code == 0 and "every run is steady" in out.output, out.output
    one = CLI.invoke(app, ["analyze", "--runs", paths[0]])
    assert one.exit_code == 2 and "two or more" in one.output and "Traceback" not in one.output
