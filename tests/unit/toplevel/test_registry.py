"""A named variant is one registry entry: registered here, it is planned, wrapped on a real
1-rank gloo group, emitted and predicted without touching any other file."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from prism_strategy import WrapConfig, plan, wrap
from prism_strategy.emit.launch import EmitRequest, emit_files
from prism_strategy.engines import step_collectives
from prism_strategy.runtime.dist import DistContext
from prism_strategy.specs import Layout, SpecError
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import STRATEGY_NAMES, all_strategies, get_strategy, register, unregister

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from tiny_llama import TinyConfig, TinyLlama  # noqa: E402

NAME = "ddp_bucket100"


@pytest.fixture
def variant():
    spec = register(
        dataclasses.replace(
            get_strategy("ddp"), name=NAME, bucket_mb=100, description="DDP with 100 MiB gradient buckets."
        )
    )
    yield spec
    unregister(NAME)
    assert NAME not in {s.name for s in all_strategies()}


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield DistContext(
        rank=0,
        local_rank=0,
        world_size=1,
        nodes=1,
        ranks_per_node=1,
        device=torch.device("cpu"),
        backend="gloo",
        launcher="torchrun",
    )
    dist.destroy_process_group()


def test_variant_is_planned_and_predicted(variant):
    p = plan("qwen3-0.6b", platform="aurora", nodes=2, seq_len=512, micro_batch=8, calibration="none")
    assert [o.strategy for o in p.options][: len(STRATEGY_NAMES)] == list(STRATEGY_NAMES)
    mine, ddp = p.option(NAME), p.option("ddp")
    calls = lambda o: sum(c.calls_per_step for c in o.comm.collectives if c.op == "all_reduce")  # noqa: E731
    assert calls(mine) < calls(ddp) and mine.memory.total == ddp.memory.total
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=512)
    parts = model_parts(MultimodalSpec(backbone=load_model("qwen3-0.6b")), t)
    ar = next(
        c for c in step_collectives(variant, parts, t, Layout(nodes=2, ranks_per_node=12)) if c.op == "all_reduce"
    )
    assert ar.bytes_per_call >= 100 * 2**20


def test_variant_is_emitted(variant, tmp_path):
    emitted = emit_files(EmitRequest(strategy=NAME, platform="aurora", nodes=2), tmp_path / "out")
    toml = next(f.text for f in emitted.files if f.name == "strategy.toml")
    assert f'strategy = "{NAME}"' in toml and emitted.strategy.bucket_mb == 100


def test_variant_is_wrapped_for_real(variant, one_rank):
    """One SGD step through the variant's job equals the same step on the bare model: on one rank
    DDP's all-reduce averages over one gradient, so job.backward + job.step must give p - lr * grad."""
    torch.manual_seed(0)
    ref, tokens = TinyLlama(TinyConfig()), torch.randint(0, TinyConfig().vocab, (2, 8))
    torch.manual_seed(0)
    job = wrap(
        TinyLlama(TinyConfig()),
        NAME,
        ctx=one_rank,
        optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1),
        mixed_precision=None,
    )
    assert job.model.bucket_bytes_cap == 100 * 2**20
    ref(tokens).float().mean().backward()
    before = {n: p.detach().clone() for n, p in ref.named_parameters()}
    job.backward(job.model(tokens).float().mean())
    grads = {n.removeprefix("module."): p.grad for n, p in job.model.named_parameters()}
    for n, p in ref.named_parameters():
        assert grads[n] is not None and torch.allclose(grads[n], p.grad, atol=1e-6), n
    job.step()
    stepped = {n.removeprefix("module."): p.detach() for n, p in job.model.named_parameters()}
    for n, p in ref.named_parameters():
        assert torch.allclose(stepped[n], before[n] - 0.1 * p.grad, atol=1e-6), n
    assert any(not torch.equal(stepped[n], before[n]) for n in before)  # the step moved something


def test_registry_refuses_clashes():
    with pytest.raises(SpecError, match="already registered"):
        register(get_strategy("ddp"))
    with pytest.raises(SpecError, match="built-in"):
        unregister("zero3")
    with pytest.raises(SpecError, match="StrategySpec"):
        register("ddp")  # type: ignore[arg-type]


def test_wrap_config_carries_a_variants_name(variant):
    assert WrapConfig(strategy=NAME).spec.bucket_mb == 100
    assert WrapConfig(strategy=NAME, bucket_mb=10).spec.bucket_mb == 10  # a per-run option wins
