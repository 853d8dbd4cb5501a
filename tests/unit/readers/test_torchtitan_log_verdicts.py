"""analyze on torchtitan logs (issue 36: refused before, "no per-rank phase times"): healthy, an
abrupt end at ^C, a slowdown and a straggler from rank 0's tokens/s per window; the same reader
`results import` uses. Truth: the generator's parameters (tests/fixtures/logs/make_fixtures.py
torchtitan_log: ~5,150 tokens/s, /1.6 from step 201, /1.5 in four windows, a ^C after step 130)
and torchtitan's own end line (torchtitan/trainer.py@b5bcd76: "Training completed")."""

from pathlib import Path

import pytest

from prism_strategy.diagnose.analyze import analyze
from prism_strategy.readers import torchtitan

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"


def _log(case: str) -> Path:
    return LOGS / f"torchtitan_{case}" / "train.log"


def test_a_completed_run_at_steady_tokens_per_second_is_healthy():
    v = analyze(_log("healthy"))
    assert v.verdict == "healthy" and "30 logging windows" in v.message and "StepMonitor" in v.message


def test_a_run_stopped_by_ctrl_c_is_incomplete_at_its_last_step_and_names_the_line():
    v = analyze(_log("ctrl_c"))
    (ev,) = v.events
    assert (v.verdict, ev.step) == ("incomplete", 130)
    assert "`^C`" in ev.message and "train.log:16" in ev.message


def test_the_same_log_without_its_end_line_reads_as_killed_or_running(tmp_path):
    lines = _log("healthy").read_text().splitlines()[:-2]  # no "Sleeping ..." nor "Training completed"
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    (ev,) = analyze(path).events
    assert ev.kind == "incomplete" and "killed" in ev.message and ev.step == 300


def test_a_lasting_drop_in_tokens_per_second_is_a_slowdown_from_its_first_window():
    v = analyze(_log("slowdown"))
    (ev,) = v.events
    assert (v.verdict, ev.step) == ("slowdown", 201)
    assert ev.evidence["ratio"] == pytest.approx(1.6, rel=0.03)  # 1.6x set, +-1% jitter per window


def test_windows_that_are_slow_now_and_then_are_a_straggler_rank_0_cannot_name():
    v = analyze(_log("straggler"))
    (ev,) = v.events
    assert v.verdict == "straggler" and ev.evidence["slow_windows"] == [60, 120, 180, 240]
    assert ev.ranks == () and "StepMonitor" in ev.message


def test_results_import_reads_the_same_windows():
    log = torchtitan.read(_log("ctrl_c"))
    assert [w.last_step for w in log.windows][-1] == 130 and log.windows[0].steps == 1
