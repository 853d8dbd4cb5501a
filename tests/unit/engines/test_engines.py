"""The engine protocol: each engine's collectives of one optimizer step follow from what the
installed engine does (torch DDP's Reducer, FSDP2, DeepSpeed 0.19); checked by hand here and
against real runs by census (tests/distributed)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest

from prism_strategy.engines import ENGINES, StepCollective, engine_of, get_engine, step_collectives
from prism_strategy.engines.ddp import bucket_count
from prism_strategy.engines.deepspeed import bucket_elements
from prism_strategy.specs import Layout, SpecError
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import STRATEGY_NAMES, get_strategy

T = TrainingSpec.from_precision("bf16-mixed", seq_len=32)
LAY = Layout(nodes=2, ranks_per_node=2)
TINY = load_model("tiny-llama")


def collectives(
    name: str, model=TINY, ga: int = 2, layout: Layout = LAY, **options
) -> dict[tuple[str, str], StepCollective]:
    parts = model_parts(MultimodalSpec(backbone=model), T)
    spec = get_strategy(name).with_options(**options)
    return {(c.op, c.phase): c for c in step_collectives(spec, parts, T, layout, ga)}


def test_every_strategy_has_an_engine_and_the_contract_holds():
    assert set(ENGINES) == {"ddp", "fsdp2", "deepspeed"}
    for name in STRATEGY_NAMES:
        out = collectives(name)
        assert out, name
        for c in out.values():
            assert c.calls >= 1 and c.bytes == pytest.approx(c.bytes_per_call * c.calls)
            assert c.dtype in ("float32", "bfloat16") and c.group_size in (2, 4)
    with pytest.raises(FrozenInstanceError):
        next(iter(collectives("ddp").values())).calls = 3  # type: ignore[misc]
    with pytest.raises(SpecError, match="unknown engine 'megatron'; choose one of ddp, fsdp2, deepspeed"):
        get_engine("megatron")


def test_one_rank_moves_nothing():
    assert all(not collectives(n, layout=Layout(nodes=1, ranks_per_node=1)) for n in STRATEGY_NAMES)


def test_ddp_reduces_fp32_grads_once_per_step_and_broadcasts_buffers():
    c = collectives("ddp", ga=4)
    ar = c[("all_reduce", "backward")]
    assert (ar.dtype, ar.calls, ar.bytes) == ("float32", 1, TINY.total_params * 4)
    assert c[("broadcast", "forward")].bytes == TINY.head_dim * 4  # inv_freq + original_inv_freq


def test_ddp_buckets_follow_the_reducer():
    mib = 2**20
    # first bucket closes at >= 1 MiB, the next ones at >= the cap; the remainder is one more
    assert bucket_count([0.5 * mib] * 6, mib, 25 * mib) == 2
    assert bucket_count([30 * mib, 30 * mib, 0.2 * mib], mib, 25 * mib) == 2  # reversed: 0.2 + 30, then 30
    q = load_model("qwen3-0.6b")
    default = collectives("ddp", model=q)[("all_reduce", "backward")]
    big = collectives("ddp", model=q, bucket_mb=100)[("all_reduce", "backward")]
    assert default.bytes == big.bytes and big.calls < default.calls
    assert big.bytes_per_call >= 100 * mib * 0.9  # each bucket holds about its cap


def test_fsdp_gathers_every_micro_step_and_reduces_once():
    ga = 3
    full, sgo = collectives("fsdp_full_shard", ga=ga), collectives("fsdp_shard_grad_op", ga=ga)
    units = TINY.layers + 1
    assert full[("all_gather", "forward")].calls == ga * units
    assert full[("all_gather", "backward")].calls == ga * (TINY.layers - 1)  # not the last block
    assert ("all_gather", "backward") not in sgo
    rs = full[("reduce_scatter", "backward")]
    assert (rs.calls, rs.dtype, rs.bytes) == (units, "float32", TINY.total_params * 4)
    assert collectives("fsdp_full_shard", reduce_dtype="bf16")[("reduce_scatter", "backward")].dtype == "bfloat16"


def test_hsdp_reduces_inside_the_node_then_all_reduces_a_shard_across_nodes():
    c = {(x.op, x.group): x for x in collectives("hsdp_shard_grad_op").values()}
    rs, ar = c[("reduce_scatter", "node")], c[("all_reduce", "across_nodes")]
    assert rs.group_size == LAY.ranks_per_node and ar.group_size == LAY.nodes
    assert ar.bytes == pytest.approx(rs.bytes / LAY.ranks_per_node) and ar.calls == rs.calls


def test_deepspeed_zero12_all_reduce_buckets_then_all_gather_params():
    z1, z2 = collectives("zero1", ga=4), collectives("zero2", ga=4)
    assert z1[("all_reduce", "step")].calls == 1 and z2[("all_reduce", "backward")].calls == 4  # every micro-step
    for c in (z1, z2):
        assert all(x.op != "reduce_scatter" for x in c.values())
        ag = c[("all_gather", "step")]
        assert (ag.calls, ag.dtype) == (1, "bfloat16") and ag.bytes == pytest.approx(TINY.total_params * 2, rel=1e-3)
    assert collectives("zero2", reduce_dtype="fp32")[("all_reduce", "backward")].dtype == "float32"
    q = load_model("qwen3-0.6b")
    buckets = collectives("zero1", model=q, ga=1, bucket_mb=50)[("all_reduce", "step")]
    # no bucket holds more than 50 MiB of bf16, but the embedding, larger, is reduced alone
    assert buckets.calls >= 1 + (q.total_params - q.vocab * q.hidden) * 2 / (50 * 2**20)


def test_the_ds_config_we_emit_takes_deepspeeds_all_reduce_path_in_zero12_and_reduce_scatter_in_zero3():
    """deepspeed 0.19.8: stage_1_and_2.py:1695 sends every gradient slice to the "allreduce"
    bucket when use_multi_rank_bucket_allreduce (zero/config.py:119, default true) whatever
    reduce_scatter says, and :2384 all-reduces it; stage3.py:1673 takes the all-reduce only
    without reduce_scatter, else reduce_scatter_coalesced (:1931). Our config, read by
    DeepSpeed's own config class, must land where step_collectives says it does."""
    zero_config = pytest.importorskip("deepspeed.runtime.zero.config")
    for name, op in (("zero1", "all_reduce"), ("zero2", "all_reduce"), ("zero3", "reduce_scatter")):
        spec = get_strategy(name)
        cfg = zero_config.DeepSpeedZeroConfig(
            **get_engine("deepspeed").engine_config(spec, micro_batch=2, world_size=4)["zero_optimization"]
        )
        all_reduces = cfg.use_multi_rank_bucket_allreduce if cfg.stage < 3 else not cfg.reduce_scatter
        assert (cfg.contiguous_gradients, all_reduces) == (True, op == "all_reduce"), name
        ops = {c.op for c in collectives(name).values()}
        assert op in ops and ({"all_reduce", "reduce_scatter"} - {op}).isdisjoint(ops), name


