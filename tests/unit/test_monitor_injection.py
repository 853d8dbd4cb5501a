"""examples/faults.py: each injector does its fault, on the right rank, from the right step."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from faults import FaultInjector, FaultSpec, add_fault_args, fault_from_args  # noqa: E402


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))


def timed_step(m: torch.nn.Module) -> tuple[float, float]:
    x = torch.randn(4, 8)
    t0 = time.perf_counter()
    loss = m(x).sum()
    t1 = time.perf_counter()
    loss.backward()
    return t1 - t0, time.perf_counter() - t1


def test_args_round_trip():
    p = argparse.ArgumentParser()
    add_fault_args(p)
    spec = fault_from_args(p.parse_args(["--fault", "slow-rank", "--fault-step", "3", "--fault-rank", "1",
                                         "--fault-scale", "0.2"]))
    assert spec == FaultSpec(kind="slow-rank", step=3, rank=1, scale=0.2)
    assert fault_from_args(p.parse_args([])).kind == "none"


def test_bad_spec_is_a_value_error():
    with pytest.raises(ValueError, match="unknown fault"):
        FaultSpec(kind="meltdown")
    with pytest.raises(ValueError, match=">= 0"):
        FaultSpec(kind="hang", step=-1)


def test_collapse_sleeps_in_backward_growing_on_every_rank():
    inj = FaultInjector(FaultSpec(kind="collapse", step=2, scale=0.02), rank=0)
    m = model()
    inj.attach(m)
    inj.set_step(1)
    _, bwd_before = timed_step(m)
    inj.set_step(3)  # second faulty step: 2 x 0.02 s
    fwd, bwd = timed_step(m)
    assert bwd >= 0.04 > bwd_before and fwd < 0.02
    assert [FaultInjector(inj.spec, rank=r).collapse_sleep_s() for r in (0, 3)] == [0.0, 0.0]  # step 0
    inj.detach()
    _, bwd_after = timed_step(m)
    assert bwd_after < 0.02


def test_slow_rank_burns_only_on_its_rank():
    spec = FaultSpec(kind="slow-rank", step=0, rank=1, scale=0.03)
    slow, fast = model(), model()
    FaultInjector(spec, rank=1).attach(slow)
    FaultInjector(spec, rank=0).attach(fast)
    assert timed_step(slow)[0] >= 0.03 > timed_step(fast)[0]


def test_hang_blocks_before_forward_of_its_step_only():
    spec = FaultSpec(kind="hang", step=2, rank=0, scale=0.2)
    inj = FaultInjector(spec, rank=0)
    m = model()
    inj.attach(m)
    inj.set_step(1)
    assert timed_step(m)[0] < 0.1
    inj.set_step(2)
    assert timed_step(m)[0] >= 0.2
    other, m1 = FaultInjector(spec, rank=1), model()
    other.attach(m1)
    other.set_step(2)
    assert timed_step(m1)[0] < 0.1


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
    slow, fast = model(), model()
    FaultInjector(spec, rank=1).attach(slow)
    FaultInjector(spec, rank=0).attach(fast)
    c0 = time.process_time()
    wall = timed_step(slow)[0]
    assert wall >= 0.05 and time.process_time() - c0 < 0.03
    assert timed_step(fast)[0] < 0.05


def test_slow_data_sleeps_in_before_batch_only():
    spec = FaultSpec(kind="slow-data", step=2, rank=0, scale=0.05)
    inj, other = FaultInjector(spec, rank=0), FaultInjector(spec, rank=1)
    m = model()
    inj.attach(m)
    for step, want_slow in ((1, False), (2, True)):
        inj.set_step(step)
        other.set_step(step)
        t0 = time.perf_counter()
        inj.before_batch()
        assert (time.perf_counter() - t0 >= 0.05) is want_slow
    t0 = time.perf_counter()
    other.before_batch()
    assert time.perf_counter() - t0 < 0.05 and timed_step(m)[0] < 0.05  # nothing in forward


def test_kill_is_a_sigkill_in_forward_of_its_step(tmp_path):
    import subprocess

    code = ("import sys; sys.path.insert(0, {ex!r}); import torch; from faults import FaultInjector, FaultSpec\n"
            "m = torch.nn.Linear(2, 2); inj = FaultInjector(FaultSpec(kind='kill', step=1, rank=0), 0).attach(m)\n"
            "inj.set_step(0); m(torch.ones(2)); print('step 0 done', flush=True)\n"
            "inj.set_step(1); m(torch.ones(2)); print('step 1 done', flush=True)\n")
    ex = str(Path(__file__).resolve().parents[2] / "examples")
    res = subprocess.run([sys.executable, "-c", code.format(ex=ex)], capture_output=True, text=True, timeout=120)
    assert res.returncode == -9 and res.stdout == "step 0 done\n", (res.returncode, res.stdout, res.stderr)
