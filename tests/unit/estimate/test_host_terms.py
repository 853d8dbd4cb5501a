"""Step-time terms from the Aurora measurements (compute.py kernel counts, estimate/host.py), the
runtime memory terms (estimate/memory_runtime.py) and their fit (bench/fit/fit_terms.py)."""

from __future__ import annotations

import dataclasses

import pytest

from prism_strategy.bench.fit import fit_terms as ft
from prism_strategy.bench.fit.published import load_published
from prism_strategy.estimate.comm import estimate_comm
from prism_strategy.estimate.compute import block_kernels, phase_times, step_kernels
from prism_strategy.estimate.host import grad_path_s, host_terms
from prism_strategy.estimate.memory_runtime import runtime_memory
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.report.plan_json import option_dict
from prism_strategy.specs import load_model, load_platform
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.parts import model_parts
from prism_strategy.strategies import get_strategy

RECORDS = {r.id: r for r in load_published("aurora-prism")}


def _parts(record_id: str, **over):
    sc = scenario_from_flags(**(RECORDS[record_id].scenario_kwargs() | over))
    return sc, model_parts(sc.model, sc.training)


def test_block_kernels_follow_structure():
    qwen, siglip = load_model("qwen3-0.6b"), load_model("siglip2-base-patch16-224")
    q, s = block_kernels(qwen), block_kernels(siglip)
    assert q.gemms == 7 and s.gemms == 6  # q k v o + SwiGLU's 3 | GELU MLP's 2
    assert q.kernels > s.kernels  # RMSNorm in 7 kernels, q/k norms, rope, GQA copies
    assert q.backward(trains=True) == q.backward(trains=False) + q.gemms  # frozen: no weight-grad GEMMs
    assert block_kernels(qwen, compiled=True).kernels < q.kernels


def test_step_kernels_grow_with_blocks_accumulation_and_checkpointing():
    sc, parts = _parts("A2")
    k = step_kernels(parts, sc.training)
    sc0, no_ckpt = _parts("A2", ckpt_freq=0)
    assert k.backward > step_kernels(no_ckpt, sc0.training).backward  # recompute launches the forward again
    assert step_kernels(parts, sc.training, grad_accum=4).forward == 4 * k.forward
    deeper = dataclasses.replace(parts[-1], spec=dataclasses.replace(parts[-1].spec, layers=56))
    assert step_kernels((*parts[:-1], deeper), sc.training).total > k.total


def test_kernel_counts_match_prism_profiles():
    """A2: ~6,900 launches and 1,061 GEMMs a step; B1: 22,081 launches over 4 micro-steps."""
    sc, parts = _parts("A2")
    k = step_kernels(parts, sc.training)
    assert k.total == pytest.approx(6900, rel=0.1) and k.gemms == pytest.approx(1061, rel=0.1)
    sc, parts = _parts("B1")
    assert step_kernels(parts, sc.training, grad_accum=4).total == pytest.approx(22081, rel=0.1)


def test_phase_is_launch_bound_only_when_launches_outlast_flops():
    sc, parts = _parts("A2")
    slow_launch = phase_times(parts, sc.training, sc.platform, 4)
    assert slow_launch.launch_bound and slow_launch.forward == slow_launch.forward_launch
    fast = sc.platform.with_values(kernel_launch_us=0.01)
    flops_bound = phase_times(parts, sc.training, fast, 4)
    assert not flops_bound.launch_bound and flops_bound.backward == flops_bound.backward_flops
    big = phase_times(parts, sc.training, sc.platform, 4096)  # FLOPs grow with the batch, launches do not
    assert not big.launch_bound


def test_grad_path_is_keyed_by_engine_and_needs_a_wrapper():
    sc, parts = _parts("A1")
    p = sc.platform.with_values(grad_path_us_per_tensor={"ddp": 100.0})
    s, text = grad_path_s(parts, "ddp", sc.layout, 2, p)
    tensors = sum(x.tensors for x in parts if x.trains)
    assert s == pytest.approx(tensors * 100e-6 * 2) and "100" in text
    assert grad_path_s(parts, "ddp", Layout(nodes=1, ranks_per_node=1), 1, p)[0] == 0.0
    assert grad_path_s(parts, "deepspeed", sc.layout, 1, p) is None  # falls back to per_tensor_overhead_us


