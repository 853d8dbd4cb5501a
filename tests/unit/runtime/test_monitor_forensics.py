"""StepMonitor's collapse capture (runtime/forensics.py): off until a window, K steps of records
then off again (torch.distributed restored, the GC callback removed), a baseline window early and
a collapse window when the signature is seen; phase times come from an injected device queue,
collectives from a real one-rank gloo group (no wall clock asserted)."""

from __future__ import annotations

import gc
import json

import pytest
import torch
import torch.distributed as dist
from _monitor_fakes import FakeDevice, lines

from prism_strategy.analysis.detect import DetectConfig
from prism_strategy.runtime.forensics import OPS, ForensicsConfig
from prism_strategy.runtime.monitor import StepMonitor

CFG = DetectConfig(warmup_skip=2, warmup_steps=5)


@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    for name in OPS:  # whatever a test leaves patched is put back
        if hasattr(dist, name):
            monkeypatch.setattr(dist, name, getattr(dist, name))
    for k in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def forensic(path, kind="forensic"):
    return [r for r in lines(path) if r["kind"] == kind]


def test_baseline_window_records_collectives_gc_allocator_and_env(tmp_path, one_rank_group, monkeypatch):
    monkeypatch.setenv("CCL_ATL_TRANSPORT", "ofi")
    original = dist.all_reduce
    mon = StepMonitor(tmp_path, hang_timeout_s=None, summary_every=100, detect=CFG, forensics=ForensicsConfig(steps=3))
    patched = []
    for step in range(8):
        with mon.step():
            with mon.phase("forward"):
                dist.all_gather_single(torch.empty(64), torch.ones(64))
            with mon.phase("backward"):
                dist.reduce_scatter_single(torch.empty(16), torch.ones(16))
                dist.all_reduce(torch.ones(100))
                dist.all_reduce(torch.ones(10))
                gc.collect(0)  # a youngest-generation pass: gc.callbacks see it as any other, in microseconds
            patched.append(dist.all_reduce is not original)
    mon.close()
    assert patched == [False, False, True, True, True, False, False, False]  # steps 2-4 only
    assert dist.all_reduce is original and not any(getattr(cb, "__self__", None) is mon._fx for cb in gc.callbacks)
    (win,) = forensic(tmp_path / "rank0.jsonl", "forensic_window")
    assert win["window"] == "baseline" and win["from_step"] == 2 and win["env"]["CCL_ATL_TRANSPORT"] == "ofi"
    recs = forensic(tmp_path / "rank0.jsonl")
    assert [r["step"] for r in recs] == [2, 3, 4] and {r["window"] for r in recs} == {"baseline"}
    rows = {(c["op"], c["phase"]): c for c in recs[0]["collectives"]}
    assert set(rows) == {("all_gather", "forward"), ("reduce_scatter", "backward"), ("all_reduce", "backward")}
    ar = rows[("all_reduce", "backward")]
    assert ar["calls"] == 2 and ar["bytes"] == 440 and ar["group"] == "0" and len(ar["host_s"]) == 2
    assert rows[("all_gather", "forward")]["bytes"] == 256 and rows[("all_gather", "forward")]["first_call"] == 0
    assert recs[0]["gc"]["backward"]["count"] >= 1  # the collection in backward, seen by gc.callbacks
    assert recs[0]["allocator"]["available"] is False and "no caching-allocator" in recs[0]["allocator"]["why"]
    assert set(recs[0]["wall"]) == set(recs[0]["cpu"]) == {"forward", "backward"}


def test_no_forensics_patches_nothing(tmp_path, one_rank_group):
    original = dist.reduce_scatter_single
    mon = StepMonitor(tmp_path, hang_timeout_s=None, summary_every=100, detect=CFG, forensics=None)
    for _ in range(6):
        with mon.step():
            with mon.phase("backward"):
                assert dist.reduce_scatter_single is original
    mon.close()
    assert forensic(tmp_path / "rank0.jsonl") == []


