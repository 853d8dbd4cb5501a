"""Each formula against values computed by hand on a small config, and model states against
DeepSpeed's own estimator."""

import dataclasses

import pytest

from prism_strategy.estimate.comm import collective_seconds, estimate_comm
from prism_strategy.estimate.compute import flops_per_sample, part_flops_per_sample
from prism_strategy.estimate.memory import (
    block_activation_bytes_per_token,
    estimate_memory,
    max_micro_batch,
    model_state_rows,
    moments,
)
from prism_strategy.specs import Layout, MultimodalSpec, TrainingSpec, TransformerSpec, load_model, load_platform
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

TINY = TransformerSpec(
    name="tiny", layers=2, hidden=8, heads=2, kv_heads=1, head_dim=4, ffn=16, vocab=10, max_positions=64
)
P = TINY.total_params
LAY4 = Layout(nodes=1, ranks_per_node=4)
CPU = load_platform("cpu")


def states(strategy, precision="bf16-mixed", layout=LAY4, model=TINY):
    t = TrainingSpec.from_precision(precision, seq_len=16)
    parts = model_parts(MultimodalSpec(backbone=model), t)
    rows = model_state_rows(parts, t, get_strategy(strategy), layout)
    return {k: sum(b for key, _, b in rows if key == k) for k in ("params", "grads", "optimizer")}


def test_model_states_by_hand():
    assert states("ddp") == {"params": 4 * P, "grads": 4 * P, "optimizer": 8 * P}
    assert states("ddp", "bf16-pure") == {"params": 2 * P, "grads": 2 * P, "optimizer": 4 * P}
    assert states("fsdp_full_shard") == {"params": P, "grads": P, "optimizer": 2 * P}
    assert states("fsdp_shard_grad_op")["params"] == P
    hsdp = states("hsdp_full_shard", layout=Layout(nodes=2, ranks_per_node=2))
    assert hsdp == {"params": 2 * P, "grads": 2 * P, "optimizer": 4 * P}


@pytest.mark.parametrize("nodes, rpn", [(1, 8), (2, 12), (4, 4)])
def test_zero2_matches_deepspeed_estimator(nodes, rpn):
    ds = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    model = load_model("olmo-7b")
    s = states("zero2", layout=Layout(nodes=nodes, ranks_per_node=rpn), model=model)
    _, gpu = ds.estimate_zero2_model_states_mem_needs(
        model.total_params, num_gpus_per_node=rpn, num_nodes=nodes, cpu_offload=False
    )
    assert sum(s.values()) == pytest.approx(gpu, rel=1e-6)  # 2P + 18P/N


@pytest.mark.parametrize("nodes, rpn", [(1, 8), (2, 12)])
def test_zero3_matches_deepspeed_estimator(nodes, rpn):
    ds = pytest.importorskip("deepspeed.runtime.zero.stage3")
    model = load_model("llama-2-7b")
    lay = Layout(nodes=nodes, ranks_per_node=rpn)
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=16)
    parts = model_parts(MultimodalSpec(backbone=model), t)
    # DeepSpeed's estimator counts model states and L: the end of backward (the optimizer step's
    # fp32 sub-group gradient and temporaries come on top, tests/unit/estimate/test_optimizer_step.py)
    end = next(m for m in moments(parts, t, CPU, lay, get_strategy("zero3")) if m.name == "end of backward")
    big_l = next(b for _, label, b in end.fixed if "DeepSpeed's L" in label)
    est = {k: sum(b for key, _, b in end.fixed if key == k) for k in ("params", "grads", "optimizer")}
    # where the code differs from the estimator's 18 bytes per param: stage3.py keeps the gradient
    # partition in gradient_accumulation_dtype, the model dtype by default (engine.py get_data_types:
    # 2 bytes, not 4), and holds the params of <= 1e5 elements gathered whole (the norms here)
    norms = (2 * model.layers + 1) * model.hidden
    est["grads"] += 2 * model.total_params / lay.world
    est["params"] -= 2 * norms
    largest = model.vocab * model.hidden
    _, gpu, _ = ds.estimate_zero3_model_states_mem_needs(
        model.total_params,
        largest,
        num_gpus_per_node=rpn,
        num_nodes=nodes,
        cpu_offload=False,
        cpu_offload_params=False,
        zero_init=True,
    )
    assert sum(est.values()) + big_l == pytest.approx(gpu, rel=1e-6)  # L + 18P/N


