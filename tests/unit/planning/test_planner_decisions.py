"""The planner's decisions held to what PRISM measured on Aurora, not to the model's own output.

Truth: the shipped records, src/prism_strategy/data/measurements/aurora-prism.toml (transcribed
from shared/data/aurora_measurements.md: PRISM scaling_study.md 2026-03-01 and
qwen3_e2e_perf_investigation.md 2026-06-18), named by record id in each test, and docs/domain.md
section 2 where PRISM states a decision without a figure (then no margin is asserted). Each
scenario is the record's own (`PublishedRecord.scenario_kwargs`), assumptions included.

Out of sample (issue 29): a test judged by records predicts them on the presets refitted without
those records (the `refit_without` fixture, tests/unit/_holdout.py: the step-time fit, the
allocator factors and section D's inferred text length each drop them); such tests carry the
`out_of_sample` marker, and a check left in-sample says `in_sample` in its name.

Tolerance: one run per figure. Where the same setting was reported as a range, runs differed by
about +/-3% (C2 392-415 samples/s, D4 13.0-13.5), so a ratio of two runs is held to +/-6%.

Where the model disagrees with a record the test is a strict xfail naming the gap (GAPS): it
fails the day the model meets the measurement; test_known_gaps_stay_within_their_stated_size
fails the day a gap widens past its size + the measurement's tolerance (restate after a refit).
"""

import math

import pytest
from _decision_gaps import (
    _A3,
    _C3_HI,
    _C3_LO,
    GAPS,
    OOS,
    RATIO_BAND,
    RECORDS,
    ZERO_BS8,
    _a3_efficiency,
    _a3_ratio,
    _c4_two_node_step_ratio,
    _e2_over_e1_per_tile,
    _hsdp_sgo_over_full_shard,
    _zero3_over_zero2,
    at,
)
from _holdout import refit_without

from prism_strategy.estimate.calibration import with_value
from prism_strategy.flags import plan, scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs import load_platform
from prism_strategy.specs.cluster import GiB
from prism_strategy.strategies import get_strategy


def _xfail(key: str):
    return pytest.mark.xfail(strict=True, raises=AssertionError, reason=GAPS[key].reason())


@OOS
@pytest.mark.parametrize("key", sorted(GAPS))
def test_known_gaps_stay_within_their_stated_size(key):
    """Each strict xfail's companion: today's gap is on the stated side of the measurement and at
    most the stated size plus the measurement's tolerance (a strict xfail alone passes however far
    the model drifts from the record)."""
    g = GAPS[key]
    today = g.today()
    assert today > 0 and (today > g.measured) is (g.stated > g.measured), (key, today, g.stated)
    assert abs(math.log(today / g.measured)) <= g.size + g.tolerance, (key, today, g.stated)


# ------------------------------------------------------------------ Qwen3-0.6B end-to-end (A)


@OOS
def test_one_node_ddp_of_the_0_6b_is_comm_bound():
    """A1 vs A2: DDP's step 2.50 s, one rank's 0.38 s (compute and optimizer); A1's host spent
    1.46 s in xccl:all_reduce and 1.49 s in AccumulateGrad. Comm and the grad path dominate.
    A1's profile set the DDP grad-path prior (fit_terms.PRIOR_RECORDS), which a refit without A1
    still starts from; that term only adds to comm, so the decision must hold without it too."""
    assert RECORDS["A1"].step_time_s() - RECORDS["A2"].step_time_s() > RECORDS["A2"].step_time_s()
    assert at("A1", held_out=("A1", "A2")).bound == "comm"
    refit = refit_without("A1", "A2")
    no_prior = with_value(refit.platform("aurora"), "grad_path_us_per_tensor.ddp", 0.0)
    o = evaluate(scenario_from_flags(**refit.kwargs("A1", platform=no_prior)), get_strategy("ddp"))
    assert o.bound == "comm" and o.comm_s < at("A1", held_out=("A1", "A2")).comm_s


