"""oneCCL's GPU-kernel / host-staged routing follows the environment (estimate/comm_oneccl.py),
as oneCCL's can_use_sycl_kernels decides it (src/coll/algorithms/utils/sycl_selection.cpp,
uxlfoundation/oneCCL 9ac28472b13e1f0831609c3510bc8005f2a3e455): CCL_WORKER_COUNT != 1 refuses the
GPU kernels for every collective; a named algorithm other than topo refuses them for its op."""

from __future__ import annotations

import pytest

from prism_strategy.bench.fit.published import load_published
from prism_strategy.emit.env import load_env_profile
from prism_strategy.estimate.comm import collective_call
from prism_strategy.estimate.comm_oneccl import gpu_kernel_route, host_ring_seconds, with_ccl_env
from prism_strategy.flags import scenario_from_flags
from prism_strategy.planning.planner import evaluate
from prism_strategy.specs import load_platform
from prism_strategy.specs.errors import SpecError
from prism_strategy.strategies import get_strategy

OPS = ("all_gather", "reduce_scatter", "all_reduce")
SIZE = 256e6


@pytest.fixture(scope="module")
def aurora():
    return load_platform("aurora")


@pytest.fixture(scope="module")
def prism_env(aurora):
    return load_env_profile(aurora.env_profile).values_for(aurora.name)


def _host_path(op, ranks, nodes, p):
    return p.collectives.collective_overhead_us * 1e-6 + host_ring_seconds(op, SIZE, ranks, nodes, 1, p)


def test_shipped_profile_keeps_the_shipped_routing_and_prices(aurora, prism_env):
    routed = with_ccl_env(aurora, prism_env)
    assert [gpu_kernel_route(op, routed)[0] for op in OPS] == [True, True, False]
    for op in OPS:
        for ranks, nodes in ((12, 1), (24, 2)):
            assert collective_call(op, SIZE, ranks, nodes, 1, routed) == collective_call(
                op, SIZE, ranks, nodes, 1, aurora
            )


@pytest.mark.parametrize("op", OPS)
def test_four_workers_stage_every_collective_through_the_host(aurora, prism_env, op):
    p = with_ccl_env(aurora, prism_env | {"CCL_WORKER_COUNT": "4"})
    assert gpu_kernel_route(op, p) == (False, "CCL_WORKER_COUNT=4")
    for ranks, nodes in ((12, 1), (24, 2)):
        seconds, algo = collective_call(op, SIZE, ranks, nodes, 1, p)
        assert seconds == pytest.approx(_host_path(op, ranks, nodes, p)) and "host ring" in algo


def test_one_worker_and_topo_all_reduce_run_the_gpu_kernels(aurora, prism_env):
    p = with_ccl_env(aurora, prism_env | {"CCL_ALLREDUCE": "topo"})
    assert gpu_kernel_route("all_reduce", p) == (True, "")
    seconds, algo = collective_call("all_reduce", SIZE, 12, 1, 1, p)
    assert "topo" in algo and seconds < _host_path("all_reduce", 12, 1, p)
    unset = with_ccl_env(aurora, {k: v for k, v in prism_env.items() if k != "CCL_ALLREDUCE"})
    assert gpu_kernel_route("all_reduce", unset)[0]


def test_a_named_non_topo_algorithm_refuses_only_its_own_op(aurora, prism_env):
    p = with_ccl_env(aurora, prism_env | {"CCL_REDUCE_SCATTER": "ring", "CCL_ALLGATHERV": "topo"})
    assert gpu_kernel_route("reduce_scatter", p) == (False, "CCL_REDUCE_SCATTER=ring")
    assert gpu_kernel_route("all_gather", p) == (True, "")
    assert not gpu_kernel_route("all_gather", with_ccl_env(aurora, prism_env | {"CCL_ALLGATHERV": "ring"}))[0]


def test_a_worker_count_that_is_not_a_positive_integer_is_refused(aurora):
    for bad in ("0", "four", "-1"):
        with pytest.raises(SpecError, match="CCL_WORKER_COUNT"):
            with_ccl_env(aurora, {"CCL_WORKER_COUNT": bad})


def test_four_workers_slow_fsdp_and_leave_ddp_ring_all_reduce_alone(aurora, prism_env):
    """DDP's all-reduce is already host-staged under CCL_ALLREDUCE=ring: the worker count cannot
    move it (its one broadcast of the initial state can). FSDP's all-gathers / reduce-scatters
    leave the GPU kernels, so its step is slower."""
    kw = {r.id: r for r in load_published("aurora-prism")}["A3-fsdp"].scenario_kwargs()
    out = {}
    for workers in ("1", "4"):
        sc = scenario_from_flags(**(kw | {"platform": with_ccl_env(aurora, prism_env | {"CCL_WORKER_COUNT": workers})}))
        out[workers] = {s: evaluate(sc, get_strategy(s)) for s in ("ddp", "fsdp_full_shard")}
    ar = {w: [c.seconds_per_step for c in o["ddp"].comm.collectives if c.op == "all_reduce"] for w, o in out.items()}
    assert ar["1"] and ar["4"] == pytest.approx(ar["1"])
    assert out["4"]["fsdp_full_shard"].step_time_s > out["1"]["fsdp_full_shard"].step_time_s
