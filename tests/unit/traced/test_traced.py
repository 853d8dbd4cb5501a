"""Traced memory (traced/estimate.py) on a tiny Llama-style config, world 4 fake process group.

Numbers a reader can check by hand: sharded fp32 params are exactly 4 bytes x params / world,
AdamW keeps two fp32 moments, DDP's buckets are the fp32 grads of every trainable parameter.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from _traced_factory import TINY
from torch import nn

from prism_strategy.estimate.memory import KEYS, estimate_memory
from prism_strategy.specs import Layout, MultimodalSpec, SpecError, TrainingSpec, TransformerSpec, load_platform
from prism_strategy.specs.parts import model_parts, transformer_tensors
from prism_strategy.strategies import get_strategy
from prism_strategy.traced.estimate import (
    TracedMemory,
    TraceError,
    differences,
    search_max_micro_batch,
    trace_memory,
    trace_option,
    traced_fields,
)

VISION = TransformerSpec(
    name="tiny-siglip",
    kind="vision",
    hf_model_type="siglip_vision_model",
    layers=1,
    hidden=64,
    heads=4,
    kv_heads=4,
    head_dim=16,
    ffn=128,
    qkv_bias=True,
    o_bias=True,
    mlp_bias=True,
    mlp="gelu",
    norm="layernorm",
    image_size=32,
    patch_size=8,
)
WORLD4 = Layout(nodes=1, ranks_per_node=4)
MIXED = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
FP32 = TrainingSpec.from_precision("fp32", seq_len=64)


@pytest.fixture(scope="module")
def fsdp() -> TracedMemory:
    return trace_memory(TINY, MIXED, WORLD4, "fsdp_full_shard", 2)


@pytest.fixture(scope="module")
def ddp() -> TracedMemory:
    return trace_memory(TINY, FP32, WORLD4, "ddp", 2)


def test_importing_the_planner_and_traced_module_loads_no_torch():
    code = (
        "import sys, prism_strategy.planning.planner, prism_strategy.traced.estimate; "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_fsdp_trace_shards_params_and_optimizer_state_over_the_world(fsdp):
    assert fsdp.by_key["params"] == TINY.total_params * 4 / 4  # fp32, 1/4 (dims divide evenly)
    steps = 4 * transformer_tensors(TINY)  # AdamW's fp32 `step` scalar per parameter tensor
    assert fsdp.by_key["optimizer"] == 2 * fsdp.by_key["params"] + steps  # two fp32 moments
    assert fsdp.by_key["reserve"] == 0
    assert sum(fsdp.by_key.values()) == pytest.approx(fsdp.peak_bytes)
    assert set(fsdp.by_key) == set(KEYS)
    assert "FakeTensorMode + fake process group world=4" in fsdp.method and "FSDPMemTracker" in fsdp.method
    assert fsdp.phase in ("forward", "backward", "optimizer step") and fsdp.torch_version.startswith("2.")
    assert fsdp.micro_batch == 2 and fsdp.seconds > 0 and "LlamaForCausalLM" in fsdp.model


def test_ddp_trace_counts_full_params_and_its_buckets(ddp):
    p = TINY.total_params * 4
    assert ddp.by_key["params"] == p
    assert ddp.by_key["grads"] == p  # the buckets, present at every point of the step
    assert ddp.by_key["optimizer"] == 2 * p + 4 * transformer_tensors(TINY)
    assert ddp.method.startswith("traced single process + DDP bucket copy")


def test_fsdp_peak_is_below_ddp_and_hsdp_between(fsdp):
    ddp_mixed = trace_memory(TINY, MIXED, WORLD4, "ddp", 2)
    hsdp = trace_memory(TINY, MIXED, Layout(nodes=2, ranks_per_node=2), "hsdp_full_shard", 2)
    assert fsdp.peak_bytes < hsdp.peak_bytes < ddp_mixed.peak_bytes
    assert hsdp.by_key["params"] == TINY.total_params * 4 / 2 and "mesh 2x2" in hsdp.method
    assert ddp_mixed.categories.get("Autocast copy", 0) > 0  # bf16 weight copies, counted as buffers


def test_checkpointing_every_block_lowers_the_peak():
    t = TrainingSpec.from_precision("fp32", seq_len=128)
    plain = trace_memory(TINY, t, WORLD4, "ddp", 4)
    ckpt = trace_memory(TINY, TrainingSpec.from_precision("fp32", seq_len=128, ckpt_freq=1), WORLD4, "ddp", 4)
    assert ckpt.by_key["activations"] < plain.by_key["activations"]
    assert ckpt.by_key["params"] == plain.by_key["params"]


def test_traced_max_micro_batch_finds_the_boundary_in_few_traces():
    peaks = {mb: trace_memory(TINY, FP32, WORLD4, "fsdp_shard_grad_op", mb).peak_bytes for mb in (5, 6)}
    usable = (peaks[5] + peaks[6]) / 2
    found = search_max_micro_batch(TINY, FP32, WORLD4, "fsdp_shard_grad_op", usable + 1e6, reserve_bytes=1e6)
    assert found.micro_batch == 5 and found.exact
    assert 1 <= found.traces <= 4
    assert {mb: p for mb, p in found.points if mb in peaks} == {mb: peaks[mb] for mb, _ in found.points if mb in peaks}
    opt = trace_option(TINY, FP32, WORLD4, "fsdp_shard_grad_op", None, usable_bytes=usable)
    assert opt.search.micro_batch == 5 and opt.memory.micro_batch == 5
    assert opt.memory.peak_bytes == pytest.approx(peaks[5])


def test_nothing_fits_gives_micro_batch_zero():
    found = search_max_micro_batch(TINY, FP32, WORLD4, "ddp", 1e6)
    assert found.micro_batch == 0 and found.exact


def test_zero_strategies_are_not_traced_and_say_so():
    """DeepSpeed cannot run under fake tensors: trace_memory hands back the analytic estimate under
    an 'analytic' label. That the two agree is what the label means, not evidence for either."""
    t = trace_memory(TINY, MIXED, WORLD4, "zero3", 2)
    est = estimate_memory(
        model_parts(MultimodalSpec(backbone=TINY), MIXED),
        MIXED,
        load_platform("aurora"),
        WORLD4,
        get_strategy("zero3"),
        2,
    )
    assert t.method.startswith("analytic (DeepSpeed cannot be traced)") and not t.traced
    assert t.peak_bytes == pytest.approx(est.total - est.reserve) and t.by_key["reserve"] == 0
    assert differences(est, t) == []  # nothing traced, so no disagreement is claimed


@pytest.mark.parametrize(("strategy", "param_bytes"), [("zero1", 2), ("zero2", 2), ("zero3", 2 / 4)])
def test_zero_model_states_follow_the_zero_paper(strategy, param_bytes):
    """Rajbhandari et al., ZeRO (SC'20) section 3.1/5: mixed-precision Adam holds 2 bytes of bf16
    parameter per element and K = 12 bytes of optimizer state (fp32 master copy, momentum,
    variance); every stage shards the 12 over the N_d = 4 ranks, stage 3 the 2 as well. Beyond the
    paper, stage 3 holds every parameter of <= 1e5 elements gathered whole (DeepSpeed's
    stage3_param_persistence_threshold): all of TINY but its two 1024 x 128 vocab matrices."""
    t = trace_memory(TINY, MIXED, WORLD4, strategy, 2)
    persistent = TINY.total_params - 2 * 1024 * 128 if strategy == "zero3" else 0
    assert t.by_key["params"] == pytest.approx(param_bytes * TINY.total_params + 2 * persistent)
    assert t.by_key["optimizer"] == pytest.approx(12 / 4 * TINY.total_params)


def test_projector_mode_trains_only_the_projector():
    mm = MultimodalSpec(backbone=TINY, vision=VISION, mode="projector")
    t = trace_memory(mm, FP32, WORLD4, "ddp", 2)
    assert t.by_key["grads"] == mm.projector.params * 4  # buckets hold trainable params only
    assert t.by_key["optimizer"] == 2 * mm.projector.params * 4 + 4 * 4  # + 4 `step` scalars
    assert t.by_key["params"] == mm.total_params * 4  # fp32: frozen parts in the compute dtype, fp32 here
    assert "vision + projector + backbone built whole" in t.method


class _Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(256, 32)
        self.head = nn.Linear(32, 256)

    def forward(self, ids):
        return self.head(self.embed(ids))


def make_plain() -> nn.Module:
    return _Plain()


def make_on_meta_tied() -> nn.Module:
    """Built on the meta device with a tied head, as large-model factories do."""
    import torch

    with torch.device("meta"):
        m = _Plain()
    m.head.weight = m.embed.weight
    return m


def make_untraceable() -> nn.Module:
    class DataDependent(_Plain):
        def forward(self, ids):
            return self.head(self.embed(ids[: int(ids.max())]))

    return DataDependent()


def test_factory_string_builds_the_same_model_as_the_spec(ddp):
    t = trace_memory("_traced_factory:make_tiny", FP32, WORLD4, "ddp", 2)
    assert t.peak_bytes == ddp.peak_bytes and "from factory _traced_factory:make_tiny" in t.model


def test_factory_without_hf_interface_gets_logits_loss():
    t = trace_memory(make_plain, FP32, WORLD4, "fsdp_full_shard", 2)
    n = 256 * 32 + 32 * 256 + 256
    assert t.by_key["params"] == pytest.approx(n * 4 / 4, rel=0.01)  # dim-0 shards, padded to 4 rows


def test_factory_built_on_meta_keeps_tied_weights_tied():
    t = trace_memory(make_on_meta_tied, FP32, WORLD4, "ddp", 2)
    assert t.by_key["params"] == (256 * 32 + 256) * 4  # the shared matrix once, plus the head bias


@pytest.mark.parametrize(
    "text, message",
    [
        ("_traced_factory:", "must look like 'package.module:function'"),
        ("prism_strategy_no_such_mod:f", "cannot import 'prism_strategy_no_such_mod'"),
        ("_traced_factory:no_such_fn", "has no 'no_such_fn'"),
        ("_traced_factory:TINY", "is a TransformerSpec, not a function"),
    ],
)
def test_bad_factory_strings_are_one_line_spec_errors(text, message):
    with pytest.raises(SpecError, match=message) as e:
        trace_memory(text, FP32, WORLD4, "ddp", 1)
    assert "\n" not in str(e.value)


def test_factory_errors_and_untraceable_models_are_one_line():
    with pytest.raises(SpecError, match="returned int, not a torch.nn.Module"):
        trace_memory(lambda: 3, FP32, WORLD4, "ddp", 1)
    with pytest.raises(SpecError, match="failed: ZeroDivisionError"):
        trace_memory(lambda: 1 / 0, FP32, WORLD4, "ddp", 1)
    with pytest.raises(TraceError, match="under fake tensors: DataDependentOutputException") as e:
        trace_memory(make_untraceable, FP32, WORLD4, "ddp", 1)
    assert "\n" not in str(e.value)


def test_bad_arguments():
    with pytest.raises(SpecError, match="micro_batch must be an integer >= 1"):
        trace_memory(TINY, FP32, WORLD4, "ddp", 0)
    with pytest.raises(SpecError, match="fake 'cpu' device"):
        trace_memory(TINY, FP32, WORLD4, "ddp", 1, device="cuda")
    with pytest.raises(SpecError, match="unknown strategy"):
        trace_memory(TINY, FP32, WORLD4, "fsdp", 1)


def test_trace_leaves_no_process_group_and_restores_the_default_dtype(fsdp):
    import torch
    import torch.distributed as dist

    trace_memory(TINY, TrainingSpec.from_precision("bf16-pure", seq_len=64), WORLD4, "fsdp_full_shard", 1)
    assert not dist.is_initialized() and torch.get_default_dtype() == torch.float32


def test_refuses_to_run_inside_a_process_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with pytest.raises(SpecError, match="a process group already exists"):
            trace_memory(TINY, FP32, WORLD4, "fsdp_full_shard", 1)
    finally:
        dist.destroy_process_group()


def test_differences_name_the_item_that_differs(fsdp):
    est = estimate_memory(
        model_parts(MultimodalSpec(backbone=TINY), MIXED),
        MIXED,
        load_platform("cpu"),
        WORLD4,
        get_strategy("fsdp_full_shard"),
        2,
    )
    same = TracedMemory(
        peak_bytes=est.total,
        by_key={k: getattr(est, k) for k in KEYS},
        method="traced: x",
        seconds=0,
        torch_version="",
        micro_batch=2,
    )
    assert differences(est, same) == []
    off = TracedMemory(
        peak_bytes=est.total + est.activations,
        by_key={**same.by_key, "activations": 2 * est.activations},
        method="traced: x",
        seconds=0,
        torch_version="",
        micro_batch=2,
        phase="backward",
    )
    notes = differences(est, off)
    assert len(notes) == 2 and notes[0].startswith("analytic ") and "backward" in notes[0]
    assert notes[1].startswith("activations differ")
    moved = est.activations / 2  # same total, split differently: no note
    shuffled = TracedMemory(
        peak_bytes=est.total,
        by_key={**same.by_key, "activations": est.activations - moved, "buffers": est.buffers + moved},
        method="traced: x",
        seconds=0,
        torch_version="",
        micro_batch=2,
    )
    assert differences(est, shuffled) == []


def test_traced_fields_have_the_keys_of_memory_gib(fsdp):
    est = estimate_memory(
        model_parts(MultimodalSpec(backbone=TINY), MIXED),
        MIXED,
        load_platform("aurora"),
        WORLD4,
        get_strategy("fsdp_full_shard"),
        2,
    )
    d = traced_fields(fsdp, reserve_bytes=est.reserve, analytic=est)
    assert set(d["traced_memory_gib"]) == set(est.gib())
    assert d["traced_memory_gib"]["reserve"] == pytest.approx(est.reserve / 2**30, abs=1e-3)
    assert d["traced_memory_gib"]["total"] == pytest.approx((fsdp.peak_bytes + est.reserve) / 2**30, abs=1e-3)
    assert isinstance(d["traced_notes"], list) and d["traced_max_micro_batch"] is None
