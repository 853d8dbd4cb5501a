"""The Aurora planner decisions' known gaps (test_planner_decisions.py): the scenario helper `at`,
each gap's `today` function and the GAPS table its strict xfails and companion bounds read. Truth
and tolerances: test_planner_decisions' module docstring. Restate a gap's `stated` after a refit
(a size the model gives today, never a threshold)."""

from __future__ import annotations

import math

import pytest
from _holdout import Gap, refit_without

from prism_strategy.bench.fit.published import load_published
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.strategies import get_strategy

RECORDS = {r.id: r for r in load_published("aurora-prism")}
RATIO_BAND = 0.06  # two runs at +/-3% each (module docstring)
OOS = pytest.mark.out_of_sample
ZERO_BS8 = dict(micro_batch=8, global_batch=8 * 12)  # DOMAIN 2's "BS 8", read as 8 per rank on 12 tiles


def at(record_id: str, strategy: str | None = None, *, held_out: tuple[str, ...] = (), **changes):
    """The planner's option for a record's scenario (optionally another strategy or node count) on
    the presets refitted without `held_out` (the records the caller judges it by)."""
    r = RECORDS[record_id]
    kw = refit_without(*held_out).kwargs(record_id) | changes
    if "nodes" in changes:  # same micro-batch and accumulation per rank at the new scale
        s = r.scenario
        kw["global_batch"] = s.micro_batch * s.grad_accum * s.ranks_per_node * changes["nodes"]
    return evaluate(scenario_from_flags(**kw), get_strategy(strategy or r.planner_strategy))


def per_rank(o) -> float:
    return o.samples_per_s / (o.global_batch / (o.micro_batch * o.grad_accum))


def _a3_ratio() -> float:
    held = ("A3-fsdp", "A3-ddp")
    return at("A3-fsdp", held_out=held).samples_per_s / at("A3-ddp", held_out=held).samples_per_s


def _a3_comm_over_compute() -> float:
    o = at("A3-fsdp", held_out=("A3-fsdp", "A2"))
    return o.comm_s / o.compute_s


def _a3_efficiency() -> float:
    held = ("A3-fsdp", "A2")
    return per_rank(at("A3-fsdp", held_out=held)) / per_rank(at("A2", held_out=held))


def _a3_in_sample_comm_over_compute() -> float:
    o = at("A3-fsdp")
    return o.comm_s / o.compute_s


def _c4_two_node_step_ratio() -> float:
    held = ("C3", "C4-daos")
    return at("C4-daos", held_out=held).step_time_s / at("C3", held_out=held).step_time_s


def _zero3_over_zero2() -> float:
    return at("D1", "zero3", **ZERO_BS8).samples_per_s / at("D1", "zero2", **ZERO_BS8).samples_per_s


def _e2_over_e1_per_tile() -> float:
    held = ("E1", "E2")
    return per_rank(at("E2", held_out=held)) / per_rank(at("E1", held_out=held))


def _hsdp_sgo_over_full_shard() -> float:
    """A3's scenario (Qwen3-0.6B + SigLIP2, seq 512, micro-batch 4, 2 nodes x 12) on the shipped
    presets: the seed's figure is in no fit."""
    return at("A3-fsdp", "hsdp_shard_grad_op").samples_per_s / at("A3-fsdp").samples_per_s


def _c6_b4_at_limit() -> float:
    return at("C6-b4", held_out=("C6-b4",)).memory_runtime["memory_at_limit_gib"]