@OOS
def test_full_shard_beats_ddp_by_the_measured_2_6x_on_two_nodes():
    """A3: FSDP full_shard 119.2 vs DDP (500 MB buckets) 46.1 samples/s on 24 ranks: 2.59x."""
    measured = _A3.measured.samples_per_s / RECORDS["A3-ddp"].measured.samples_per_s
    assert measured == pytest.approx(2.59, abs=0.005)
    assert _a3_ratio() == pytest.approx(measured, rel=RATIO_BAND)


@OOS
@pytest.mark.parametrize(
    "nodes", [pytest.param(2, marks=_xfail("A3-bound")), pytest.param(4, marks=_xfail("A3-bound")), 8]
)
def test_full_shard_of_the_0_6b_is_comm_bound_across_nodes(nodes):
    """A2 + A3-fsdp: 24 x 4 samples / 119.2 samples/s = 0.805 s per step, of which one rank's
    whole step (A2) is 0.38 s; DOMAIN 2 (PRISM): comm-bound 'on 2+ nodes'. Refitted without
    A3-fsdp and A2 the model over-prices the compute (A2 held out) and calls it compute-bound on 2
    and 4 nodes; the gap is measured on 2 nodes (A3's), the only count with a record. From 8 nodes
    the sync wait (P10) makes the calls the larger part."""
    assert at("A3-fsdp", held_out=("A3-fsdp", "A2"), nodes=nodes).bound == "comm"


@pytest.mark.parametrize("nodes", [pytest.param(2, marks=_xfail("A3-in-sample-bound")), 4, 8])
def test_full_shard_of_the_0_6b_is_comm_bound_across_nodes_in_sample(nodes):
    """As above on the shipped preset, which was fitted on A3-fsdp: on 2 nodes the fit trades comm
    for compute and calls the step compute-bound; from 4 nodes the cross-node calls' sync wait,
    fitted to PRISM's 10-node rows, makes it comm-bound."""
    assert at("A3-fsdp", nodes=nodes).bound == "comm"


@OOS
@_xfail("A3-efficiency")
def test_full_shard_of_the_0_6b_keeps_47_percent_of_one_ranks_rate_on_two_nodes():
    """A2: one rank, 4 samples in 0.38 s = 10.5 samples/s; A3-fsdp: 119.2 / 24 = 4.97 per rank:
    47% (A3's micro-batch 4 is assumed, as in the record). DOMAIN 2: full-shard efficiency
    measured in a compute-bound regime (E) does not transfer to this one."""
    assert _a3_efficiency() == pytest.approx(GAPS["A3-efficiency"].measured, rel=RATIO_BAND)


@pytest.mark.parametrize("allreduce", ["ring", "topology"])
@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_hsdp_shard_grad_op_beats_full_shard_for_the_0_6b_on_2_plus_nodes(nodes, allreduce):
    """DOMAIN 2 (PRISM): for 0.6B at seq 512 on 2+ nodes HSDP shard_grad_op 'often beats FSDP
    full_shard by a wide margin'. No figure was recorded, so only the order is asserted: under
    PRISM's CCL_ALLREDUCE=ring (the aurora preset, records A), and under oneCCL's default
    topology-aware all-reduce, which does not stage HSDP's replicate all-reduce through the host
    (oneCCL env-variables.rst)."""
    platform = load_platform("aurora")
    if allreduce == "topology":
        platform = platform.with_values(allreduce_algorithm="topology")
    fs = at("A3-fsdp", nodes=nodes, platform=platform)
    hsgo = at("A3-fsdp", "hsdp_shard_grad_op", nodes=nodes, platform=platform)
    assert platform.collectives.allreduce_algorithm == allreduce
    assert hsgo.samples_per_s > fs.samples_per_s


@OOS  # the seed's figure, in no fit
@_xfail("HSDP-sgo")
def test_hsdp_shard_grad_op_beats_full_shard_by_the_seeds_42_to_47_percent_on_two_nodes():
    """The seed (issue 25 item 8): for the 0.6B VLM at seq 512 on 2 nodes HSDP shard_grad_op 'often
    beats [FSDP full_shard] by ~42-47%': held to the middle, 1.445, +/- the band of a ratio."""
    assert _hsdp_sgo_over_full_shard() == pytest.approx(GAPS["HSDP-sgo"].measured, rel=RATIO_BAND)


