"""The family terms the estimators add (estimate/families.py), by hand: an MoE's states count every
expert, its FLOPs and activations the routed ones; Gemma's extra norms; the plan's assumption lines."""

import dataclasses
from pathlib import Path

import pytest

from prism_strategy.estimate.compute import block_kernels, part_flops_per_sample
from prism_strategy.estimate.memory import block_activation_bytes_per_token, estimate_memory
from prism_strategy.flags import plan
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec, load_model, load_platform
from prism_strategy.specs.model import TransformerSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

HF = Path(__file__).parents[2] / "fixtures" / "hf"
# A small Mixtral-like MoE: 2 blocks, 4 experts of width 24, top-2; and its dense twin.
MOE = TransformerSpec(
    name="moe",
    hf_model_type="mixtral",
    layers=2,
    hidden=16,
    heads=4,
    kv_heads=2,
    head_dim=4,
    ffn=24,
    vocab=50,
    max_positions=64,
    experts=4,
    experts_per_token=2,
    expert_ffn=24,
)
DENSE = dataclasses.replace(MOE, experts=0, experts_per_token=0, expert_ffn=0)
T = TrainingSpec.from_precision("bf16-mixed", seq_len=32)


def parts(spec):
    return model_parts(MultimodalSpec(backbone=spec), T)


def test_moe_states_count_every_expert():
    # per block: the dense twin's 3 MLP matrices become 4 experts' and a router Linear(16, 4)
    assert MOE.block_params - DENSE.block_params == 3 * 16 * 24 * (4 - 1) + 16 * 4
    mem = estimate_memory(
        parts(MOE), T, load_platform("cpu"), Layout(nodes=1, ranks_per_node=4), get_strategy("ddp"), 1
    )
    assert mem.params == MOE.total_params * T.param_bytes  # DDP: every rank holds every expert


def test_moe_flops_count_the_routed_experts():
    t, L, h = T.seq_len, MOE.layers, MOE.hidden
    attn_mm = h * 16 + 2 * h * 8 + 16 * h
    routed = 2 * 3 * h * 24 + 4 * h  # top-2 experts + the router
    attention = 4 * t * t * 16 * 0.5  # scores and values, causal half
    fwd = L * (2 * t * (attn_mm + routed) + attention) + 2 * t * 50 * h
    assert part_flops_per_sample(parts(MOE)[0], T).forward == pytest.approx(fwd)


def test_moe_activations_add_routing_to_the_active_width():
    e, h, k = 2, MOE.hidden, 2
    # the dense formula at MLP width top-k x expert_ffn, plus per token: the gathered input and the
    # output row of each routed pair, the router's fp32 softmax over 4 experts and its int64 top-k
    twin = dataclasses.replace(DENSE, ffn=k * 24)
    extra = k * 2 * e * h + 4 * 4 + 8 * k
    assert block_activation_bytes_per_token(MOE, e, True) == block_activation_bytes_per_token(twin, e, True) + extra
    frozen_extra = k * e * h + 4 * 4 + 8 * k  # a frozen expert saves no input for weight gradients
    assert (
        block_activation_bytes_per_token(MOE, e, False)
        == block_activation_bytes_per_token(twin, e, False) + frozen_extra
    )


def test_moe_kernels_router_and_grouped_gemms_replace_the_dense_mlp():
    dense, moe = block_kernels(DENSE), block_kernels(MOE)
    assert moe.gemms == dense.gemms  # router + gate_up + down grouped GEMMs = gate, up, down
    assert moe.kernels - dense.kernels == 18  # routing and dispatch (estimate/families.ROUTING_KERNELS)


def test_gemma_extra_norms_save_their_fp32_inputs():
    g = load_model(str(HF / "gemma-2-9b" / "config.json"))
    two = dataclasses.replace(g, block_norms=2)
    # each extra GemmaRMSNorm: its fp32 input, the fp32 rsqrt and the fp32 copy `output * (1.0 + weight.float())`
    # keeps for the weight's grad (transformers models/gemma2/modeling_gemma2.py Gemma2RMSNorm)
    extra = 2 * (4 * g.hidden + 4 + 4 * g.hidden)
    assert block_activation_bytes_per_token(g, 2, True) - block_activation_bytes_per_token(two, 2, True) == extra
    assert g.block_params - two.block_params == 2 * g.hidden


def test_moe_plan_states_data_parallelism_only_and_dense_does_not():
    reasons = plan(MOE, platform="cpu", ranks_per_node=2, seq_len=32, micro_batch=1).reasons
    line = [r for r in reasons if "mixture of experts" in r]
    assert len(line) == 1 and "data parallelism only" in line[0] and "expert parallelism is not modelled" in line[0]
    assert not [
        r
        for r in plan(DENSE, platform="cpu", ranks_per_node=2, seq_len=32, micro_batch=1).reasons
        if r.startswith("assumption")
    ]


def test_moe_precision_line_only_when_params_and_compute_differ():
    mixed = plan(MOE, platform="cpu", ranks_per_node=2, seq_len=32, micro_batch=1).reasons
    pure = plan(MOE, platform="cpu", ranks_per_node=2, seq_len=32, micro_batch=1, precision="bf16-pure").reasons
    assert any("grouped_mm" in r and "bf16-pure" in r for r in mixed)
    assert not any("grouped_mm" in r for r in pure)


def test_sliding_window_assumption_only_past_the_window():
    g = load_model(str(HF / "gemma-2-9b" / "config.json"))
    from prism_strategy.estimate.families import assumptions

    assert (g.sliding_window, g.sliding_layers) == (4096, 21)  # Gemma 2: every other layer of 42
    at = lambda n: assumptions(MultimodalSpec(backbone=g), dataclasses.replace(T, seq_len=n))  # noqa: E731
    short, long = at(2048), at(8192)
    assert not any("window" in a for a in short) and any("4096-token window" in a for a in long)
    assert any("eager" in a for a in short)  # Gemma 2's attention implementation, at any length


def test_ddp_autocast_copies_no_expert_weights():
    # transformers' grouped_mm experts are not autocast-enabled: under bf16-mixed they run in fp32
    # (seen on CPU: the experts' grouped_mm got and returned float32 while q_proj returned bfloat16)
    mem = estimate_memory(
        parts(MOE), T, load_platform("cpu"), Layout(nodes=1, ranks_per_node=4), get_strategy("ddp"), 1
    )
    copies = sum(b for _, label, b in mem.items if label.startswith("autocast"))
    attn_mm, h = 16 * 16 + 2 * 16 * 8 + 16 * 16, 16
    assert copies == (2 * (attn_mm + 4 * h) + 50 * h) * T.compute_bytes  # attention + router per block, LM head


def test_moe_block_gemms_carry_the_routed_flops():
    from prism_strategy.estimate.compute import block_gemms

    assert sum(i * o for i, o in block_gemms(MOE)) == MOE.active_matmul_params  # shapes and FLOPs agree
    assert sum(i * o for i, o in block_gemms(DENSE)) == DENSE.active_matmul_params
