"""The schedule's overlap (estimate/overlap.py) against hand-worked timelines, SM contention against
its formula, NCCL's kernel channels against connect.cc / enqueue.cc's rules, and the physics the
plan must show: on dgx-h100 FSDP's exposed communication grows with the node count."""

from __future__ import annotations

import dataclasses

import pytest

from prism_strategy.engines import step_collectives
from prism_strategy.engines.ddp import bucket_count
from prism_strategy.engines.fsdp2 import fsdp_units
from prism_strategy.estimate.comm import CollectiveCost, CommEstimate, estimate_comm, schedules_overlap
from prism_strategy.estimate.comm_nccl import call_channels, channels, compute_channels
from prism_strategy.estimate.overlap import Phase, Slot, exposed_collectives, phase_wall_s, schedule
from prism_strategy.flags import plan
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.model import MultimodalSpec
from prism_strategy.specs.parts import model_parts
from prism_strategy.specs.presets import load_model, load_platform
from prism_strategy.specs.training import TrainingSpec
from prism_strategy.strategies import get_strategy

H100 = load_platform("dgx-h100")


def wall(slots: list[Slot], in_flight: int) -> float:
    return schedule(Phase.of(slots), in_flight).wall_s


def test_forward_gathers_hide_behind_the_unit_before_and_the_first_is_exposed():
    # 3 units of 2 s compute; gathers 1, 3, 1 s; a gather may start once the unit two before started.
    # g0 0-1 | c0 1-3 | g1 1-4 (stream free at 1) | c1 4-6 (waits g1) | g2 4-5 | c2 6-8
    slots = [Slot(2.0, gather=(1.0, 0.0)), Slot(2.0, gather=(3.0, 0.0)), Slot(2.0, gather=(1.0, 0.0))]
    assert wall(slots, in_flight=2) == pytest.approx(8.0)  # exposed 2: the first gather, 1 s of the long one


def test_the_last_reduction_is_exposed_and_a_second_stream_follows_its_own():
    # c0 0-2 r0 2-3 | c1 2-4 r1 4-5 | c2 4-6 r2 6-9: only the last reduction sticks out (3 s)
    assert wall([Slot(2.0, reduce=(1.0, 0.0)), Slot(2.0, reduce=(1.0, 0.0)), Slot(2.0, reduce=(3.0, 0.0))], 1) == 9.0
    # side all-reduces of 2 s after each 1 s reduce-scatter: s0 3-5, s1 5-7, s2 7-9
    side = [Slot(2.0, reduce=(1.0, 0.0), side=(2.0, 0.0)) for _ in range(3)]
    assert wall(side, 1) == pytest.approx(9.0)


def test_backward_regather_queues_behind_the_reduce_scatter_on_one_stream():
    # c0 0-2; g1 0-1 (prefetched at c0's start); r0 2-3; g2 issued after r0 on the same stream: 3-5;
    # r1 waits c1 (2-4) and g2: 5-6; c2 waits g2: 5-7; r2 7-8.  Two separate streams would give 7.
    slots = [
        Slot(2.0, reduce=(1.0, 0.0)),
        Slot(2.0, gather=(1.0, 0.0), reduce=(1.0, 0.0)),
        Slot(2.0, gather=(2.0, 0.0), reduce=(1.0, 0.0)),
    ]
    assert wall(slots, in_flight=1) == pytest.approx(8.0)


def test_compute_beside_a_collective_runs_at_one_minus_its_sm_share():
    # g1 (4 s at 33 of 132 SMs) runs 0-4 beside c0 (0-10): c0 takes 10 + 0.25 x 4 = 11, c1 11-21
    slots = [Slot(10.0), Slot(10.0, gather=(4.0, 33 / 132))]
    assert phase_wall_s(Phase.of(slots), 2) == pytest.approx(10.0 + 10.0 + 0.25 * 4.0)
    assert phase_wall_s(Phase.of([Slot(10.0), Slot(10.0, gather=(4.0, 0.0))]), 2) == pytest.approx(20.0)


def test_exposed_collectives_of_a_step_with_contention():
    # forward: 3 gathers of 1 s at 33 channels on 132 SMs, 30 s of compute (10 per unit); the first
    # gather is exposed (1 s), the other two run beside units 0 and 1: + 0.25 x 2 s
    c = CollectiveCost(
        op="all_gather",
        group="world",
        link="spans nodes",
        ranks=16,
        bytes_per_call=1e9,
        calls_per_step=3,
        seconds_per_step=3.0,
        overlappable=True,
        phase="forward",
        channels=33,
    )
    comm = CommEstimate(collectives=(c,), per_tensor_s=0.0)
    p132 = H100.with_values(sm_count=132)
    assert exposed_collectives(comm, 30.0, 0.0, 1, p132).seconds == pytest.approx(1.0 + 0.25 * 2)
    assert exposed_collectives(comm, 30.0, 0.0, 1, H100.with_values(sm_count=0)).seconds == pytest.approx(1.0)
    step = dataclasses.replace(c, phase="step")  # after the optimizer: nothing to hide behind
    assert exposed_collectives(CommEstimate(collectives=(step,), per_tensor_s=0.0), 30.0, 0.0, 1, p132).seconds == 3.0


