"""Decisions that follow from what the engines really communicate (census-checked collectives)."""

from __future__ import annotations

from prism_strategy.flags import plan


def test_make_run_scenario_no_longer_favours_zero1_from_a_reduce_scatter_it_does_not_issue():
    p = plan("qwen3-0.6b", mode="e2e", platform="aurora", nodes=2, seq_len=512, micro_batch=8, calibration="none")
    z1, hsdp = p.option("zero1"), p.option("hsdp_shard_grad_op")
    assert {c.op for c in z1.comm.collectives} == {"all_reduce", "all_gather"}  # DeepSpeed 0.19 all-reduces buckets
    # HSDP keeps gathers and reduce-scatters inside the node; ZeRO-1 all-reduces every gradient over all 24 ranks
    assert hsdp.comm_s < z1.comm_s and hsdp.samples_per_s > z1.samples_per_s
    # DOMAIN 2 names hsdp_shard_grad_op PRISM's pick here; with the replicate all-reduce priced as
    # PRISM's CCL_ALLREDUCE=ring runs it (host-staged, the ~2 GB/s of A1 and A3-ddp) the model now
    # puts fsdp_shard_grad_op ~10% ahead: what this test holds is that ZeRO-1 is not the pick
    assert p.recommended not in ("zero1", "zero2")


def test_zero2_reduces_every_micro_step_zero1_once():
    p = plan(
        "qwen3-0.6b",
        mode="e2e",
        platform="aurora",
        nodes=2,
        seq_len=512,
        micro_batch=8,
        global_batch=8 * 24 * 4,
        calibration="none",
    )
    grads = lambda name: sum(c.calls_per_step for c in p.option(name).comm.collectives if c.op == "all_reduce")  # noqa: E731
    assert p.option("zero2").grad_accum == 4 and grads("zero2") == 4 * grads("zero1")


def test_zero2_lands_below_ddp_for_projector_only_training():
    """PRISM's projector-only regime (frozen OLMo-7B + SigLIP2, local batch 2, grad accumulation 16):
    ZeRO-2 all-reduces its buckets on every micro-step where DDP (no_sync) reduces once per step."""
    p = plan(
        "olmo-7b",
        vision="siglip2-so400m-patch14-384",
        mode="projector",
        platform="aurora",
        nodes=2,
        seq_len=1024,
        micro_batch=2,
        grad_accum=16,
        ckpt_freq=1,
    )
    ddp, z2 = p.option("ddp"), p.option("zero2")
    assert z2.samples_per_s < ddp.samples_per_s
    assert p.recommended == "ddp"
