"""StepMonitor and the fault injector ending a process (moved from tests/unit/runtime/: each starts
one): the watchdog exits a hung rank with HANG_EXIT_CODE after its timeout and writes the hang
report; the `kill` fault is a SIGKILL in forward of its step, before the step's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prism_strategy.runtime.monitor import HANG_EXIT_CODE

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.distributed


def test_hang_exits_the_process_with_the_hang_code(tmp_path):
    script = textwrap.dedent(f"""
        import time
        from prism_strategy.runtime.monitor import StepMonitor
        mon = StepMonitor({str(tmp_path)!r}, hang_timeout_s=1.0)
        with mon.step():
            with mon.phase("forward"):
                time.sleep(60)
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for k in ("RANK", "WORLD_SIZE"):
        env.pop(k, None)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == HANG_EXIT_CODE, proc.stderr
    rep = json.loads((tmp_path / "hang_report.json").read_text())
    # it waited out the timeout before firing (a lower bound holds on a loaded host; how soon after
    # the timeout it fires is the watchdog tick's, not a test's to time)
    assert rep["written"] - rep["per_rank"]["0"]["last_progress"] >= 1.0
    assert "hang: rank 0 saw no progress" in proc.stderr
    assert json.loads((tmp_path / "hang_report.json").read_text())["phase"] == "forward"
    assert not (tmp_path / "stacks" / "rank0.gil_stall.txt").exists()


def test_kill_is_a_sigkill_in_forward_of_its_step(tmp_path):
    code = (
        "import sys; sys.path.insert(0, {ex!r}); import torch; from faults import FaultInjector, FaultSpec\n"
        "m = torch.nn.Linear(2, 2); inj = FaultInjector(FaultSpec(kind='kill', step=1, rank=0), 0).attach(m)\n"
        "inj.set_step(0); m(torch.ones(2)); print('step 0 done', flush=True)\n"
        "inj.set_step(1); m(torch.ones(2)); print('step 1 done', flush=True)\n"
    )
    ex = str(ROOT / "examples")
    res = subprocess.run([sys.executable, "-c", code.format(ex=ex)], capture_output=True, text=True, timeout=120)
    assert res.returncode == -9 and res.stdout == "step 0 done\n", (res.returncode, res.stdout, res.stderr)
