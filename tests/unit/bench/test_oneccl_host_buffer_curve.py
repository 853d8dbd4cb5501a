"""A oneCCL `benchmark` log run on host buffers imports as its own curve (issue 36: it imported as
the platform's GPU curve and, being newer, replaced the earlier one in plans), and a measured
price outside the measured sizes says "extrapolated" (it said "interpolated"). Truth: oneCCL's
own option names (examples/benchmark/include/benchmark.hpp print_user_options at 5f70104:
backend host, sycl_usm_type host) and the curve's measured size range."""

from pathlib import Path

from prism_strategy.bench.results.curves import HOST_BUFFERS, curves_for, import_collective_log, stored_curves
from prism_strategy.bench.results.store import Store
from prism_strategy.estimate.comm_measured import describe, measured_seconds
from prism_strategy.readers import oneccl_benchmark

GPU = Path(__file__).resolve().parents[2] / "fixtures" / "imports" / "oneccl_allreduce_2x12_aurora.log"


def _host_log(tmp_path: Path, how: tuple[str, str]) -> Path:
    path = tmp_path / "host.log"
    path.write_text(GPU.read_text().replace(*how))
    return path


def test_the_options_that_put_buffers_on_the_host_are_read(tmp_path):
    assert oneccl_benchmark.read(GPU).buffers == "device"
    for how in (
        ("backend:         sycl", "backend:         host"),
        ("sycl_usm_type:   device", "sycl_usm_type:   host"),
    ):
        assert oneccl_benchmark.read(_host_log(tmp_path, how)).buffers == "host"


def test_a_host_buffer_import_is_its_own_curve_and_plans_keep_the_device_one(tmp_path):
    store = Store(tmp_path / "r.db")
    args = dict(platform="aurora", nodes=2, ranks_per_node=None, store=store)
    gpu = import_collective_log(GPU, "oneccl-benchmark", **args)
    host = import_collective_log(
        _host_log(tmp_path, ("backend:         sycl", "backend:         host")), "oneccl-benchmark", **args
    )
    assert gpu["format"] == "oneccl-benchmark" and host["format"] == "oneccl-benchmark" + HOST_BUFFERS
    (planned,) = curves_for(tmp_path / "r.db", "aurora")
    assert planned.label == "oneccl-benchmark"
    assert sorted(c.label for _, c in stored_curves(store, "aurora")) == [
        "oneccl-benchmark",
        "oneccl-benchmark" + HOST_BUFFERS,
    ]


def test_a_size_beyond_the_measured_ones_says_extrapolated(tmp_path):
    store = Store(tmp_path / "r.db")
    import_collective_log(GPU, "oneccl-benchmark", platform="aurora", nodes=2, ranks_per_node=None, store=store)
    (c,) = curves_for(tmp_path / "r.db", "aurora")
    beyond = c.points[-1][0] * 4
    m = measured_seconds((c,), c.op, beyond, c.ranks, c.nodes, 1)
    assert m.how == "extrapolated" and "extrapolated beyond the measured" in describe(m, c.ranks, c.nodes)
    inside = measured_seconds((c,), c.op, (c.points[0][0] * c.points[1][0]) ** 0.5, c.ranks, c.nodes, 1)
    assert "interpolated" in describe(inside, c.ranks, c.nodes)
