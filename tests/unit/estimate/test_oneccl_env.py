"""oneCCL as the environment makes it run (estimate/comm_oneccl.py): the scale-out algorithm per op
and size (CCL_<OP>_SCALEOUT, oneCCL's selector rules), GPU RDMA, CCL_OP_SYNC, and the two shipped
Aurora profiles pricing DDP's all-reduce differently with provenance saying which path priced it."""

from __future__ import annotations

import pytest

from prism_strategy.emit.env import load_env_profile
from prism_strategy.estimate.comm import collective_call, comm_readings, estimate_comm
from prism_strategy.estimate.comm_oneccl import parse_scaleout, scaleout_choice, with_ccl_env
from prism_strategy.specs import load_platform
from prism_strategy.specs.cluster import Layout
from prism_strategy.specs.errors import SpecError


@pytest.fixture(scope="module")
def aurora():
    return load_platform("aurora")


def _env(name, aurora):
    return load_env_profile(name).values_for(aurora.name)


def test_size_ranged_scaleout_spec_picks_by_size_and_falls_back_where_oneccl_refuses(aurora):
    spec = {"CCL_ALLREDUCE_SCALEOUT": "direct:0-1048576;rabenseifner:1048577-max"}
    mpi = with_ccl_env(aurora, spec | {"CCL_ATL_TRANSPORT": "mpi"})
    assert scaleout_choice("all_reduce", 1e6, 10, mpi)[0] == "direct"
    assert scaleout_choice("all_reduce", 4e6, 10, mpi)[0] == "rabenseifner"
    ofi = with_ccl_env(aurora, spec)  # direct is not allowed over OFI: the fallback table's ring
    algo, why = scaleout_choice("all_reduce", 1e6, 10, ofi)
    assert algo == "ring" and "direct needs MPI" in why
    assert scaleout_choice("all_reduce", 4096, 10, ofi)[0] == "recursive_doubling"  # <= 8192 B over OFI
    # rabenseifner below the element count rule (count < pof2(ranks)) falls back too
    rab = with_ccl_env(aurora, {"CCL_ALLREDUCE_SCALEOUT": "rabenseifner", "CCL_ATL_TRANSPORT": "mpi"})
    assert scaleout_choice("all_reduce", 2 * 1000, 1024, rab)[0] == "ring"
    assert scaleout_choice("all_reduce", 2 * 1024, 1024, rab)[0] == "rabenseifner"


def test_scaleout_algorithm_changes_the_price_at_scale(aurora):
    """At 1,024 nodes a ring's 2(n-1) dependent steps dwarf rabenseifner's 2 log2(n)."""
    base = with_ccl_env(aurora, {"CCL_ATL_TRANSPORT": "mpi"})
    rab = with_ccl_env(aurora, {"CCL_ATL_TRANSPORT": "mpi", "CCL_ALLREDUCE_SCALEOUT": "rabenseifner"})
    ring_t, ring_a = collective_call("all_reduce", 64e6, 12 * 1024, 1024, 1, base)
    rab_t, rab_a = collective_call("all_reduce", 64e6, 12 * 1024, 1024, 1, rab)
    assert "ring scale-out" in ring_a and "rabenseifner scale-out" in rab_a
    assert ring_t - rab_t > 2 * 1000 * aurora.links.inter_latency_us * 1e-6


def test_gpu_rdma_removes_the_host_staging(aurora):
    topo = with_ccl_env(aurora, {})
    rdma = with_ccl_env(aurora, {"CCL_ATL_HMEM": "1"})
    t, _ = collective_call("all_reduce", 1e9, 120, 10, 1, topo)
    t_rdma, algo = collective_call("all_reduce", 1e9, 120, 10, 1, rdma)
    staged = 2 * 1e9 / (aurora.links.host_copy_node_gbps / 12 * 1e9)  # the whole buffer at the node's PCIe share
    assert t - t_rdma == pytest.approx(staged, rel=1e-6) and "GPU RDMA" in algo


