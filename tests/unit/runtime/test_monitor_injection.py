"""examples/faults.py: each injector does its fault, on the right rank, from the right step, in the
right phase; read from an injected clock, not timed (wall-clock bounds flake on a loaded host)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from faults import FaultInjector, FaultSpec, add_fault_args, burn, fault_from_args  # noqa: E402


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


class FakeTime:
    """An injected clock: sleep() advances it and records (phase, seconds); burn() records too.
    What a fault does is then read from the record, not timed on a loaded host."""

    def __init__(self) -> None:
        self.now, self.phase = 0.0, "outside"
        self.sleeps: list[tuple[str, float]] = []
        self.burns: list[tuple[str, float]] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append((self.phase, s))
        self.now += s

    def clock(self) -> float:
        return self.now

    def burn(self, s: float, device="cpu") -> int:
        self.burns.append((self.phase, s))
        return 1

    def slept(self, phase: str) -> float:
        return sum(s for ph, s in self.sleeps if ph == phase)


def injector(spec: FaultSpec, rank: int, t: FakeTime) -> FaultInjector:
    return FaultInjector(spec, rank=rank, sleep=t.sleep, clock=t.clock, burn_fn=t.burn)


def fake_step(m: torch.nn.Module, t: FakeTime) -> None:
    t.phase = "forward"
    loss = m(torch.randn(4, 8)).sum()
    t.phase = "backward"
    loss.backward()
    t.phase = "outside"


def test_args_round_trip():
    p = argparse.ArgumentParser()
    add_fault_args(p)
    spec = fault_from_args(
        p.parse_args(["--fault", "slow-rank", "--fault-step", "3", "--fault-rank", "1", "--fault-scale", "0.2"])
    )
    assert spec == FaultSpec(kind="slow-rank", step=3, rank=1, scale=0.2)
    assert fault_from_args(p.parse_args([])).kind == "none"


def test_bad_spec_is_a_value_error():
    with pytest.raises(ValueError, match="unknown fault"):
        FaultSpec(kind="meltdown")
    with pytest.raises(ValueError, match=">= 0"):
        FaultSpec(kind="hang", step=-1)


def test_collapse_sleeps_in_backward_growing_on_every_rank():
    spec = FaultSpec(kind="collapse", step=2, scale=0.02)
    for rank in (0, 3):  # every rank, not one
        t = FakeTime()
        inj, m = injector(spec, rank, t), model()
        inj.attach(m)
        inj.set_step(1)
        fake_step(m, t)
        assert t.sleeps == []  # before the fault step
        for step, want in ((2, 0.02), (3, 0.04), (500, 100 * 0.02)):  # grows by scale per step, capped at 100x
            t.sleeps.clear()
            inj.set_step(step)
            fake_step(m, t)
            assert t.sleeps == [("backward", pytest.approx(want))], (rank, step)
        inj.detach()
        t.sleeps.clear()
        fake_step(m, t)
        assert t.sleeps == []


def test_slow_rank_burns_compute_before_forward_only_on_its_rank():
    spec = FaultSpec(kind="slow-rank", step=0, rank=1, scale=0.03)
    t_slow, t_fast = FakeTime(), FakeTime()
    slow, fast = model(), model()
    injector(spec, 1, t_slow).attach(slow)
    injector(spec, 0, t_fast).attach(fast)
    fake_step(slow, t_slow)
    fake_step(fast, t_fast)
    assert t_slow.burns == [("forward", 0.03)] and t_slow.sleeps == []
    assert t_fast.burns == [] and t_fast.sleeps == []


def test_burn_spends_cpu_time_in_matmuls():
    # burn counts this thread's CPU time on a CPU device, so a busy host cannot shorten its work
    c0 = time.thread_time()
    assert burn(0.02) > 0
    assert time.thread_time() - c0 >= 0.02


def test_hang_blocks_before_forward_of_its_step_only():
    spec = FaultSpec(kind="hang", step=2, rank=0, scale=7.5)
    t = FakeTime()
    inj, m = injector(spec, 0, t), model()
    inj.attach(m)
    inj.set_step(1)
    fake_step(m, t)
    assert t.sleeps == []
    inj.set_step(2)
    fake_step(m, t)
    assert t.slept("forward") == pytest.approx(7.5) and t.slept("backward") == 0.0
    assert all(s <= 1.0 for _, s in t.sleeps)  # wakes every second at most
    t.sleeps.clear()
    inj.set_step(3)  # only its step
    fake_step(m, t)
    assert t.sleeps == []
    t1 = FakeTime()
    other, m1 = injector(spec, 1, t1), model()
    other.attach(m1)
    other.set_step(2)
    fake_step(m1, t1)
    assert t1.sleeps == []


def test_input_skew_lengths_vary_deterministically():
    inj = FaultInjector(FaultSpec(kind="input-skew", step=1, scale=0.25), rank=2)
    assert inj.seq_len(512) == 512  # before the fault step
    got = []
    for s in range(1, 40):
        inj.set_step(s)
        got.append(inj.seq_len(512))
    assert min(got) >= 128 and max(got) <= 512 and len(set(got)) > 10
    again = FaultInjector(inj.spec, rank=2)
    again.set_step(5)
    assert again.seq_len(512) == got[4]


def test_slow_wait_sleeps_wall_time_not_cpu_time_on_its_rank():
    spec = FaultSpec(kind="slow-wait", step=0, rank=1, scale=0.05)
    t_slow, t_fast = FakeTime(), FakeTime()
    slow, fast = model(), model()
    injector(spec, 1, t_slow).attach(slow)
    injector(spec, 0, t_fast).attach(fast)
    fake_step(slow, t_slow)
    fake_step(fast, t_fast)
    assert t_slow.sleeps == [("forward", 0.05)] and t_slow.burns == []  # a sleep: wall time, no CPU time
    assert t_fast.sleeps == [] and t_fast.burns == []


def test_slow_data_sleeps_in_before_batch_only():
    spec = FaultSpec(kind="slow-data", step=2, rank=0, scale=0.05)
    t, t_other = FakeTime(), FakeTime()
    inj, other = injector(spec, 0, t), injector(spec, 1, t_other)
    m = model()
    inj.attach(m)
    for step, want in ((1, []), (2, [("data", 0.05)])):
        t.sleeps.clear()
        inj.set_step(step)
        other.set_step(step)
        t.phase = t_other.phase = "data"
        inj.before_batch()
        other.before_batch()
        assert t.sleeps == want, step
    t.sleeps.clear()
    fake_step(m, t)
    assert t.sleeps == [] and t_other.sleeps == []  # nothing in forward or backward, nothing on rank 1


# -- the collapse forensics' faults: collective-collapse, host-stall, gc-pause ----------------------
@pytest.fixture
def one_rank_group(tmp_path, monkeypatch):
    import torch.distributed as dist

    for name in ("all_reduce", "reduce_scatter_single", "all_gather_single", "all_gather_into_tensor"):
        monkeypatch.setattr(dist, name, getattr(dist, name))
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield dist
    dist.destroy_process_group()


def collectives(dist, t: FakeTime, n_rs: int = 4) -> None:
    t.phase = "backward"
    for _ in range(n_rs):
        dist.reduce_scatter_single(torch.empty(8), torch.ones(8))
    dist.all_reduce(torch.ones(8))
    t.phase = "outside"


def test_collective_collapse_slows_only_its_op_spread_over_the_step_and_growing(one_rank_group):
    dist, t = one_rank_group, FakeTime()
    original = dist.reduce_scatter_single
    inj = FaultInjector(FaultSpec(kind="collective-collapse", step=2, scale=0.1, op="reduce_scatter"), 0, sleep=t.sleep)
    inj.attach(model())
    for step in (0, 1, 2, 3, 50):
        t.sleeps.clear()
        inj.set_step(step)
        collectives(dist, t)
        want = 0.0 if step < 2 else min(0.1 * (step - 1), 1.0)  # scale per step, capped at 10x
        assert sum(s for _, s in t.sleeps) == pytest.approx(want), step
        assert len(t.sleeps) == (0 if step < 2 else 4)  # after each of the 4 reduce-scatters, none after the all-reduce
    inj.detach()
    assert dist.reduce_scatter_single is original


def test_collective_collapse_with_fault_node_slows_that_nodes_ranks_only(one_rank_group):
    spec = FaultSpec(kind="collective-collapse", step=0, rank=3, scale=0.1, op="reduce_scatter", node=True)
    affected = [FaultInjector(spec, r, ranks_per_node=2).affected() for r in range(6)]
    assert affected == [False, False, True, True, False, False]  # rank 3's node is node 1: ranks 2, 3
    assert all(FaultInjector(FaultSpec(kind="collective-collapse"), r, ranks_per_node=2).affected() for r in range(4))


def test_host_stall_burns_cpu_in_backward_and_gc_pause_collects_there():
    t = FakeTime()
    stall = FaultInjector(FaultSpec(kind="host-stall", step=1, scale=0.05), 0, burn_fn=t.burn, sleep=t.sleep)
    m = model()
    stall.attach(m)
    stall.set_step(2)
    fake_step(m, t)
    assert t.burns == [("backward", pytest.approx(0.1))] and t.sleeps == []
    collections = []

    def collect():
        collections.append(t.phase)
        t.now += 0.03  # each full collection takes 30 ms of the injected clock

    g = FaultInjector(FaultSpec(kind="gc-pause", step=0, scale=0.1), 0, clock=t.clock, collect=collect)
    m2 = model()
    g.attach(m2)
    g.set_step(0)
    fake_step(m2, t)
    assert collections == ["backward"] * 4  # 0.1 s of collections: 4 of 30 ms
    assert len(g._garbage) == 200_000  # the kept heap every full collection traverses


def test_new_fault_args_round_trip():
    p = argparse.ArgumentParser()
    add_fault_args(p)
    ns = p.parse_args(
        ["--fault", "collective-collapse", "--fault-op", "all_gather", "--fault-node", "--fault-rank", "1"]
    )
    assert fault_from_args(ns) == FaultSpec(kind="collective-collapse", rank=1, op="all_gather", node=True)
    with pytest.raises(ValueError, match="unknown --fault-op"):
        FaultSpec(kind="collective-collapse", op="broadcast")
