"""The planner reproduces DOMAIN.md section 2's decisions from its model (no table of answers).

Scenarios use PRISM's own settings where DOMAIN gives them: seq 1024 with checkpointing of
every block for 7B end-to-end, seq 512 for the 0.6B runs (micro-batch 8 per tile assumed),
seq 8192 for AuroraGPT-2B.

Margins are those of the aurora preset fitted to PRISM's 1-2 node records (benchmarks/aurora_fit.py):
the blocking ring all-reduce measured in A1 (~2 GB/s) and FSDP's measured cost at 2 nodes (A3) give
HSDP shard_grad_op ~1.18x full_shard for a 0.6B model and full_shard ~0.8 efficiency at 8 nodes,
where the pre-fit preset gave >1.25x and <0.7; the decisions (who wins, which is comm-bound) hold.
"""

import dataclasses

import pytest

from prism_strategy.planning.planner import plan
from prism_strategy.specs import load_platform
from prism_strategy.specs.cluster import GiB

VISION = "siglip2-so400m-patch14-384"


@pytest.mark.parametrize("nodes", [1, 2])
def test_projector_only_on_7b_backbone_is_ddp(nodes):
    p = plan("olmo-7b", vision=VISION, mode="projector", platform="aurora", nodes=nodes, seq_len=1024)
    assert p.recommended == "ddp"
    ddp = p.option("ddp")
    assert ddp.feasible and ddp.comm_fraction < 0.1  # fp32 projector grads over the ~2 GB/s blocking ring (A1)
    assert any("static_graph" in n for n in ddp.notes)
    # sharding the frozen 7B backbone only adds all-gathers of frozen weights
    assert p.option("fsdp_full_shard").samples_per_s < 0.9 * ddp.samples_per_s


def test_7b_e2e_one_aurora_node_is_fsdp_full_shard_and_ddp_does_not_fit():
    p = plan("olmo-7b", mode="e2e", platform="aurora", nodes=1, seq_len=1024, ckpt_freq=1)
    ddp = p.option("ddp")
    assert not ddp.feasible and "out of memory" in ddp.why_not
    assert ddp.memory.total > 64 * GiB
    assert p.recommended == "fsdp_full_shard"
    fs = p.option("fsdp_full_shard")
    assert fs.max_micro_batch == max(o.max_micro_batch for o in p.options if o.strategy.startswith(("fsdp", "hsdp")))


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_small_model_comm_bound_hsdp_shard_grad_op_beats_full_shard(nodes):
    """DOMAIN section 2. The lead needs oneCCL's default topology-aware all-reduce for HSDP's
    replicate groups: under PRISM's CCL_ALLREDUCE=ring the shard all-reduce is staged through the
    host (oneCCL env-variables.rst, non-topo algorithms) at the ~2 GB/s A1 and A3-ddp measured,
    and the model puts HSDP level with full_shard there (the 2 GB/s ring applies to every
    all-reduce the profile forces, not only DDP's)."""
    topo = dataclasses.replace(load_platform("aurora"), allreduce_algorithm="topology")
    p = plan("qwen3-0.6b", platform=topo, nodes=nodes, seq_len=512, micro_batch=8)
    fs, hsgo = p.option("fsdp_full_shard"), p.option("hsdp_shard_grad_op")
    # comm-bound as measured (A3-fsdp's 0.805 s step at 2 nodes less A2's 0.38 s on one rank is
    # 1.12x A2's) is a known gap of the model at 2 nodes: benchmarks/aurora_fit.py lists A2 +35%
    # (compute too slow), so the model's comm/compute there is ~0.87 (8 nodes: the test below)
    assert hsgo.samples_per_s > 1.15 * fs.samples_per_s


def test_7b_shard_grad_op_shows_gathered_params_and_root_only_wrap_cost():
    p = plan("olmo-7b", platform="aurora", nodes=1, seq_len=1024, ckpt_freq=1, micro_batch=1)
    sgo, fs = p.option("fsdp_shard_grad_op"), p.option("fsdp_full_shard")
    gathered = next(b for _, label, b in sgo.memory.items if label.startswith("gathered params"))
    assert gathered == pytest.approx(6.888e9 * 2, rel=0.01)  # the whole model in bf16 on each of 12 ranks
    # shard_grad_op peaks at the start of backward with the whole model gathered and no grads yet;
    # full_shard peaks late in backward, when its sharded grads (2.3 GB) are there: the gap is
    # the gathered model less those grads and full_shard's own in-flight units
    assert sgo.memory.moment == "start of backward" and fs.memory.moment == "late backward"
    assert sgo.memory.total - fs.memory.total > gathered - fs.memory.grads - 2 * 2**30
    assert any("12 ranks per node" in n for n in sgo.notes)
    root_note = next(n for n in sgo.notes if "wrapping only the root" in n)
    assert "does not fit" in root_note  # PRISM ran out of memory this way even at small batches


def test_full_shard_scaling_compute_bound_2b_vs_comm_bound_small_model():
    big = plan("auroragpt-2b", platform="aurora", nodes=8, seq_len=8192, ckpt_freq=1).option("fsdp_full_shard")
    small = plan("qwen3-0.6b", platform="aurora", nodes=8, seq_len=512, micro_batch=8).option("fsdp_full_shard")
    assert big.bound == "compute" and big.comm_s < 0.5 * big.compute_s
    # the small model's communication is as large as its (launch-bound) compute at 8 nodes, past it at 16
    assert small.comm_s > 0.9 * small.compute_s
    assert big.scaling_efficiency >= 0.85
    assert small.scaling_efficiency < big.scaling_efficiency - 0.1  # efficiency does not transfer (DOMAIN 2)


def test_not_viable_options_are_never_recommended():
    p = plan("qwen3-0.6b", platform="aurora", nodes=2, seq_len=512, micro_batch=8, compile=True)
    for o in p.options:
        assert not o.feasible and "not viable" in o.why_not  # multi-node compile on XPU
    assert p.recommended is None
    single = plan("qwen3-0.6b", platform="aurora", nodes=1, seq_len=512, micro_batch=8, compile=True)
    assert all(not single.option(z).feasible for z in ("zero1", "zero2", "zero3"))  # DeepSpeed + compile
    assert single.recommended not in ("zero1", "zero2", "zero3") and single.recommended is not None


def test_each_option_says_where_numbers_come_from():
    p = plan("qwen3-0.6b", platform="aurora", nodes=1, seq_len=512)
    for o in p.options:
        assert set(o.provenance) >= {"memory", "compute", "communication"}
        assert all(v.startswith(("predicted", "none")) for v in o.provenance.values())


def test_loss_buffers_named_when_they_are_the_largest_item():
    """With checkpointing at seq 2048 the fp32 cross-entropy buffers (tokens x vocab x 12 bytes per
    sample) outweigh everything else an FSDP rank holds: the plan says so and names the lever."""
    p = plan("olmo-7b", platform="aurora", nodes=1, seq_len=2048, ckpt_freq=1)
    fs = p.option("fsdp_full_shard")
    loss = next(b for _, label, b in fs.memory.items if label.startswith("loss:"))
    assert loss == pytest.approx(fs.micro_batch * 2048 * 50304 * 12, rel=0.01)
    assert any("fp32 loss buffers are the largest item" in n for n in fs.notes)
    short = plan("olmo-7b", platform="aurora", nodes=1, seq_len=256, ckpt_freq=0, micro_batch=1).option("fsdp_full_shard")
    assert not any("fp32 loss buffers" in n for n in short.notes)