# ------------------------------------------------------------------ projector-only on OLMo-7B (C)


@OOS
@pytest.mark.parametrize("record_id", ["C3", "C4-daos"])
def test_projector_only_on_7b_backbone_is_ddp(record_id):
    """C3 (1 node) and C4 (2 nodes): PRISM trained the projector with DDP (DOMAIN 2: the default
    when the backbone is frozen); sharding a frozen backbone only adds all-gathers of it."""
    p = plan(**refit_without(record_id).kwargs(record_id))
    assert p.recommended == "ddp"
    assert any("static_graph" in n for n in p.option("ddp").notes)
    assert p.option("fsdp_full_shard").samples_per_s < p.option("ddp").samples_per_s


@OOS
def test_projector_ddp_comm_across_two_nodes_costs_at_most_3_5_percent():
    """C3: 50-51 samples/s on 1 node; C4-daos: 98.4 on 2 nodes (same setting, DAOS data). The
    2-node step is at most 1 - 98.4 / (2 x 51) = 3.5% longer, and that bounds what the cross-node
    gradient all-reduce can add (grad accum 16: one all-reduce per 16 micro-batches)."""
    lo, hi = RECORDS["C3"].measured.samples_per_s
    bound = 1 - RECORDS["C4-daos"].measured.samples_per_s / (2 * hi)
    assert bound == pytest.approx(0.035, abs=0.001)
    assert at("C4-daos", held_out=("C3", "C4-daos")).comm_fraction <= bound


@OOS
@_xfail("C4-slowdown")
def test_projector_ddp_two_node_step_is_the_measured_1_6_to_3_5_percent_longer():
    """The other side of the bound above: with C3 at 50-51 samples/s (its range is the runs'
    spread), C4-daos' 98.4 on twice the ranks makes the 2-node step 1.6-3.5% longer, so a model
    with no cross-node cost (zero communication) must fail here."""
    lo = 1 - RECORDS["C4-daos"].measured.samples_per_s / (2 * _C3_LO)
    hi = 1 - RECORDS["C4-daos"].measured.samples_per_s / (2 * _C3_HI)
    assert 1 / (1 - lo) <= _c4_two_node_step_ratio() <= 1 / (1 - hi)


@OOS  # DOMAIN 2's figures, in no fit
def test_zero2_is_a_little_slower_than_ddp_for_the_projector():
    """DOMAIN 2 (PRISM): ZeRO-2 ran at ~92% of DDP for projector-only training (the scenario was
    not recorded; checked at C4's). Held to 92% +/- the 6% band of a ratio."""
    ratio = at("C4-daos", "zero2").samples_per_s / at("C4-daos").samples_per_s
    assert ratio == pytest.approx(0.92, abs=RATIO_BAND)


# ------------------------------------------------------------------ OLMo-3 7B end-to-end (D)


@OOS
def test_7b_e2e_ddp_does_not_fit_a_tile():
    """D5: one rank with no DDP ran out of memory at optimizer.step with 62.81 GB allocated; DDP
    holds the same states on every rank plus its gradient buckets, so it cannot fit either."""
    assert RECORDS["D5"].measured.oom
    for rid in ("D5", "D1"):
        ddp = at(rid, "ddp", held_out=(rid,))
        assert not ddp.feasible and "out of memory" in ddp.why_not, rid


@OOS
def test_7b_e2e_one_node_is_fsdp_full_shard():
    """D1: PRISM's 7B end-to-end runs used FSDP full_shard per block (DOMAIN 2: 7B+ end-to-end on a
    single node); asked for its own micro-batch the plan recommends the same."""
    kw = {k: v for k, v in refit_without("D1").kwargs("D1").items() if k not in ("micro_batch", "global_batch")}
    assert plan(**kw).recommended == "fsdp_full_shard"


