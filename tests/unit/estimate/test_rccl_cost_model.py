"""Issue 37 item 3: RCCL's cost model (estimate/backends/rccl.py), selected by a platform's
collective_library while torch's backend stays "nccl". The expected times are written here from
the formulas the module cites (the alpha-beta ring of Thakur, Rabenseifner and Gropp 2005; NCCL's
tree as reduce + broadcast at tuning.cc's .92 of the bus bandwidth), over the platform file's own
values."""

import math

import pytest

from prism_strategy.estimate.backends import BACKENDS, backend_of
from prism_strategy.estimate.comm import model_description
from prism_strategy.specs.presets import load_platform

MB = 1 << 20


@pytest.fixture(scope="module")
def frontier():
    return load_platform("frontier")


def test_rocm_platforms_are_priced_by_rccl_and_run_torchs_nccl_backend(frontier):
    for name in ("frontier", "lumi", "mi300x", "mi325x"):
        p = load_platform(name)
        assert backend_of(p) is BACKENDS["rccl"] and p.backend == "nccl"
    assert "RCCL" in model_description(frontier) and "estimate/backends/rccl.py" in model_description(frontier)


def test_one_node_all_reduce_is_the_alpha_beta_ring(frontier):
    p, n, size = frontier, 8, 64 * MB
    eff = p.collectives.bw_efficiency * 1e9
    want = p.collectives.collective_overhead_us * 1e-6 + 2 * (
        (n - 1) * p.links.intra_latency_us * 1e-6 + size * (n - 1) / n / (p.links.intra_ring_bw_gbps * eff)
    )
    c = BACKENDS["rccl"].call("all_reduce", size, n, 1, 1, p)
    assert c.algorithm == "rccl ring" and c.seconds == pytest.approx(want, rel=1e-12)


def _tree(p, size, ranks, nodes):
    eff, ppn = p.collectives.bw_efficiency * 1e9 * 0.92, ranks // nodes  # NCCL tuning.cc: tree busBw * .92
    hops = (ppn - 1) * p.links.intra_latency_us + math.ceil(math.log2(nodes)) * p.links.inter_latency_us
    bw = min(p.links.intra_bw_gbps, p.links.nic_bw_gbps * p.links.nics_per_node) * eff
    over = (p.collectives.collective_overhead_us + p.collectives.scaleout_overhead_us) * 1e-6
    return over + 2 * (hops * 1e-6 + size / bw)


def test_across_nodes_the_tree_wins_small_calls_and_the_ring_large_ones(frontier):
    """The tree's latency grows with log2(nodes), the ring's with every rank: at 16 nodes x 8 a
    small all-reduce takes the tree; a large one the ring, which moves (n-1)/n of the buffer per
    step against the tree's whole buffer over the same slowest link."""
    p, nodes, ranks = frontier, 16, 128
    small = BACKENDS["rccl"].call("all_reduce", 64 * 1024, ranks, nodes, 1, p)
    assert small.algorithm == "rccl tree" and small.seconds == pytest.approx(_tree(p, 64 * 1024, ranks, nodes))
    large = BACKENDS["rccl"].call("all_reduce", 1024 * MB, ranks, nodes, 1, p)
    assert large.algorithm == "rccl ring" and large.seconds < _tree(p, 1024 * MB, ranks, nodes)


def test_all_gather_and_reduce_scatter_run_the_ring_only(frontier):
    for op in ("all_gather", "reduce_scatter"):
        assert BACKENDS["rccl"].call(op, 1024, 128, 16, 1, frontier).algorithm == "rccl ring"


def test_a_faster_fabric_is_priced_faster(frontier):
    """mi300x's Infinity Fabric mesh (448 GB/s per direction) against Frontier's 50 GB/s GCD ring:
    the same one-node all-reduce of 1 GiB is faster by close to the bandwidth ratio."""
    mi300x = load_platform("mi300x")
    slow = BACKENDS["rccl"].call("all_reduce", 1024 * MB, 8, 1, 1, frontier).seconds
    fast = BACKENDS["rccl"].call("all_reduce", 1024 * MB, 8, 1, 1, mi300x).seconds
    ratio = mi300x.links.intra_ring_bw_gbps / frontier.links.intra_ring_bw_gbps
    assert slow / fast == pytest.approx(ratio, rel=0.02)  # the rest: the same fixed and per-step latencies
