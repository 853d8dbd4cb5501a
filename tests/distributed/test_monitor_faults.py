"""StepMonitor under torchrun: 4 ranks, real gloo process group, DDP, injected faults.

Five launches: one runs clean x3, collapse, slow rank 2 (compute, then waiting in a sleep, then
a slow data phase) and input skew one after another in the same process group (saves process
starts); one hangs rank 2 before a collective; one SIGKILLs rank 2 mid-step; and two run the
collapse forensics' scenarios under HSDP on a 2 x 2 mesh, the collective ones and the host ones
(monitor_worker.py --hsdp; two, so neither passes a minute; the all-ranks reduce-scatter collapse
runs through examples/train.py in test_example_train.py). The capture
is on (StepMonitor's default) in all of them: the straggler, hang and kill verdicts are read with it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from prism_strategy.analysis.detect import DetectConfig
from prism_strategy.cli import app
from prism_strategy.diagnose.analyze import analyze
from prism_strategy.runtime.monitor import HANG_EXIT_CODE

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("monitor_worker.py")
CFG = DetectConfig(warmup_skip=2, warmup_steps=5)
SCENARIOS = ("clean", "clean", "clean", "collapse", "slow-rank", "input-skew", "slow-wait", "slow-data")
HANG_TIMEOUT_S = 5.0
HANG_STEP = 5
KILL_STEP = 6
FAULT_STEP = 7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(out: Path, *args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "LOCAL_", "WORLD_SIZE", "MASTER_"))}
    env.update(
        OMP_NUM_THREADS="1",
        TORCH_FR_BUFFER_SIZE="2000",
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]),
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "4",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(_free_port()),
        str(WORKER),
        str(out),
        *args,
    ]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # only the session this test started
        output, _ = proc.communicate()
        raise AssertionError(f"torchrun timed out after {timeout}s:\n{output[-4000:]}") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, output, "")


def online_events(run_dir: Path) -> list[dict]:
    out = []
    for f in sorted(run_dir.glob("rank*.jsonl")):
        out += [r for r in map(json.loads, f.read_text().splitlines()) if r.get("kind") == "event"]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("monitor_runs")
    res = torchrun(out, "--scenarios", ",".join(SCENARIOS), "--steps", "20", "--fault-step", str(FAULT_STEP))
    assert res.returncode == 0, res.stdout[-4000:]
    return {f"{i}_{name}": out / f"{i}_{name}" for i, name in enumerate(SCENARIOS)}


@pytest.mark.parametrize("i", [0, 1, 2])
def test_clean_runs_have_no_event(runs, i):
    run = runs[f"{i}_clean"]
    assert online_events(run) == []
    v = analyze(run, CFG)
    assert v.verdict == "healthy" and v.events == (), v.message
    assert sorted(v.ranks) == [0, 1, 2, 3] and all(s.steps >= 17 for s in v.ranks.values())


def test_collapse_is_collapse_not_straggler(runs):
    run = runs["3_collapse"]
    v = analyze(run, CFG)
    assert v.verdict == "collapse", v.message
    assert "straggler" not in {e.kind for e in v.events}
    ev = v.events[0]
    # the sleep grows 40 ms per step from FAULT_STEP: 3x a 30-100 ms baseline within a few steps
    assert ev.ranks == (0, 1, 2, 3) and FAULT_STEP <= ev.evidence["from_step"] < FAULT_STEP + 8
    assert ev.evidence["backward_factor"] >= 3 and ev.evidence["to_step"] - ev.evidence["from_step"] >= 4
    # rank 0, online. A straggler found online before the collapse is a rank this shared 2-core
    # host starved for a stretch of steps (real by wall time); the collapse is never one
    online = online_events(run)
    assert "collapse" in [e["event"] for e in online]
    assert all(len(e["ranks"]) < 4 for e in online if e["event"] == "straggler")


def test_slow_rank_2_is_the_straggler(runs):
    run = runs["4_slow-rank"]
    v = analyze(run, CFG)
    assert v.verdict == "straggler" and v.events[0].ranks == (2,), v.message
    waits = v.events[0].evidence["collective_wait_s"]
    assert waits["2"] == min(waits.values())  # the straggler waits least in the all-reduce
    assert {e["event"] for e in online_events(run)} == {"straggler"}
    assert all(e["ranks"] == [2] for e in online_events(run))


def test_slow_rank_2_is_a_compute_straggler(runs):
    v = analyze(runs["4_slow-rank"], CFG)
    assert v.verdict == "straggler" and v.evidence["cause"] == "compute", v.message


def test_sleeping_rank_is_a_waiting_straggler(runs):
    """Wall time slow, CPU time not: found by wall time, named waiting (the issue's CPU miss)."""
    run = runs["6_slow-wait"]
    v = analyze(run, CFG)
    assert v.verdict == "straggler" and v.events[0].ranks == (2,), v.message
    assert v.evidence["cause"] == "waiting", v.evidence["causes"]
    cause = v.evidence["causes"]["2"]
    assert cause["extra_wall_s"] >= 0.02 and cause["extra_cpu_s"] < 0.5 * cause["extra_wall_s"]
    assert {e["event"] for e in online_events(run)} == {"straggler"}
    # online, the detector sees a window at a time: on a busy 2-core host another rank may be flagged
    # too, but rank 2 must be named, as waiting
    assert any(e["ranks"] == [2] and e["evidence"]["cause"] == "waiting" for e in online_events(run))


def test_slow_data_phase_is_a_data_loader_straggler(runs):
    v = analyze(runs["7_slow-data"], CFG)
    assert v.verdict == "straggler" and v.events[0].ranks == (2,), v.message
    assert v.evidence["cause"] == "data_loader" and "data loader" in v.message
    assert v.evidence["causes"]["2"]["extra_data_s"] >= 0.02


def test_input_skew(runs):
    v = analyze(runs["5_input-skew"], CFG)
    assert v.verdict == "input_skew", v.message


def test_summary_names_fastest_and_slowest_rank(runs):
    recs = [json.loads(x) for x in (runs["4_slow-rank"] / "rank0.jsonl").read_text().splitlines()]
    summaries = [r for r in recs if r["kind"] == "summary"]
    assert len(summaries) == 4 and all(s["ranks"] == 4 and s["measure"] == "wall" for s in summaries)
    # by wall time; the first window holds the warm-up steps, noisy on a busy 2-core host
    # over the detector's own threshold (the burn is 3x the others' local work on an idle host; a
    # busy one shrinks the ratio, never below what the detector needs to call it)
    ratio = DetectConfig().straggler_ratio
    assert all(s["slowest_rank"] == 2 and s["straggler_ratio"] > ratio for s in summaries[1:]), summaries


def test_rank_killed_mid_step_is_incomplete(tmp_path):
    """SIGKILL on rank 2 in its forward of step KILL_STEP: the flushed records survive, no close."""
    res = torchrun(tmp_path, "--scenarios", "kill", "--steps", "20", "--fault-step", str(KILL_STEP))
    assert res.returncode != 0, res.stdout[-4000:]
    run = tmp_path / "0_kill"
    v = analyze(run, CFG)
    assert v.verdict == "incomplete" and v.events[0].ranks == (0, 1, 2, 3), v.message
    last = v.events[0].evidence["last_step"]
    assert last["2"] == KILL_STEP - 1  # killed before its step KILL_STEP was recorded
    assert all(KILL_STEP - 1 <= last[r] <= KILL_STEP for r in "013"), last
    assert f"rank 2 after step {KILL_STEP - 1}" in v.message
    out = CliRunner().invoke(app, ["analyze", str(run)])
    assert out.exit_code == 1 and "verdict: incomplete" in out.output, out.output
    assert "rank 2: last step" in out.output and "Traceback" not in out.output


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def hang(tmp_path_factory):
    """One launch whose rank 2 stops before its forward at step HANG_STEP: (result, run dir, seconds)."""
    out = tmp_path_factory.mktemp("hang")
    res = torchrun(
        out,
        "--scenarios",
        "hang",
        "--steps",
        "20",
        "--fault-step",
        str(HANG_STEP),
        "--hang-timeout",
        str(HANG_TIMEOUT_S),
    )
    return res, out / "0_hang"


def test_hang_report_stacks_exit_code_no_orphans(hang):
    res, run = hang
    assert res.returncode != 0 and f"exitcode  : {HANG_EXIT_CODE}" in res.stdout, res.stdout[-4000:]
    rep = json.loads((run / "hang_report.json").read_text())
    assert rep["phase"] == "backward" and rep["step"] == HANG_STEP
    assert rep["ranks_reached"] == [0, 1, 3]
    assert rep["ranks_not_reached"] == {"2": {"step": HANG_STEP, "phase": "forward"}}
    stuck_since = rep["per_rank"]["2"]["last_progress"]
    assert rep["written"] - stuck_since >= HANG_TIMEOUT_S  # it waited the timeout out (no upper bound: load)
    for r in range(4):
        stack = (run / "stacks" / f"rank{r}.txt").read_text()
        assert "monitor_worker.py" in stack
    assert "_pre_forward" in (run / "stacks" / "rank2.txt").read_text()  # where rank 2 is stuck
    v = analyze(run, CFG)
    assert v.verdict == "hang" and v.events[0].ranks == (2,)
    pids = [json.loads((run / f"rank{r}.jsonl").read_text().splitlines()[0])["pid"] for r in range(4)]
    assert not [p for p in pids if _alive(p)], "orphan worker processes"


def test_hang_dumps_a_flight_recorder_that_shows_who_is_behind(hang):
    """With TORCH_FR_BUFFER_SIZE set (torchrun() above), every rank's watchdog writes torch's flight
    recorder (c10d `_dump_fr_trace`, the pickle `torchfrtrace` reads). Rank 2 never entered step
    HANG_STEP's gradient all-reduce, so the default group's last collective it issued comes before
    the last one ranks 0, 1 and 3 issued (and wait in)."""
    import pickle

    import torch._C._distributed_c10d as c10d

    if not hasattr(c10d, "_dump_fr_trace"):
        pytest.skip(f"this torch build ({torch_version()}) has no flight recorder for gloo")
    _, run = hang
    last_seq = {}
    for r in range(4):
        said = json.loads((run / "hang" / f"rank{r}.json").read_text())["flight_recorder"]
        assert said.startswith("written by _dump_fr_trace"), said
        trace = pickle.loads((run / "flight_recorder" / f"fr_trace_rank_{r}").read_bytes())
        default = [e for e in trace["entries"] if e["process_group"][0] == "0" and not e["is_p2p"]]
        assert default and all(e["profiling_name"].startswith("gloo:") for e in default), r
        last_seq[r] = max(e["collective_seq_id"] for e in default)
    assert last_seq[0] == last_seq[1] == last_seq[3] > last_seq[2]


def torch_version() -> str:
    import torch

    return torch.__version__


# -- collapse forensics (two launches: HSDP on 2 x 2, scenarios one after the other) -------------
FX_COLLECTIVE = ("clean-nofx", "clean", "collective-collapse-node")
FX_HOST = ("host-stall", "gc-pause", "kill-capture")  # kill-capture ends its launch: it comes last
FX_FAULT_STEP, FX_KILL_AFTER, FX_STEPS = 10, 2, 22
"""The growing faults add 0.08-0.15 s more per step from FX_FAULT_STEP: the collapse is seen at step
14 and its 5-step capture window (ForensicsConfig.steps) is steps 15-19 (measured); two steps spare."""


def _fx_launch(out: Path, scenarios: tuple[str, ...]) -> tuple[subprocess.CompletedProcess, dict[str, Path]]:
    args = ["--hsdp", "--scenarios", ",".join(scenarios), "--steps", str(FX_STEPS), "--fault-step", str(FX_FAULT_STEP)]
    res = torchrun(out, *args, "--kill-after", str(FX_KILL_AFTER), "--seq", "32", "--batch", "4", timeout=300)
    return res, {name: out / f"{i}_{name}" for i, name in enumerate(scenarios)}


@pytest.fixture(scope="module")
def fx_collective(tmp_path_factory) -> dict[str, Path]:
    res, runs = _fx_launch(tmp_path_factory.mktemp("forensics"), FX_COLLECTIVE)
    assert res.returncode == 0, res.stdout[-4000:]
    return runs


@pytest.fixture(scope="module")
def fx_host(tmp_path_factory) -> dict[str, Path]:
    res, runs = _fx_launch(tmp_path_factory.mktemp("forensics_host"), FX_HOST)
    assert res.returncode != 0  # the last scenario SIGKILLs rank 2
    assert (runs["gc-pause"] / "losses.json").exists(), res.stdout[-4000:]  # every other scenario finished
    return runs


def forensics_of(run: Path) -> dict:
    out = CliRunner().invoke(app, ["analyze", str(run), "--json"])
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output[-3000:]
    return json.loads(out.output)


def test_one_slow_node_is_named(fx_collective):
    v = forensics_of(fx_collective["collective-collapse-node"])
    fx = v["forensics"]
    assert v["verdict"] == "collapse" and "straggler" not in {e["event"] for e in v["events"]}
    assert fx["kind"] == "collective" and fx["op"] == "reduce_scatter", fx.get("message")
    assert fx["where"]["group"] == "node 1" and fx["where"]["ranks"] == [2, 3]
    assert "leaving out node 1" in fx["experiment"]


def test_host_stall_is_host_bound_not_collective(fx_host):
    fx = forensics_of(fx_host["host-stall"])["forensics"]
    assert fx["kind"] == "host" and fx["cause"] == "cpu", (fx.get("message"), fx.get("shares"))


def test_gc_pauses_are_host_bound_gc(fx_host):
    fx = forensics_of(fx_host["gc-pause"])["forensics"]
    assert fx["kind"] == "host" and fx["cause"] == "gc", (fx.get("message"), fx.get("shares"))
    assert any(g.get("name") == "GC pauses" and g["phase"] == "backward" for g in fx["grew"])


def test_the_capture_never_changes_the_loss(fx_collective):
    """Same seed, with the baseline capture on (steps 2-6) and with no capture at all."""
    plain = json.loads((fx_collective["clean-nofx"] / "losses.json").read_text())
    captured = json.loads((fx_collective["clean"] / "losses.json").read_text())
    assert len(plain) == FX_STEPS and captured == plain
    recs = [json.loads(x) for x in (fx_collective["clean"] / "rank0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if r["kind"] == "forensic"] == [2, 3, 4, 5, 6]
    assert analyze(fx_collective["clean"], CFG).verdict == "healthy"


def test_a_run_killed_mid_capture_still_analyses(fx_host):
    run = fx_host["kill-capture"]
    v = analyze(run, CFG)
    assert v.verdict == "incomplete" and v.forensics["kind"] == "collective", v.forensics
    rank2 = [json.loads(x) for x in (run / "rank2.jsonl").read_text().splitlines() if x.strip()]
    captured = [r["step"] for r in rank2 if r.get("kind") == "forensic" and r["window"] == "collapse"]
    last_step = max(r["step"] for r in rank2 if r.get("kind") == "step")
    # killed in its forward after 2 captured steps: both written, read back, nothing after them
    assert len(captured) == FX_KILL_AFTER and captured[-1] == last_step, (captured, last_step)
    win = v.forensics["windows"]["collapse"]
    assert win[0] == captured[0] and win[1] >= captured[-1]
