"""The `# device-only:` branches, run on a CUDA or XPU device (marked `gpu`: skipped without one,
see tests/conftest.py). benchmarks/device_validation.py measures the same device when one is lent.

What each checks comes from the code it runs: runtime/dist.py sets the rank's device before the
process group and binds the group with device_id on CUDA only (DOMAIN 4: never on XPU);
runtime/monitor.py times phases with device events on an accelerator (torch.Event), not the host
clock; the bench worker reads the allocator's peak from torch.<device>.max_memory_allocated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.gpu
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))


def device_kind() -> str:
    return "xpu" if hasattr(torch, "xpu") and torch.xpu.is_available() else "cuda"


@pytest.fixture
def one_rank(monkeypatch):
    from prism_strategy.runtime.dist import init_distributed

    for k, v in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29555",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("PRISM_DEVICE", raising=False)
    ctx = init_distributed(timeout_s=60)
    yield ctx
    dist.destroy_process_group()


def test_init_distributed_puts_the_rank_on_its_device(one_rank):
    kind = device_kind()
    assert one_rank.device.type == kind and one_rank.backend == {"cuda": "nccl", "xpu": "xccl"}[kind]
    assert getattr(torch, kind).current_device() == one_rank.device.index
    t = torch.arange(4.0, device=one_rank.device)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    bound = getattr(dist.group.WORLD, "bound_device_id", None)
    assert (bound is not None) == (kind == "cuda")  # device_id on CUDA, never on XPU


def test_step_monitor_times_phases_with_device_events(one_rank, tmp_path):
    import json

    from prism_strategy.runtime.monitor import StepMonitor

    mon = StepMonitor(tmp_path, ctx=one_rank, hang_timeout_s=None, summary_every=100)
    a = torch.randn(2048, 2048, device=one_rank.device)
    for _ in range(3):
        with mon.step():
            with mon.phase("forward"):
                for _ in range(20):
                    a = torch.tanh(a @ a)
    mon.close()
    steps = [json.loads(x) for x in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    steps = [s for s in steps if s["kind"] == "step"]
    assert len(steps) == 3 and all(s["phases"]["forward"] > 0 for s in steps)
    assert all(s["peak_mem_bytes"] >= a.numel() * 4 for s in steps)  # the allocator's peak, not the host RSS


def test_wrapped_ddp_step_on_the_device_matches_the_bare_model(one_rank):
    from prism_strategy import wrap
    from tiny_llama import TinyConfig, TinyLlama

    torch.manual_seed(0)
    ref = TinyLlama(TinyConfig()).to(one_rank.device)
    torch.manual_seed(0)
    job = wrap(
        TinyLlama(TinyConfig()),
        "ddp",
        ctx=one_rank,
        optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1),
        mixed_precision=None,
    )
    tokens = torch.randint(0, TinyConfig().vocab, (2, 8), device=one_rank.device)
    ref(tokens).float().mean().backward()
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    job.backward(job.model(tokens).float().mean())
    job.step()
    got = {n.removeprefix("module."): p.detach() for n, p in job.model.named_parameters()}
    assert next(iter(got.values())).device.type == one_rank.device.type
    for n, p in ref.named_parameters():
        assert torch.allclose(got[n], before[n] - 0.1 * p.grad, atol=1e-5), n