def test_op_sync_sets_host_blocking_and_unset_keeps_the_platform(aurora):
    assert with_ccl_env(aurora, {"CCL_OP_SYNC": "0"}).collectives.host_blocking_collectives is False
    assert with_ccl_env(aurora, {"CCL_OP_SYNC": "1"}).collectives.host_blocking_collectives is True
    assert (
        with_ccl_env(aurora, {}).collectives.host_blocking_collectives == aurora.collectives.host_blocking_collectives
    )


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"CCL_ALLREDUCE_SCALEOUT": "fastest"}, "not a oneCCL all_reduce algorithm"),
        ({"CCL_ALLREDUCE_SCALEOUT": "ring:5-2"}, "size range"),
        ({"CCL_REDUCE_SCATTER_SCALEOUT": "rabenseifner"}, "not a oneCCL reduce_scatter algorithm"),
        ({"CCL_ALLREDUCE": "tree"}, "not a oneCCL all_reduce algorithm"),
        ({"CCL_OP_SYNC": "yes"}, "reads 0 or 1"),
        ({"CCL_ATL_TRANSPORT": "tcp"}, "ofi or mpi"),
    ],
)
def test_impossible_ccl_values_raise_one_line(aurora, env, words):
    with pytest.raises(SpecError, match=words) as e:
        with_ccl_env(aurora, env)
    assert "\n" not in str(e.value)


def test_parse_reads_onecclss_selection_string():
    assert parse_scaleout("CCL_ALLREDUCE_SCALEOUT", "direct:0-1048576;rabenseifner:1048577-max") == (
        ("direct", 0, 1048576),
        ("rabenseifner", 1048577, float("inf")),
    )


def test_the_two_aurora_profiles_price_ddp_all_reduce_differently_at_10_nodes(aurora):
    """PRISM's profile (CCL_ALLREDUCE=ring: one flat host ring over 120 ranks) against ALCF's
    large-scale one (topo, rabenseifner scale-out above 1 MiB over MPI): DDP's bucket all-reduce is
    priced by different algorithms, and the algorithm says which."""
    from prism_strategy.specs import load_model
    from prism_strategy.specs.model import MultimodalSpec
    from prism_strategy.specs.parts import model_parts
    from prism_strategy.specs.training import TrainingSpec
    from prism_strategy.strategies import get_strategy

    t = TrainingSpec.from_precision("bf16-mixed", seq_len=512)
    parts = model_parts(MultimodalSpec(backbone=load_model("qwen3-0.6b")), t)
    lay = Layout(nodes=10, ranks_per_node=12)
    out = {}
    for name in ("aurora-prism-2026.11", "aurora-alcf-large-scale"):
        p = with_ccl_env(aurora, _env(name, aurora))
        est = estimate_comm(parts, t, p, lay, get_strategy("ddp"))
        out[name] = [c for c in est.collectives if c.op == "all_reduce"]
    prism, alcf = out["aurora-prism-2026.11"], out["aurora-alcf-large-scale"]
    assert "host ring over 120" in prism[0].algorithm and "CCL_ALLREDUCE=ring" in prism[0].algorithm
    assert "rabenseifner scale-out over 10 nodes" in alcf[0].algorithm
    ratio = sum(c.seconds_per_step for c in prism) / sum(c.seconds_per_step for c in alcf)
    assert ratio > 2  # 238 ring steps at inter_latency_us against topo's 12 groups on 1/12 each


def test_readings_carry_the_other_staging(aurora):
    r = comm_readings(aurora)
    other = next(v for k, v in r.items() if k.startswith("host staging"))
    assert other.oneccl.ccl_host_staging != aurora.oneccl.ccl_host_staging
    rdma = comm_readings(aurora.with_values(ccl_gpu_rdma=True))
    assert "shipped" in rdma and not any(k.startswith("host staging") for k in rdma)  # GPU RDMA: nothing staged
