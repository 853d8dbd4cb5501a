"""The collective models against their sources' formulas, worked by hand: NCCL's tuning.cc
(latency per algorithm / protocol / hop, bandwidth per channel), oneCCL's host ring and topo
scale-out (estimate/comm_oneccl.py docstring), and the scale terms a 1-2 node fit cannot see."""

from __future__ import annotations

import math

import pytest

from prism_strategy.estimate.comm import (
    collective_call,
    collective_seconds,
    comm_readings,
    estimate_comm,
)
from prism_strategy.estimate.comm_nccl import channels, latency_us, nccl_choice
from prism_strategy.specs import load_model, load_platform
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import get_strategy

H100 = load_platform("dgx-h100")
AURORA = load_platform("aurora")


def test_nccl_channel_search_outcome_on_dgx_h100():
    """search.cc: 18 NVLinks x 20.6 GB/s carry 6 channels at 60 GB/s, doubled to 12 x 30
    (ncclTopoDupChannels); across nodes one 48 GB/s channel per 50 GB/s NIC, 8 NICs, no doubling
    (compCap > 80, < 50 GB/s, > 4 channels)."""
    assert channels(H100, 1, 8) == (12, 30.0)
    assert channels(H100, 2, 8) == (8, 48.0)


def test_nccl_ring_and_tree_latency_by_hand():
    # ring all-gather, 2 nodes x 8, LL: base 6.6 + 14 intra steps at max(0.6, net overhead 1.0) + 1 net step at 2.7
    assert latency_us(H100, "all_gather", "ring", "LL", 16, 2) == pytest.approx(6.6 + 14 * 1.0 + 1 * 2.7)
    # ring all-reduce, 8 nodes x 8, Simple: 2(N-1) = 126 steps, 2(nodes-1) = 14 on the network at 14 us;
    # intra steps at max(3.4, 3 x 1.0 net overhead)
    assert latency_us(H100, "all_reduce", "ring", "Simple", 64, 8) == pytest.approx(8.4 + 112 * 3.4 + 14 * 14.0)
    # tree all-reduce, 64 nodes x 8, Simple: 2 x ((8-1) NVLink hops at 4.0 + log2(64) network hops at 14)
    assert latency_us(H100, "all_reduce", "tree", "Simple", 512, 64) == pytest.approx(8.4 + 2 * (7 * 4.0 + 6 * 14.0))


def test_nccl_large_all_reduce_in_one_node_is_ring_simple_by_hand():
    c = nccl_choice(H100, "all_reduce", 1e9, 8, 1)
    bus = 12 * 30.0  # channels x GB/s per channel
    expect_us = 8.4 + 14 * 3.4 + 1e9 / (1000 * bus * 8 / 14)  # busBw -> algBw: nRanks / nSteps
    assert (c.algorithm, c.protocol) == ("ring", "Simple")
    assert c.seconds == pytest.approx(expect_us * 1e-6)


def test_nccl_small_messages_pick_low_latency_protocols_and_trees_at_scale():
    assert nccl_choice(H100, "all_reduce", 4096, 8, 1).protocol == "LL"
    # many nodes: the tree's log2(nodes) network hops beat the ring's 2(nodes-1)
    assert nccl_choice(H100, "all_reduce", 1e6, 512, 64).algorithm == "tree"


def test_ring_latency_grows_with_the_ranks_it_crosses():
    """A ring all-gather over N ranks has N-1 dependent steps: its small-message time grows about
    linearly in N (NCCL ring), not as a constant per collective."""
    t = [nccl_choice(H100, "all_gather", 1e5, 8 * n, n).seconds for n in (2, 8, 64)]
    assert t[0] < t[1] < t[2]
    assert t[2] - t[1] > 0.5 * (t[1] - t[0]) * (64 - 8) / (8 - 2)


def test_concurrent_groups_share_the_nodes_nics():
    """HSDP's replicate groups (one GPU per node each, 8 at once on a DGX) get at most a share of
    the node's 8 x 50 GB/s each."""
    one = nccl_choice(H100, "all_reduce", 1e9, 16, 16, concurrent=1)
    eight = nccl_choice(H100, "all_reduce", 1e9, 16, 16, concurrent=8)
    assert eight.seconds >= one.seconds
    assert 1e9 * 2 * 15 / 16 / eight.seconds <= 8 * 50e9 / 8 * 1.001  # bus bandwidth <= the NIC share


def test_oneccl_forced_ring_is_a_flat_host_ring_over_every_rank():
    """CCL_ALLREDUCE=ring: the whole buffer staged to the host (at the node's PCIe share), then
    2(N-1) steps; spanning nodes, every step waits on the inter-node hop and the rank's injection."""
    p = AURORA
    size, ranks = 1e6, 24
    t, algo = collective_call("all_reduce", size, ranks, 2, 1, p)
    bw = min(
        p.links.intra_ring_bw_gbps * p.collectives.bw_efficiency,
        p.links.host_ring_node_gbps * p.collectives.bw_efficiency / 12,
        p.links.nic_bw_gbps * min(p.links.ring_channels, p.links.nics_per_node) * p.collectives.bw_efficiency,
        p.links.scaleout_rank_bw_gbps,
    )
    staging = 2 * size / (min(p.links.host_copy_gbps, p.links.host_copy_node_gbps / 12) * 1e9)
    expect = (
        p.collectives.collective_overhead_us * 1e-6
        + staging
        + 2 * ((ranks - 1) * p.links.inter_latency_us * 1e-6 + size * (ranks - 1) / ranks / (bw * 1e9))
    )
    assert t == pytest.approx(expect) and "host ring over 24" in algo