def test_zero3_gathers_per_module_and_persistent_params_per_tensor():
    q = load_model("qwen3-0.6b")
    c = collectives("zero3", model=q, ga=1)
    fwd, step = c[("all_gather", "forward")], c[("all_gather", "step")]
    assert fwd.calls > q.layers and step.calls == 2 * q.layers + 1 + 2 * q.layers  # norms, qk-norms
    assert fwd.bytes + step.bytes == pytest.approx(q.total_params * 2, rel=1e-3)  # 0.6B: never re-gathered
    rest = q.total_params - q.vocab * q.hidden  # the embedding, larger than a bucket, goes alone
    assert c[("reduce_scatter", "backward")].calls >= 1 + rest / bucket_elements(get_strategy("zero3"), T)


def test_ds_config_buckets_are_the_models():
    s = get_strategy("zero3").with_options(bucket_mb=40)
    cfg = engine_of(s).engine_config(s, micro_batch=2, world_size=8)
    z = cfg["zero_optimization"]
    assert z["reduce_bucket_size"] == z["stage3_prefetch_bucket_size"] == bucket_elements(s, T) == 40 * 2**20 // 2
    assert engine_of(get_strategy("ddp")).engine_config(get_strategy("ddp"), micro_batch=1, world_size=2) is None


def test_engine_facts():
    facts = {n: engine_of(get_strategy(n)).facts(get_strategy(n), has_blocks=False) for n in STRATEGY_NAMES}
    assert facts["ddp"] == {"engine": "ddp", "reshard_or_sharded": False, "root_only_wrap": None}
    assert facts["fsdp_full_shard"]["root_only_wrap"] is True and facts["zero1"]["reshard_or_sharded"] is True


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(bucket_mb=0), "bucket size"),
        (dict(bucket_mb=True), "bucket size"),
        (dict(reduce_dtype="fp16"), "--reduce-dtype"),
    ],
)
def test_bad_options(bad, message):
    with pytest.raises(SpecError, match=message):
        get_strategy("ddp").with_options(**bad)
