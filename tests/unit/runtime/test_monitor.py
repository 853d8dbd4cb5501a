"""StepMonitor in one process (no process group): records, detection, watchdog, device-event path."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest
from _monitor_fakes import FakeDevice, lines

from prism_strategy.analysis.detect import FIELDS, DetectConfig
from prism_strategy.runtime.monitor import HANG_EXIT_CODE, StepMonitor
from prism_strategy.runtime.monitor_state import StepHistory
from prism_strategy.runtime.watchdog import merge_reports

FAST = DetectConfig(warmup_skip=1, warmup_steps=4, collapse_steps=3)


def run_loop(mon: StepMonitor, steps: int, bwd=lambda i: 0.0, tokens=lambda i: 64) -> None:
    for i in range(steps):
        with mon.step(samples=4, tokens=tokens(i)):
            with mon.phase("forward"):
                time.sleep(0.002)
            with mon.phase("backward"):
                time.sleep(0.002 + bwd(i))
            with mon.phase("optimizer"):
                pass
    mon.close()


def test_constructor_has_no_side_effects(tmp_path):
    StepMonitor(tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_records_phases_data_gap_and_summary(tmp_path):
    mon = StepMonitor(tmp_path, ctx=SimpleNamespace(rank=0, world_size=1), summary_every=3, hang_timeout_s=None)
    run_loop(mon, 7)
    recs = lines(tmp_path / "rank0.jsonl")
    kinds = [r["kind"] for r in recs]
    assert kinds[0] == "meta" and kinds[-1] == "close" and kinds.count("step") == 7
    assert kinds.count("summary") == 2
    steps = [r for r in recs if r["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(7))
    assert {"forward", "backward", "optimizer"} <= set(steps[0]["phases"]) and "data" not in steps[0]["phases"]
    assert "data" in steps[1]["phases"] and steps[1]["phases"]["forward"] >= 0.002
    assert steps[1]["samples"] == 4 and steps[1]["tokens"] == 64 and steps[1]["peak_mem_bytes"] > 0
    assert steps[3].get("monitor_s", 0) > 0  # the step after a summary carries the monitor's own time
    summ = next(r for r in recs if r["kind"] == "summary")
    assert summ["fastest_rank"] == summ["slowest_rank"] == 0 and summ["straggler_ratio"] == 1.0


def test_ctx_none_reads_launcher_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    mon = StepMonitor(tmp_path, hang_timeout_s=None)
    run_loop(mon, 1)
    meta = lines(tmp_path / "rank3.jsonl")[0]
    assert meta["rank"] == 3 and meta["world_size"] == 4 and meta["gather"] is False


def test_online_collapse_from_local_rank(tmp_path, caplog):
    mon = StepMonitor(tmp_path, summary_every=5, detect=FAST, hang_timeout_s=None)
    with caplog.at_level("WARNING", logger="prism_strategy.monitor"):
        run_loop(mon, 15, bwd=lambda i: 0.03 if i >= 6 else 0.0)
    assert [e.kind for e in mon.events] == ["collapse"]
    ev = [r for r in lines(tmp_path / "rank0.jsonl") if r["kind"] == "event"]
    assert ev[0]["event"] == "collapse" and ev[0]["source"] == "online" and ev[0]["evidence"]["from_step"] == 6
    assert "collapse" in caplog.text


def test_clean_loop_has_no_event(tmp_path):
    mon = StepMonitor(tmp_path, summary_every=5, detect=FAST, hang_timeout_s=None)
    run_loop(mon, 15)
    assert mon.events == []


def test_exception_in_step_is_recorded(tmp_path):
    mon = StepMonitor(tmp_path, hang_timeout_s=None)
    with pytest.raises(RuntimeError):
        with mon.step():
            raise RuntimeError("boom")
    mon.close()
    assert lines(tmp_path / "rank0.jsonl")[1]["error"] == "RuntimeError"


def test_device_event_path_resolves_late_but_completely(tmp_path):
    dev = FakeDevice()
    mon = StepMonitor(tmp_path, hang_timeout_s=None, event_factory=dev.event, summary_every=100)
    written = lambda: [r for r in lines(tmp_path / "rank0.jsonl") if r["kind"] == "step"]  # noqa: E731
    for i in range(5):
        with mon.step():
            with mon.phase("forward"):
                dev.t_ms += 3.0 + i  # the device spends 3 + i ms in this step's forward
            dev.t_ms += 1.0
        if i == 0:
            assert written() == []  # its events are not complete: no record yet, and no sync forced
        if i == 1:
            dev.done_up_to = dev.t_ms  # the device catches up: the next step's end writes both
    assert [s["step"] for s in written()] == [0, 1, 2]  # at most 2 wait: step 4's end forced step 2 out
    mon.close()  # close waits for every pending event
    steps = written()
    assert [s["step"] for s in steps] == list(range(5))
    assert [s["phases"]["forward"] for s in steps] == pytest.approx([0.003, 0.004, 0.005, 0.006, 0.007])


def test_history_keeps_baseline_and_recent_window():
    h = StepHistory(keep_first=4, keep_last=6)
    for k in range(10):
        block = np.zeros((2, 3, len(FIELDS)))
        block[:, :, 0] = np.arange(3 * k, 3 * k + 3)
        h.add(block)
    steps = h.series((0, 1)).steps.tolist()
    assert steps[:4] == [0, 1, 2, 3] and steps[-1] == 29 and 4 + 6 <= len(steps) <= 4 + 6 + 3


def test_watchdog_fires_reports_and_calls_exit(tmp_path):
    codes: list[int] = []
    mon = StepMonitor(tmp_path, hang_timeout_s=0.4, exit_fn=codes.append)
    with mon.step():
        with mon.phase("forward"):
            pass
        with mon.phase("backward"):
            deadline = time.monotonic() + 5
            while not codes and time.monotonic() < deadline:
                time.sleep(0.05)
    mon.close()
    assert codes == [HANG_EXIT_CODE]
    rep = json.loads((tmp_path / "hang_report.json").read_text())
    assert rep["phase"] == "backward" and rep["step"] == 0 and rep["ranks_reached"] == [0]
    assert "test_watchdog_fires_reports_and_calls_exit" in (tmp_path / "stacks" / "rank0.txt").read_text()
    assert any(r.get("event") == "hang" for r in lines(tmp_path / "rank0.jsonl"))


def test_paused_time_does_not_count(tmp_path):
    """The watchdog's decision at a given monotonic time (no timer raced against a loaded host)."""
    codes: list[int] = []
    mon = StepMonitor(tmp_path, hang_timeout_s=100, exit_fn=codes.append)
    with mon.step():
        pass
    wd, p = mon._watchdog, mon.progress
    assert wd.hung(p.last_mono + 101)  # between steps counts (a stuck data loader is a hang)
    with mon.paused():
        assert not wd.hung(p.last_mono + 1000)  # paused: never
        entered = p.last_mono
    assert p.last_mono >= entered and not wd.hung(p.last_mono + 99)  # counting restarts at the pause's end
    with mon.step():
        pass
    mon.close()
    assert codes == []


def test_merge_reports_names_stuck_phase_and_missing_rank(tmp_path):
    (tmp_path / "heartbeat").mkdir()
    states = {0: (5, "backward", 46), 1: (5, "backward", 46), 2: (5, "forward", 44)}
    for r, (step, phase, seq) in states.items():
        (tmp_path / "heartbeat" / f"rank{r}.json").write_text(json.dumps({"step": step, "phase": phase, "seq": seq}))
    rep = merge_reports(tmp_path, world_size=4)
    assert rep["phase"] == "backward" and rep["ranks_reached"] == [0, 1]
    assert rep["ranks_not_reached"] == {"2": {"step": 5, "phase": "forward"}} and rep["ranks_unknown"] == [3]