def test_nccl_compute_channels_follow_connect_cc():
    # ncclTopoPostset doubles the search's channels; Hopper across nodes at > 45 GB/s doubles again below 16
    assert compute_channels(H100, 1, 8) == 2 * channels(H100, 1, 8)[0]
    assert compute_channels(H100, 2, 8) == 2 * channels(H100, 2, 8)[0] == 16
    six_nics = H100.with_values(nics_per_node=6)  # 6 channels at 48 GB/s: 12 after postset, then 24
    n, speed = channels(six_nics, 2, 8)
    assert speed > 45 and 2 * n < 16 and compute_channels(six_nics, 2, 8) == 4 * n
    ampere = six_nics.with_values(gpu_arch="ampere")
    assert compute_channels(ampere, 2, 8) == 2 * channels(ampere, 2, 8)[0]


def test_small_calls_run_on_fewer_channels():
    # enqueue.cc: drop channels while bytes < channels x threads x threshold; ring LL: 512 x 8 x ranks
    per_channel = 512 * 8 * 8
    assert call_channels(24, "ring", "LL", 10 * per_channel - 1, 8) == 9
    assert call_channels(24, "ring", "Simple", 1e9, 8) == 24
    assert call_channels(24, "ring", "LL128", 1.0, 8) == 1


def test_engines_give_the_sizes_in_issue_order():
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=2048)
    m = load_model("llama-3.1-8b")
    parts = model_parts(MultimodalSpec(backbone=m), t)
    lay = Layout(nodes=2, ranks_per_node=8)
    cs = {(c.op, c.phase): c for c in step_collectives(get_strategy("fsdp_full_shard"), parts, t, lay)}
    units = fsdp_units(parts, lay.world, "block")
    ag, rs = cs[("all_gather", "forward")], cs[("reduce_scatter", "backward")]
    assert ag.sizes[0] == units[-1].params * 2 and len(ag.sizes) == len(units)  # the root first
    assert rs.sizes[-1] == units[-1].trainable * 4 and sum(rs.sizes) == pytest.approx(rs.bytes)  # reduced last
    ddp = step_collectives(get_strategy("ddp"), parts, t, lay)[0]
    assert len(ddp.sizes) == ddp.calls and sum(ddp.sizes) == pytest.approx(ddp.bytes)
    head = m.vocab * m.hidden * 4  # fp32 grads; a tensor over the cap fills a bucket alone
    assert ddp.sizes[0] == head and ddp.sizes[-1] >= head  # LM head ready first, embedding (+ leftovers) last


def test_fsdp_exposed_communication_grows_with_nodes_on_dgx_h100():
    """Every count from 2 nodes crosses the network the same way (16 channels, NICs): more ranks mean
    longer rings, so more exposed time and less per-GPU throughput once the sharded optimizer is
    small. One node differs: NCCL runs 24 channels inside it (more SMs taken) and the optimizer
    state is sharded over 8 ranks, not 16 (estimate/comm_nccl.py compute_channels; the optimizer step)."""
    rows = [
        plan("llama-2-7b", platform="dgx-h100", nodes=n, seq_len=2048, micro_batch=4).option("fsdp_full_shard")
        for n in (2, 4, 8, 16, 32, 64, 128)
    ]
    exposed = [o.exposed_comm_s for o in rows]
    assert all(a < b for a, b in zip(exposed, exposed[1:])), exposed
    without_optimizer = [o.compute_s + o.exposed_comm_s for o in rows]
    assert all(a < b for a, b in zip(without_optimizer, without_optimizer[1:]))
    eff = [o.scaling_efficiency for o in rows]
    assert eff[-1] < eff[-2] < eff[-3] < eff[0]


def test_aurora_and_cpu_keep_their_model():
    """Collectives that block the host (Aurora, CCL_OP_SYNC=1) are exposed whole; gloo on CPU keeps
    its comm_overlap of 0: the step is compute + every collective + grad path + optimizer (+ the
    late ranks beyond the nodes the fit measured, estimate/scale_loss.py)."""
    for name in ("aurora", "cpu"):
        p = load_platform(name)
        assert not schedules_overlap(p)
        o = plan("qwen3-0.6b", platform=name, nodes=2, seq_len=512, micro_batch=1).option("fsdp_full_shard")
        assert o.comm is not None and all(not c.call_seconds for c in o.comm.collectives)
        assert o.step_time_s == pytest.approx(o.compute_s + o.comm_s + o.optimizer_s + o.late_ranks.seconds)
    assert (
        schedules_overlap(H100)
        and "schedule"
        in plan("qwen3-0.6b", platform="dgx-h100", nodes=2, seq_len=512, micro_batch=1)
        .option("ddp")
        .provenance["communication"]
    )


def test_bucket_sizes_match_the_bucket_count():
    mib = 2**20
    assert bucket_count([0.5 * mib] * 6, mib, 25 * mib) == 2
    t = TrainingSpec.from_precision("bf16-mixed", seq_len=16)
    parts = model_parts(MultimodalSpec(backbone=load_model("tiny-llama")), t)
    c = estimate_comm(parts, t, H100, Layout(nodes=2, ranks_per_node=8), get_strategy("ddp")).collectives[0]
    assert len(c.call_seconds) == c.calls_per_step and sum(c.call_seconds) == pytest.approx(c.seconds_per_step)