def test_activation_bytes_by_hand():
    # h=8, q=8, kv=4, f=16, heads=2, bf16: fp32 norm inputs 2*4*8; per RMSNorm its fp32 rsqrt 4 and,
    # when its weight trains, the bf16 normalised copy 2*8; q/k/v 2*(8+8), attn out 2*8 (o_proj's input
    # too: one storage), fp32 logsumexp 4*2; trainable: norm outputs 2*2*8, SwiGLU 4*2*16
    assert block_activation_bytes_per_token(TINY, 2, trains=True) == 64 + 2 * (4 + 16) + 32 + 16 + 8 + 32 + 128
    # frozen: no linear inputs, no normalised copies; SwiGLU keeps gate, up, act(gate) for the product
    assert block_activation_bytes_per_token(TINY, 2, trains=False) == 64 + 2 * 4 + 32 + 16 + 8 + 96


def test_eager_block_count_is_what_autograd_saves_on_a_real_llama_block():
    """A bf16 HF LlamaDecoderLayer on CPU, eager, its saved tensors caught by saved_tensors_hooks
    (one entry per storage): every saved byte is in the count except the rotary cos/sin tables,
    which are per position and shared by the batch (2 x (t, head_dim) bf16). This is what caught
    the RMSNorm weight product's bf16 copy and rsqrt (families.rms_norm_saved_bytes_per_token) and
    SDPA's output doubling as o_proj's input."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    h, f, b, t, d = 64, 176, 2, 24, 16
    cfg = LlamaConfig(
        hidden_size=h,
        intermediate_size=f,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=1,
        attn_implementation="sdpa",
    )
    block, rope = LlamaDecoderLayer(cfg, 0).to(torch.bfloat16), LlamaRotaryEmbedding(cfg)
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    saved: dict[int, int] = {}

    def pack(v):
        if v.untyped_storage().data_ptr() not in params:
            saved[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()
        return v

    x = torch.randn(b, t, h, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda v: v):
        y = block(x, position_embeddings=rope(x, torch.arange(t).unsqueeze(0)))
    (y[0] if isinstance(y, tuple) else y).sum().backward()
    rope_tables = 2 * t * d * 2
    spec = TransformerSpec(
        name="tiny", layers=1, hidden=h, heads=4, kv_heads=2, head_dim=d, ffn=f, vocab=32, max_positions=t
    )
    assert (sum(saved.values()) - rope_tables) / (b * t) == block_activation_bytes_per_token(spec, 2, True, 2)


def test_activations_checkpointing_and_logits_by_hand():
    t0 = TrainingSpec.from_precision("bf16-pure", seq_len=16)
    t1 = TrainingSpec.from_precision("bf16-pure", seq_len=16, ckpt_freq=1)
    a = 320  # test_activation_bytes_by_hand, trainable
    root = 4 * 8 + 2 * 8  # final-norm fp32 input + LM-head input
    loss = 10 * 12  # fp32 log-probs, fp32 grad in and out; the bf16 logits are not kept
    # no checkpointing: 2 blocks saved + the loss; every block: 2 block inputs + max(loss, one recomputed block)
    for t, per_token in ((t0, 2 * a + loss), (t1, 2 * 2 * 8 + max(a, loss))):
        parts = model_parts(MultimodalSpec(backbone=TINY), t)
        est = estimate_memory(parts, t, CPU, LAY4, get_strategy("fsdp_full_shard"), 3)
        assert est.per_sample == 16 * (per_token + root)
        assert est.activations == 3 * est.per_sample and est.moment == "start of backward"


def _mem(strategy, precision="bf16-mixed", mb=0, model=TINY, layout=LAY4, **kw):
    t = TrainingSpec.from_precision(precision, seq_len=16, **kw)
    return estimate_memory(model_parts(MultimodalSpec(backbone=model), t), t, CPU, layout, get_strategy(strategy), mb)


def test_fsdp_peak_moves_to_the_end_of_backward_without_activations():
    """Start of backward: no grads yet (zero_grad sets them to None). End of backward: every
    block's sharded grads, plus the root unit's unsharded bf16 grads and their fp32
    reduce-scatter copy (the root reduces last)."""
    big_vocab = TransformerSpec(
        name="v",
        layers=2,
        hidden=8,
        heads=2,
        kv_heads=1,
        head_dim=4,
        ffn=16,
        vocab=4000,
        max_positions=64,
        tied_embeddings=False,
    )
    est = _mem("fsdp_full_shard", model=big_vocab)
    assert est.moment == "end of backward"
    root_trainable = big_vocab.root_params
    expected = big_vocab.total_params * (4 + 8) / 4 + (big_vocab.total_params - root_trainable) * 4 / 4
    expected += root_trainable * (2 + 4)
    assert est.total == expected
    assert _mem("fsdp_full_shard", mb=64, model=big_vocab).moment == "start of backward"
    # a tied LM head keeps the root gathered (bf16) through its reduce-scatter (seen in traces and a real run)
    tied = dataclasses.replace(big_vocab, tied_embeddings=True)
    est = _mem("fsdp_full_shard", model=tied)
    expected = tied.total_params * (4 + 8) / 4 + (tied.total_params - tied.root_params) * 4 / 4
    assert est.moment == "end of backward" and est.total == expected + tied.root_params * (2 + 4 + 2)


def test_shard_grad_op_holds_the_whole_model_at_the_start_of_backward():
    est = _mem("fsdp_shard_grad_op", mb=1)
    gathered = next(b for _, label, b in est.items if label.startswith("gathered params"))
    assert gathered == 2 * P and est.moment == "start of backward"


def test_ddp_autocast_copies_only_linear_weights():
    """Embedding lookups and fp32 norms make no bf16 copy; the (tied) LM head makes one."""
    est = _mem("ddp")
    copies = next(b for _, label, b in est.items if label.startswith("autocast"))
    assert copies == 2 * (TINY.layers * TINY.block_matmul_params + TINY.vocab * TINY.hidden)
    assert not [r for r in _mem("ddp", "fp32").items if r[1].startswith("autocast")]


def test_max_micro_batch_is_the_largest_that_fits():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=2048, ckpt_freq=1)
    parts = model_parts(MultimodalSpec(backbone=load_model("qwen3-1.7b")), t)
    aurora = load_platform("aurora")
    lay = Layout.for_platform(aurora, 1)
    s = get_strategy("fsdp_full_shard")
    mb = max_micro_batch(parts, t, aurora, lay, s)
    assert mb > 0
    assert estimate_memory(parts, t, aurora, lay, s, mb).total <= aurora.usable_bytes
    assert estimate_memory(parts, t, aurora, lay, s, mb + 1).total > aurora.usable_bytes


def test_flops_by_hand():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=16)
    parts = model_parts(MultimodalSpec(backbone=TINY), t)
    mm = 8 * 8 + 2 * 8 * 4 + 8 * 8 + 3 * 8 * 16
    fwd = 2 * (2 * mm * 16 + 4 * 16 * 16 * 8 * 0.5) + 2 * 10 * 8 * 16
    assert flops_per_sample(parts, t) == 3 * fwd
    t1 = TrainingSpec.from_precision("bf16-mixed", seq_len=16, ckpt_freq=2)  # 1 of 2 blocks recomputed
    assert flops_per_sample(model_parts(MultimodalSpec(backbone=TINY), t1), t1) == 3 * fwd + (
        2 * mm * 16 + 4 * 16 * 16 * 8 * 0.5
    )


def test_projector_only_is_about_two_thirds_of_e2e():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=1024)
    b, v = load_model("olmo-7b"), load_model("siglip2-so400m-patch14-384")
    e2e = flops_per_sample(model_parts(MultimodalSpec(backbone=b, vision=v, mode="e2e"), t), t)
    proj = flops_per_sample(model_parts(MultimodalSpec(backbone=b, vision=v, mode="projector"), t), t)
    assert 0.6 < proj / e2e < 0.72
    parts = model_parts(MultimodalSpec(backbone=b, vision=v, mode="projector"), t)
    vision = part_flops_per_sample(parts[0], t)
    assert vision.backward == 0 and vision.forward > 0  # frozen encoder below the projector: forward only


def test_collective_cost_by_hand():
    """gloo: the alpha-beta ring (Thakur et al. 2005) with cpu.toml's figures."""
    p = load_platform("cpu")
    size, n = 1e8, 4
    ar = collective_seconds("all_reduce", size, n, 1, 1, p)
    expect = 100e-6 + 2 * ((n - 1) * 50e-6 + size * (n - 1) / n / (2.0 * 0.8 * 1e9))
    assert ar == pytest.approx(expect)
    ag = collective_seconds("all_gather", size, n, 1, 1, p)
    assert ag == pytest.approx(100e-6 + (n - 1) * 50e-6 + size * (n - 1) / n / (2.0 * 0.8e9))
    assert collective_seconds("all_reduce", size, 1, 1, 1, p) == 0.0