@OOS  # DOMAIN 2's figures, in no fit
def test_7b_e2e_zero3_outruns_zero2_on_one_node():
    """DOMAIN 2 (PRISM): OLMo-3 7B end-to-end on one Aurora node ran ZeRO-2 at ~9.8 and ZeRO-3 at
    ~14.9 samples/s (BS 8). Not a shipped record: the rest of the scenario is D1's (an assumption)."""
    assert at("D1", "zero3", **ZERO_BS8).samples_per_s > at("D1", "zero2", **ZERO_BS8).samples_per_s


@_xfail("ZeRO")
def test_7b_e2e_zero3_over_zero2_is_the_measured_1_5x():
    """The collectives are DeepSpeed 0.19.8's for our ds_config (engines/deepspeed.py cites the
    lines): ZeRO-2 all-reduces whole buckets (use_multi_rank_bucket_allreduce, default true, even
    with reduce_scatter true), ZeRO-3 reduce-scatters; what is off is the all-reduce's price. Under
    PRISM's CCL_ALLREDUCE=ring, oneCCL refuses its SYCL (topo) kernels for an all-reduce whose
    algorithm is named otherwise (src/coll/algorithms/utils/sycl_selection.cpp,
    can_use_sycl_kernels), so the ZeRO-2 all-reduce would run DDP's host ring. ZeRO-2's 14.8 GB
    gradient all-reduce is priced on the host-staged CCL_ALLREDUCE=ring DDP's A1 was fitted on, and
    A1's own 1.46 s for 1.37 GB scaled to 14.8 GB is 15.8 s, more than PRISM's whole 9.8 s ZeRO-2
    step: PRISM's ZeRO all-reduce did not run at A1's rate (CCL profile of the ZeRO runs
    unrecorded). The figures are DOMAIN 2's, in no fit; the scenario is D1's at BS 8."""
    assert _zero3_over_zero2() == pytest.approx(GAPS["ZeRO"].measured, rel=RATIO_BAND)


# Runs with a memory outcome: ran (a peak reported) or out of memory. The gaps are item 3's
# memory records (tests of the figures themselves); here only the planner's fits / does not fit,
# judged as the planner does: reserved at the limit (allocated + runtime + the slivers a failed
# cudaMalloc's flush cannot release, estimate/memory_runtime.py) against the usable memory.
_MEMORY_RECORDS = [
    pytest.param(rid, marks=_xfail(rid)) if rid in GAPS else rid
    for rid, r in RECORDS.items()
    if r.measured.oom or r.measured.peak_gb is not None or r.measured.peak_allocated_gb is not None
]


@OOS
@pytest.mark.parametrize("record_id", _MEMORY_RECORDS)
def test_the_plan_fits_where_the_run_fit_and_not_where_it_ran_out(record_id):
    """Each record on the presets refitted without it: D1 with section D's text length inferred
    from D4 instead (292 tokens vs D1's 331), C6-b2/b3 with the varying-shape factor from the other,
    C6-b4 with no pinned factor (its only record). D2 and D3 fit though their allocated figures stay
    above the measured ones (test_published_memory)."""
    o = at(record_id, held_out=(record_id,))
    usable = scenario_from_flags(**refit_without(record_id).kwargs(record_id)).platform.usable_bytes
    fits = o.memory_runtime["memory_at_limit_gib"] * GiB <= usable
    assert fits is not RECORDS[record_id].measured.oom


@OOS
def test_two_node_7b_full_shard_ceiling_is_16_to_19():
    """D4: batch 16 ran on 2 nodes; D4-b20: batch 20 ran out of memory (63.3 GB). Held out of the
    inference of section D's text length (from D1 alone, benchmarks/allocator_fit.py)."""
    assert 16 <= at("D4", held_out=("D4", "D4-b20")).max_micro_batch <= 19