def test_blocking_collectives_hide_nothing_behind_compute():
    sc, parts = _parts("A3-fsdp")
    s = get_strategy("fsdp_full_shard")
    comm = estimate_comm(parts, sc.training, sc.platform, sc.layout, s)
    overlap = sc.platform.with_values(host_blocking_collectives=False, comm_overlap=1.0)
    blocking = overlap.with_values(host_blocking_collectives=True)
    compute = 10.0
    assert host_terms(parts, comm, "fsdp2", sc.layout, 1, compute, blocking).exposed_collectives_s == comm.total_s
    assert host_terms(parts, comm, "fsdp2", sc.layout, 1, compute, overlap).exposed_collectives_s < comm.total_s


def test_bucket_size_changes_calls_not_bytes():
    """A run's bucket size reaches the engine model (the one place collectives are laid out)."""
    sc, _ = _parts("A1")

    def world_all_reduce(bucket_mb):
        o = evaluate(sc.with_training(dataclasses.replace(sc.training, bucket_mb=bucket_mb)), get_strategy("ddp"))
        return [c for c in o.comm.collectives if c.op == "all_reduce" and c.group == "world"]

    small, big = world_all_reduce(25), world_all_reduce(500)
    calls = lambda cs: sum(c.calls_per_step for c in cs)  # noqa: E731
    payload = lambda cs: sum(c.bytes_per_call * c.calls_per_step for c in cs)  # noqa: E731
    assert calls(small) > calls(big)
    assert payload(small) == pytest.approx(payload(big))


def test_reserved_adds_the_allocator_cache_and_plan_says_which_figure():
    sc, _ = _parts("B1")
    o = evaluate(sc, get_strategy("ddp"))
    none = runtime_memory(o.memory, sc.platform.with_values(allocator_cache_factor=0.0))
    some = runtime_memory(o.memory, sc.platform.with_values(allocator_cache_factor=1.0))
    assert none.reserved == none.allocated and some.reserved == pytest.approx(
        none.allocated + o.memory.activations + o.memory.buffers
    )
    assert some.device == some.reserved + o.memory.reserve
    d = option_dict(o)
    assert "allocated" in d["memory_figure"] and d["memory_reserved_gib"] >= d["memory_allocated_gib"]
    assert "allocated" in d["provenance"]["memory"]


def _obs(ids=("A1", "A2", "B1", "C3")):
    return [o for i in ids for o in ft.record_observations(RECORDS[i])]


def test_fit_is_deterministic_and_improves_the_error():
    base = ft.prior_platform(load_platform("aurora"))
    obs = _obs()
    knobs = ("kernel_launch_us", "achievable_fraction", "grad_path_us_per_tensor.ddp", "intra_ring_bw_gbps")
    a, b = ft.fit(base, obs, knobs), ft.fit(base, obs, knobs)
    assert [ft.get_value(a, k) for k in knobs] == [ft.get_value(b, k) for k in knobs]
    assert ft.loss(a, obs) < ft.loss(base, obs)
    assert ft.median_abs(ft.errors(a, obs)) < ft.median_abs(ft.errors(base, obs))


def test_leave_one_out_refits_without_each_record():
    base = ft.prior_platform(load_platform("aurora"))
    obs = _obs(("A1", "A2", "B1"))
    loo = ft.leave_one_out(base, obs, ("kernel_launch_us", "grad_path_us_per_tensor.ddp"))
    assert set(loo) == {"A1", "A2", "B1"}
    fitted = ft.fit(base, obs, ("kernel_launch_us", "grad_path_us_per_tensor.ddp"))
    # a record the fit did not see is predicted no better than when it was seen
    assert sum(abs(v) for v in loo.values()) >= sum(abs(v) for v in ft.errors(fitted, obs).values())


def test_held_out_and_inconsistent_records_are_not_fitted():
    assert "64 nodes" in ft.fit_reason(RECORDS["E2"])
    assert ft.fit_reason(RECORDS["C1"]).startswith("inconsistent")
    assert ft.fit_reason(RECORDS["A1"]) is None and ft.fit_reason(RECORDS["A4"]) is not None


def test_shipped_aurora_preset_is_the_fit():
    """Refitting from the priors reproduces the shipped values (to their rounding)."""
    shipped = load_platform("aurora")
    obs = [o for r in RECORDS.values() if ft.fit_reason(r) is None for o in ft.record_observations(r)]
    refit = ft.fit(ft.prior_platform(shipped), obs)
    for k in ft.KNOBS:
        assert ft.get_value(refit, k) == pytest.approx(ft.get_value(shipped, k), rel=0.01), k
    assert "fitted to PRISM" in shipped.source("kernel_launch_us")