_A2, _A3 = RECORDS["A2"], RECORDS["A3-fsdp"]
_C3_LO, _C3_HI = RECORDS["C3"].measured.samples_per_s
_A3_COMM_OVER_COMPUTE = (0.805 - 0.38) / 0.38
"""A3-fsdp's 0.805 s step holds at most A2's 0.38 s of compute, so >= 0.42 s is comm and host."""
GAPS = {
    "A3-bound": Gap(
        "A2, A3-fsdp",
        "comm / compute on 2 nodes refitted without both (compute over-priced: A2 held out is +63%)",
        0.472,
        _A3_COMM_OVER_COMPUTE,
        RATIO_BAND,
        _a3_comm_over_compute,
    ),
    "A3-efficiency": Gap(
        "A2, A3-fsdp",
        "full_shard's per-rank rate over one rank's, refitted without both",
        0.683,
        (_A3.measured.samples_per_s / _A3.scenario.world) / (_A2.scenario.micro_batch / _A2.step_time_s()),
        RATIO_BAND,
        _a3_efficiency,
    ),
    "A3-in-sample-bound": Gap(
        "A2, A3-fsdp",
        "in-sample comm / compute on A3's 2 nodes (comm 0.35 s vs compute 0.50 s; A3-fsdp's 0.805 s step "
        "holds at most A2's 0.38 s of compute, so >= 0.42 s is comm and host; from 4 nodes on the sync wait "
        "makes it comm-bound, as PRISM says of 2+ nodes)",
        0.702,
        _A3_COMM_OVER_COMPUTE,
        RATIO_BAND,
        _a3_in_sample_comm_over_compute,
    ),
    "C4-slowdown": Gap(
        "C3, C4-daos",
        "2-node over 1-node step time, refitted without both (measured: the low end of 1.016-1.035)",
        1.0004,
        (2 * _C3_LO) / RECORDS["C4-daos"].measured.samples_per_s,
        math.log(_C3_HI / _C3_LO),  # C3's reported range: the runs' spread
        _c4_two_node_step_ratio,
    ),
    "ZeRO": Gap(
        "D1 (scenario; DOMAIN 2 figures, in no fit)",
        "ZeRO-3 / ZeRO-2 samples/s",
        6.66,
        14.9 / 9.8,
        RATIO_BAND,
        _zero3_over_zero2,
    ),
    "E-rate": Gap(
        "E1, E2",
        "E2's per-tile rate over E1's, refitted without both (the scale-out steps at the collective "
        "fit's inter_latency_us and the sync wait at 64 nodes, on Sunspot's unrecorded CCL env; decided by "
        "E1 itself, -31% held out: attention's rate at seq 8192 on XPU)",
        0.815,
        77 / 82,
        RATIO_BAND,
        _e2_over_e1_per_tile,
    ),
    "HSDP-sgo": Gap(
        "A3's scenario (DOMAIN 2 / the seed: 'often beats it by ~42-47%', no record)",
        "HSDP shard_grad_op over FSDP full_shard samples/s on 2 nodes. Both issue one all-gather and "
        "one reduce-scatter per block, full_shard a second all-gather in backward, all three across "
        "24 ranks (topo, host-staged scale-out), shard_grad_op its two inside the node plus a 1/12 "
        "all-reduce across nodes (FSDP2 _fsdp_param_group.py; oneCCL topo). Candidates, each a "
        "reading of A3-fsdp's 0.805 s: (1) compute over-priced, the launch at 75 us where one rank "
        "(A2, +64.5% held out) allows 55 us, its 0.12 s then in full_shard's cross-node calls; (2) "
        "FSDP2's per-tensor path fitted at ~200 us (B1's profile: 45 us) holds full_shard's cross-node "
        "cost and prices shard_grad_op the same; (1) and (2) as a cost per cross-node call (124 vs "
        "42): ~1.26; (3) the seed's environment unrecorded: under topo all-reduce 1.09. Decided by a "
        "2-node HSDP shard_grad_op run, or A3-fsdp's profile (host time per xccl all-gather)",
        1.061,
        1.445,
        RATIO_BAND,
        _hsdp_sgo_over_full_shard,
    ),
    "C6-b4": Gap(
        "C6-b4",
        "GiB at the limit, refitted without it (no pinned-factor record left), where the run died at 60.8 usable",
        37.2,
        60.8,
        0.10,  # PEAK_TOLERANCE of a memory figure (test_published_memory)
        _c6_b4_at_limit,
    ),
}
