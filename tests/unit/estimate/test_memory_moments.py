"""The moments of a step beyond the start of backward (issue 17 items 1-2), by hand on a small
config: each moment's rows against the tensors torch / DeepSpeed hold at that point (sources in
engines/*.py docstrings)."""

from __future__ import annotations

from prism_strategy.estimate.memory import block_activation_bytes_per_token, estimate_memory, moments
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec, TransformerSpec, load_platform
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

DEEP = TransformerSpec(
    name="deep", layers=16, hidden=8, heads=2, kv_heads=1, head_dim=4, ffn=16, vocab=10, max_positions=64
)
LAY4 = Layout(nodes=1, ranks_per_node=4)
CPU, AURORA = load_platform("cpu"), load_platform("aurora")


def _moments(strategy, platform=CPU, precision="bf16-mixed", model=DEEP, **kw):
    t = TrainingSpec.from_precision(precision, seq_len=16, **kw)
    parts = model_parts(MultimodalSpec(backbone=model), t)
    return {m.name: m for m in moments(parts, t, platform, LAY4, get_strategy(strategy))}, t, parts


def test_fsdp_late_backward_holds_the_bottom_block_beside_every_sharded_grad():
    """With checkpointing the recomputed bottom block is alive while every other block's sharded
    grad already exists: per sample, one block's full activations (16 tokens)."""
    ms, t, _ = _moments("fsdp_full_shard", ckpt_freq=1)
    per_sample = sum(b for *_, b in ms["late backward"].per_sample)
    assert per_sample == 16 * block_activation_bytes_per_token(DEEP, 2, trains=True)
    assert any(label.startswith("grads of every unit") for _, label, _ in ms["late backward"].fixed)


def test_fsdp_peak_is_late_backward_when_grads_outweigh_the_loss():
    """16 blocks checkpointed, tiny vocab: the start of backward holds the 16 block inputs and the
    recomputed block, late backward the recomputed block and all sharded grads: late is larger."""
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=16, ckpt_freq=1)
    parts = model_parts(MultimodalSpec(backbone=DEEP), t)
    est = estimate_memory(parts, t, CPU, LAY4, get_strategy("fsdp_full_shard"), 2)
    assert est.moment == "late backward"


def test_optimizer_step_moment_by_hand_ddp_foreach():
    """DDP, bf16-pure, foreach: params 2P + grads 2P + two bf16 moments 4P + _foreach_sqrt 2P."""
    ms, _, parts = _moments("ddp", AURORA, "bf16-pure")
    p = DEEP.total_params
    reserve = AURORA.allocator.framework_reserve_gib * 2**30
    assert ms["optimizer step"].total(0) == 10 * p + reserve
    assert ms["optimizer step"].per_sample == []


def test_optimizer_step_moment_fused_and_loop():
    p, largest = DEEP.total_params, DEEP.vocab * DEEP.hidden
    fused, _, _ = _moments("ddp", CPU, "fp32", optimizer_impl="fused")
    loop, _, _ = _moments("ddp", CPU, "fp32", optimizer_impl="loop")
    assert fused["optimizer step"].total(0) == 16 * p
    assert loop["optimizer step"].total(0) == 16 * p + 2 * 4 * max(largest, DEEP.ffn * DEEP.hidden)


def test_deepspeed_step_steps_the_flat_fp32_partition():
    """ZeRO-1 bf16: bf16 params (full) + fp32 master + 2 fp32 moments (1/4) + the fp32 flat
    gradient partition (1/4) + foreach's sqrt of the flat exp_avg_sq (1/4) + the ipg bucket."""
    ms, t, parts = _moments("zero1", AURORA)
    p = DEEP.total_params
    step = ms["optimizer step"]
    rows = {label: b for _, label, b in step.fixed}
    assert sum(b for k, _, b in step.fixed if k in ("params", "optimizer")) == 2 * p + 12 * p / 4
    assert rows["fp32 flat gradient partition (1/4)"] == 4 * -(-p // 4)
    assert rows["foreach AdamW temporary: _foreach_sqrt of the whole state group (the flat fp32 partition)"] == 4 * -(
        -p // 4
    )