def test_aurora_allreduce_uses_the_flat_ring():
    """PRISM's profile (CCL_ALLREDUCE=ring): the all-reduce is the staged flat host ring, the
    reduce-scatter oneCCL's topo scale-up (estimate/comm_oneccl.py)."""
    from prism_strategy.estimate.comm import collective_call
    from prism_strategy.estimate.comm_oneccl import host_ring_seconds, scale_up_seconds

    a = load_platform("aurora")
    ar, ar_algo = collective_call("all_reduce", 1e9, 12, 1, 1, a)
    rs, rs_algo = collective_call("reduce_scatter", 1e9, 12, 1, 1, a)
    assert "host ring over 12" in ar_algo and "topo" in rs_algo
    t0 = a.collectives.collective_overhead_us * 1e-6
    assert ar == pytest.approx(t0 + host_ring_seconds("all_reduce", 1e9, 12, 1, 1, a))
    assert rs == pytest.approx(t0 + scale_up_seconds("reduce_scatter", 1e9, 12, a))
    assert ar > 2 * rs


def test_hsdp_keeps_gather_inside_node_and_reduces_a_shard_across():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=512)
    parts = model_parts(MultimodalSpec(backbone=load_model("qwen3-0.6b")), t)
    lay = Layout(nodes=2, ranks_per_node=12)
    p = load_platform("aurora")
    hsdp = estimate_comm(parts, t, p, lay, get_strategy("hsdp_shard_grad_op"))
    links = {(c.op, c.link) for c in hsdp.collectives}
    assert links == {("all_gather", "intra-node"), ("reduce_scatter", "intra-node"), ("all_reduce", "inter-node")}
    ar = next(c for c in hsdp.collectives if c.op == "all_reduce")
    rs = next(c for c in hsdp.collectives if c.op == "reduce_scatter")
    assert ar.bytes_per_call * ar.calls_per_step == pytest.approx(rs.bytes_per_call * rs.calls_per_step / 12)
    fs = estimate_comm(parts, t, p, lay, get_strategy("fsdp_full_shard"))
    assert {c.link for c in fs.collectives} == {"spans nodes"}
    # forward: 28 blocks + the root; backward: every block but the last (the root and the last block stay gathered)
    assert sum(c.calls_per_step for c in fs.collectives if c.op == "all_gather") == (28 + 1) + 27