def drive(tmp_path, steps, backward_ms):
    """Phase times from an injected device queue: forward 10 ms, backward backward_ms(step)."""
    dev = FakeDevice()
    mon = StepMonitor(
        tmp_path, hang_timeout_s=None, event_factory=dev.event, summary_every=5, detect=CFG,
        forensics=ForensicsConfig(steps=3),
    )  # fmt: skip
    on_disk = {}
    for i in range(steps):
        with mon.step():
            with mon.phase("forward"):
                dev.t_ms += 10
            with mon.phase("backward"):
                dev.t_ms += backward_ms(i)
            dev.done_up_to = dev.t_ms
        on_disk[i] = len(forensic(tmp_path / "rank0.jsonl"))  # flushed at each captured step's end
    mon.close()
    return on_disk


def test_collapse_signature_arms_a_capture_window_at_the_next_sync(tmp_path):
    on_disk = drive(tmp_path, 30, lambda i: 20 if i < 12 else 200)
    wins = forensic(tmp_path / "rank0.jsonl", "forensic_window")
    # 5 hot steps (12-16) are first in a gathered window at step 20's sync: capture steps 20-22
    assert [(w["window"], w["from_step"]) for w in wins] == [("baseline", 2), ("collapse", 20)]
    assert wins[1]["reason"]["collapse_from_step"] == 12
    recs = forensic(tmp_path / "rank0.jsonl")
    assert [(r["window"], r["step"]) for r in recs] == [("baseline", s) for s in (2, 3, 4)] + [
        ("collapse", s) for s in (20, 21, 22)
    ]
    assert on_disk[20] == 4 and on_disk[21] == 5  # written through before the run ends


def test_healthy_run_captures_only_the_baseline(tmp_path):
    drive(tmp_path, 30, lambda i: 20)
    assert [w["window"] for w in forensic(tmp_path / "rank0.jsonl", "forensic_window")] == ["baseline"]


def test_records_are_plain_json(tmp_path, one_rank_group):
    mon = StepMonitor(tmp_path, hang_timeout_s=None, summary_every=100, detect=CFG, forensics=ForensicsConfig(steps=1))
    for _ in range(4):
        with mon.step():
            with mon.phase("backward"):
                dist.all_reduce(torch.ones(4))
    mon.close()
    (rec,) = forensic(tmp_path / "rank0.jsonl")
    assert json.loads(json.dumps(rec)) == rec and rec["calls_not_itemised"] == 0


def test_profile_dir_profiles_the_collapse_windows_first_step_only(tmp_path):
    dev = FakeDevice()
    fx = ForensicsConfig(steps=3, profile_dir=str(tmp_path / "prof"))
    mon = StepMonitor(tmp_path, hang_timeout_s=None, event_factory=dev.event, summary_every=5, detect=CFG, forensics=fx)
    for i in range(24):
        with mon.step():
            with mon.phase("forward"):
                dev.t_ms += 10
            with mon.phase("backward"):
                dev.t_ms += 20 if i < 12 else 200
            dev.done_up_to = dev.t_ms
    mon.close()
    assert [p.name for p in (tmp_path / "prof").iterdir()] == ["profile_rank0_step20.json"]
    assert "traceEvents" in (tmp_path / "prof" / "profile_rank0_step20.json").read_text()[:2000]


def test_ddp_bucket_all_reduces_are_itemised_with_the_hook(tmp_path, one_rank_group):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from prism_strategy.runtime.forensics import register_ddp_hook

    torch.manual_seed(0)
    ddp = DDP(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)))
    register_ddp_hook(ddp)
    mon = StepMonitor(tmp_path, hang_timeout_s=None, summary_every=100, detect=CFG, forensics=ForensicsConfig(steps=2))
    for _ in range(5):
        with mon.step():
            with mon.phase("forward"):
                loss = ddp(torch.randn(4, 8)).sum()
            with mon.phase("backward"):
                loss.backward()
    mon.close()
    recs = forensic(tmp_path / "rank0.jsonl")
    rows = [c for c in recs[0]["collectives"] if c["phase"] == "backward"]
    assert [c["op"] for c in rows] == ["all_reduce"] and rows[0]["async"] is True
    assert rows[0]["bytes"] == 4 * (8 * 8 + 8 + 8 + 1)  # one bucket: every gradient, fp32
    assert len(rows[0]["done_s"]) == rows[0]["calls"]  # completion seen through the future