def test_oneccl_topo_scale_out_has_a_per_operation_and_a_per_peer_cost():
    """all-gather across n nodes: scale-up inside the node, then over r2r_comm one fixed cost and
    (n-1) peer messages: the difference between 10 and 2 nodes at a tiny size is 8 peer latencies
    (plus the slightly larger share of the bytes)."""
    p = AURORA.with_values(inter_latency_us=500.0)
    t2 = collective_seconds("all_gather", 1e3, 24, 2, 1, p)
    t10 = collective_seconds("all_gather", 1e3, 120, 10, 1, p)
    assert t10 - t2 == pytest.approx(8 * 500e-6, rel=0.01)
    assert (
        t2
        > (p.collectives.collective_overhead_us + p.collectives.scaleout_overhead_us + p.links.inter_latency_us) * 1e-6
    )


def test_hsdp_replicate_all_reduce_runs_one_group_per_shard_sharing_nics():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=512)
    parts = model_parts(MultimodalSpec(backbone=load_model("qwen3-0.6b")), t)
    lay = Layout(nodes=4, ranks_per_node=8)
    hsdp = estimate_comm(parts, t, H100, lay, get_strategy("hsdp_shard_grad_op"))
    ar = next(c for c in hsdp.collectives if c.op == "all_reduce")
    assert ar.ranks == 4 and ar.link == "inter-node" and ar.algorithm.startswith("nccl")
    alone = collective_seconds("all_reduce", ar.bytes_per_call, 4, 4, 1, H100)
    assert ar.seconds_per_step / ar.calls_per_step >= alone


def test_platform_without_gpu_arch_keeps_the_generic_ring():
    p = H100.with_values(gpu_arch="")
    t, algo = collective_call("all_gather", 1e8, 8, 1, 1, p)
    bw = p.links.intra_bw_gbps * p.collectives.bw_efficiency * 1e9
    expect = p.collectives.collective_overhead_us * 1e-6 + 7 * p.links.intra_latency_us * 1e-6 + 1e8 * 7 / 8 / bw
    assert algo == "nccl ring" and t == pytest.approx(expect)
    assert not math.isclose(t, collective_seconds("all_gather", 1e8, 8, 1, 1, H100))


def test_the_staging_readings_differ_by_the_staged_bytes():
    """What the collective rows leave open (estimate/comm.comm_readings): whether a multi-node topo
    all-reduce stages the whole buffer (torch's 2025 stack) or the scale-out part (oneCCL 2021.17's
    benchmark); they differ by (1 - 1/rpn) of the buffer at the node's PCIe share, both ways."""
    p = AURORA.with_values(allreduce_algorithm="topology")
    readings = comm_readings(p)
    other = next(v for k, v in readings.items() if k != "shipped")
    size = 1.2e9
    gap = collective_seconds("all_reduce", size, 120, 10, 1, readings["shipped"]) - collective_seconds(
        "all_reduce", size, 120, 10, 1, other
    )
    share = min(p.links.host_copy_gbps, p.links.host_copy_node_gbps / 12) * 1e9
    sign = 1 if p.oneccl.ccl_host_staging == "whole buffer" else -1
    assert gap == pytest.approx(sign * 2 * size * (1 - 1 / 12) / share)
    assert set(comm_readings(H100)) == {"shipped"}  # NCCL's model has no undecided fitted term


def test_plan_beyond_the_measured_nodes_prices_every_reading():
    """At 16 Aurora nodes (the training fit measured 10: PRISM's P10 rows) each option carries its
    step under each reading of the comm terms (the other host staging, the sync wait's linear
    reading); at 10 nodes none."""
    from prism_strategy.flags import plan

    far = plan("qwen3-0.6b", platform="aurora", nodes=16, seq_len=512, micro_batch=8).option("fsdp_full_shard")
    r = far.step_time_s_readings
    assert r["shipped"] == pytest.approx(far.step_time_s) and len(r) == 3
    assert "measure it at 16 nodes" in far.provenance["communication_beyond_fit"]
    near = plan("qwen3-0.6b", platform="aurora", nodes=10, seq_len=512, micro_batch=8).option("fsdp_full_shard")
    assert near.step_time_s_readings == {} and "communication_beyond_fit" not in near.provenance


def test_gloo_reduce_scatter_costs_its_all_reduce():
    """ProcessGroupGloo.cpp reduce_scatter_tensor_coalesced: an all_reduce of a copy of the input,
    then the rank's chunk copied out; so a reduce-scatter on gloo moves twice an all-gather's bytes
    (the ring all-reduce's 2(N-1)/N S against (N-1)/N S), unlike NCCL's, which costs an all-gather."""
    cpu = load_platform("cpu")
    rs, algo = collective_call("reduce_scatter", 16 * 2**20, 4, 2, 1, cpu)
    assert rs == collective_seconds("all_reduce", 16 * 2**20, 4, 2, 1, cpu) and algo.endswith("all_reduce")
    assert rs > 1.8 * collective_seconds("all_gather", 16 * 2**20, 4, 2, 1, cpu)
    nccl_rs = collective_seconds("reduce_scatter", 16 * 2**20, 8, 1, 1, H100)
    assert nccl_rs < collective_seconds("all_reduce", 16 * 2**20, 8, 1, 1, H100)