def test_grad_accumulation_gathers_every_micro_step_reduces_once():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
    parts = model_parts(MultimodalSpec(backbone=TINY), t)
    fs = estimate_comm(parts, t, CPU, LAY4, get_strategy("fsdp_full_shard"), grad_accum=4)
    calls = lambda op: sum(c.calls_per_step for c in fs.collectives if c.op == op)  # noqa: E731
    # per micro-batch: forward gathers 2 blocks + root, backward re-gathers the first block only
    assert calls("all_gather") == 4 * (3 + 1) and calls("reduce_scatter") == 3
    z2 = estimate_comm(parts, t, CPU, LAY4, get_strategy("zero2"), grad_accum=4)
    # DeepSpeed ZeRO-2 all-reduces its gradient bucket in every backward (one bucket here)
    assert next(c for c in z2.collectives if c.op == "all_reduce").calls_per_step == 4


def test_only_trainable_params_are_communicated_by_ddp():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=64)
    b, v = load_model("qwen3-0.6b"), load_model("siglip2-base-patch16-224")
    parts = model_parts(MultimodalSpec(backbone=b, vision=v, mode="projector"), t)
    ddp = estimate_comm(parts, t, CPU, LAY4, get_strategy("ddp"))
    moved = sum(c.bytes_per_call * c.calls_per_step for c in ddp.collectives if c.op == "all_reduce")
    proj = 768 * 1024 + 1024 + 1024 * 1024 + 1024
    assert moved == proj * 4
    # reverse order: fc2 bias + weight (4 MiB) fill the 1 MiB first bucket, fc1 the second
    assert sum(c.calls_per_step for c in ddp.collectives if c.op == "all_reduce") == 2
