"""wrap() checks its input and the rules before it touches the model or a process group:
these run without one (a DistContext is plain data)."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

from prism_strategy.runtime.dist import DistContext
from prism_strategy.runtime.wrap import config_of, deepspeed_config, situation, wrap
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy
from prism_strategy.wrap_config import WrapConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from tiny_llama import TinyConfig, TinyLlama  # noqa: E402

SGD = lambda params: torch.optim.SGD(params, lr=0.1)  # noqa: E731


def ctx(device: str = "cpu", nodes: int = 1, rpn: int = 2) -> DistContext:
    return DistContext(
        rank=0,
        local_rank=0,
        world_size=nodes * rpn,
        nodes=nodes,
        ranks_per_node=rpn,
        device=torch.device(device),
        backend={"xpu": "xccl", "cuda": "nccl"}.get(device, "gloo"),
        launcher="torchrun",
    )


def model() -> TinyLlama:
    return TinyLlama(TinyConfig())


def test_compile_across_nodes_on_xpu_warns_naming_the_stack_that_deadlocked():
    """rules.toml: PRISM's whole-backbone compile (FSDP1) deadlocked oneCCL; torchtitan's per-block
    compile with FSDP2 ran on 2 and 64 nodes (E1, E2): a warning, and wrap() goes on (to the missing
    process group)."""
    with (
        pytest.warns(UserWarning, match=r"\[xpu-multinode-compile\].*PRISM's stack.*deadlocked oneCCL.*E1, E2"),
        pytest.raises(SpecError, match="no process group"),
    ):
        wrap(model(), "hsdp_full_shard", ctx=ctx("xpu", nodes=2), optimizer=SGD, compile=True)


def test_compile_on_one_xpu_node_is_not_refused():
    with pytest.raises(SpecError, match="no process group"):
        wrap(model(), "fsdp_full_shard", ctx=ctx("xpu", nodes=1), optimizer=SGD, compile=True)


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
def test_refuses_deepspeed_with_compile(strategy):
    with pytest.raises(SpecError, match=r"refuses \[deepspeed-compile\].*NaN"):
        wrap(model(), strategy, ctx=ctx(), optimizer=SGD, compile=True)


def test_refuses_find_unused_with_static_graph():
    with pytest.raises(SpecError, match=r"refuses \[find-unused-vs-static-graph\].*disables static_graph"):
        wrap(model(), "ddp", ctx=ctx(), optimizer=SGD, static_graph=True, find_unused_parameters=True)


def test_find_unused_alone_warns_about_its_cost():
    with pytest.warns(UserWarning, match="find-unused-cost"), pytest.raises(SpecError, match="no process group"):
        wrap(model(), "ddp", ctx=ctx(), optimizer=SGD, find_unused_parameters=True)


def test_refuses_fsdp_with_daos_preload(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/opt/daos/lib64/libpil4dfs.so")
    with pytest.raises(SpecError, match="daos-preload-fsdp"):
        wrap(model(), "fsdp_full_shard", ctx=ctx(), optimizer=SGD)


def test_root_only_fsdp_warns():
    lone = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.warns(UserWarning, match="fsdp-root-only-wrap"), pytest.raises(SpecError, match="no process group"):
        wrap(lone, "fsdp_full_shard", ctx=ctx(), optimizer=SGD)


def test_ddp_options_on_other_engines_warn():
    with (
        pytest.warns(UserWarning, match="static_graph, bucket_mb do not apply to fsdp_full_shard"),
        pytest.raises(SpecError, match="no process group"),
    ):
        wrap(model(), "fsdp_full_shard", ctx=ctx(), optimizer=SGD, static_graph=True, bucket_mb=50)


def test_situation_matches_the_rules_keys():
    facts = situation(
        get_strategy("hsdp_full_shard"),
        ctx("xpu", nodes=2),
        compile=True,
        static_graph=False,
        find_unused_parameters=False,
        has_blocks=True,
    )
    assert facts.device == "xpu" and facts.multi_node and facts.engine == "fsdp2"
    assert facts.passes_device_id is False and facts.root_only_wrap is False and facts.reshard_or_sharded
    ddp = situation(
        get_strategy("ddp"), ctx(), compile=False, static_graph=True, find_unused_parameters=False, has_blocks=False
    )
    assert ddp.root_only_wrap is None and ddp.reshard_or_sharded is False  # the engine's facts


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(strategy="fsdp"), "unknown strategy 'fsdp'; choose one of ddp, fsdp_full_shard"),
        (dict(strategy=3), "strategy must be a strategy name"),
        (dict(bucket=25), r"wrap\(\) has no setting bucket; its settings are mixed_precision, ckpt_freq"),
        (dict(config=WrapConfig(strategy="ddp"), ckpt_freq=1), "takes config= or the settings, not both"),
        (dict(optimizer=torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1)), "optimizer must be a factory"),
        (dict(mixed_precision="fp16"), "mixed_precision must be 'bf16' or None"),
        (dict(ckpt_freq=-1), "ckpt_freq must be an int >= 0"),
        (dict(ckpt_freq=True), "ckpt_freq must be an int >= 0"),
        (dict(static_graph="yes"), "static_graph must be True or False"),
        (dict(compile=1), "compile must be True or False"),
        (dict(bucket_mb=0), "bucket size must be a number of MiB"),
        (dict(reduce_dtype="fp16"), r"reduce dtype \(--reduce-dtype\) must be fp32 or bf16"),
        (dict(block_types=(3,)), "block_types must be module classes or class names"),
        (dict(block_types=torch.nn.Conv2d), "no module of block_types"),
        (dict(model="not a module"), "model must be a torch.nn.Module"),
        (dict(ctx=object()), "ctx must be the DistContext"),
    ],
)
def test_bad_input_is_a_one_line_spec_error(kwargs, message):
    args = dict(model=model(), strategy="ddp", ctx=ctx(), optimizer=SGD) | kwargs
    m, s = args.pop("model"), args.pop("strategy")
    with pytest.raises(SpecError, match=message) as e:
        wrap(m, s, **args)
    assert "\n" not in str(e.value)


def test_a_strategy_specs_own_bucket_and_reduce_dtype_fill_the_settings_not_given():
    named = get_strategy("zero2").with_options(bucket_mb=100, reduce_dtype="bf16")
    assert (config_of(named, {}).bucket_mb, config_of(named, {}).reduce_dtype) == (100, "bf16")
    given = config_of(named, {"bucket_mb": 50, "reduce_dtype": None, "ckpt_freq": 2})
    assert (given.strategy, given.bucket_mb, given.reduce_dtype, given.ckpt_freq) == ("zero2", 50, "bf16", 2)


def test_checkpointing_needs_blocks():
    with pytest.raises(SpecError, match="ckpt_freq=1 needs transformer blocks"):
        wrap(torch.nn.Linear(2, 2), "ddp", ctx=ctx(), optimizer=SGD, ckpt_freq=1)


def test_model_untouched_when_refused():
    m = model()
    before = [type(b).__name__ for b in m.layers]
    with pytest.raises(SpecError):
        wrap(m, "zero3", ctx=ctx(), optimizer=SGD, compile=True, ckpt_freq=1)
    assert [type(b).__name__ for b in m.layers] == before


def test_generated_deepspeed_config():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = deepspeed_config(get_strategy("zero1"), ctx(nodes=2), mixed_precision=None, ds_config=None)
    assert cfg["zero_optimization"]["stage"] == 1 and cfg["bf16"] == {"enabled": False}
    assert cfg["train_batch_size"] == 4 and cfg["gradient_accumulation_steps"] == 1
    assert cfg["managed_gradient_accumulation"] is False and cfg["zero_allow_untested_optimizer"] is True
    assert cfg["zero_optimization"]["overlap_comm"] is False


def test_callers_deepspeed_config_is_checked_and_not_mutated():
    mine = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "train_batch_size": 64,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True},
    }
    with pytest.warns(UserWarning, match="gradient_accumulation_steps=4 ignored"):
        cfg = deepspeed_config(get_strategy("zero2"), ctx(nodes=2, rpn=4), mixed_precision="bf16", ds_config=mine)
    assert (cfg["train_batch_size"], cfg["gradient_accumulation_steps"]) == (16, 1)
    assert cfg["zero_optimization"]["overlap_comm"] is True
    assert mine["gradient_accumulation_steps"] == 4 and "managed_gradient_accumulation" not in mine
    with pytest.raises(SpecError, match="stage=2 but the strategy is zero3"):
        deepspeed_config(get_strategy("zero3"), ctx(), mixed_precision="bf16", ds_config=mine)
    with pytest.raises(SpecError, match="contradicts mixed_precision=None"):
        deepspeed_config(get_strategy("zero2"), ctx(), mixed_precision=None, ds_config=mine)
    with pytest.raises(SpecError, match="optimizer section"):
        deepspeed_config(get_strategy("zero2"), ctx(), mixed_precision="bf16", ds_config=mine | {"optimizer": {}})
