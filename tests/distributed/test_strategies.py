"""Every strategy, for real on gloo: same parameters as one process on the same global batch,
the per-rank storage the strategy promises, gradient accumulation with no_sync()."""

from __future__ import annotations

import math

import pytest

from prism_strategy.strategies import STRATEGY_NAMES

pytestmark = pytest.mark.distributed

WORLD, RANKS_PER_NODE = 4, 2
# Fraction of the parameters each rank stores at rest, read from its local shards.
STORED = {
    "ddp": 1,
    "fsdp_full_shard": 1 / WORLD,
    "fsdp_shard_grad_op": 1 / WORLD,
    "hsdp_full_shard": 1 / RANKS_PER_NODE,
    "hsdp_shard_grad_op": 1 / RANKS_PER_NODE,
    "zero1": 1,
    "zero2": 1,
    "zero3": 1 / WORLD,
}


def test_every_catalogue_strategy_is_covered():
    assert set(STORED) == set(STRATEGY_NAMES)


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_sgd_matches_single_process(run_of, strategy):
    r = run_of(strategy)[0][f"{strategy}/sgd"]
    assert r["keys_match"]
    assert r["max_diff"] <= 1e-6, r["worst"]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_adamw_with_checkpointing_every_block_matches_single_process(run_of, strategy):
    r = run_of(strategy)[0][f"{strategy}/adamw_ckpt1"]
    assert r["keys_match"]
    assert r["max_diff"] <= 1e-4, r["worst"]
    assert "activation checkpointing on 4 (every 1)" in r["describe"]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_no_sync_accumulation_equals_one_larger_batch(run_of, strategy):
    r = run_of(strategy)[0][f"{strategy}/accum_ckpt2"]
    assert r["max_diff"] <= 1e-6, r["worst"]
    assert "activation checkpointing on 2 (every 2)" in r["describe"]


def test_no_sync_accumulation_with_ddp_static_graph(torch_run):
    # static_graph cannot skip sync before its first synchronized backward: job.no_sync() syncs then.
    assert torch_run[0]["ddp/accum_static_graph"]["max_diff"] <= 1e-6


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_per_rank_parameter_storage_matches_strategy(run_of, strategy):
    for rank, res in enumerate(run_of(strategy)):
        r = res[f"{strategy}/sgd"]
        assert r["stored"] == r["total"] * STORED[strategy], f"rank {rank}"
        assert r["param_storage"] == [r["stored"], r["total"]]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_bf16_mixed_precision_trains(run_of, strategy):
    res = run_of(strategy)[0]
    bf16, fp32 = res[f"{strategy}/bf16"], res[f"{strategy}/sgd"]
    assert bf16["finite"] and math.isclose(bf16["loss"], fp32["loss"], abs_tol=0.05)
    assert "bf16" in bf16["describe"]


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
def test_deepspeed_bf16_trains_the_projector_from_float_features_and_leaves_the_backbone(ds_run, strategy):
    """fp32 projector features meet bf16 parameters (cast like FSDP's policy): the step must reach
    the projector (every trainable tensor moved) and leave the frozen backbone exactly as it was."""
    r = ds_run[0][f"{strategy}/projector_bf16"]
    assert r["finite"] and r["dtypes"] == ["torch.bfloat16"]
    assert r["frozen_max_change"] == 0.0
    assert r["trainable_min_change"] > 0.0


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_describe_names_strategy_mesh_and_storage(run_of, strategy):
    text = run_of(strategy)[0][f"{strategy}/sgd"]["describe"]
    assert text.startswith(f"strategy   {strategy} ")
    assert "4 x TinyBlock" in text and "stored on this rank" in text
    if strategy.startswith("hsdp"):
        assert "dp_replicate=2 x dp_shard=2" in text


def test_context_under_torchrun_with_ranks_per_node(torch_run):
    for rank, res in enumerate(torch_run):
        c = res["ctx"]
        assert (c["rank"], c["local_rank"], c["world_size"]) == (rank, rank, 4)
        assert (c["nodes"], c["ranks_per_node"], c["launcher"]) == (2, 2, "torchrun")
        assert (c["device"], c["backend"]) == ("cpu", "gloo")
        assert c["mesh_2d"] == [2, 2] and c["mesh_1d"] == [4]
        assert c["all_reduce"] == [10.0, 4.0]


def test_context_under_pals_finds_ranks_per_node_from_hostnames(ds_run):
    for rank, res in enumerate(ds_run):
        c = res["ctx"]
        assert (c["rank"], c["world_size"], c["launcher"]) == (rank, 4, "pals")
        assert (c["nodes"], c["ranks_per_node"]) == (1, 4)
        assert c["all_reduce"] == [10.0, 4.0]


def test_wrap_from_file_hsdp(torch_run):
    r = torch_run[0]["from_file/hsdp_full_shard"]
    assert r["max_diff"] <= 1e-6 and r["stored"] == r["total"] / RANKS_PER_NODE
    assert "activation checkpointing on 4 (every 1)" in r["describe"]


def test_wrap_from_file_zero2_with_emitted_ds_config(ds_run):
    r = ds_run[0]["from_file/zero2"]
    assert r["max_diff"] <= 1e-6
    assert any("gradient_accumulation_steps=2 ignored" in w for w in r["warnings"])