def test_7b_shard_grad_op_shows_gathered_params_and_root_only_wrap_cost():
    """Hand formula: shard_grad_op keeps the whole model gathered from forward to backward, 6.888e9
    parameters x 2 bytes of bf16 on each rank, so its peak holds at least that. DOMAIN 2 (PRISM):
    7B shard_grad_op with 12 ranks per node ran out of memory even at small batches, wrapped
    only at the root."""
    p = plan("olmo-7b", platform="aurora", nodes=1, seq_len=1024, ckpt_freq=1, micro_batch=1)
    sgo = p.option("fsdp_shard_grad_op")
    gathered = next(b for _, label, b in sgo.memory.items if label.startswith("gathered params"))
    assert gathered == pytest.approx(6.888e9 * 2, rel=0.01)
    assert sgo.memory.moment == "start of backward" and sgo.memory.total > gathered
    assert any("12 ranks per node" in n for n in sgo.notes)
    root_note = next(n for n in sgo.notes if "wrapping only the root" in n)
    assert "does not fit" in root_note


# ------------------------------------------------------------------ AuroraGPT-2B, compute-bound (E)


@OOS
def test_the_2b_is_compute_bound_on_2_and_64_nodes():
    """Section E is the compute-bound reference (27% of the 298 TF peak, E1 and E2); refitted
    without E1 (E2 is in no fit)."""
    assert at("E1", held_out=("E1", "E2")).bound == at("E2", held_out=("E1", "E2")).bound == "compute"


@OOS
@_xfail("E-rate")
def test_compute_bound_2b_keeps_its_per_device_rate_from_2_to_64_nodes():
    """E1, E2: 82 -> 77 TFLOPS per tile (torchtitan, seq 8192): 93.9% (92.7-95.1% from the integer
    figures alone), held to +/-6% (RATIO_BAND: each figure one run); refitted without E1."""
    assert _e2_over_e1_per_tile() == pytest.approx(77 / 82, rel=RATIO_BAND)


@pytest.mark.parametrize("record_id", ["E1", "E2"])
def test_the_compiled_multi_node_2b_runs_are_not_called_not_viable(record_id):
    o = at(record_id, held_out=(record_id,))
    assert not (o.why_not or "").startswith("not viable")


# ------------------------------------------------------------------ rules and provenance


def test_not_viable_options_are_never_recommended():
    """rules.toml: deepspeed-compile (PRISM, Aurora) is not viable; xpu-multinode-compile is a
    warning (torchtitan's per-block FSDP2 compile ran on 2 and 64 nodes, E1/E2), so on 2 nodes the
    ZeRO options stay not viable and an FSDP2/DDP option is recommended."""
    p = plan("qwen3-0.6b", platform="aurora", nodes=2, seq_len=512, micro_batch=8, compile=True)
    assert all(not p.option(z).feasible and "not viable" in p.option(z).why_not for z in ("zero1", "zero2", "zero3"))
    assert p.recommended not in (None, "zero1", "zero2", "zero3")
    single = plan("qwen3-0.6b", platform="aurora", nodes=1, seq_len=512, micro_batch=8, compile=True)
    assert all(not single.option(z).feasible for z in ("zero1", "zero2", "zero3"))
    assert single.recommended not in ("zero1", "zero2", "zero3") and single.recommended is not None


def test_each_option_says_where_numbers_come_from():
    p = plan("qwen3-0.6b", platform="aurora", nodes=1, seq_len=512)
    for o in p.options:
        assert set(o.provenance) >= {"memory", "compute", "communication"}
        assert all(v.startswith(("predicted", "none")) for v in o.provenance.values())


def test_loss_buffers_named_when_they_are_the_largest_item():
    """Hand formula: fp32 cross-entropy buffers of micro-batch x tokens x vocab x 12 bytes (logits
    upcast, softmax and its gradient; DOMAIN 2 and 8) outweigh what an FSDP rank holds at seq 2048."""
    p = plan("olmo-7b", platform="aurora", nodes=1, seq_len=2048, ckpt_freq=1)
    fs = p.option("fsdp_full_shard")
    loss = next(b for _, label, b in fs.memory.items if label.startswith("loss:"))
    assert loss == pytest.approx(fs.micro_batch * 2048 * 50304 * 12, rel=0.01)
    assert any("fp32 loss buffers are the largest item" in n for n in fs.notes)
    short = plan("olmo-7b", platform="aurora", nodes=1, seq_len=256, ckpt_freq=0, micro_batch=1).option(
        "fsdp_full_shard"
    )
    assert not any("fp32 loss buffers" in n for n in short.notes)
